"""The library's version, recorded in every saved model and checkpoint (see README, "Versions")."""

__version__ = "0.1.0"

"""Core: what every layer may use; imports nothing else of the package."""

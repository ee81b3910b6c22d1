"""The ``pal-lightning`` command line (nothing is imported here, so that ``--help`` loads only what it prints)."""

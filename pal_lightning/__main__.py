"""``python -m pal_lightning`` runs the ``pal-lightning`` command line."""

import sys

from pal_lightning.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

"""A small offline demo set shipped with the package: real rows of SST, Quora and STS.

``data_dir: demo`` (``--data.data_dir demo``, or ``PAL_DATA_DIR=demo``) points the data module at
this folder from any working directory; ``configs/demo.yaml`` trains on it. The files are in the
CS224N starter layout and names (train and dev splits only), so the built-in tasks ``sst``, ``qqp``
and ``sts`` read them unchanged. Sources and licences: ``SOURCES.md`` beside this file.
"""

from __future__ import annotations

from pathlib import Path

#: The ``data_dir`` value that selects this folder (a local folder named "demo" is ``./demo``).
DEMO_DATA = "demo"


def demo_data_dir() -> Path:
    """The folder of the packaged demo files."""
    return Path(__file__).resolve().parent

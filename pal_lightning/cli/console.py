"""A quiet console: :func:`quiet_lightning` drops the lines of Lightning a user cannot act on."""

from __future__ import annotations

import logging
import os
import sys
import warnings

DROPPED_PREFIXES = (
    "💡 Tip:",  # the LitLogger advertisement
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "LOCAL_RANK:",
    "Restoring states from the checkpoint path",  # the CLI prints "loading from <ckpt>"
    "Restored all states from the checkpoint at",
    "Loaded model weights from the checkpoint",
    "`Trainer.fit` stopped: `max_steps=",  # the score report says how many steps ran
)
_LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.accelerators.cuda",
)


def _keep(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(DROPPED_PREFIXES)


def quiet_lightning() -> None:
    """Drop Lightning's chatter, torch's ``LeafSpec`` warning and ``datasets``' progress bars (idempotent;
    before the Trainer is built; ``HF_DATASETS_DISABLE_PROGRESS_BARS=0`` keeps the bars)."""
    for name in _LIGHTNING_LOGGERS:
        logging.getLogger(name).addFilter(_keep)  # a filter already there is not added again
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # read when datasets is imported (by DDP's processes too); the user's to set otherwise
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules and os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1":
        sys.modules["datasets"].disable_progress_bars()

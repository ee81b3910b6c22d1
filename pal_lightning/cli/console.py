"""A quiet console for the command line: what is trained, progress, the scores, where the files went.

Lightning prints, on every command, lines a user of this library cannot act on: an advertisement
for a logging service, "GPU available: False, used: False" / "TPU available: ...", a
``FutureWarning`` that torch raises inside Lightning's own code (``LeafSpec``), "Restoring states
from the checkpoint path ..." after the CLI already said which checkpoint it loads. :func:`quiet_lightning`
drops exactly those (a logging filter on Lightning's ``rank_zero`` logger, a warnings filter by
message), and the ``datasets`` library's "Generating train split" bars of a task read through it (set
``HF_DATASETS_DISABLE_PROGRESS_BARS=0`` to see them); every other message, warnings included, still
reaches the user.

:class:`ConsoleProgressBar` is the CLI's progress bar: :class:`~pal_lightning.callbacks.progress.RunProgressBar`
with one line per bar when the output goes to a file or a pipe, and the right total for an epoch
resumed in its middle.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

import lightning.pytorch as pl

from pal_lightning.callbacks.progress import RunProgressBar

#: Beginnings of Lightning info lines that :func:`quiet_lightning` drops.
DROPPED_PREFIXES = (
    "💡 Tip:",  # the LitLogger advertisement, printed by every Trainer without that logger
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "LOCAL_RANK:",  # "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]" on every GPU run
    "Restoring states from the checkpoint path",  # the CLI prints "loading from <ckpt>"
    "Restored all states from the checkpoint at",  # ... and "resuming from <ckpt>"
    "Loaded model weights from the checkpoint",
    "`Trainer.fit` stopped: `max_steps=",  # the score report says how many steps ran
)
#: Loggers Lightning's ``rank_zero_info`` writes to.
_LIGHTNING_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.pytorch.accelerators.cuda",
)


class DropLightningChatter(logging.Filter):
    """Drop log records whose message starts with one of :data:`DROPPED_PREFIXES`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(DROPPED_PREFIXES)


def quiet_lightning() -> None:
    """Install the filters (idempotent). Call before the Trainer is built."""
    for name in _LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropLightningChatter) for f in logger.filters):
            logger.addFilter(DropLightningChatter())
    # torch deprecated LeafSpec; Lightning 2.6 still constructs it, so every run warned about code
    # that is not the user's
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    # a bar per split of a small local file; HF_DATASETS_DISABLE_PROGRESS_BARS (read when datasets is
    # imported, by DDP's processes too) is the user's to set otherwise
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules and os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1":
        sys.modules["datasets"].disable_progress_bars()


#: Console width of the progress bars when the output is not a terminal (rich would assume 80 columns
#: and wrap the metrics into a column under each bar).
FILE_WIDTH = 200


class ConsoleProgressBar(RunProgressBar):
    """:class:`~pal_lightning.callbacks.progress.RunProgressBar` for two consoles Lightning's bar gets wrong.

    * Output to a file or a pipe: rich assumes 80 columns and wraps the metrics into a column under the
      bar; here the console is :data:`FILE_WIDTH` wide, one line per bar (``COLUMNS`` or a ``width`` in
      ``console_kwargs`` still decides when given).
    * A run resumed in the middle of an epoch: Lightning adds that epoch's bar at its first batch, with the
      steps left at that moment as its total, so the bar ended past its total ("50/48"); here the total
      counts the epoch's batches before the resume too.
    """

    def __init__(self, **kwargs: Any) -> None:
        console_kwargs = dict(kwargs.pop("console_kwargs", None) or {})
        if "width" not in console_kwargs and not os.environ.get("COLUMNS") and not sys.stdout.isatty():
            console_kwargs["width"] = FILE_WIDTH
        super().__init__(console_kwargs=console_kwargs, **kwargs)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        resumed = self.train_progress_bar_id is None  # Lightning adds the bar of a resumed epoch now
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if resumed and self.progress is not None and self.train_progress_bar_id is not None:
            self.progress.update(self.train_progress_bar_id, total=resumed_epoch_total(trainer, batch_idx))


def resumed_epoch_total(trainer: pl.Trainer, batch_idx: int) -> int | float:
    """The training bar's total of an epoch resumed at ``batch_idx``: what Lightning's bar shows at an
    epoch start (its batches, or fewer when ``max_steps`` ends it first), counted from the epoch's start."""
    total: int | float = trainer.num_training_batches
    if trainer.max_epochs == -1 and trainer.max_steps is not None and trainer.max_steps > 0:
        total = min(total, batch_idx + 1 + trainer.max_steps - trainer.global_step)
    return total

"""A quiet console for the command line: what is trained, progress, the scores, where the files went.

Lightning prints, on every command, lines a user of this library cannot act on: an advertisement
for a logging service, "GPU available: False, used: False" / "TPU available: ...", a
``FutureWarning`` that torch raises inside Lightning's own code (``LeafSpec``), "Restoring states
from the checkpoint path ..." after the CLI already said which checkpoint it loads. :func:`quiet_lightning`
drops exactly those (a logging filter on Lightning's ``rank_zero`` logger, a warnings filter by
message); every other message, warnings included, still reaches the user.
"""

from __future__ import annotations

import logging
import warnings

#: Beginnings of Lightning info lines that :func:`quiet_lightning` drops.
DROPPED_PREFIXES = (
    "💡 Tip:",  # the LitLogger advertisement, printed by every Trainer without that logger
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "LOCAL_RANK:",  # "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]" on every GPU run
    "Restoring states from the checkpoint path",  # the CLI prints "loading from <ckpt>"
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

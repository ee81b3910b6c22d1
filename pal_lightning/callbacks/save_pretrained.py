"""``<run>/model/``: a ``save_pretrained`` folder of the best checkpoint, written when ``fit`` ends."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from pal_lightning.core.contracts import MaxLength, PretrainedSaver, datamodule_of, satisfies
from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError

log = logging.getLogger(__name__)


def best_checkpoint_path(trainer: pl.Trainer) -> str | None:
    """The best checkpoint of the first monitoring ``ModelCheckpoint`` that wrote one, else ``None``."""
    for cb in trainer.checkpoint_callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.monitor and cb.best_model_path:
            if Path(cb.best_model_path).is_file():
                return cb.best_model_path
    return None


def best_scores(trainer: pl.Trainer) -> dict[str, float] | None:
    """The dev scores of the best validation as recorded by a ``ScoreReport`` callback, if any."""
    for cb in trainer.callbacks:  # type: ignore[attr-defined]
        best = getattr(cb, "best", None)
        if callable(best) and hasattr(cb, "history"):
            found = best()
            if found and found.get("scores"):
                return {k: float(v) for k, v in found["scores"].items()}
    return None


class SavePretrainedModel(Callback):
    """Save the best checkpoint (else the final weights) as a ``save_pretrained`` folder at the end of ``fit``.

    Args:
        dirname: folder name inside the run's log directory (``<run>/<dirname>``).
        enabled: set ``False`` to skip writing the folder.
    """

    def __init__(self, dirname: str = "model", enabled: bool = True) -> None:
        self.dirname = dirname
        self.enabled = enabled
        self.saved: Path | None = None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # every rank reads log_dir: a broadcast under DDP
        log_dir = trainer.log_dir or trainer.default_root_dir
        if not self.enabled or not is_main_process(trainer) or not satisfies(pl_module, PretrainedSaver):
            return
        ckpt = best_checkpoint_path(trainer)
        state: Any = None
        if ckpt is not None:
            state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
            note = f"Weights of the best validation checkpoint ({Path(ckpt).name}); scores on the dev sets."
        else:
            note = "Final weights of the run (no best checkpoint was written: no complete validation ran)."
        scores = (best_scores(trainer) or {}) if ckpt is not None else {}
        datamodule = datamodule_of(trainer)
        max_length = datamodule.max_length if satisfies(datamodule, MaxLength) else None
        target = Path(log_dir) / self.dirname
        try:
            self.saved = pl_module.save_pretrained(
                target, scores=scores, max_length=max_length, state_dict=state, scores_note=note
            )
        except PalUserError as err:  # e.g. a user logger reusing a folder: keep the run's result
            log.warning("Did not save the model folder: %s", err)
            return
        loader = f"{type(pl_module).__qualname__}.from_pretrained"  # a subclass's folder loads through it
        print(f"pal-lightning: saved the model to {target} (load it with {loader})")

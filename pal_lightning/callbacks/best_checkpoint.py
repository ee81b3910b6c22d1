"""The CLI's ``ModelCheckpoint`` subclasses: :class:`BestCheckpoint` and :class:`LastCheckpoint`."""

from __future__ import annotations

import os
import warnings
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info

from pal_lightning.core.contracts import last_stage_scores
from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.files import atomic_link_or_copy
from pal_lightning.core.private_api import CheckpointHooks, last_saved
from pal_lightning.tasks.metrics import PARTIAL_SUFFIX

BEST_ALIAS = "best.ckpt"


def is_partial_evaluation(pl_module: Any, monitor: str | None) -> bool:
    """Whether the latest evaluation of ``monitor``'s stage has only ``<monitor>_partial``."""
    # last_scores, not trainer.callback_metrics: those keep keys of earlier evaluations
    if not monitor or "/" not in monitor:
        return False
    stage_scores = last_stage_scores(pl_module, monitor.split("/", 1)[0])
    if stage_scores is None:
        return False
    return monitor not in stage_scores and monitor + PARTIAL_SUFFIX in stage_scores


class _ResumeIntoNewFolder(CheckpointHooks):
    # a resumed run logs into a new version_N on purpose: no "dirpath has changed" warning

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The dirpath has changed from")
            super().load_state_dict(state_dict)


class BestCheckpoint(_ResumeIntoNewFolder):
    """``ModelCheckpoint`` that never ranks a partial evaluation (Lightning would stop on the missing key
    or rank a stale score); with a ``monitor`` it keeps ``best.ckpt``, a link to the best checkpoint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._told_partial = False
        self._validated = False

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validated = False
        super().on_fit_start(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated = True
        super().on_validation_end(trainer, pl_module)

    # every rank has the same last_scores, so skipping here keeps DDP's collectives in step
    def rank_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Any]) -> None:
        if self.monitor is not None and self.monitor not in monitor_candidates and not self._validated:
            return  # a training epoch ended before any validation of this fit: nothing to rank yet
        if is_partial_evaluation(trainer.lightning_module, self.monitor):
            if not self._told_partial:
                rank_zero_info(
                    f"pal-lightning: validation reached only some tasks, so {self.monitor} was not "
                    "computed and no best checkpoint is chosen from it (last.ckpt is still written)."
                )
                self._told_partial = True
            return
        super().rank_checkpoint(trainer, monitor_candidates)

    def write_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        super().write_checkpoint(trainer, filepath)
        # the save ends with a barrier: the file exists when rank 0 links it
        if self.monitor is not None and filepath == self.best_model_path and is_main_process(trainer):
            alias = os.path.join(os.path.dirname(filepath), BEST_ALIAS)
            if os.path.abspath(alias) != os.path.abspath(filepath):
                atomic_link_or_copy(filepath, alias)


class LastCheckpoint(_ResumeIntoNewFolder):
    """``ModelCheckpoint`` for ``last.ckpt`` that links to a checkpoint another callback saved at the same step."""

    def _same_state_saved(self, trainer: pl.Trainer) -> str | None:
        # attributes only, no file check: every rank must take the same branch (a save is a collective)
        for callback in trainer.checkpoint_callbacks:
            if callback is self or not isinstance(callback, ModelCheckpoint):
                continue
            path, step = last_saved(callback)
            if path and step == trainer.global_step and callback.save_weights_only == self.save_weights_only:
                return str(path)
        return None

    def write_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        source = self._same_state_saved(trainer)
        if source is None or os.path.abspath(source) == os.path.abspath(filepath):
            super().write_checkpoint(trainer, filepath)
            return
        if is_main_process(trainer):
            atomic_link_or_copy(source, filepath)
        trainer.strategy.barrier("LastCheckpoint.link")
        self.record_saved(trainer, filepath)

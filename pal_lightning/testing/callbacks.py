"""Callbacks for tests that run the CLI in a subprocess, named in a config's ``trainer.callbacks``
(``pal_lightning.testing.callbacks.KillAtStep`` ...)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from pal_lightning.core.batch import IDS, TASK, TASKS

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

    from pal_lightning.gem import GEMCallback


class KillAtStep(Callback):
    """SIGKILL this process at the end of optimizer step ``step`` (``during_save``: halfway through the
    checkpoint written then, at its first ``os.fsync``, as a power cut would)."""

    def __init__(self, step: int, during_save: bool = False) -> None:
        self.step = step
        self.during_save = during_save

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.global_step < self.step:
            return
        if not self.during_save:
            os.kill(os.getpid(), signal.SIGKILL)

        def cut_and_die(fd: FileDescriptorLike) -> None:
            fileno = fd if isinstance(fd, int) else fd.fileno()
            os.ftruncate(fileno, os.fstat(fileno).st_size // 2)
            os.kill(os.getpid(), signal.SIGKILL)

        os.fsync = cut_and_die  # checkpoint callbacks run after this one, in this batch end


class SignalAtStep(Callback):
    """Send this process (on ``rank``, default every one) ``signal_name`` at the end of optimizer step ``step``."""

    def __init__(self, step: int, signal_name: str = "SIGTERM", rank: int | None = None) -> None:
        self.step = step
        self.signum = signal.Signals[signal_name]
        self.rank = rank

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.global_step == self.step and self.rank in (None, trainer.global_rank):
            os.kill(os.getpid(), self.signum)


class RankRecorder(Callback):
    """Write ``<out>/fit_rank<r>.json`` (``validate_rank<r>.json``): the task and example ids of every
    training step, a digest of the final weights, the last validation metrics and GEM's state."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.tasks: list[list[Any]] = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # a mixed batch (data.batch_mixing: mixed) records its rows' tasks
        task = batch[TASK] if TASK in batch else [str(t) for t in batch[TASKS]]
        self.tasks.append([trainer.global_step, task, [str(i) for i in batch[IDS]]])

    def _write(self, trainer: pl.Trainer, pl_module: pl.LightningModule, name: str) -> None:
        params = torch.cat([p.detach().double().flatten() for p in pl_module.parameters()])
        callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set by Trainer.__init__, not declared
        gem = [cb.state_dict() for cb in callbacks if type(cb).__name__ == "GEMCallback"]
        record = {
            "rank": trainer.global_rank,
            "world": trainer.world_size,
            "tasks": self.tasks,
            "params_digest": hashlib.sha256(params.numpy().tobytes()).hexdigest(),
            "params_sum": float(params.sum()),
            "val": {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")},
            "gem": gem[0] if gem else None,
        }
        Path(self.out).mkdir(parents=True, exist_ok=True)
        (Path(self.out) / f"{name}{trainer.global_rank}.json").write_text(json.dumps(record))

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._write(trainer, pl_module, "fit_rank")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "validate":
            self._write(trainer, pl_module, "validate_rank")


class ConstraintRows:
    """The memory gradients (rows of ``G``) a GEM callback computed last (``None`` before one; a test
    resets it), whatever ``refresh_every`` caches."""

    def __init__(self, gem: GEMCallback) -> None:
        self.rows: list | None = None
        compute = gem._constraint_gradients

        def recording(*args: Any, **kwargs: Any) -> Any:
            self.rows = compute(*args, **kwargs)
            return self.rows

        gem._constraint_gradients = recording  # type: ignore[method-assign]

"""Test-only callbacks that the CLI tests load through ``trainer.callbacks`` in a config.

The subprocesses import this module with ``tests/cli`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback


class KillAtStep(Callback):
    """SIGKILL this process at the end of the training batch that completes optimizer step ``step``.

    With ``during_save=True`` it dies instead in the middle of the checkpoint written at that batch
    end: the first ``os.fsync`` (on the temporary file of the atomic writer) cuts the file to half
    its length and kills the process, as a power cut during the write would.
    """

    def __init__(self, step: int, during_save: bool = False) -> None:
        self.step = step
        self.during_save = during_save

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.global_step < self.step:
            return
        if not self.during_save:
            os.kill(os.getpid(), signal.SIGKILL)

        def cut_and_die(fd: int) -> None:
            os.ftruncate(fd, os.fstat(fd).st_size // 2)
            os.kill(os.getpid(), signal.SIGKILL)

        os.fsync = cut_and_die  # checkpoint callbacks run after this one, in this batch end


class RankRecorder(Callback):
    """Write ``<out>/rank<r>.json``: the task of every training step and a digest of the final weights."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.tasks: list[list[Any]] = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.tasks.append([trainer.global_step, batch["task"], [str(i) for i in batch["ids"]]])

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        params = torch.cat([p.detach().double().flatten() for p in pl_module.parameters()])
        record = {
            "rank": trainer.global_rank,
            "world": trainer.world_size,
            "tasks": self.tasks,
            "params_sum": float(params.sum()),
            "params_abs": float(params.abs().sum()),
            "params_head": params[:64].tolist(),
            "val": {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")},
        }
        Path(self.out).mkdir(parents=True, exist_ok=True)
        (Path(self.out) / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))

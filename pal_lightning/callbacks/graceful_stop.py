"""A clean stop on SIGTERM or Ctrl-C during ``fit`` (:class:`StopOnSignal`).

Lightning exits 0 on SIGTERM and 1 mid-step on Ctrl-C, without a checkpoint; here the step ends,
``last.ckpt`` is written, one line says how to resume and the command exits ``128 + signal``.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from pal_lightning.core.distributed import all_reduce_sum, is_main_process
from pal_lightning.core.private_api import CheckpointHooks, last_saved

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingStopped(SystemExit):
    """``fit`` stopped on a signal; ``code`` is the exit status (``128 + signum``)."""


def stop_status(signum: int) -> int:
    """The shell's exit status ``128 + signum``."""
    return 128 + int(signum)


def stop_message(signame: str, step: int, checkpoint: str | None) -> str:
    """The line printed when ``fit`` stops on ``signame`` after optimizer step ``step``."""
    if checkpoint is None:
        return (
            f"pal-lightning: stopped by {signame} after step {step}; no checkpoint was written (no "
            "last_checkpoint callback with save_last), so a new run starts from the beginning."
        )
    return (
        f"pal-lightning: stopped by {signame} after step {step}; {checkpoint} written. Resume with the "
        "same command plus --ckpt_path last."
    )


def save_last_now(trainer: pl.Trainer) -> str | None:
    """Write ``last.ckpt`` of this step through the ``save_last`` callback; its path, or ``None`` without one."""
    found = (c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.save_last)
    callback = next(found, None)
    if callback is None:
        return None
    path = callback.format_checkpoint_name({}, callback.CHECKPOINT_NAME_LAST)
    if last_saved(callback) == (path, trainer.global_step):
        return path
    if isinstance(callback, CheckpointHooks):  # LastCheckpoint links to a checkpoint of the same step
        callback.write_checkpoint(trainer, path)
    else:
        trainer.save_checkpoint(path, weights_only=callback.save_weights_only)
    return path


def accumulating(trainer: pl.Trainer, batch_idx: int) -> bool:
    """Whether batch ``batch_idx`` (of its epoch) ended inside a gradient-accumulation window, before its
    optimizer step (Lightning steps every ``accumulate_grad_batches`` batches and on an epoch's last)."""
    done = batch_idx + 1
    return done % max(1, int(trainer.accumulate_grad_batches)) != 0 and done < trainer.num_training_batches


class StopOnSignal(Callback):
    """Stop ``fit`` at the end of a step on SIGTERM or SIGINT with a resumable ``last.ckpt``; a second
    Ctrl-C stops at once (add it after every callback that changes state at a batch end)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.received is not None:
            raise KeyboardInterrupt  # a second Ctrl-C: stop at once
        self.received = signum

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after Lightning's signal connector: ours replaces its SIGTERM handler (a SystemExit without status)
        self.received = None
        for signum in STOP_SIGNALS:
            try:
                self._previous[signum] = signal.signal(signum, self._note)
            except ValueError:  # not the main thread: signals cannot be handled here
                return

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()

    def agreed_signal(self, trainer: pl.Trainer) -> int | None:
        """The signal any rank received (SIGTERM first), agreed by an all-reduce so all ranks stop together."""
        if trainer.world_size == 1:
            return self.received  # no tensor: a GPU run would synchronise at every step
        votes = torch.tensor(
            [float(self.received == s) for s in STOP_SIGNALS], device=trainer.strategy.root_device
        )
        votes = all_reduce_sum(votes)
        return next((int(s) for s, v in zip(STOP_SIGNALS, votes.tolist(), strict=True) if v > 0), None)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        signum = self.agreed_signal(trainer)  # a collective: every rank, every step
        if signum is None or trainer.global_step >= (trainer.max_steps or -1) > 0:
            return  # no signal, or the last step: the run finishes normally
        if accumulating(trainer, batch_idx):
            return  # mid-window: a checkpoint would lose the gradients accumulated so far; stop at its step
        path = save_last_now(trainer)
        if is_main_process(trainer):
            print(stop_message(signal.Signals(signum).name, trainer.global_step, path), file=sys.stderr)
            sys.stderr.flush()
        raise TrainingStopped(stop_status(signum))

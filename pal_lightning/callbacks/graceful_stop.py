"""A clean stop on SIGTERM (a scheduler's notice) or Ctrl-C during ``fit``: :class:`StopOnSignal`.

Lightning exits 0 on SIGTERM (as if training had finished) and 1 mid-step on Ctrl-C, without a
checkpoint. Here the handler only notes the signal; at the end of the step ``last.ckpt`` is written
where a periodic one would be (``--ckpt_path last`` resumes exactly), one line says how to resume, and
the command exits ``128 + signal`` (143, 130). A second Ctrl-C stops at once. Under DDP the ranks agree
on the signal at every step, so all stop at the same step with one ``last.ckpt``.
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

__all__ = ["StopOnSignal", "TrainingStopped", "stop_message", "stop_status"]

#: The signals that request a clean stop.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class TrainingStopped(SystemExit):
    """``fit`` stopped on a signal; ``code`` is the exit status (``128 + signum``)."""


def stop_status(signum: int) -> int:
    """The exit status of a command stopped by signal ``signum`` (the shell's ``128 + n``)."""
    return 128 + int(signum)


def stop_message(signame: str, step: int, checkpoint: str | None) -> str:
    """The one line printed when ``fit`` stops on ``signame`` after optimizer step ``step``."""
    if checkpoint is None:
        return (
            f"pal-lightning: stopped by {signame} after step {step}; no checkpoint was written (no "
            "last_checkpoint callback with save_last), so a new run starts from the beginning."
        )
    return (
        f"pal-lightning: stopped by {signame} after step {step}; {checkpoint} written. Resume with the "
        "same command plus --ckpt_path last."
    )


def last_checkpoint_callback(trainer: pl.Trainer) -> ModelCheckpoint | None:
    """The checkpoint callback that writes ``last.ckpt`` (``save_last``), if any."""
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.save_last:
            return callback
    return None


def save_last_now(trainer: pl.Trainer) -> str | None:
    """Write ``last.ckpt`` for the current step through its callback (unless it already holds this step);
    the file, or ``None`` without a ``save_last`` callback."""
    callback = last_checkpoint_callback(trainer)
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


class StopOnSignal(Callback):
    """Stop ``fit`` cleanly at the end of a step on SIGTERM or SIGINT, with a resumable ``last.ckpt``
    (add it after every other callback that changes state at a batch end)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.received is not None:
            raise KeyboardInterrupt  # a second Ctrl-C: stop at once
        self.received = signum

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after Lightning's signal connector (registered just before training starts): ours replaces its
        # SIGTERM handler, whose SystemExit carries no status; Lightning restores the original at teardown
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
        """The signal any rank received (SIGTERM first), the same on every rank: one small all-reduce per
        step under DDP, so that every rank saves and stops at the same step whichever rank was signalled."""
        if trainer.world_size == 1:
            return self.received  # no tensor: a GPU run would wait for the device at every step
        votes = torch.tensor(
            [float(self.received == s) for s in STOP_SIGNALS], device=trainer.strategy.root_device
        )
        votes = all_reduce_sum(votes)
        return next((int(s) for s, v in zip(STOP_SIGNALS, votes.tolist(), strict=True) if v > 0), None)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        signum = self.agreed_signal(trainer)  # a collective: every rank, every step
        if signum is None or trainer.global_step >= (trainer.max_steps or -1) > 0:
            return  # no signal, or the last step: the run finishes normally
        path = save_last_now(trainer)
        if is_main_process(trainer):
            print(stop_message(signal.Signals(signum).name, trainer.global_step, path), file=sys.stderr)
            sys.stderr.flush()
        raise TrainingStopped(stop_status(signum))

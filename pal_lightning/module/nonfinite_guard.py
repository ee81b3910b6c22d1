"""The numerical guard: an optimizer step whose gradients are not all finite is skipped, and too many in a
row stop the run with a :class:`NonFiniteTrainingError`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import attached_trainer

if TYPE_CHECKING:
    import lightning.pytorch as pl

    _ModuleBase = pl.LightningModule
else:
    _ModuleBase = object


class NonFiniteTrainingError(PalUserError):
    """Training stopped after too many consecutive optimizer steps with non-finite gradients."""


def check_max_nonfinite_steps(max_nonfinite_steps: int) -> None:
    """Refuse a tolerance below one step."""
    if max_nonfinite_steps < 1:
        raise PalUserError(f"max_nonfinite_steps must be >= 1, got {max_nonfinite_steps}.")


def all_finite(grads: Sequence[Tensor]) -> bool:
    """Whether every element of every tensor in ``grads`` is finite (``True`` for none).

    Per tensor (a norm of all could overflow on finite values), through ``aminmax``: NaN propagates and
    an infinity is its own extreme, and no temporary of the tensor's size is written.
    """
    if not grads:
        return True
    return bool(torch.stack([_finite(g).to(grads[0].device) for g in grads]).all())


def _finite(g: Tensor) -> Tensor:
    if g.is_sparse:
        g = g.coalesce().values()
    if g.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=g.device)
    return torch.isfinite(torch.stack(g.aminmax())).all()


def nonfinite_message(in_a_row: int, loss_bad: bool, tasks: Sequence[str], step: int) -> str:
    """The message of the :class:`NonFiniteTrainingError` that stops a run."""
    what = "loss" if loss_bad else "gradients"
    return (
        f"Training stopped: {in_a_row} consecutive steps with non-finite "
        f"loss/gradients (last: non-finite {what}; task {', '.join(tasks) or '?'}, step {step}); "
        "those steps were skipped and the last checkpoint written before them is intact. Lower "
        "the learning rate (--model.lr, --model.head_lr), check the data of that task for extreme "
        "labels, or enable gradient clipping (--trainer.gradient_clip_val 1.0); resume with "
        "--ckpt_path last. max_nonfinite_steps sets how many such steps are tolerated."
    )


class NonFiniteGuardMixin(_ModuleBase):
    """Skips optimizer steps with non-finite gradients and stops after ``max_nonfinite_steps`` in a row
    (the module calls :meth:`_init_guard` and, with every training loss, :meth:`_note_training_loss`)."""

    nonfinite_in_a_row: int
    nonfinite_steps: int

    def _init_guard(self) -> None:
        # the accumulation window's tasks and whether a loss was non-finite (a tensor: no device sync)
        self._window_tasks: list[str] = []
        self._window_bad_loss: Tensor | None = None
        self.nonfinite_in_a_row = 0
        self.nonfinite_steps = 0

    def _note_training_loss(self, task: str, loss: Tensor) -> None:
        if task not in self._window_tasks:
            self._window_tasks.append(task)
        bad = ~torch.isfinite(loss.detach())
        self._window_bad_loss = bad if self._window_bad_loss is None else self._window_bad_loss | bad

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Skip an optimizer step whose gradients are not all finite (every gradient set to ``None``);
        raise :class:`NonFiniteTrainingError` after ``max_nonfinite_steps`` in a row.

        The gradients are unscaled and all-reduced here, so every rank takes the same decision.
        """
        tasks, bad_loss = self._window_tasks, self._window_bad_loss
        self._window_tasks, self._window_bad_loss = [], None
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:
            return
        if all_finite(grads):
            self.nonfinite_in_a_row = 0
            self.log("train/nonfinite_steps", float(self.nonfinite_steps), on_step=True, on_epoch=False)
            return
        for p in self.parameters():
            p.grad = None
        self.nonfinite_steps += 1
        if not self._scaler_handles_overflow():
            self.nonfinite_in_a_row += 1
        self.log("train/nonfinite_steps", float(self.nonfinite_steps), on_step=True, on_epoch=False)
        loss_bad = bad_loss is not None and bool(bad_loss)
        self.log("train/nonfinite_loss", float(loss_bad), on_step=True, on_epoch=False)
        if self.nonfinite_in_a_row >= self.hparams["max_nonfinite_steps"]:
            step = self.trainer.global_step if attached_trainer(self) is not None else -1
            raise NonFiniteTrainingError(nonfinite_message(self.nonfinite_in_a_row, loss_bad, tasks, step))

    def _scaler_handles_overflow(self) -> bool:
        """Whether an fp16 ``GradScaler`` at a scale >= 1 skips this step anyway (and lowers the scale)."""
        if attached_trainer(self) is None:
            return False
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if scaler is None or not scaler.is_enabled():
            return False
        return float(scaler.get_scale()) >= 1.0

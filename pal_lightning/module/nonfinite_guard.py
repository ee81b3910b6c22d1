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


class NonFiniteTrainingError(PalUserError):
    """Training stopped after too many consecutive optimizer steps with non-finite gradients."""


def all_finite(grads: Sequence[Tensor]) -> bool:
    """Whether every element of every tensor in ``grads`` is finite (``True`` for none)."""
    # per tensor (a norm of all could overflow), through aminmax: NaN propagates, no temporary of its size
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
        "the learning rate (--model.optim.lr, --model.optim.head_lr), check the data of that task for extreme "
        "labels, or enable gradient clipping (--trainer.gradient_clip_val 1.0); resume with "
        "--ckpt_path last. max_nonfinite_steps sets how many such steps are tolerated."
    )


class NonFiniteGuard:
    """Skips optimizer steps whose gradients are not all finite; ``limit`` such steps in a row raise
    :class:`NonFiniteTrainingError`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_a_row = 0
        self.steps = 0
        # the accumulation window's tasks and whether a loss was non-finite (a tensor: no device sync)
        self._tasks: list[str] = []
        self._bad_loss: Tensor | None = None

    def note(self, task: str, loss: Tensor) -> None:
        """Remember a training loss of the current accumulation window."""
        if task not in self._tasks:
            self._tasks.append(task)
        bad = ~torch.isfinite(loss.detach())
        self._bad_loss = bad if self._bad_loss is None else self._bad_loss | bad

    def before_optimizer_step(self, module: pl.LightningModule) -> None:
        """Drop every gradient of ``module`` when one is not finite (the step moves nothing); gradients are
        unscaled and all-reduced here, so every rank decides alike."""
        tasks, bad_loss = self._tasks, self._bad_loss
        self._tasks, self._bad_loss = [], None
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        if not grads:
            return
        finite = all_finite(grads)
        trainer = attached_trainer(module)
        if finite:
            self.in_a_row = 0
        else:
            for p in module.parameters():
                p.grad = None
            self.steps += 1
            # an fp16 GradScaler at a scale >= 1 skips this step anyway (and lowers the scale)
            scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
            if not (scaler is not None and scaler.is_enabled() and float(scaler.get_scale()) >= 1.0):
                self.in_a_row += 1
        module.log("train/nonfinite_steps", float(self.steps), on_step=True, on_epoch=False)
        if finite:
            return
        loss_bad = bad_loss is not None and bool(bad_loss)
        module.log("train/nonfinite_loss", float(loss_bad), on_step=True, on_epoch=False)
        if self.in_a_row >= self.limit:
            step = trainer.global_step if trainer is not None else -1
            raise NonFiniteTrainingError(nonfinite_message(self.in_a_row, loss_bad, tasks, step))

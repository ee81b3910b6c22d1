"""The training step of a mixed batch (``--data.batch_mixing mixed``): rows of several tasks in one step.

The batch comes from :class:`~pal_lightning.data.mixed_sampler.MixedTaskBatchSampler` (every row's task
drawn from the schedule's ``p_t``) and runs through one encoder pass with per-example task routing
(:meth:`~pal_lightning.module.encoding.PairEncodingMixin.forward_mixed`). The step's loss is the mean of
the rows' losses, ``sum_t (n_t / B) L_t`` with ``L_t`` the mean loss of task ``t``'s ``n_t`` rows: its
expected gradient is the per-task schedule's ``sum_t p_t grad L_t`` (the argument is in
:mod:`pal_lightning.data.mixed_sampler`'s docstring). Each present task's ``L_t`` is logged as
``train/<task>/loss``, the total as ``train/loss``.

Two training features need one task per batch, so a fit with mixed batches refuses them at setup
(:func:`check_mixed_training`): GEM and A-GEM project the step's gradient against the memories of the
tasks *not* being trained, and a mixed batch usually holds every task (nothing would be left to
protect); SimCSE's auxiliary loss reads the pooled vectors of a one-task forward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from pal_lightning.core.batch import LABELS, TASKS
from pal_lightning.core.contracts import datamodule_of
from pal_lightning.core.errors import PalUserError

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from pal_lightning.module.encoding import TaskRows

    _ModuleBase = pl.LightningModule
else:
    _ModuleBase = object

__all__ = ["MixedStepMixin", "TASK_LOSSES", "check_mixed_training", "is_mixed_batch"]

#: The key of the present tasks' detached losses in what a mixed training step returns (``{"loss", TASK_LOSSES}``).
TASK_LOSSES = "task_losses"


def is_mixed_batch(batch: Any) -> bool:
    """Whether ``batch`` holds rows of several tasks (a ``tasks`` key) rather than one task's."""
    return isinstance(batch, Mapping) and TASKS in batch


def check_mixed_training(batch_mixing: str, simcse: object | None, callbacks: Iterable[object]) -> None:
    """Refuse what cannot train on mixed batches: GEM / A-GEM callbacks and SimCSE.

    Raises:
        PalUserError: naming the feature and the fix.
    """
    if batch_mixing != "mixed":
        return
    from pal_lightning.gem.callback import GEMCallback

    if any(isinstance(cb, GEMCallback) for cb in callbacks):
        raise PalUserError(
            "GEM and A-GEM project each step's gradient against the memories of the tasks that step does not "
            "train; a mixed batch trains every task it holds, usually all of them, so nothing is left to project "
            "against. Drop the GEM callback (configs/gem.yaml), or use --data.batch_mixing per_task."
        )
    if simcse is not None:
        raise PalUserError(
            "SimCSE's auxiliary loss is computed on a one-task batch's sentence vectors; a mixed batch runs "
            "several tasks in one pass. Drop --model.simcse, or use --data.batch_mixing per_task."
        )


class MixedStepMixin(_ModuleBase):
    """:meth:`_mixed_training_step` and the setup check :meth:`_check_mixed_training` (module docstring)."""

    if TYPE_CHECKING:  # provided by the module
        simcse: Any

        def forward_mixed(self, batch: Mapping[str, Any]) -> dict[str, TaskRows]: ...

        def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor: ...

        def _note_training_loss(self, task: str, loss: Tensor) -> None: ...

    def _check_mixed_training(self) -> None:
        """At ``setup("fit")``: refuse GEM and SimCSE when the data module serves mixed batches."""
        trainer = self._trainer
        if trainer is None:
            return
        config = getattr(datamodule_of(trainer), "config", None)
        mixing = str(getattr(config, "batch_mixing", "per_task"))
        check_mixed_training(mixing, self.simcse, getattr(trainer, "callbacks", []))

    def _mixed_training_step(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The loss of a mixed batch, the mean over its rows; logs each present task's loss and the total."""
        if LABELS not in batch:
            raise PalUserError(
                "A mixed batch without labels cannot be trained on: add 'labels' (one per row)."
            )
        if self.simcse is not None:
            check_mixed_training("mixed", self.simcse, ())
        labels = batch[LABELS]
        rows = len(batch[TASKS])
        total: Tensor | None = None
        losses: dict[str, Tensor] = {}
        for task, out in self.forward_mixed(batch).items():
            loss = self.compute_loss(task, out.output, labels.to(out.rows.device)[out.rows])
            count = int(out.rows.numel())
            # logger=False, as for a one-task batch: TrainingLog writes each present task's loss once
            self.log(f"train/{task}/loss", loss, batch_size=count, logger=False)
            self._note_training_loss(task, loss)
            losses[task] = loss.detach()
            part = loss * (count / rows)
            total = part if total is None else total + part
        assert total is not None  # a batch has at least one row
        self.log("train/loss", total, prog_bar=True, batch_size=rows)
        # Always the loss, even a NaN one (the guard decides): see MultiTaskModule.training_step
        return {"loss": total, TASK_LOSSES: losses}

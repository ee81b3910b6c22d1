"""Mixed batches (``--data.batch_mixing mixed``): rows of several tasks trained in one step, the loss the mean
of the rows' losses (``docs/design.md`` §3, "Mixed batches"). GEM / A-GEM and SimCSE need one task per batch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from pal_lightning.core.batch import LABELS, TASKS
from pal_lightning.core.errors import PalUserError

if TYPE_CHECKING:
    from pal_lightning.module.multitask import MultiTaskModule

#: The key of the present tasks' detached losses in what a mixed training step returns (``{"loss", TASK_LOSSES}``).
TASK_LOSSES = "task_losses"


def is_mixed_batch(batch: Any) -> bool:
    """Whether ``batch`` holds rows of several tasks (a ``tasks`` key) rather than one task's."""
    return isinstance(batch, Mapping) and TASKS in batch


def check_mixed_training(batch_mixing: str, simcse: object | None, callbacks: Iterable[object]) -> None:
    """Refuse what cannot train on mixed batches (GEM / A-GEM callbacks, SimCSE) with one user error."""
    if batch_mixing != "mixed":
        return
    from pal_lightning.gem.callback import GEMCallback

    if any(isinstance(cb, GEMCallback) for cb in callbacks):
        raise PalUserError(
            "GEM and A-GEM project a step's gradient against the memories of the tasks it does not train; a "
            "mixed batch trains every task it holds, leaving nothing to project against. Drop the GEM callback "
            "(configs/gem.yaml), or use --data.batch_mixing per_task."
        )
    if simcse is not None:
        raise PalUserError(
            "SimCSE's auxiliary loss is computed on a one-task batch's sentence vectors; a mixed batch runs "
            "several tasks in one pass. Drop --model.simcse, or use --data.batch_mixing per_task."
        )


def mixed_losses(module: MultiTaskModule, batch: Mapping[str, Any]) -> dict[str, tuple[Tensor, int]]:
    """Per task present in a labelled mixed batch, the loss of its rows and their count."""
    if LABELS not in batch:
        raise PalUserError("A mixed batch without labels has no loss: add 'labels' (one per row).")
    labels = torch.as_tensor(batch[LABELS])
    return {
        task: (
            module.compute_loss(task, out.output, labels.to(out.rows.device)[out.rows]),
            int(out.rows.numel()),
        )
        for task, out in module.forward_mixed(batch).items()
    }


def mixed_training_step(module: MultiTaskModule, batch: Mapping[str, Any]) -> dict[str, Any]:
    """The loss of a mixed batch, the mean over its rows; logs each present task's loss and the total."""
    if module.simcse is not None:
        check_mixed_training("mixed", module.simcse, ())
    rows = len(batch[TASKS])
    total: Tensor | None = None
    losses: dict[str, Tensor] = {}
    for task, (loss, count) in mixed_losses(module, batch).items():
        # logger=False, as for a one-task batch: TrainingLog writes each present task's loss once
        module.log(f"train/{task}/loss", loss, batch_size=count, logger=False)
        module.guard.note(task, loss)
        losses[task] = loss.detach()
        part = loss * (count / rows)
        total = part if total is None else total + part
    assert total is not None  # a batch has at least one row
    module.log("train/loss", total, prog_bar=True, batch_size=rows)
    # always the loss, even a NaN one (the guard decides): see MultiTaskModule.training_step
    return {"loss": total, TASK_LOSSES: losses}

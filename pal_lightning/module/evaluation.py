"""The one evaluation loop (validation, test, :class:`~pal_lightning.callbacks.ContinualEvaluation`): a
:class:`TaskScorer` fed by :func:`score_batch`, logged by :func:`log_scores` or run by :func:`evaluate_loader`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn
from torchmetrics import MetricCollection

from pal_lightning.core.batch import LABELS, TASK
from pal_lightning.core.contracts import TaskPredictor, require
from pal_lightning.core.distributed import all_reduce_sum
from pal_lightning.module.inference import eval_mode
from pal_lightning.tasks.metrics import build_task_metrics, overall_over, scored_task_names
from pal_lightning.tasks.specs import EvalView, TaskSpec, with_views

if TYPE_CHECKING:
    import lightning.pytorch as pl

#: The evaluation stages Lightning drives through the module's steps.
STAGES = ("val", "test")


class EvaluatedModel(TaskPredictor, Protocol):
    """What the evaluation loop needs of a model: a forward, predictions from its output and a loss."""

    def __call__(self, batch: Mapping[str, Any]) -> Tensor: ...

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor: ...


@dataclass
class Scores:
    """One evaluation's ``{task: {metric: value}}`` and ``{task: mean loss}`` (tasks with labelled examples)."""

    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    losses: dict[str, float] = field(default_factory=dict)


class TaskScorer(nn.Module):
    """One evaluation's running state over the tasks ``specs``: metrics, counts and (``with_loss``) loss sums."""

    def __init__(self, specs: Iterable[TaskSpec], with_loss: bool = True) -> None:
        super().__init__()
        self.collections = nn.ModuleDict({s.name: build_task_metrics(s) for s in specs})
        self.with_loss = with_loss
        self._counts: dict[str, int] = {}
        self._loss_sums: dict[str, list[Tensor]] = {}

    def _collection(self, task: str) -> MetricCollection:
        return cast(MetricCollection, self.collections[task])

    def reset(self) -> None:
        """Forget every update (metrics, counts and losses)."""
        self._counts, self._loss_sums = {}, {}
        for name in self.collections:
            self._collection(name).reset()

    def update(self, task: str, predictions: Tensor, labels: Tensor, loss: Tensor | None = None) -> None:
        """Add one batch of ``task``: its predictions, labels and (with ``with_loss``) its mean loss."""
        self._collection(task).update(predictions, labels)
        self._counts[task] = self._counts.get(task, 0) + len(labels)
        if self.with_loss and loss is not None:
            # a tensor, so that no batch waits for the device; summed once at the end
            self._loss_sums.setdefault(task, []).append(loss.detach().float() * len(labels))

    def compute(self, device: torch.device) -> Scores:
        """The scores of every task that was updated on any rank, then :meth:`reset` (collective under DDP:
        counts are summed first, so every rank makes the same ``compute()`` calls)."""
        names = list(self.collections.keys())
        counts = torch.tensor([float(self._counts.get(n, 0)) for n in names], device=device)
        losses = torch.stack(
            [
                torch.stack(self._loss_sums[n]).sum() if n in self._loss_sums else counts.new_zeros(())
                for n in names
            ]
        )
        totals = all_reduce_sum(torch.stack([counts, losses]))
        scores = Scores()
        for i, name in enumerate(names):
            if totals[0, i] <= 0:
                continue
            scores.metrics[name] = {k: float(v) for k, v in self._collection(name).compute().items()}
            if self.with_loss:
                scores.losses[name] = float(totals[1, i] / totals[0, i])
        self.reset()
        return scores


def score_batch(model: EvaluatedModel, scorer: TaskScorer, batch: Mapping[str, Any]) -> None:
    """Forward one batch and add it to ``scorer``; a batch without labels (a test split) is skipped."""
    if LABELS not in batch:
        return
    task, labels = batch[TASK], batch[LABELS]
    output = model(batch)
    loss = model.compute_loss(task, output, labels) if scorer.with_loss else None
    scorer.update(task, model.predict_from_output(task, output), labels, loss)


@torch.no_grad()
def evaluate_loader(
    module: pl.LightningModule,
    loader: Iterable[Mapping[str, Any]],
    specs: Iterable[TaskSpec],
    forward_context: AbstractContextManager[Any],
) -> Scores:
    """Score ``module`` on ``loader`` with fresh metrics from inside the training loop (eval mode, no
    gradients, inside ``forward_context``; collective under DDP)."""
    model = require(module, EvaluatedModel, "evaluation", "evaluate a MultiTaskModule (or a subclass).")
    scorer = TaskScorer(specs, with_loss=False).to(module.device)
    with eval_mode(module), forward_context:
        for batch in loader:
            score_batch(model, scorer, move_data_to_device(batch, module.device))
        return scorer.compute(module.device)


def scored_tasks(specs: Iterable[TaskSpec], views: dict[str, EvalView], auxiliary: Any) -> list[str]:
    """The tasks the overall score covers: all but the ``auxiliary`` ones, each with its evaluated views."""
    left_out = {*([auxiliary] if isinstance(auxiliary, str) else auxiliary or ())}
    left_out |= {v.name for v in views.values() if v.parent in left_out}
    return scored_task_names(with_views(specs, views, "dev"), tuple(left_out))


def log_scores(
    module: pl.LightningModule, stage: str, scores: Scores, specs: list[TaskSpec], scored: list[str]
) -> dict[str, float]:
    """Log (and return) one evaluation's ``<stage>/<task>/<metric>``, ``.../loss`` and ``<stage>/overall``
    (``overall_partial`` for some of the ``scored`` tasks)."""
    values: dict[str, float] = {}
    for name, metrics in scores.metrics.items():
        values.update({f"{stage}/{name}/{k}": v for k, v in metrics.items()})
        values[f"{stage}/{name}/loss"] = scores.losses[name]
    overall = overall_over(scores.metrics, specs, scored)
    # equal on every rank already; sync_dist keeps Lightning's epoch logging consistent under DDP
    if values:
        module.log_dict(values, sync_dist=True)
        if stage == "val" and module.trainer.state.fn == "fit":
            # Lightning would log this at the steps done minus one: a logged "step" sets the steps done
            module.log_dict(
                {"step": float(module.global_step), "epoch": float(module.current_epoch)}, sync_dist=True
            )
    if overall.value is not None:
        # a partial mean has its own name: a checkpoint monitoring <stage>/overall never sees it
        module.log(overall.key(stage), overall.value, prog_bar=True, sync_dist=True)
        values[overall.key(stage)] = overall.value
    return values

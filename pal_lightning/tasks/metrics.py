"""Per-task evaluation metrics and the overall score.

One :class:`torchmetrics.MetricCollection` per task and stage (val, test):
metric objects accumulate their state over the whole evaluation set and
``compute()`` merges the states of all DDP ranks before computing, so the
numbers are the full-set values, not averages of per-batch values.

Metric names (``TaskSpec.metrics``):

============ =========================================================== ==================
name         definition                                                  input
============ =========================================================== ==================
accuracy     ``mean(ŷ == y)`` over all examples (micro)                  class indices
f1           binary F1 of class 1 (``2PR/(P+R)``); macro F1 for C > 2    class indices
pearson      ``cov(ŷ, y) / (σ_ŷ σ_y)``                                   scores, task scale
spearman     Pearson correlation of the ranks (ties get average ranks)   scores, task scale
matthews     ``(TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))``    class indices
             (CoLA's GLUE metric; the multiclass R_K for C > 2)
============ =========================================================== ==================

The overall score: see :func:`overall_score`. An evaluation that reached only some of the scored
tasks (e.g. ``--trainer.limit_val_batches 2``) gives a *partial* overall, logged as
``<stage>/overall_partial`` and never as ``<stage>/overall`` (:func:`overall_over`), so a partial mean
is never compared with, or chosen as best over, a complete one.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import (
    BinaryF1Score,
    BinaryMatthewsCorrCoef,
    MulticlassAccuracy,
    MulticlassF1Score,
    MulticlassMatthewsCorrCoef,
)
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.glue import glue_average, is_glue_task
from pal_lightning.tasks.specs import TaskSpec

_CLASSIFICATION_ONLY = ("accuracy", "f1", "matthews")
#: Metrics in -1..1 (correlations), mapped to 0..1 by :func:`normalised_main_score`.
_CORRELATIONS = ("pearson", "spearman", "matthews")


def build_metric(name: str, spec: TaskSpec) -> Metric:
    """One torchmetrics object for metric ``name`` of task ``spec``.

    Raises:
        PalUserError: an unknown name, or accuracy/F1 asked of a regression task.
    """
    if name in _CLASSIFICATION_ONLY and spec.is_regression:
        raise PalUserError(
            f"Task {spec.name!r} is a regression task: metric {name!r} needs classes. Use 'pearson' or 'spearman'."
        )
    if name == "accuracy":
        return MulticlassAccuracy(num_classes=spec.num_labels, average="micro")
    if name == "f1":
        if spec.num_labels == 2:
            return BinaryF1Score()
        return MulticlassF1Score(num_classes=spec.num_labels, average="macro")
    if name == "pearson":
        return PearsonCorrCoef()
    if name == "spearman":
        # Spearman keeps every prediction (ranks need the whole set); torchmetrics warns about
        # memory, which is irrelevant at dev-set sizes, so the warning is silenced here.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*will save all targets and predictions.*")
            return SpearmanCorrCoef()
    if name == "matthews":
        if spec.num_labels == 2:
            return BinaryMatthewsCorrCoef()
        return MulticlassMatthewsCorrCoef(num_classes=spec.num_labels)
    raise PalUserError(
        f"Task {spec.name!r}: unknown metric {name!r}; choose from accuracy, f1, pearson, spearman, matthews."
    )


def build_task_metrics(spec: TaskSpec, prefix: str = "") -> MetricCollection:
    """The metrics of one task, keyed by metric name (output keys get ``prefix``, e.g. ``"val/sst/"``).

    ``update(preds, target)`` takes the output of :func:`pal_lightning.modeling.heads.predict`
    (class indices, or scores on the task's scale) and the batch labels.
    """
    # compute_groups=False: each metric keeps its own state, which is cheap
    # here and avoids torchmetrics' group detection on the first update.
    return MetricCollection(
        {name: build_metric(name, spec) for name in spec.metrics}, prefix=prefix, compute_groups=False
    )


def cs224n_overall(sst_acc: float, qqp_acc: float, sts_pearson: float) -> float:
    """The CS224N minBERT overall score: ``(SST acc + Quora acc + (STS Pearson + 1) / 2) / 3``."""
    return (sst_acc + qqp_acc + (sts_pearson + 1.0) / 2.0) / 3.0


def normalised_main_score(spec: TaskSpec, value: float) -> float:
    """A task's main metric on a 0..1 scale: correlations ``r -> (r + 1) / 2``, others unchanged."""
    if spec.main_metric in _CORRELATIONS:
        return (value + 1.0) / 2.0
    return value


def overall_score(
    scores_by_task: Mapping[str, Mapping[str, float]], specs: Sequence[TaskSpec]
) -> float | None:
    """One number summarising all evaluated tasks (higher is better).

    * When ``sst`` (accuracy), ``qqp`` (accuracy) and ``sts`` (pearson) were all
      evaluated, it is :func:`cs224n_overall`, whatever other tasks are present,
      so numbers compare with the CS224N leaderboard.
    * Otherwise, when every evaluated task is a built-in GLUE task, it is the GLUE score
      (:func:`pal_lightning.tasks.glue.glue_average`: the mean of each task's metrics, then over tasks).
    * Otherwise it is the mean over evaluated tasks of each task's main metric
      (the first of ``TaskSpec.metrics``) mapped to 0..1 by
      :func:`normalised_main_score` (``pearson -> (r + 1) / 2``).

    NaN scores (e.g. a correlation over constant predictions) count as they are,
    so the overall is NaN too: a broken task is not hidden.

    Args:
        scores_by_task: ``{task: {metric: value}}`` for the tasks evaluated.
        specs: the task specs (tasks not in ``scores_by_task`` are skipped).

    Returns:
        The score, or ``None`` when no task was evaluated.
    """
    by_name = {s.name: s for s in specs}
    try:
        return cs224n_overall(
            float(scores_by_task["sst"]["accuracy"]),
            float(scores_by_task["qqp"]["accuracy"]),
            float(scores_by_task["sts"]["pearson"]),
        )
    except KeyError:
        pass
    evaluated = [by_name[t] for t in scores_by_task if t in by_name]
    if evaluated and all(is_glue_task(s) for s in evaluated):
        return glue_average(scores_by_task, specs)
    values = [
        normalised_main_score(by_name[task], float(scores[by_name[task].main_metric]))
        for task, scores in scores_by_task.items()
        if task in by_name and by_name[task].main_metric in scores
    ]
    if not values:
        return None
    return math.fsum(values) / len(values)


#: Suffix of the key under which a partial overall is logged (``val/overall_partial``).
PARTIAL_SUFFIX = "_partial"


def scored_task_names(specs: Iterable[TaskSpec], auxiliary: Collection[str] = ()) -> list[str]:
    """The tasks an overall score must cover: every task except auxiliary ones, in task order.

    A task is auxiliary when its name is in ``auxiliary`` or its spec says ``auxiliary=True`` (trained
    for its effect on the encoder, deliberately left out of the overall).
    """
    return [s.name for s in specs if s.name not in auxiliary and not getattr(s, "auxiliary", False)]


@dataclass(frozen=True)
class Overall:
    """The overall score of one evaluation and which of the scored tasks it covers."""

    value: float | None
    """:func:`overall_score` over the covered tasks; ``None`` when none of them was evaluated."""
    covered: tuple[str, ...]
    """Scored tasks that were evaluated (in task order)."""
    missing: tuple[str, ...]
    """Scored tasks that were not evaluated: the value leaves them out."""

    @property
    def complete(self) -> bool:
        """Whether the value covers every scored task (only then is it *the* overall score)."""
        return self.value is not None and not self.missing

    def key(self, stage: str) -> str:
        """The logged name: ``<stage>/overall`` when complete, ``<stage>/overall_partial`` otherwise."""
        return f"{stage}/overall" + ("" if self.complete else PARTIAL_SUFFIX)


def overall_over(
    scores_by_task: Mapping[str, Mapping[str, float]], specs: Sequence[TaskSpec], scored: Sequence[str]
) -> Overall:
    """:func:`overall_score` over the ``scored`` tasks that were evaluated, and whether that is all of them.

    Tasks outside ``scored`` (auxiliary tasks) never enter the value.
    """
    covered = tuple(t for t in scored if t in scores_by_task)
    missing = tuple(t for t in scored if t not in scores_by_task)
    value = overall_score({t: scores_by_task[t] for t in covered}, specs) if covered else None
    return Overall(value=value, covered=covered, missing=missing)

"""Per-task metrics (one :class:`torchmetrics.MetricCollection` per task and stage, full-set values merged
over DDP ranks) and the overall score. ``accuracy`` (micro), ``f1`` (binary F1 of class 1, macro for more
classes), ``matthews`` (CoLA's) take class indices; ``pearson``, ``spearman`` scores on the task's scale.
An evaluation that reached only some scored tasks logs ``<stage>/overall_partial``, never
``<stage>/overall`` (:func:`overall_over`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
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
_CORRELATIONS = ("pearson", "spearman", "matthews")


def build_metric(name: str, spec: TaskSpec) -> Metric:
    """The torchmetrics object of metric ``name`` of task ``spec``.

    Raises:
        PalUserError: an unknown name, or accuracy/F1 asked of a regression task.
    """
    if name in _CLASSIFICATION_ONLY and spec.is_regression:
        raise PalUserError(
            f"Task {spec.name!r} is a regression task: metric {name!r} needs classes. Use 'pearson' or 'spearman'."
        )
    n = spec.num_labels
    factories: dict[str, Callable[[], Metric]] = {
        "accuracy": lambda: MulticlassAccuracy(num_classes=n, average="micro"),
        "f1": lambda: BinaryF1Score() if n == 2 else MulticlassF1Score(num_classes=n, average="macro"),
        "pearson": PearsonCorrCoef,
        "spearman": SpearmanCorrCoef,
        "matthews": lambda: BinaryMatthewsCorrCoef() if n == 2 else MulticlassMatthewsCorrCoef(num_classes=n),
    }
    if name not in factories:
        raise PalUserError(
            f"Task {spec.name!r}: unknown metric {name!r}; choose from accuracy, f1, pearson, spearman, matthews."
        )
    with warnings.catch_warnings():  # Spearman's memory warning is irrelevant at dev-set sizes
        warnings.filterwarnings("ignore", message=".*will save all targets and predictions.*")
        return factories[name]()


def build_task_metrics(spec: TaskSpec, prefix: str = "") -> MetricCollection:
    """The metrics of one task by name (keys prefixed with ``prefix``, e.g. ``"val/sst/"``)."""
    # compute_groups=False: own states are cheap, and skip group detection on the first update
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
    """One number summarising ``{task: {metric: value}}`` (``None`` when no task was evaluated).

    :func:`cs224n_overall` when sst, qqp and sts were evaluated; else the GLUE score when every task is a
    built-in GLUE task; else the mean of each task's :func:`normalised_main_score`. NaN stays NaN.
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


PARTIAL_SUFFIX = "_partial"


def scored_task_names(specs: Iterable[TaskSpec], auxiliary: Collection[str] = ()) -> list[str]:
    """The tasks an overall score covers: all but the auxiliary ones (named, or ``auxiliary=True``)."""
    return [s.name for s in specs if s.name not in auxiliary and not getattr(s, "auxiliary", False)]


@dataclass(frozen=True)
class Overall:
    """The overall score of one evaluation, the scored tasks it covers and those it misses."""

    value: float | None
    covered: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Whether the value covers every scored task."""
        return self.value is not None and not self.missing

    def key(self, stage: str) -> str:
        """``<stage>/overall`` when complete, else ``<stage>/overall_partial``."""
        return f"{stage}/overall" + ("" if self.complete else PARTIAL_SUFFIX)


def overall_over(
    scores_by_task: Mapping[str, Mapping[str, float]], specs: Sequence[TaskSpec], scored: Sequence[str]
) -> Overall:
    """:func:`overall_score` over the evaluated ``scored`` tasks (auxiliary ones never enter)."""
    covered = tuple(t for t in scored if t in scores_by_task)
    missing = tuple(t for t in scored if t not in scores_by_task)
    value = overall_score({t: scores_by_task[t] for t in covered}, specs) if covered else None
    return Overall(value=value, covered=covered, missing=missing)

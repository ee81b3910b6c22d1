"""GLUE: the benchmark's score (Wang et al., 2019, section 4: the mean over tasks of the mean of each task's
metrics; MNLI matched and mismatched count as one task, AX is not scored) and the test-server submission
files (``index\tprediction`` per test example, a zip of :data:`SUBMISSION_FILES`)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write
from pal_lightning.tasks.catalogue import GLUE_TASKS
from pal_lightning.tasks.specs import TaskSpec

_NLI = ("entailment", "neutral", "contradiction")
_QNLI_RTE = ("entailment", "not_entailment")

#: Server file name and label names (``None``: the prediction as a number) of each GLUE task.
SUBMISSION_FILES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "glue_cola": ("CoLA.tsv", None),
    "glue_sst2": ("SST-2.tsv", None),
    "glue_mrpc": ("MRPC.tsv", None),
    "glue_qqp": ("QQP.tsv", None),
    "glue_stsb": ("STS-B.tsv", None),
    "glue_mnli": ("MNLI-m.tsv", _NLI),
    "glue_mnli_mm": ("MNLI-mm.tsv", _NLI),
    "glue_qnli": ("QNLI.tsv", _QNLI_RTE),
    "glue_rte": ("RTE.tsv", _QNLI_RTE),
    "glue_wnli": ("WNLI.tsv", None),
    "glue_ax": ("AX.tsv", _NLI),
}
_SAME_TASK = {"glue_mnli_mm": "glue_mnli"}
_NOT_SCORED = frozenset({"glue_ax"})
GLUE_VIEWS: dict[str, TaskSpec] = {v.name: v for spec in GLUE_TASKS.values() for v in spec.views()}


def is_glue_task(spec: TaskSpec) -> bool:
    """Whether ``spec`` is a built-in GLUE task or view, unchanged."""
    return GLUE_TASKS.get(spec.name) == spec or GLUE_VIEWS.get(spec.name) == spec


def missing_submission_files(written: Iterable[str]) -> list[str]:
    """The server's files not among ``written``, in GLUE's order."""
    done = set(written)
    return [name for name, _ in SUBMISSION_FILES.values() if name not in done]


def glue_task_score(spec: TaskSpec, scores: Mapping[str, float]) -> float:
    """The mean of a task's metrics (``nan`` when one is missing)."""
    values = [float(scores.get(metric, math.nan)) for metric in spec.metrics]
    return math.fsum(values) / len(values)


def glue_average(
    scores_by_task: Mapping[str, Mapping[str, float]], specs: Sequence[TaskSpec]
) -> float | None:
    """The GLUE score of the evaluated tasks, or ``None`` when none was evaluated."""
    by_name = {s.name: s for s in specs}
    grouped: dict[str, list[float]] = {}
    for task, scores in scores_by_task.items():
        if task in by_name and task not in _NOT_SCORED:
            grouped.setdefault(_SAME_TASK.get(task, task), []).append(glue_task_score(by_name[task], scores))
    if not grouped:
        return None
    return math.fsum(math.fsum(v) / len(v) for v in grouped.values()) / len(grouped)


def submission_value(task: str, prediction: Any) -> str:
    """One prediction as the server reads it: a label name, an int class or a float (STS-B)."""
    _, names = SUBMISSION_FILES[task]
    if names is not None:
        return names[int(prediction)]
    if task == "glue_stsb":
        return repr(float(prediction))
    return str(int(prediction))


def write_submission_file(
    folder: str | os.PathLike[str], task: str, rows: Sequence[tuple[str, Any]], overwrite: bool = False
) -> Path:
    """Write ``<folder>/<server name>``, one row per ``(idx, prediction)``.

    Raises:
        PalUserError: ``task`` is not a GLUE task, or the file exists and ``overwrite`` is false.
    """
    if task not in SUBMISSION_FILES:
        raise PalUserError(
            f"Task {task!r} has no GLUE submission file; the GLUE tasks are {sorted(SUBMISSION_FILES)}."
        )
    path = Path(folder) / SUBMISSION_FILES[task][0]
    if path.exists() and not overwrite:
        raise PalUserError(f"{path} already exists; move it, or pass overwrite=True to replace it.")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("index\tprediction\n")
        for idx, prediction in rows:
            f.write(f"{idx}\t{submission_value(task, prediction)}\n")
    return path

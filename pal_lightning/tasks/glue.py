"""GLUE: the benchmark's average score and its test-server submission files.

**The GLUE score** (Wang et al., 2019, section 4) is the unweighted mean over tasks of each task's score,
the mean of its metrics (MRPC and QQP ``(accuracy + F1) / 2``, STS-B ``(Pearson + Spearman) / 2``, CoLA
Matthews, the others accuracy). MNLI is one task: its matched and mismatched accuracies are averaged; the
diagnostic set AX is not scored. Correlations enter as they are; the score stays on the 0..1 scale.

**Submission files**: a flat zip of the eleven tab-separated files of :data:`SUBMISSION_FILES`, each a
header ``index\tprediction`` and one row per test example: its ``idx`` and the prediction, an integer class
(CoLA, SST-2, MRPC, QQP, WNLI, in the hub's class order), a float (STS-B) or the label name (MNLI, AX,
QNLI, RTE).
"""

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
    "glue_mnli_mm": ("MNLI-mm.tsv", _NLI),  # the view of glue_mnli (its mismatched dev and test sets)
    "glue_qnli": ("QNLI.tsv", _QNLI_RTE),
    "glue_rte": ("RTE.tsv", _QNLI_RTE),
    "glue_wnli": ("WNLI.tsv", None),
    "glue_ax": ("AX.tsv", _NLI),  # the view of glue_mnli: the diagnostic set, predicted by the MNLI head
}
#: Tasks that count as one in the GLUE score (MNLI's matched and mismatched evaluations).
_SAME_TASK = {"glue_mnli_mm": "glue_mnli"}
#: Evaluations outside the GLUE score (the diagnostic set).
_NOT_SCORED = frozenset({"glue_ax"})
#: The built-in GLUE evaluation views (``glue_mnli_mm``, ``glue_ax``) as specs, by name.
GLUE_VIEWS: dict[str, TaskSpec] = {v.name: v for spec in GLUE_TASKS.values() for v in spec.views()}


def is_glue_task(spec: TaskSpec) -> bool:
    """Whether ``spec`` is one of the built-in GLUE tasks or their evaluation views, unchanged."""
    return GLUE_TASKS.get(spec.name) == spec or GLUE_VIEWS.get(spec.name) == spec


def missing_submission_files(written: Iterable[str]) -> list[str]:
    """The server's files (:data:`SUBMISSION_FILES`) not among the file names ``written``, in GLUE's order."""
    done = set(written)
    return [name for name, _ in SUBMISSION_FILES.values() if name not in done]


def glue_task_score(spec: TaskSpec, scores: Mapping[str, float]) -> float:
    """A task's GLUE score: the mean of its metrics (``nan`` when one of them was not computed)."""
    values = [float(scores.get(metric, math.nan)) for metric in spec.metrics]
    return math.fsum(values) / len(values)


def glue_average(
    scores_by_task: Mapping[str, Mapping[str, float]], specs: Sequence[TaskSpec]
) -> float | None:
    """The GLUE score of the evaluated tasks (module docstring), or ``None`` when none was evaluated."""
    by_name = {s.name: s for s in specs}
    grouped: dict[str, list[float]] = {}
    for task, scores in scores_by_task.items():
        if task in by_name and task not in _NOT_SCORED:
            grouped.setdefault(_SAME_TASK.get(task, task), []).append(glue_task_score(by_name[task], scores))
    if not grouped:
        return None
    return math.fsum(math.fsum(v) / len(v) for v in grouped.values()) / len(grouped)


def submission_value(task: str, prediction: Any) -> str:
    """One prediction as the server reads it: a label name (MNLI, QNLI, RTE), an int class or a float."""
    _, names = SUBMISSION_FILES[task]
    if names is not None:
        return names[int(prediction)]
    if task == "glue_stsb":
        return repr(float(prediction))
    return str(int(prediction))


def write_submission_file(
    folder: str | os.PathLike[str], task: str, rows: Sequence[tuple[str, Any]], overwrite: bool = False
) -> Path:
    """``<folder>/<server name>`` with ``index\\tprediction`` and one row per ``(idx, prediction)``.

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

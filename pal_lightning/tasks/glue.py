"""GLUE: the benchmark's average score and its test-server submission files.

The tasks themselves are :data:`pal_lightning.tasks.specs.GLUE_TASKS` (``nyu-mll/glue`` through ``datasets``);
``glue_mnli`` is one MNLI head scored on both dev sets, the mismatched one and the diagnostic set AX as its
evaluation views ``glue_mnli_mm`` and ``glue_ax`` (:mod:`pal_lightning.tasks.views`).

**The GLUE score** (Wang et al., 2019, section 4) is the unweighted mean over tasks of each task's score, a
task's score being the mean of its metrics: MRPC and QQP ``(accuracy + F1) / 2``, STS-B ``(Pearson +
Spearman) / 2``, CoLA the Matthews correlation, the others accuracy. MNLI is one task of the nine: its
matched and mismatched accuracies are averaged into one MNLI score, and the diagnostic set AX is not part
of the score. Checked by arithmetic on the leaderboard's BERT-large row (CoLA 60.5, SST-2 94.9, MRPC
89.3/85.4, STS-B 87.6/86.5, QQP 72.1/89.3, MNLI-m 86.7, MNLI-mm 85.9, QNLI 92.7, RTE 70.1, WNLI 65.1,
AX 39.6; score 80.5): nine task scores with MNLI (86.7 + 85.9) / 2 give 80.52, while MNLI-m and MNLI-mm as
two tasks would give 81.1 and AX as a tenth task 76.4. (The first metric of each task is as the BERT paper
and torchdistill's README table quote it; the second metrics, WNLI, AX and the 80.5 are the leaderboard's,
not found in a searchable copy when this was written.) Correlations enter as they are (not mapped to
0..1). The leaderboard prints it times 100; here it stays on the 0..1 scale of the other scores, and
:func:`pal_lightning.tasks.metrics.overall_score` returns it as ``val/overall`` when every evaluated task is a
GLUE task.

**Submission files**: the server (gluebenchmark.com/submit) takes a zip of eleven tab-separated files, no
sub-folders, named as in :data:`SUBMISSION_FILES` (``CoLA.tsv``, ``SST-2.tsv``, ``MRPC.tsv``, ``STS-B.tsv``,
``QQP.tsv``, ``MNLI-m.tsv``, ``MNLI-mm.tsv``, ``QNLI.tsv``, ``RTE.tsv``, ``WNLI.tsv``, ``AX.tsv``), each a
header ``index\tprediction`` and one row per test example: the example's ``idx`` (the hub's copy of the
index column of GLUE's test files) and its prediction, an integer class for CoLA, SST-2, MRPC, QQP and
WNLI (1 = acceptable / positive / paraphrase / entailment: the hub's class order, WNLI's being
not_entailment, entailment), a float for STS-B, and the label *name* for MNLI and AX (``entailment``,
``neutral``, ``contradiction``), QNLI and RTE (``entailment``, ``not_entailment``). Where each fact comes
from: the eleven names, the header line, one ``id<TAB>label`` row per test example and the flat zip are the
GLUE site's submission instructions (as quoted in a public copy of that page); the label names and
orders are the nyu-mll/glue card's and ``datasets``' GLUE builder's ``label_classes``; label names for the
NLI files and 0/1 for WNLI are what public submission scripts write. Not checked here: a submission to
the server itself.
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

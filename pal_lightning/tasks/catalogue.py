"""The built-in tasks, registered by name: the CS224N minBERT workload (sst, qqp, sts, cfimdb), SST-2 and
the GLUE tasks (:data:`GLUE_TASKS`, read from ``nyu-mll/glue``); docs/data.md lists them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pal_lightning.tasks.specs import TaskKind, TaskSpec, register_task

__all__ = ["BUILTIN_TASKS", "CS224N_TASKS", "GLUE_EIGHT", "GLUE_TASKS", "overall_name"]

_STARTER = (
    "CS224N minBERT default final project, the starter code's data/ folder "
    "(github.com/gpoesia/minbert-default-final-project):"
)
_PAIR_COLUMNS = ("sentence1", "sentence2")


def _cs224n(name: str, prefix: str, source: str, **kw: Any) -> TaskSpec:
    files = {"train": f"{prefix}-train.csv", "dev": f"{prefix}-dev.csv", "test": f"{prefix}-test-student.csv"}
    return TaskSpec(name=name, files=files, format="cs224n", source=_STARTER + source, **kw)


BUILTIN_TASKS: dict[str, TaskSpec] = {
    "sst": _cs224n(
        "sst",
        "ids-sst",
        " ids-sst-{train,dev,test-student}.csv: the Stanford Sentiment Treebank, 5 classes (Socher et al., "
        "2013). Public copy: the Hugging Face dataset SetFit/sst5.",
        num_labels=5,
        label_range=(0, 4),
        ptb_detokenize=True,
    ),
    "qqp": _cs224n(
        "qqp",
        "quora",
        " quora-{train,dev,test-student}.csv: Quora Question Pairs (2017), the course's own split. Public "
        "copy: the Hugging Face dataset nyu-mll/glue, config qqp (GLUE's split).",
        kind=TaskKind.PAIR_CLASSIFICATION,
        metrics=("accuracy", "f1"),
        text_columns=_PAIR_COLUMNS,
        label_column="is_duplicate",
        unquote=True,
    ),
    "sts": _cs224n(
        "sts",
        "sts",
        " sts-{train,dev,test-student}.csv: the STS benchmark (Cer et al., 2017), reshuffled by the course. "
        "Public copy: the Hugging Face dataset nyu-mll/glue, config stsb (GLUE's split).",
        kind=TaskKind.PAIR_REGRESSION,
        num_labels=1,
        label_range=(0, 5),
        metrics=("pearson", "spearman"),
        text_columns=_PAIR_COLUMNS,
        label_column="similarity",
    ),
    "cfimdb": _cs224n(
        "cfimdb",
        "ids-cfimdb",
        " ids-cfimdb-{train,dev,test-student}.csv: IMDB movie reviews, positive or negative. No public "
        "Hugging Face copy of this selection: the folder is needed.",
    ),
    "sst2": TaskSpec(
        name="sst2",
        format="glue_tsv",
        files={"train": "train_full.tsv", "dev": "dev.tsv", "test": "test.tsv"},
        label_column="label",
        id_column=None,
        source="GLUE SST-2 (Wang et al., 2019) as GLUE distributes it: train_full.tsv (GLUE's train.tsv, "
        "67,349 phrases), dev.tsv, test.tsv (no labels). Public copy: the Hugging Face dataset nyu-mll/glue, "
        "config sst2.",
    ),
}


_GLUE_SOURCE = "GLUE (Wang et al., 2019), the Hugging Face dataset nyu-mll/glue, config "


def _glue(config: str, text_columns: tuple[str, ...], labels: int = 2, **kw: Any) -> TaskSpec:
    """The task ``glue_<config>``: the hub's columns, splits and label order."""
    kind = TaskKind.PAIR_CLASSIFICATION if len(text_columns) == 2 else TaskKind.SINGLE_CLASSIFICATION
    files = {"train": "train", "dev": "validation", "test": "test"}
    fields: dict[str, Any] = dict(kind=kind, num_labels=labels, label_range=(0, labels - 1), files=files)
    fields.update(format="hf", hf_path="nyu-mll/glue", hf_name=config, text_columns=text_columns)
    fields.update(label_column="label", id_column="idx", source=_GLUE_SOURCE + config + ".")
    return TaskSpec(name=f"glue_{config}", **{**fields, **kw})


#: The one MNLI head also scores the mismatched sets and the diagnostic set (config ``ax``).
_MNLI_VIEWS: dict[str, dict[str, Any]] = {
    "glue_mnli_mm": {"files": {"dev": "validation_mismatched", "test": "test_mismatched"}},
    "glue_ax": {
        "hf_name": "ax",
        "files": {"test": "test"},
        "source": _GLUE_SOURCE + "ax: GLUE's diagnostic set, predicted by the MNLI head.",
    },
}

_MNLI_FILES = {"train": "train", "dev": "validation_matched", "test": "test_matched"}
#: The GLUE tasks from ``nyu-mll/glue``, with GLUE's metrics and the hub's label order.
GLUE_TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        _glue("cola", ("sentence",), metrics=("matthews",)),
        _glue("sst2", ("sentence",)),
        _glue("mrpc", _PAIR_COLUMNS, metrics=("accuracy", "f1")),
        _glue("qqp", ("question1", "question2"), metrics=("accuracy", "f1")),
        _glue(
            "stsb",
            _PAIR_COLUMNS,
            1,
            kind=TaskKind.PAIR_REGRESSION,
            label_range=(0, 5),
            metrics=("pearson", "spearman"),
        ),
        _glue("mnli", ("premise", "hypothesis"), labels=3, files=_MNLI_FILES, eval_views=_MNLI_VIEWS),
        _glue("qnli", ("question", "sentence")),
        _glue("rte", _PAIR_COLUMNS),
        _glue("wnli", _PAIR_COLUMNS),
    )
}
#: The eight tasks of the paper's GLUE setting, in GLUE's order (no WNLI, which the paper left out).
GLUE_EIGHT = tuple(f"glue_{t}" for t in ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"))

for _spec in (*BUILTIN_TASKS.values(), *GLUE_TASKS.values()):
    register_task(_spec)

#: The tasks whose presence makes the overall score the CS224N one.
CS224N_TASKS = ("sst", "qqp", "sts")


def overall_name(tasks: Sequence[str]) -> str:
    """The name of the overall score of ``tasks``: ``CS224N overall``, ``GLUE score`` or ``Overall``."""
    if tasks and all(t in tasks for t in CS224N_TASKS):
        return "CS224N overall"
    if tasks and all(t in GLUE_TASKS for t in tasks):
        return "GLUE score"
    return "Overall"

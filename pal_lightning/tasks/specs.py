"""Task specifications: what a task is, independent of model and data code.

A :class:`TaskSpec` says what kind of prediction a task asks for, how many
labels it has, which metrics judge it and where its data lives. The model reads
``kind``/``num_labels``/``loss``/``metrics``; the data module reads the file and
column fields. Users add their own tasks by building a ``TaskSpec`` (in Python
or in a YAML config) or by calling :func:`register_task`; the library never
needs editing.

Built-in tasks (the CS224N minBERT workload and two extras):

======== ======================= ====== ============ ====================
name     kind                    labels range        metrics
======== ======================= ====== ============ ====================
sst      single classification   5      0..4         accuracy
qqp      pair classification     2      0..1         accuracy, f1
sts      pair regression         1      0..5         pearson, spearman
cfimdb   single classification   2      0..1         accuracy
sst2     single classification   2      0..1         accuracy
======== ======================= ====== ============ ====================

The GLUE tasks (:data:`GLUE_TASKS`: ``glue_cola``, ``glue_sst2``, ``glue_mrpc``, ``glue_qqp``, ``glue_stsb``,
``glue_mnli`` (scored on both MNLI dev sets), ``glue_qnli``, ``glue_rte``, ``glue_wnli``) read ``nyu-mll/glue``
through ``datasets``.

Each built-in task's ``source`` says where its data comes from; :data:`HUB_COPIES` holds the public
Hugging Face copy of those that have one (read when no data folder is given).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.plain_values import to_plain


class TaskKind(str, Enum):
    """The three prediction problems the library knows how to build heads for."""

    SINGLE_CLASSIFICATION = "single_classification"
    """One sentence in, one of ``num_labels`` classes out (SST, CFIMDB)."""
    PAIR_CLASSIFICATION = "pair_classification"
    """Two sentences in, one of ``num_labels`` classes out (Quora paraphrase)."""
    PAIR_REGRESSION = "pair_regression"
    """Two sentences in, one real score in ``label_range`` out (STS)."""

    @property
    def is_pair(self) -> bool:
        return self is not TaskKind.SINGLE_CLASSIFICATION

    @property
    def is_regression(self) -> bool:
        return self is TaskKind.PAIR_REGRESSION


#: Metric names understood by the module (see ``pal_lightning.tasks.metrics``).
KNOWN_METRICS = ("accuracy", "f1", "pearson", "spearman", "matthews")
#: Loss names understood by the module.
KNOWN_LOSSES = ("cross_entropy", "bce", "mse")
#: File formats understood by the data readers.
KNOWN_FORMATS = ("cs224n", "glue_tsv", "hf")


@dataclass
class TaskSpec:
    """Everything the library needs to know about one task.

    Example (a user task read from local CSV files through ``datasets``)::

        TaskSpec(
            name="mnli_small",
            kind="pair_classification",
            num_labels=3,
            label_names=("entailment", "neutral", "contradiction"),
            metrics=("accuracy",),
            format="hf",
            hf_path="csv",
            files={"train": "mnli/train.csv", "dev": "mnli/dev.csv"},
            text_columns=("premise", "hypothesis"),
            label_column="label",
        )
    """

    name: str
    """Unique task name; used in batch keys, metric names (``val/<name>/<metric>``) and file names."""
    kind: TaskKind | str = TaskKind.SINGLE_CLASSIFICATION
    """Prediction problem: single-sentence classification, pair classification or pair regression.
    A plain string value (``"pair_regression"``, as YAML configs and saved hyper-parameters write it) is
    accepted and converted to :class:`TaskKind`."""
    num_labels: int = 2
    """Number of classes (1 for regression)."""
    label_range: tuple[float, ...] = ()
    """Inclusive ``(low, high)`` range a label must lie in; rows outside it are bad rows. Left empty, it is
    ``(0, num_labels - 1)`` for a classification task (every class) and ``(0, 1)`` for a regression task;
    a regression task on another scale sets it (STS: ``(0, 5)``)."""
    label_names: tuple[str, ...] = ()
    """The class names, in class-index order (classification only): the label column may then hold these
    names (``sports``, ``politics``) as well as class indices, and predictions, prediction files, score
    reports and saved models name the classes. Left empty, a label column of words gets its names from the
    training split (sorted); a column of numbers stays numbers."""
    metrics: tuple[str, ...] = ("accuracy",)
    """Metric names from :data:`KNOWN_METRICS`; the first is the task's main score."""
    loss: str | None = None
    """Loss from :data:`KNOWN_LOSSES`; ``None`` picks cross-entropy for classification, mse for regression."""
    format: str = "cs224n"
    """File format: ``cs224n`` (tab-separated minBERT files), ``glue_tsv`` or ``hf`` (any ``datasets`` source)."""
    files: dict[str, str] = field(default_factory=dict)
    """File name per split (``train``, ``dev``, ``test``), relative to the data directory."""
    text_columns: tuple[str, ...] = ("sentence",)
    """Column(s) holding the text: one for single-sentence tasks, two for pairs."""
    label_column: str | None = "sentiment"
    """Column holding the label (absent from unlabelled test files)."""
    id_column: str | None = "id"
    """Column holding a unique example id, written back in prediction files; ``None`` uses the row number."""
    hf_path: str | None = None
    """For ``format='hf'``: a hub id or a builder name (``csv``, ``json``, ``parquet``) for ``datasets.load_dataset``."""
    hf_name: str | None = None
    """For ``format='hf'``: the dataset configuration name, if any."""
    ptb_detokenize: bool = False
    """Undo Penn-Treebank tokens (``-LRB-``, ````` ``, ``\\/``) in the text (SST)."""
    unquote: bool = False
    """Undo a second layer of CSV quoting (``"a ""b"" c"`` -> ``a "b" c``) in the text (Quora)."""
    source: str = ""
    """Where the data comes from, for people (the corpus, the files and their public copy); the code never
    reads it. Every built-in task fills it in."""
    eval_views: dict[str, dict[str, Any]] = field(default_factory=dict)
    """More evaluation sets scored by this task's head (and its adapters), each under a name of its own:
    ``{name: {field: value}}``, the fields of this spec that differ for that set (``files`` naming its
    ``dev`` and/or ``test`` split, ``hf_name`` ...). A view is validated (``val/<name>/<metric>``) and
    predicted (``<name>-<split>-output.csv``) like a task, but has no head and is never trained: MNLI's
    mismatched dev and test sets (``glue_mnli_mm``) and GLUE's diagnostic set (``glue_ax``) are views of
    ``glue_mnli`` (:mod:`pal_lightning.tasks.views`)."""

    def __post_init__(self) -> None:
        self.kind = TaskKind(self.kind)
        self.label_names = tuple(str(n) for n in self.label_names)
        self.label_range = self._resolved_range()
        self.metrics = tuple(self.metrics)
        self.text_columns = tuple(self.text_columns)
        self.files = dict(self.files)
        self.eval_views = {str(name): dict(fields) for name, fields in dict(self.eval_views).items()}
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(
                f"TaskSpec name {self.name!r} must be non-empty and use letters, digits, '_' or '-'."
            )
        if self.label_range[0] > self.label_range[1]:
            raise ValueError(f"Task {self.name!r}: label_range {self.label_range} has low > high.")
        if self.kind.is_regression:
            if self.num_labels != 1:
                raise ValueError(f"Task {self.name!r} is a regression task: num_labels must be 1.")
        elif self.num_labels < 2:
            raise ValueError(f"Task {self.name!r} is a classification task: num_labels must be >= 2.")
        self._check_classes()
        unknown = [m for m in self.metrics if m not in KNOWN_METRICS]
        if unknown or not self.metrics:
            raise ValueError(f"Task {self.name!r}: unknown metrics {unknown}; choose from {KNOWN_METRICS}.")
        if self.loss is not None and self.loss not in KNOWN_LOSSES:
            raise ValueError(f"Task {self.name!r}: unknown loss {self.loss!r}; choose from {KNOWN_LOSSES}.")
        if self.loss == "bce" and self.num_labels != 2:
            raise ValueError(f"Task {self.name!r}: loss 'bce' needs a binary task (num_labels=2).")
        if self.format not in KNOWN_FORMATS:
            raise ValueError(
                f"Task {self.name!r}: unknown format {self.format!r}; choose from {KNOWN_FORMATS}."
            )
        expected = 2 if self.kind.is_pair else 1
        if len(self.text_columns) != expected:
            raise ValueError(
                f"Task {self.name!r} ({self.kind.value}) needs {expected} text column(s), got {self.text_columns}."
            )
        self.views()  # a view with an unknown field or a bad value fails here, with the task

    def _resolved_range(self) -> tuple[float, float]:
        """:attr:`label_range` as two floats; an empty one is every class (classification) or ``(0, 1)``."""
        given = tuple(self.label_range)
        if not given:
            high = 1.0 if TaskKind(self.kind).is_regression else float(self.num_labels - 1)
            return (0.0, high)
        if len(given) != 2:
            raise ValueError(f"Task {self.name!r}: label_range {given} must be two numbers (low, high).")
        return (float(given[0]), float(given[1]))

    def _check_classes(self) -> None:
        """A classification task's label range and names must fit its ``num_labels`` classes."""
        if self.is_regression:
            if self.label_names:
                raise ValueError(f"Task {self.name!r} is a regression task: it has no label_names.")
            return
        low, high = self.label_range
        if low < 0 or high > self.num_labels - 1:
            raise ValueError(
                f"Task {self.name!r}: label_range ({low:g}, {high:g}) reaches outside its classes "
                f"0..{self.num_labels - 1} (num_labels {self.num_labels}); leave label_range out (every class) "
                "or fix num_labels."
            )
        if self.label_names and len(self.label_names) != self.num_labels:
            raise ValueError(
                f"Task {self.name!r}: {len(self.label_names)} label_names {list(self.label_names)} for "
                f"num_labels {self.num_labels}; give one name per class."
            )
        stripped = [n.strip() for n in self.label_names]
        if len(set(stripped)) != len(stripped) or not all(stripped):
            raise ValueError(
                f"Task {self.name!r}: label_names must be distinct and non-empty, got {list(self.label_names)}."
            )

    @property
    def is_pair(self) -> bool:
        """Whether an example holds two sentences."""
        return TaskKind(self.kind).is_pair  # a TaskKind after __post_init__; the field's type admits str

    @property
    def is_regression(self) -> bool:
        """Whether the label is a real score rather than a class."""
        return TaskKind(self.kind).is_regression

    @property
    def resolved_loss(self) -> str:
        """The loss actually used: :attr:`loss`, or the default for the task kind."""
        if self.loss is not None:
            return self.loss
        return "mse" if self.is_regression else "cross_entropy"

    @property
    def main_metric(self) -> str:
        """The metric that summarises the task (the first of :attr:`metrics`)."""
        return self.metrics[0]

    def replace(self, **changes: Any) -> TaskSpec:
        """A copy with some fields changed (``dataclasses.replace``).

        A label range that was the default of the old ``num_labels``/``kind`` follows a change of either
        (a 4-class copy of a 2-class task accepts labels 0..3), unless ``label_range`` is changed too.
        """
        if "label_range" not in changes and {"num_labels", "kind"} & set(changes):
            default = self.replace(label_range=())  # this spec's default range
            if default.label_range == self.label_range:
                changes["label_range"] = ()
        return dataclasses.replace(self, **changes)

    def views(self) -> list[TaskSpec]:
        """The :attr:`eval_views` as task specs: this spec renamed, with the view's fields, without views.

        Raises:
            ValueError: for a view naming a field :class:`TaskSpec` does not have, or an invalid value.
        """
        out = []
        for name, fields in self.eval_views.items():
            settable = {f.name for f in dataclasses.fields(self)} - {"name", "eval_views"}
            unknown = sorted(set(fields) - settable)
            if unknown:
                raise ValueError(
                    f"Task {self.name!r}: eval_views[{name!r}] sets {unknown}; a view sets TaskSpec fields "
                    "other than name and eval_views (files, hf_name, ...)."
                )
            out.append(self.replace(name=name, eval_views={}, **fields))
        return out


#: Where the CS224N files come from (the starter code's ``data/`` folder).
_STARTER = (
    "CS224N minBERT default final project, the starter code's data/ folder "
    "(github.com/gpoesia/minbert-default-final-project):"
)
_PAIR_COLUMNS = ("sentence1", "sentence2")


def _cs224n(name: str, prefix: str, source: str, **kw: Any) -> TaskSpec:
    """A task read from the CS224N files ``<prefix>-{train,dev,test-student}.csv``; ``kw``: the fields that
    differ from :class:`TaskSpec`'s defaults (one sentence, two classes 0..1, accuracy, ``sentiment``)."""
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


def _hub_copy(
    name: str, hf_path: str, hf_name: str | None, text_columns: tuple[str, ...], **kw: object
) -> TaskSpec:
    """Built-in task ``name`` read from its public Hugging Face copy (same kind, labels and metrics)."""
    return BUILTIN_TASKS[name].replace(
        format="hf",
        hf_path=hf_path,
        hf_name=hf_name,
        files={"train": "train", "dev": "validation", "test": "test"},
        text_columns=text_columns,
        label_column="label",
        **kw,
    )


#: The public Hugging Face dataset of each built-in task that has one, as a ``format="hf"`` task of the same
#: name. The data module reads these when no data folder is given (see ``pal_lightning.data.sources.hf``);
#: their splits are not the CS224N files' (README, "Data").
HUB_COPIES: dict[str, TaskSpec] = {
    # SetFit/sst5: text, label (0..4), label_text; train 8,544 / validation 1,101 / test 2,210, test labelled
    "sst": _hub_copy("sst", "SetFit/sst5", None, ("text",), id_column=None),
    # GLUE: question1, question2, label, idx; the test split's labels are hidden (-1)
    "qqp": _hub_copy(
        "qqp", "nyu-mll/glue", "qqp", ("question1", "question2"), id_column="idx", unquote=False
    ),
    # GLUE STS-B: sentence1, sentence2, label (a float 0..5), idx; test labels hidden (-1)
    "sts": _hub_copy("sts", "nyu-mll/glue", "stsb", ("sentence1", "sentence2"), id_column="idx"),
    # GLUE SST-2: sentence, label, idx; test labels hidden (-1)
    "sst2": _hub_copy("sst2", "nyu-mll/glue", "sst2", ("sentence",), id_column="idx"),
}

_GLUE_SOURCE = "GLUE (Wang et al., 2019), the Hugging Face dataset nyu-mll/glue, config "


def _glue(name: str, config: str, text_columns: tuple[str, ...], labels: int = 2, **kw: object) -> TaskSpec:
    """GLUE task ``config`` read from ``nyu-mll/glue`` (splits train/validation/test, label and idx columns;
    the test labels are hidden as -1); ``kw``: the fields that differ (kind, metrics, splits)."""
    kind = TaskKind.PAIR_CLASSIFICATION if len(text_columns) == 2 else TaskKind.SINGLE_CLASSIFICATION
    fields: dict[str, Any] = {
        "kind": kind,
        "num_labels": labels,
        "label_range": (0, labels - 1),
        "format": "hf",
        "hf_path": "nyu-mll/glue",
        "hf_name": config,
        "files": {"train": "train", "dev": "validation", "test": "test"},
        "text_columns": text_columns,
        "label_column": "label",
        "id_column": "idx",
        "source": _GLUE_SOURCE + config + ".",
        **kw,
    }
    return TaskSpec(name=name, **fields)


def _mnli(name: str, genres: str, **kw: Any) -> TaskSpec:
    """MNLI trained on its train split and scored on its ``genres`` (``matched``/``mismatched``) dev and test."""
    files = {"train": "train", "dev": f"validation_{genres}", "test": f"test_{genres}"}
    return _glue(name, "mnli", ("premise", "hypothesis"), labels=3, files=files, **kw)


#: What the one MNLI head is also scored on (GLUE's setting: one model trained on MNLI's train split, scored
#: on both dev sets and submitted for both test sets and the diagnostic set). Checked against the
#: nyu-mll/glue dataset card (huggingface.co/datasets/nyu-mll/glue, README ``dataset_info``): config ``mnli``
#: has the splits validation_mismatched and test_mismatched; config ``ax`` has one split, ``test`` (1,104
#: rows, labels hidden as -1), with the columns premise, hypothesis, label (0 entailment, 1 neutral,
#: 2 contradiction, MNLI's order) and idx; the card says to predict it with a model trained on MultiNLI.
_MNLI_VIEWS: dict[str, dict[str, Any]] = {
    "glue_mnli_mm": {"files": {"dev": "validation_mismatched", "test": "test_mismatched"}},
    "glue_ax": {
        "hf_name": "ax",
        "files": {"test": "test"},
        "source": _GLUE_SOURCE + "ax: GLUE's diagnostic set, predicted by the MNLI head.",
    },
}

#: The GLUE tasks, read through ``datasets`` from ``nyu-mll/glue`` (hub columns and label orders checked
#: against the dataset card), each with GLUE's metric(s): CoLA Matthews correlation, MRPC and QQP accuracy
#: and F1, STS-B Pearson and Spearman, the others accuracy. ``glue_mnli`` is one MNLI head scored on the
#: matched dev set (``val/glue_mnli/accuracy``) and, through its :attr:`TaskSpec.eval_views`, on the
#: mismatched one (``val/glue_mnli_mm/accuracy``); ``predict`` also runs it on both test sets and on the
#: diagnostic set ``glue_ax``. Labels as the hub has them: MNLI 0 entailment, 1 neutral, 2 contradiction;
#: QNLI and RTE 0 entailment, 1 not_entailment; WNLI 0 not_entailment, 1 entailment (the other way round);
#: CoLA 1 acceptable; MRPC and QQP 1 paraphrase.
GLUE_TASKS: dict[str, TaskSpec] = {
    "glue_cola": _glue("glue_cola", "cola", ("sentence",), metrics=("matthews",)),
    "glue_sst2": _glue("glue_sst2", "sst2", ("sentence",)),
    "glue_mrpc": _glue("glue_mrpc", "mrpc", _PAIR_COLUMNS, metrics=("accuracy", "f1")),
    "glue_qqp": _glue("glue_qqp", "qqp", ("question1", "question2"), metrics=("accuracy", "f1")),
    "glue_stsb": _glue(
        "glue_stsb",
        "stsb",
        _PAIR_COLUMNS,
        labels=1,
        kind=TaskKind.PAIR_REGRESSION,
        label_range=(0, 5),
        metrics=("pearson", "spearman"),
    ),
    "glue_mnli": _mnli("glue_mnli", "matched", eval_views=_MNLI_VIEWS),
    "glue_qnli": _glue("glue_qnli", "qnli", ("question", "sentence")),
    "glue_rte": _glue("glue_rte", "rte", _PAIR_COLUMNS),
    # config wnli: sentence1, sentence2, label (0 not_entailment, 1 entailment), idx; train 635, validation
    # 71, test 146 (labels hidden), from the card
    "glue_wnli": _glue("glue_wnli", "wnli", _PAIR_COLUMNS),
}
#: The eight tasks of the paper's GLUE setting, in GLUE's order (MNLI scored on both dev sets; no WNLI,
#: which the paper left out).
GLUE_EIGHT: tuple[str, ...] = (
    "glue_cola",
    "glue_sst2",
    "glue_mrpc",
    "glue_stsb",
    "glue_qqp",
    "glue_mnli",
    "glue_qnli",
    "glue_rte",
)

_REGISTRY: dict[str, TaskSpec] = {**BUILTIN_TASKS, **GLUE_TASKS}

#: The tasks whose presence makes the overall score the CS224N one (``pal_lightning.tasks.metrics.overall_score``).
CS224N_TASKS = ("sst", "qqp", "sts")


def overall_name(tasks: Sequence[str]) -> str:
    """What the overall score of ``tasks`` is called, as ``overall_score`` computes it: ``CS224N overall``
    when SST, Quora and STS are among them, ``GLUE score`` when all are GLUE tasks, else ``Overall`` (the
    mean of the tasks' main metrics)."""
    if tasks and all(t in tasks for t in CS224N_TASKS):
        return "CS224N overall"
    if tasks and all(t in GLUE_TASKS for t in tasks):
        return "GLUE score"
    return "Overall"


def register_task(spec: TaskSpec, *, overwrite: bool = False) -> TaskSpec:
    """Make ``spec`` available by name (``tasks: [my_task]`` in a config).

    Raises:
        ValueError: if the name is taken and ``overwrite`` is false.
    """
    if spec.name in _REGISTRY and not overwrite:
        raise ValueError(f"Task {spec.name!r} is already registered; pass overwrite=True to replace it.")
    _REGISTRY[spec.name] = spec
    return spec


def available_tasks() -> list[str]:
    """Names of all registered tasks."""
    return sorted(_REGISTRY)


def get_task(name: str) -> TaskSpec:
    """Look up a registered task by name.

    Raises:
        ValueError: naming the unknown task and listing the known ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"Unknown task {name!r}. Known tasks: {', '.join(available_tasks())}. "
            "Define your own with pal_lightning.TaskSpec(...) or register_task(...)."
        ) from None


def resolve_tasks(tasks: Iterable[str | TaskSpec | Mapping[str, Any]]) -> list[TaskSpec]:
    """Turn names, specs or plain dicts (from YAML) into a list of unique :class:`TaskSpec`.

    Raises:
        ValueError: for an unknown name, an empty list or a duplicated task.
    """
    out: list[TaskSpec] = []
    for t in tasks:
        if isinstance(t, TaskSpec):
            spec = t
        elif isinstance(t, str):
            spec = get_task(t)
        elif isinstance(t, Mapping):
            spec = TaskSpec(**t)
        else:
            raise TypeError(f"A task must be a name, a TaskSpec or a mapping, got {type(t).__name__}.")
        out.append(spec)
    if not out:
        raise PalUserError(
            "No task given: name at least one task (--model.tasks / --data.tasks, e.g. [sst, qqp, sts])."
        )
    dupes = repeated_names(s.name for s in out)
    if dupes:
        raise PalUserError(f"Tasks listed twice: {dupes}. Name each task once.")
    return out


def repeated_names(names: Iterable[str]) -> list[str]:
    """The names that occur more than once in ``names``, sorted (for "listed twice" messages)."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for name in names:
        (repeated if name in seen else seen).add(name)
    return sorted(repeated)


def task_names(tasks: Sequence[TaskSpec]) -> list[str]:
    """The names of ``tasks``, in order."""
    return [t.name for t in tasks]


def task_to_hparam(spec: TaskSpec) -> str | dict[str, object]:
    """A task in plain, checkpoint-safe form: its name when registered unchanged, else a dict.

    Model and data module both store their tasks this way, so Lightning's check that the two
    agree on shared hyper-parameters compares equal values (lists, not tuples; the kind's string
    value, not the enum), and checkpoints load with ``weights_only``.
    """
    if _REGISTRY.get(spec.name) == spec:
        return spec.name
    return task_to_dict(spec)


def task_to_dict(spec: TaskSpec) -> dict[str, object]:
    """Every field of ``spec`` as plain values (JSON- and ``weights_only``-safe): ``TaskSpec(**d)`` rebuilds it."""
    return {f.name: to_plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)}


def task_name_of(task: str | TaskSpec | Mapping[str, object]) -> str:
    """The name of a task given as a name, a :class:`TaskSpec` (any object with a ``name``) or its dict form
    (:func:`task_to_dict`, as saved hyper-parameters hold it).

    Raises:
        PalUserError: when no name can be read from ``task``.
    """
    if isinstance(task, str):
        return task
    name = task.get("name") if isinstance(task, Mapping) else getattr(task, "name", None)
    if not isinstance(name, str):
        raise PalUserError(f"A task must be a name, a TaskSpec or a mapping with a 'name', got {task!r}.")
    return name

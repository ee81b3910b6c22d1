"""What a task is: :class:`TaskSpec` (kind, labels, metrics, and where its rows come from) and the
registry of tasks by name.

The model reads ``kind``/``num_labels``/``loss``/``metrics``; the data module hands the reading fields
(``format``, ``files``, the columns, ``hf_*``, ``delimiter``, ``quoting``) to the source registered under
``format`` (:mod:`pal_lightning.data.sources`). The built-in tasks are registered by
:mod:`pal_lightning.tasks.catalogue`; users add theirs with a ``TaskSpec`` (Python or YAML) or
:func:`register_task`.
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


@dataclass
class TaskSpec:
    """Everything the library needs to know about one task.

    Example (a user task read from local csv files through ``datasets``)::

        TaskSpec(name="mnli_small", kind="pair_classification", num_labels=3, format="hf",
                 label_names=("entailment", "neutral", "contradiction"),
                 files={"train": "mnli/train.csv", "dev": "mnli/dev.csv"},
                 text_columns=("premise", "hypothesis"), label_column="label")
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
    """The source that reads the rows, by its registered name (:mod:`pal_lightning.data.sources`): ``cs224n``
    (the minBERT files: tab-separated, CSV quoting), ``glue_tsv`` (tab-separated, no quoting) or ``hf`` (any
    ``datasets`` source: a hub id, a saved folder, local csv/tsv/json/parquet files)."""
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
    delimiter: str | None = None
    """For local csv/tsv files of ``format='hf'``: the field separator; ``None``: a tab for ``.tsv``/``.tab``
    files, else a comma."""
    quoting: bool | None = None
    """For local csv/tsv files of ``format='hf'``: whether ``"`` quotes fields (CSV quoting); ``None``: yes for
    comma-separated files, no for tab-separated ones (a ``"`` is then text, as GLUE's files have it)."""
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


#: The tasks by name (the built-in ones are registered by :mod:`pal_lightning.tasks.catalogue`).
_REGISTRY: dict[str, TaskSpec] = {}


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
    """A task in plain, checkpoint-safe form (``weights_only``): its name when registered unchanged, else
    :func:`task_to_dict`; model and data module store their tasks so, and Lightning finds them equal."""
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

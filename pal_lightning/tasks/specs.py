"""What a task is (:class:`TaskSpec`: kind, labels, metrics, where its rows come from), the registry of tasks
by name, and the task lists' checks. The reading fields go to the source registered under ``format``
(:mod:`pal_lightning.data.sources`).

Evaluation views (:class:`EvalView`) are more dev and test sets scored by one task's head under a name of
their own, with no head or training of their own (MNLI's mismatched sets ``glue_mnli_mm``, the diagnostic set
``glue_ax``); a view whose name is also a listed task is left out: that task has its own head. Auxiliary
tasks (:func:`check_auxiliary`) are trained and evaluated like any other, but left out of ``val/overall`` and
``test/overall``, so extra training data never changes what the overall score means."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.plain_values import to_plain


class TaskKind(str, Enum):
    """The three prediction problems the library builds heads for."""

    SINGLE_CLASSIFICATION = "single_classification"
    PAIR_CLASSIFICATION = "pair_classification"
    PAIR_REGRESSION = "pair_regression"

    @property
    def is_pair(self) -> bool:
        return self is not TaskKind.SINGLE_CLASSIFICATION

    @property
    def is_regression(self) -> bool:
        return self is TaskKind.PAIR_REGRESSION


KNOWN_METRICS = ("accuracy", "f1", "pearson", "spearman", "matthews")
KNOWN_LOSSES = ("cross_entropy", "bce", "mse")


@dataclass
class TaskSpec:
    """Everything the library needs to know about one task.

    Example (local csv files read through ``datasets``)::

        TaskSpec(name="mnli_small", kind="pair_classification", num_labels=3, format="hf",
                 label_names=("entailment", "neutral", "contradiction"),
                 files={"train": "mnli/train.csv", "dev": "mnli/dev.csv"},
                 text_columns=("premise", "hypothesis"), label_column="label")
    """

    name: str
    """Unique name; used in batch keys, metric names (``val/<name>/<metric>``) and file names."""
    kind: TaskKind | str = TaskKind.SINGLE_CLASSIFICATION
    """Single-sentence classification, pair classification or pair regression (a string is converted)."""
    num_labels: int = 2
    """Number of classes (1 for regression)."""
    label_range: tuple[float, ...] = ()
    """Inclusive ``(low, high)`` a label must lie in (rows outside are bad rows); empty: every class, or
    ``(0, 1)`` for regression (STS sets ``(0, 5)``)."""
    label_names: tuple[str, ...] = ()
    """Class names in index order: the label column may hold them, and outputs name the classes. Empty: a
    column of words gets its names from the training split (sorted)."""
    metrics: tuple[str, ...] = ("accuracy",)
    """Metric names from :data:`KNOWN_METRICS`; the first is the task's main score."""
    loss: str | None = None
    """Loss from :data:`KNOWN_LOSSES`; ``None``: cross-entropy for classification, mse for regression."""
    format: str = "cs224n"
    """The registered source that reads the rows: ``cs224n`` (tab-separated, CSV quoting), ``glue_tsv``
    (tab-separated, no quoting) or ``hf`` (a hub id, a saved folder, local csv/tsv/json/parquet files)."""
    files: dict[str, str] = field(default_factory=dict)
    """File (or hub split) per split (``train``, ``dev``, ``test``), relative to the data directory."""
    text_columns: tuple[str, ...] = ("sentence",)
    """Column(s) holding the text: one for single-sentence tasks, two for pairs."""
    label_column: str | None = "sentiment"
    """Column holding the label (absent from unlabelled test files)."""
    id_column: str | None = "id"
    """Column holding a unique example id; ``None`` uses the row number."""
    hf_path: str | None = None
    """``format='hf'``: a hub id, a folder, or a builder (``csv``, ``json``, ``parquet``)."""
    hf_name: str | None = None
    """``format='hf'``: the dataset configuration name, if any."""
    delimiter: str | None = None
    """``format='hf'`` csv/tsv files: the field separator; ``None``: tab for ``.tsv``/``.tab``, else comma."""
    quoting: bool | None = None
    """``format='hf'`` csv/tsv files: whether ``"`` quotes fields; ``None``: only when comma-separated."""
    ptb_detokenize: bool = False
    """Undo Penn-Treebank tokens (``-LRB-``, ````` ``, ``\\/``) in the text (SST)."""
    unquote: bool = False
    """Undo a second layer of CSV quoting (``"a ""b"" c"`` -> ``a "b" c``) in the text (Quora)."""
    source: str = ""
    """Where the data comes from, for people; the code never reads it."""
    eval_views: dict[str, dict[str, Any]] = field(default_factory=dict)
    """More evaluation sets scored by this task's head, ``{name: {field: value}}`` (the fields that differ,
    e.g. ``files``): validated and predicted under their own name, never trained
    (:class:`EvalView`; MNLI's ``glue_mnli_mm`` and ``glue_ax``)."""

    def __post_init__(self) -> None:
        self.kind = TaskKind(self.kind)
        self.label_names = tuple(str(n) for n in self.label_names)
        self.metrics = tuple(self.metrics)
        self.text_columns = tuple(self.text_columns)
        self.files = dict(self.files)
        self.eval_views = {str(name): dict(fields) for name, fields in dict(self.eval_views).items()}
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(
                f"TaskSpec name {self.name!r} must be non-empty and use letters, digits, '_' or '-'."
            )
        given = tuple(self.label_range)
        if not given:
            given = (0.0, 1.0 if self.kind.is_regression else float(self.num_labels - 1))
        if len(given) != 2:
            raise ValueError(f"Task {self.name!r}: label_range {given} must be two numbers (low, high).")
        self.label_range = low, high = (float(given[0]), float(given[1]))
        if low > high:
            raise ValueError(f"Task {self.name!r}: label_range {self.label_range} has low > high.")
        if self.kind.is_regression:
            if self.num_labels != 1:
                raise ValueError(f"Task {self.name!r} is a regression task: num_labels must be 1.")
            if self.label_names:
                raise ValueError(f"Task {self.name!r} is a regression task: it has no label_names.")
        else:
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
        if self.delimiter is not None and not (isinstance(self.delimiter, str) and len(self.delimiter) == 1):
            raise ValueError(f"Task {self.name!r}: delimiter must be one character, got {self.delimiter!r}.")
        if self.quoting is not None and not isinstance(self.quoting, bool):
            raise ValueError(f"Task {self.name!r}: quoting must be true or false, got {self.quoting!r}.")
        self.views()  # a bad view fails with its task

    def _check_classes(self) -> None:
        if self.num_labels < 2:
            raise ValueError(f"Task {self.name!r} is a classification task: num_labels must be >= 2.")
        low, high = self.label_range
        if low < 0 or high > self.num_labels - 1:
            raise ValueError(
                f"Task {self.name!r}: label_range ({low:g}, {high:g}) reaches outside its classes "
                f"0..{self.num_labels - 1}; leave label_range out (every class) or fix num_labels."
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
        return TaskKind(self.kind).is_pair

    @property
    def is_regression(self) -> bool:
        """Whether the label is a real score rather than a class."""
        return TaskKind(self.kind).is_regression

    @property
    def resolved_loss(self) -> str:
        """:attr:`loss`, or the default for the task kind."""
        return self.loss or ("mse" if self.is_regression else "cross_entropy")

    @property
    def main_metric(self) -> str:
        """The first of :attr:`metrics`."""
        return self.metrics[0]

    def replace(self, **changes: Any) -> TaskSpec:
        """``dataclasses.replace``; a default ``label_range`` follows a change of ``num_labels`` or ``kind``."""
        if "label_range" not in changes and {"num_labels", "kind"} & set(changes):
            if self.replace(label_range=()).label_range == self.label_range:
                changes["label_range"] = ()
        return dataclasses.replace(self, **changes)

    def views(self) -> list[TaskSpec]:
        """The :attr:`eval_views` as specs (this spec renamed, with the view's fields, without views).

        Raises:
            ValueError: for a view naming an unknown field, or an invalid value.
        """
        settable = {f.name for f in dataclasses.fields(self)} - {"name", "eval_views"}
        out = []
        for name, fields in self.eval_views.items():
            unknown = sorted(set(fields) - settable)
            if unknown:
                raise ValueError(
                    f"Task {self.name!r}: eval_views[{name!r}] sets {unknown}; a view sets TaskSpec fields "
                    "other than name and eval_views (files, hf_name, ...)."
                )
            out.append(self.replace(name=name, eval_views={}, **fields))
        return out


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
    """A registered task by name.

    Raises:
        ValueError: naming the unknown task and listing the known ones.
    """
    if name not in _REGISTRY:
        raise ValueError(
            f"Unknown task {name!r}. Known tasks: {', '.join(available_tasks())}. "
            "Define your own with pal_lightning.TaskSpec(...) or register_task(...)."
        )
    return _REGISTRY[name]


def resolve_tasks(tasks: Iterable[str | TaskSpec | Mapping[str, Any]]) -> list[TaskSpec]:
    """Names, specs or dicts (from YAML) as a list of unique :class:`TaskSpec`.

    Raises:
        ValueError: for an unknown name; PalUserError: an empty list or a duplicated task.
    """
    out: list[TaskSpec] = []
    for t in tasks:
        if isinstance(t, str):
            t = get_task(t)
        elif isinstance(t, Mapping):
            t = TaskSpec(**t)
        elif not isinstance(t, TaskSpec):
            raise TypeError(f"A task must be a name, a TaskSpec or a mapping, got {type(t).__name__}.")
        out.append(t)
    if not out:
        raise PalUserError(
            "No task given: name at least one task (--model.tasks / --data.tasks, e.g. [sst, qqp, sts])."
        )
    dupes = repeated_names(s.name for s in out)
    if dupes:
        raise PalUserError(f"Tasks listed twice: {dupes}. Name each task once.")
    return out


def repeated_names(names: Iterable[str]) -> list[str]:
    """The names occurring more than once, sorted."""
    return sorted(n for n, count in Counter(names).items() if count > 1)


def task_to_hparam(spec: TaskSpec) -> str | dict[str, object]:
    """A task in checkpoint-safe form: its name when registered unchanged, else :func:`task_to_dict`."""
    return spec.name if _REGISTRY.get(spec.name) == spec else task_to_dict(spec)


def task_to_dict(spec: TaskSpec) -> dict[str, object]:
    """Every field as plain (JSON- and ``weights_only``-safe) values: ``TaskSpec(**d)`` rebuilds it."""
    return {f.name: to_plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)}


def task_name_of(task: str | TaskSpec | Mapping[str, object]) -> str:
    """The name of a task given as a name, a spec or its dict form.

    Raises:
        PalUserError: when no name can be read from ``task``.
    """
    if isinstance(task, str):
        return task
    name = task.get("name") if isinstance(task, Mapping) else getattr(task, "name", None)
    if not isinstance(name, str):
        raise PalUserError(f"A task must be a name, a TaskSpec or a mapping with a 'name', got {task!r}.")
    return name


@dataclass(frozen=True)
class EvalView:
    """One evaluation view: its spec (the parent's, renamed, with the view's fields) and its parent task."""

    spec: TaskSpec
    parent: str

    @property
    def name(self) -> str:
        return self.spec.name

    def has(self, split: str) -> bool:
        """Whether the view names a ``split`` of its own."""
        return split in self.spec.files


def eval_views(specs: Iterable[TaskSpec]) -> dict[str, EvalView]:
    """The views of ``specs`` by name, in task order.

    Raises:
        PalUserError: when two tasks define a view of the same name.
    """
    specs = list(specs)
    listed = {s.name for s in specs}
    out: dict[str, EvalView] = {}
    for spec in specs:
        for view in spec.views():
            if view.name in listed:
                continue
            if view.name in out:
                raise PalUserError(
                    f"Tasks {out[view.name].parent!r} and {spec.name!r} both define the evaluation view "
                    f"{view.name!r}; rename one of them in its eval_views."
                )
            out[view.name] = EvalView(view, spec.name)
    return out


def with_views(specs: Iterable[TaskSpec], views: dict[str, EvalView], split: str) -> list[TaskSpec]:
    """``specs``, each followed by its views that have ``split``."""
    out = []
    for spec in specs:
        out.append(spec)
        out.extend(v.spec for v in views.values() if v.parent == spec.name and v.has(split))
    return out


def check_auxiliary(auxiliary: Sequence[str] | str | None, tasks: Sequence[str]) -> list[str]:
    """The auxiliary task names as a list, checked against the model's ``tasks``.

    Raises:
        PalUserError: a name not among the tasks, a name given twice, or every task auxiliary.
    """
    if auxiliary is None:
        return []
    names = [auxiliary] if isinstance(auxiliary, str) else [str(a) for a in auxiliary]
    unknown = [a for a in names if a not in tasks]
    if unknown:
        raise PalUserError(
            f"auxiliary names {unknown}, which are not among the tasks {list(tasks)}: add them to "
            "--model.tasks or remove them from --model.auxiliary."
        )
    repeated = repeated_names(names)
    if repeated:
        raise PalUserError(f"auxiliary lists {repeated} more than once; name each auxiliary task once.")
    if names and set(names) >= set(tasks):
        raise PalUserError(
            f"Every task ({list(tasks)}) is auxiliary, so val/overall would cover none; leave at least "
            "one task out of --model.auxiliary."
        )
    return names

"""Predictions on new text: ``module.predict(task, texts)``.

:class:`InferenceMixin` gives :class:`~pal_lightning.module.multitask.MultiTaskModule` a ``predict`` method that
takes plain sentences (or ``(sentence1, sentence2)`` tuples for pair tasks), tokenises them with the
model's tokenizer exactly as the data module tokenises training data (:func:`encode_split`, then
per-batch padding with :func:`pad_batch`), runs batches on the module's device in eval mode without
gradients, and returns a :class:`TaskPredictions`:

* classification: ``classes`` (ints), ``labels`` (label names where known, else the class ints) and
  ``probabilities`` ``[N, C]`` (softmax of the logits; ``[1 - p, p]`` with ``p = sigmoid(logit)`` for a
  single ``bce`` logit);
* regression: ``scores`` on the task's scale (e.g. 0..5 for STS).

Batches are formed from examples of similar token length (sorted by length, results put back in
input order), so a batch pads little; this is what makes one call for many sentences much faster
than one call per sentence (``benchmarks/predict_speed.py``).

**A mixed stream**, ``module.predict([(task, text_or_pair), ...])``:

A server receives requests of several tasks interleaved. Predicting them task by task means one small
batch per task per window of requests, and on a CPU each forward pays a fixed cost (operator launch,
Python) that a small batch does not amortise. Here every input keeps its own task and the inputs are
batched *together*: all inputs are sorted by length once (stable), cut into batches of ``batch_size``,
and each batch, whatever tasks it holds, is one encoder pass with per-example task routing
(:meth:`~pal_lightning.module.encoding.PairEncodingMixin.forward_mixed`)::

    inputs (input order)       sorted by length        batches of batch_size      one pass each
    0 (sst, "a fine film")     1 qqp  ┐                [1 qqp, 0 sst, 3 sst]  ->  forward_mixed -> sst rows, qqp rows
    1 (qqp, ("a?", "b?"))  ->  0 sst  ├─ batch 0   ->
    2 (sts, ("x", "y"))        3 sst  ┘
    3 (sst, "dull")            2 sts  ]  batch 1   ->  [2 sts]                ->  forward_mixed -> sts rows

Each input is tokenised as its task's own ``predict`` tokenises it (the task's pair encoding: a cross pair
is one sequence, a siamese pair two), and its output is its task's head output, so each prediction equals
``module.predict(task, [text])`` for that input (up to float rounding of a different padding width). The
sort key is the longest sequence an input adds to the pass (a siamese pair's longer sentence), since the
batch is padded to that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast, overload

import numpy as np
import torch

from pal_lightning.core.batch import TASK, mix_batches, resolve_pair_encoding
from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskKind, TaskSpec

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from pal_lightning.data.tokenize import TokenizedSplit
    from pal_lightning.module.multitask import MultiTaskModule

    _ModuleBase = pl.LightningModule  # the host, for the type checker; a plain mixin at run time
else:
    _ModuleBase = object

#: Label names of the built-in classification tasks (class index -> name).
BUILTIN_LABEL_NAMES: dict[str, list[str]] = {
    "sst": ["negative", "somewhat negative", "neutral", "somewhat positive", "positive"],
    "qqp": ["not_duplicate", "duplicate"],
    "cfimdb": ["negative", "positive"],
    "sst2": ["negative", "positive"],
}
#: Sequence length used when the model does not know the data module's ``max_length``.
DEFAULT_MAX_LENGTH = 128
#: The checkpoint key of the class names given or found in the data (not a hyper-parameter: ``__init__``
#: takes no names), so that a model loaded from a checkpoint predicts names too.
LABEL_NAMES_KEY = "pal_lightning_label_names"


def default_label_names(spec: TaskSpec) -> list[str] | None:
    """The label names of a built-in classification task with its usual labels, else ``None``."""
    names = BUILTIN_LABEL_NAMES.get(spec.name)
    if names is None or spec.is_regression or len(names) != spec.num_labels:
        return None
    return list(names)


@dataclass
class TaskPredictions:
    """What :meth:`InferenceMixin.predict` returns for ``N`` inputs of one task (in input order)."""

    task: str
    """The task predicted."""
    classes: list[int] | None
    """Predicted class indices (classification), else ``None``."""
    labels: list[Any] | None
    """Predicted label names where the task has them, else the class indices; ``None`` for regression."""
    probabilities: np.ndarray | None
    """``float32 [N, C]`` class probabilities (classification), else ``None``."""
    scores: list[float] | None
    """Scores on the task's scale (regression), else ``None``."""
    label_names: list[str] | None = None
    """The names of the ``C`` classes, in column order of :attr:`probabilities`, when known."""

    def __len__(self) -> int:
        return len(self.scores if self.scores is not None else self.classes or [])

    def records(self) -> list[dict[str, Any]]:
        """One dict per input: ``label`` and ``probabilities`` (name -> p), or ``score``."""
        if self.scores is not None:
            return [{"score": s} for s in self.scores]
        assert self.labels is not None and self.probabilities is not None
        names = self.label_names or [str(c) for c in range(self.probabilities.shape[1])]
        return [
            {"label": label, "probabilities": dict(zip(names, map(float, row), strict=True))}
            for label, row in zip(self.labels, self.probabilities, strict=True)
        ]


def check_inputs(
    spec: TaskSpec, texts: Sequence[Any], positions: Sequence[int] | None = None
) -> list[list[str]]:
    """The inputs as text columns (one list for single sentences, two for pairs).

    ``positions``: each text's index in the caller's input (a mixed predict's list), so that a message
    names the input the user wrote; by default the index in ``texts``.

    Raises:
        PalUserError: for an empty input, a pair task given single sentences or the reverse, or a
            non-string text.
    """
    if isinstance(texts, (str, tuple)):
        texts = [texts]
    texts = list(texts)
    if not texts:
        raise PalUserError(f"Nothing to predict for task {spec.name!r}: the input holds no sentences.")
    width = 2 if spec.is_pair else 1
    columns: list[list[str]] = [[] for _ in range(width)]
    for i, item in enumerate(texts):
        parts = (item,) if isinstance(item, str) else tuple(item) if isinstance(item, (tuple, list)) else None
        if parts is None or len(parts) != width or not all(isinstance(p, str) for p in parts):
            want = "(sentence1, sentence2) tuples" if spec.is_pair else "single sentences (strings)"
            raise PalUserError(
                f"Task {spec.name!r} takes {want}, but input {i if positions is None else positions[i]} is "
                f"{item!r}. "
                + (
                    "Pass a list of pairs, e.g. [('How do I cook rice?', 'How is rice cooked?')]."
                    if spec.is_pair
                    else "Pass a list of strings."
                )
            )
        for column, part in zip(columns, parts, strict=True):
            column.append(part)
    return columns


def probabilities_from_output(spec: TaskSpec, output: torch.Tensor) -> torch.Tensor:
    """Class probabilities ``[B, C]`` from a classification head's output.

    Softmax of ``C`` logits; for a single ``bce`` logit ``s``: ``[1 - sigmoid(s), sigmoid(s)]``.
    """
    if output.dim() == 1 or output.shape[-1] == 1:
        p = torch.sigmoid(output.reshape(-1).float())
        return torch.stack([1 - p, p], dim=-1)
    return torch.softmax(output.float(), dim=-1)


class InferenceMixin(_ModuleBase):
    """``predict(task, texts)`` for a module with ``task_specs``, ``tokenizer``, ``forward`` and heads."""

    task_specs: dict[str, TaskSpec]
    tokenizer: Any

    #: Longest tokenised sequence at prediction time (the training data module's ``max_length`` when
    #: known: set by ``from_pretrained`` and at the end of ``fit``).
    predict_max_length: int = DEFAULT_MAX_LENGTH

    @property
    def label_names(self) -> dict[str, list[str]]:
        """Class names per classification task: given ones (``set_label_names``, or found in the data by
        :meth:`adopt_label_names`), else the task's ``label_names``, else the built-in ones."""
        given: dict[str, list[str]] = getattr(self, "_label_names", {})
        out = {}
        for name, spec in self.task_specs.items():
            names = given.get(name) or list(spec.label_names) or default_label_names(spec)
            if names:
                out[name] = list(names)
        return out

    def adopt_label_names(self, datamodule: Any = None) -> None:
        """Name the classes as the data module read them (``label_names()``: a train split's words, a
        ``ClassLabel``'s names), so that predictions and saved models carry the names the data has; names
        already given with :meth:`set_label_names` are kept. ``datamodule`` defaults to the attached
        trainer's; a module on its own, or a data module without ``label_names``, changes nothing.
        """
        if datamodule is None:
            try:
                datamodule = getattr(self.trainer, "datamodule", None)
            except RuntimeError:  # not attached to a Trainer
                return
        found = getattr(datamodule, "label_names", None)
        if not callable(found):
            return
        given = getattr(self, "_label_names", {})
        names = {t: n for t, n in found().items() if t in self.task_specs and t not in given}
        if names:
            self.set_label_names(names)

    def set_label_names(self, names: Mapping[str, Sequence[str]]) -> None:
        """Name the classes of tasks (``{"my_task": ["no", "yes"]}``); saved by ``save_pretrained``.

        Raises:
            PalUserError: for an unknown task, a regression task or a wrong number of names.
        """
        current = dict(getattr(self, "_label_names", {}))
        for task, labels in names.items():
            spec = self.predict_spec(task)
            if spec.is_regression or len(labels) != spec.num_labels:
                raise PalUserError(
                    f"Task {task!r} has {spec.num_labels} label(s) ({TaskKind(spec.kind).value}); got names "
                    f"{list(labels)}. Give one name per class of a classification task."
                )
            current[task] = [str(n) for n in labels]
        self._label_names = current

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the class names set on this module (:data:`LABEL_NAMES_KEY`) beside the other hooks' data."""
        super().on_save_checkpoint(checkpoint)
        given: dict[str, list[str]] = getattr(self, "_label_names", {})
        if given:
            checkpoint[LABEL_NAMES_KEY] = {task: list(names) for task, names in given.items()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Take back the class names a checkpoint keeps, for the tasks this module has."""
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint.get(LABEL_NAMES_KEY)
        if isinstance(saved, Mapping):
            self.set_label_names({t: list(n) for t, n in saved.items() if t in self.task_specs})

    def predict_spec(self, task: str) -> TaskSpec:
        """The :class:`~pal_lightning.tasks.specs.TaskSpec` of ``task``; an unknown task is one user error naming the model's tasks."""
        specs: dict[str, TaskSpec] = self.task_specs
        if task not in specs:
            raise PalUserError(
                f"Unknown task {task!r}: this model predicts {', '.join(specs)}. Pick one of those."
            )
        return specs[task]

    @overload
    def predict(
        self, task: str, texts: Sequence[str] | Sequence[tuple[str, str]] | str, batch_size: int = 64
    ) -> TaskPredictions: ...

    @overload
    def predict(
        self, task: Sequence[tuple[str, str | tuple[str, str]]], texts: None = None, batch_size: int = 64
    ) -> list[Prediction]: ...

    @torch.no_grad()
    def predict(
        self, task: Any, texts: Any = None, batch_size: int = 64
    ) -> TaskPredictions | list[Prediction]:
        """Predict ``task`` for new sentences (pairs as ``(sentence1, sentence2)`` tuples); or, given one
        list of ``(task, text)`` pairs, each input with its own task.

        Runs on the module's device in eval mode without gradients, ``batch_size`` examples at a
        time, and restores the previous train/eval mode. The mixed form (``predict([("sst", "a fine
        film"), ("qqp", (q1, q2))])``) returns one :class:`~pal_lightning.module.inference.Prediction`
        per input, in input order, from batches that hold rows of several tasks
        (module docstring); each equals the one-task ``predict`` of that input.

        Raises:
            PalUserError: for an unknown task, no input, or inputs of the wrong shape for the task.
        """
        if not isinstance(task, str):
            if texts is not None:
                raise PalUserError(
                    "predict takes either (task, texts) or one list of (task, text) pairs, not both: "
                    "e.g. predict('sst', ['a fine film']) or predict([('sst', 'a fine film')])."
                )
            return predict_mixed(cast("MultiTaskModule", self), task, batch_size)
        if texts is None:
            raise PalUserError(
                f"Nothing to predict for task {task!r}: pass the texts, predict({task!r}, [...])."
            )
        from pal_lightning.data.sources.readers import RawSplit
        from pal_lightning.data.tokenize import encode_split, pad_batch

        spec = self.predict_spec(task)
        columns = check_inputs(spec, texts)
        if batch_size < 1:
            raise PalUserError(f"batch_size must be >= 1, got {batch_size}.")
        tokenizer = self.tokenizer
        pair_encoding = resolve_pair_encoding(self.hparams["pair_encoding"], task)
        n = len(columns[0])
        raw = RawSplit(task, "predict", "<predict>", [str(i) for i in range(n)], columns, None, rows=n)
        encoded = encode_split(raw, tokenizer, int(self.predict_max_length), pair_encoding)
        order = np.argsort(encoded.lengths, kind="stable")
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        device = self.device
        outputs: list[torch.Tensor] = []
        was_training = self.training
        self.eval()
        try:
            for start in range(0, n, batch_size):
                index = order[start : start + batch_size]
                batch: dict[str, Any] = {TASK: task}
                for side, enc in encoded.encodings.items():
                    batch.update(pad_batch(enc, index, pad_id, f"_{side}" if side else ""))
                batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                outputs.append(self(batch).float().cpu())
        finally:
            self.train(was_training)
        output = torch.cat(outputs)
        output[torch.from_numpy(order)] = output.clone()  # back to input order
        return self._to_predictions(spec, output)

    def _to_predictions(self, spec: TaskSpec, output: torch.Tensor) -> TaskPredictions:
        from pal_lightning.modeling.heads import predict as head_predict

        values = head_predict(spec, output)
        if spec.is_regression:
            return TaskPredictions(spec.name, None, None, None, [float(v) for v in values.tolist()])
        classes = [int(c) for c in values.tolist()]
        names = self.label_names.get(spec.name)
        labels: list[Any] = [names[c] for c in classes] if names else list(classes)
        probs = probabilities_from_output(spec, output).numpy().astype(np.float32)
        return TaskPredictions(spec.name, classes, labels, probs, None, names)


# ------------------------------------------------------------------ mixed streams
@dataclass
class Prediction:
    """One input's prediction from a mixed ``predict`` (the fields of :class:`TaskPredictions`, for one row)."""

    task: str
    """The input's task."""
    class_index: int | None
    """The predicted class (classification), else ``None``."""
    label: Any | None
    """The class's name where the task has names, else the class index; ``None`` for regression."""
    probabilities: np.ndarray | None
    """``float32 [C]`` class probabilities (classification), else ``None``."""
    score: float | None
    """The score on the task's scale (regression), else ``None``."""
    label_names: list[str] | None = None
    """The names of the ``C`` classes, in the order of :attr:`probabilities`, when known."""

    def record(self) -> dict[str, Any]:
        """``task`` with ``label`` and ``probabilities`` (name -> p), or with ``score``: one row of
        :meth:`TaskPredictions.records` plus the task."""
        if self.score is not None:
            return {"task": self.task, "score": self.score}
        assert self.probabilities is not None
        names = self.label_names or [str(c) for c in range(len(self.probabilities))]
        probabilities = dict(zip(names, map(float, self.probabilities), strict=True))
        return {"task": self.task, "label": self.label, "probabilities": probabilities}


def split_by_task(items: Sequence[Any]) -> dict[str, list[int]]:
    """The positions of each task's inputs in ``items`` (tasks in order of first appearance).

    Raises:
        PalUserError: for no input, or an item that is not a ``(task, text)`` pair.
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise PalUserError(
            "Nothing to predict: pass predict(task, texts) or a non-empty list of (task, text) pairs, "
            "e.g. predict([('sst', 'a fine film'), ('qqp', ('a?', 'b?'))])."
        )
    positions: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
            raise PalUserError(
                f"A mixed predict takes (task, text) pairs, but input {i} is {item!r}. Pass e.g. "
                "[('sst', 'a fine film'), ('qqp', ('How do I cook rice?', 'How is rice cooked?'))]."
            )
        positions.setdefault(item[0], []).append(i)
    return positions


def tokenize_task(module: MultiTaskModule, task: str, columns: list[list[str]]) -> TokenizedSplit:
    """``columns`` tokenised as ``predict(task, ...)`` tokenises them (the task's pair encoding)."""
    from pal_lightning.data.sources.readers import RawSplit
    from pal_lightning.data.tokenize import encode_split

    n = len(columns[0])
    raw = RawSplit(task, "predict", "<predict>", [str(i) for i in range(n)], columns, None, rows=n)
    encoding = resolve_pair_encoding(module.hparams["pair_encoding"], task)
    return encode_split(raw, module.tokenizer, int(module.predict_max_length), encoding)


def widest_side(split: TokenizedSplit) -> np.ndarray:
    """Per input, its longest sequence (a siamese pair's longer sentence): the width it pads a batch to."""
    return np.max(np.stack([enc.lengths for enc in split.encodings.values()]), axis=0)


def mixed_batch(
    splits: dict[str, TokenizedSplit], members: list[tuple[str, int]], pad_id: int
) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """One mixed batch of ``members`` (``(task, index in its task's split)``), and the members in the
    batch's row order (grouped by task, so that the encoder's routing need not sort them)."""
    from pal_lightning.data.tokenize import pad_batch

    by_task: dict[str, list[int]] = {}
    for task, local in members:
        by_task.setdefault(task, []).append(local)
    parts = []
    for task, locals_ in by_task.items():
        index = np.asarray(locals_, dtype=np.int64)
        part: dict[str, Any] = {TASK: task}
        for side, enc in splits[task].encodings.items():
            part.update(pad_batch(enc, index, pad_id, f"_{side}" if side else ""))
        parts.append(part)
    rows = [(task, local) for task, locals_ in by_task.items() for local in locals_]
    return mix_batches(parts), rows


def predict_mixed(module: MultiTaskModule, items: Sequence[Any], batch_size: int) -> list[Prediction]:
    """One :class:`Prediction` per ``(task, text)`` of ``items``, in input order (module docstring).

    Raises:
        PalUserError: for no input, a malformed item, an unknown task, a text of the wrong shape for its
            task, or a ``batch_size`` below 1.
    """
    positions = split_by_task(items)
    specs = {task: module.predict_spec(task) for task in positions}  # unknown task: names the known ones
    if batch_size < 1:
        raise PalUserError(f"batch_size must be >= 1, got {batch_size}.")
    splits = {
        task: tokenize_task(module, task, check_inputs(specs[task], [items[i][1] for i in at], at))
        for task, at in positions.items()
    }
    members = [(task, local) for task, at in positions.items() for local in range(len(at))]
    widths = np.concatenate([widest_side(splits[task]) for task in positions])
    order = np.argsort(widths, kind="stable")
    tokenizer = module.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    outputs = {task: [torch.empty(0)] * len(at) for task, at in positions.items()}
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(members), batch_size):
                batch, rows = mixed_batch(
                    splits, [members[i] for i in order[start : start + batch_size]], pad_id
                )
                batch = {
                    k: v.to(module.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
                }
                for out in module.forward_mixed(batch).values():
                    for row, value in zip(out.rows.tolist(), out.output.float().cpu(), strict=True):
                        task, local = rows[row]
                        outputs[task][local] = value
    finally:
        module.train(was_training)
    return assemble(
        module, positions, {task: torch.stack(values) for task, values in outputs.items()}, len(items)
    )


def assemble(
    module: MultiTaskModule, positions: dict[str, list[int]], outputs: dict[str, torch.Tensor], n: int
) -> list[Prediction]:
    """Per input, its row of its task's :class:`TaskPredictions` (the one-task ``predict``'s conversion)."""
    predictions: list[Prediction | None] = [None] * n
    for task, at in positions.items():
        per_task: TaskPredictions = module._to_predictions(module.predict_spec(task), outputs[task])
        for local, i in enumerate(at):
            predictions[i] = Prediction(
                task,
                None if per_task.classes is None else per_task.classes[local],
                None if per_task.labels is None else per_task.labels[local],
                None if per_task.probabilities is None else per_task.probabilities[local],
                None if per_task.scores is None else per_task.scores[local],
                per_task.label_names,
            )
    assert all(p is not None for p in predictions)
    return [p for p in predictions if p is not None]

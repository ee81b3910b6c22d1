"""Predictions on new text: one core, :func:`predict_items`, from ``(task, input)`` pairs to :class:`Prediction`s.

``module.predict``, :func:`pal_lightning.pipeline` and ``pal-lightning predict`` are adapters over it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pal_lightning.core.batch import TASK, mix_batches, resolve_pair_encoding
from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskKind, TaskSpec

if TYPE_CHECKING:
    from pal_lightning.data.tokenize import TokenizedSplit

#: Label names of the built-in classification tasks (class index -> name).
BUILTIN_LABEL_NAMES: dict[str, list[str]] = {
    "sst": ["negative", "somewhat negative", "neutral", "somewhat positive", "positive"],
    "qqp": ["not_duplicate", "duplicate"],
    "cfimdb": ["negative", "positive"],
    "sst2": ["negative", "positive"],
}
#: Sequence length used when the model does not know the data module's ``max_length``.
DEFAULT_MAX_LENGTH = 128
#: The checkpoint key of the class names given or found in the data (``__init__`` takes no names).
LABEL_NAMES_KEY = "pal_lightning_label_names"


@contextmanager
def eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """``module`` in eval mode inside, every submodule's own mode restored after."""
    training = [m for m in module.modules() if m.training]
    if not training:  # already in eval mode (a served model): nothing to switch or restore
        yield
        return
    module.eval()
    try:
        yield
    finally:
        for submodule in training:
            submodule.training = True


def as_texts(texts: Any, example: str, single: tuple[type, ...] = (str, tuple)) -> list[Any]:
    """``texts`` as a list: one text (an instance of ``single``) as a list of one.

    Raises:
        PalUserError: for what is neither a text nor an iterable of them (the fix shown by ``example``).
    """
    if isinstance(texts, single):
        return [texts]
    if not isinstance(texts, Iterable):
        raise PalUserError(
            f"Expected a sentence or a list of sentences, got {type(texts).__name__} {texts!r}. "
            f"Pass e.g. {example}."
        )
    return list(texts)


@dataclass
class Prediction:
    """One input's prediction (what :func:`predict_items` gives per ``(task, input)``)."""

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
    truncated: bool = False
    """Whether the input's tokens were cut at the model's window (``predict_max_length``) before it ran."""

    def record(self) -> dict[str, Any]:
        """``task`` with ``label`` and ``probabilities`` (name -> p), or with ``score``."""
        if self.score is not None:
            return {"task": self.task, "score": self.score}
        assert self.probabilities is not None
        return {
            "task": self.task,
            "label": self.label,
            "probabilities": _named(self.probabilities, self.label_names),
        }


@dataclass
class TaskPredictions:
    """The predictions of ``N`` inputs of one task, column by column (what ``predict(task, texts)`` returns)."""

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

    @classmethod
    def of(cls, task: str, rows: Sequence[Prediction]) -> TaskPredictions:
        """The columns of one task's :class:`Prediction` rows."""
        if rows[0].score is not None:
            return cls(task, None, None, None, [float(p.score) for p in rows if p.score is not None])
        probabilities = np.stack([p.probabilities for p in rows if p.probabilities is not None])
        classes = [int(p.class_index) for p in rows if p.class_index is not None]
        return cls(task, classes, [p.label for p in rows], probabilities, None, rows[0].label_names)

    def __len__(self) -> int:
        return len(self.scores if self.scores is not None else self.classes or [])

    def records(self) -> list[dict[str, Any]]:
        """One dict per input: ``label`` and ``probabilities`` (name -> p), or ``score``."""
        if self.scores is not None:
            return [{"score": s} for s in self.scores]
        assert self.labels is not None and self.probabilities is not None
        return [
            {"label": label, "probabilities": _named(row, self.label_names)}
            for label, row in zip(self.labels, self.probabilities, strict=True)
        ]


def _named(row: np.ndarray, names: Sequence[str] | None) -> dict[str, float]:
    # class name (else index) -> probability
    return dict(zip(names or map(str, range(len(row))), map(float, row), strict=True))


def _columns(spec: TaskSpec, texts: Sequence[Any], positions: Sequence[int]) -> list[list[str]]:
    # one task's inputs as text columns (two for pairs); positions: their indices in the input, for messages
    width = 2 if spec.is_pair else 1
    columns: list[list[str]] = [[] for _ in range(width)]
    for i, item in zip(positions, texts, strict=True):
        parts = (item,) if isinstance(item, str) else tuple(item) if isinstance(item, (tuple, list)) else None
        if parts is None or len(parts) != width or not all(isinstance(p, str) for p in parts):
            want = "(sentence1, sentence2) tuples" if spec.is_pair else "single sentences (strings)"
            fix = (
                "Pass a list of pairs, e.g. [('How do I cook rice?', 'How is rice cooked?')]."
                if spec.is_pair
                else "Pass a list of strings."
            )
            raise PalUserError(f"Task {spec.name!r} takes {want}, but input {i} is {item!r}. {fix}")
        for column, part in zip(columns, parts, strict=True):
            column.append(part)
    return columns


def probabilities_from_output(spec: TaskSpec, output: torch.Tensor) -> torch.Tensor:
    """Class probabilities ``[B, C]`` of a classification head's output (softmax; for a single ``bce``
    logit ``s``: ``[1 - sigmoid(s), sigmoid(s)]``)."""
    if output.dim() == 1 or output.shape[-1] == 1:
        p = torch.sigmoid(output.reshape(-1).float())
        return torch.stack([1 - p, p], dim=-1)
    return torch.softmax(output.float(), dim=-1)


def _to_predictions(spec: TaskSpec, output: torch.Tensor, names: Sequence[str] | None) -> list[Prediction]:
    # one Prediction per row of the task's head output; names: its class names
    from pal_lightning.modeling.heads import predict as head_predict

    values = head_predict(spec, output).tolist()
    if spec.is_regression:
        return [Prediction(spec.name, None, None, None, float(v)) for v in values]
    probs = probabilities_from_output(spec, output).numpy().astype(np.float32)
    listed = list(names) if names else None
    return [
        Prediction(spec.name, int(c), listed[int(c)] if listed else int(c), row, None, listed)
        for c, row in zip(values, probs, strict=True)
    ]


def _tokenized(module: Any, columns: dict[str, list[list[str]]]) -> dict[str, TokenizedSplit]:
    # each task's columns as training tokenises the task (its pair encoding), cut at predict_max_length; tasks
    # asked of the same texts that tokenise them alike (one sentence, or pairs of one encoding) share one call
    from pal_lightning.data.sources.readers import RawSplit
    from pal_lightning.data.tokenize import encode_split

    done: dict[tuple[Any, ...], TokenizedSplit] = {}
    out = {}
    for task, texts in columns.items():
        encoding = resolve_pair_encoding(module.hparams["pair_encoding"], task)
        key = (encoding if len(texts) > 1 else "", *map(tuple, texts))
        if key not in done:
            n = len(texts[0])
            raw = RawSplit(task, "predict", "<predict>", [str(i) for i in range(n)], texts, None, rows=n)
            done[key] = encode_split(raw, module.tokenizer, int(module.predict_max_length), encoding)
        out[task] = done[key]
    return out


def _mixed_batch(
    splits: dict[str, TokenizedSplit], members: list[tuple[str, int]], pad_id: int
) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    # the batch of members ((task, index in its split)) and the members in row order (grouped by task)
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
    return mix_batches(parts), [(task, local) for task, locals_ in by_task.items() for local in locals_]


@torch.no_grad()
def predict_items(
    module: Any, items: Sequence[Any], batch_size: int = 64, *, shared_prefix: bool = True
) -> list[Prediction]:
    """One :class:`Prediction` per ``(task, text or (sentence1, sentence2))`` of ``items``, in input order.

    Each input is tokenised as training tokenises its task; all are sorted by length once and batched whatever
    their tasks, one encoder pass per batch (``forward_mixed``), in eval mode without gradients. Inputs
    repeated in a batch run the layers below every task's module once (``MultiTaskEncoder.shared_prefix``)
    unless ``shared_prefix`` is ``False``.

    Raises:
        PalUserError: for no input, a malformed item, an unknown task, a text of the wrong shape for its
            task, or a ``batch_size`` below 1.
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
    specs = {task: module.predict_spec(task) for task in positions}  # unknown task: names the known ones
    if batch_size < 1:
        raise PalUserError(f"batch_size must be >= 1, got {batch_size}.")
    splits = _tokenized(
        module, {task: _columns(specs[task], [items[i][1] for i in at], at) for task, at in positions.items()}
    )
    members = [(task, local) for task, at in positions.items() for local in range(len(at))]
    # a batch pads to its widest sequence; one task alone sorts by all its tokens, as its data batches do
    keys = [splits[t].widths if len(splits) > 1 else splits[t].lengths for t in positions]
    order = np.argsort(np.concatenate(keys), kind="stable")
    pad_id = module.tokenizer.pad_token_id if module.tokenizer.pad_token_id is not None else 0
    outputs = {task: [torch.empty(0)] * len(at) for task, at in positions.items()}
    prefix = getattr(getattr(module, "encoder", None), "shared_prefix", None) if shared_prefix else None
    with eval_mode(module), prefix() if callable(prefix) else nullcontext():
        for start in range(0, len(members), batch_size):
            batch, rows = _mixed_batch(
                splits, [members[i] for i in order[start : start + batch_size]], pad_id
            )
            batch = {k: v.to(module.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            for out in module.forward_mixed(batch).values():
                for row, value in zip(out.rows.tolist(), out.output.float().cpu(), strict=True):
                    task, local = rows[row]
                    outputs[task][local] = value
    predictions: list[Prediction] = [None] * len(items)  # type: ignore[list-item]
    names = module.label_names
    for task, at in positions.items():
        rows_of_task = _to_predictions(specs[task], torch.stack(outputs[task]), names.get(task))
        cut = splits[task].truncated
        for local, (i, prediction) in enumerate(zip(at, rows_of_task, strict=True)):
            prediction.truncated = bool(cut is not None and cut[local])
            predictions[i] = prediction
    return predictions


def label_names_of(specs: Mapping[str, TaskSpec], given: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Class names per classification task: ``given`` ones, else the task's ``label_names``, else built-in ones."""
    out = {}
    for name, spec in specs.items():
        builtin = BUILTIN_LABEL_NAMES.get(name, [])  # only for a built-in task with its usual labels
        builtin = builtin if not spec.is_regression and len(builtin) == spec.num_labels else []
        names = given.get(name) or list(spec.label_names) or builtin
        if names:
            out[name] = list(names)
    return out


def checked_label_names(
    specs: Mapping[str, TaskSpec], names: Mapping[str, Sequence[str]]
) -> dict[str, list[str]]:
    """``names`` as lists of strings, each checked against its task.

    Raises:
        PalUserError: for an unknown task, a regression task, a wrong number of names, or names repeated or empty.
    """
    out = {}
    for task, labels in names.items():
        spec = predict_spec(specs, task)
        if spec.is_regression or len(labels) != spec.num_labels:
            raise PalUserError(
                f"Task {task!r} has {spec.num_labels} label(s) ({TaskKind(spec.kind).value}); got names "
                f"{list(labels)}. Give one name per class of a classification task."
            )
        stripped = [str(n).strip() for n in labels]
        if isinstance(labels, str) or len(set(stripped)) != len(stripped) or not all(stripped):
            raise PalUserError(
                f"Task {task!r}: class names must be a list of distinct, non-empty names, got {labels!r}."
            )
        out[task] = [str(n) for n in labels]
    return out


def predict_spec(specs: Mapping[str, TaskSpec], task: str) -> TaskSpec:
    """The spec of ``task``; an unknown task is one user error naming the known ones."""
    if task not in specs:
        raise PalUserError(
            f"Unknown task {task!r}: this model predicts {', '.join(specs)}. Pick one of those."
        )
    return specs[task]


def predict(
    module: Any, task: Any, texts: Any = None, batch_size: int = 64
) -> TaskPredictions | list[Prediction]:
    """``module.predict``: :class:`TaskPredictions` of ``texts`` for ``task``, or one :class:`Prediction` per
    ``(task, text)`` pair of the list ``task``."""
    if not isinstance(task, str):
        if texts is not None:
            raise PalUserError(
                "predict takes either (task, texts) or one list of (task, text) pairs, not both: "
                "e.g. predict('sst', ['a fine film']) or predict([('sst', 'a fine film')])."
            )
        return predict_items(module, task, batch_size)
    if texts is None:
        raise PalUserError(f"Nothing to predict for task {task!r}: pass the texts, predict({task!r}, [...]).")
    texts = as_texts(texts, f"predict({task!r}, ['a fine film'])")
    module.predict_spec(task)
    if not texts:
        raise PalUserError(f"Nothing to predict for task {task!r}: the input holds no sentences.")
    return TaskPredictions.of(task, predict_items(module, [(task, t) for t in texts], batch_size))

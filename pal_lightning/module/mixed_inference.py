"""Predictions for a mixed stream: ``module.predict([(task, text_or_pair), ...])``.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pal_lightning.core.batch import TASK, mix_batches, resolve_pair_encoding
from pal_lightning.core.errors import PalUserError
from pal_lightning.module.inference import TaskPredictions, check_inputs

if TYPE_CHECKING:
    from pal_lightning.data.tokenize import TokenizedSplit
    from pal_lightning.module.multitask import MultiTaskModule


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

"""The batch contract between the data module and the model: a plain ``dict`` of one task's examples.

* always: ``task`` (the task's name), ``ids`` (example ids), ``indices`` (positions in the split, what
  episodic memories store), ``split``;
* ``labels`` when the split is labelled: ``LongTensor[B]`` classes, or ``FloatTensor[B]`` scores on the
  task's own scale;
* ``input_ids``, ``attention_mask``, ``token_type_ids`` (``[B, T]``, padded per batch) for single
  sentences and ``cross`` pairs; a ``siamese`` pair holds them once per sentence, as ``*_a`` and ``*_b``.

A *mixed* batch (``MultiTaskModule.forward_mixed``, made by :func:`mix_batches`) holds rows of several
tasks: ``tasks`` (each row's task name, or index into the model's tasks), each row's sequence (a siamese
pair's first sentence) under the plain keys, its second sentence under ``*_b`` (padding for other rows),
and optionally ``labels`` (as floats), ``ids`` and ``indices``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

# The keys of a batch: code reads and writes batches through these names only, never the literal strings.
TASK = "task"
TASKS = "tasks"
"""The key of each row's task in a mixed batch (one batch, rows of several tasks)."""
SPLIT = "split"
IDS = "ids"
INDICES = "indices"
LABELS = "labels"
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
TOKEN_TYPE_IDS = "token_type_ids"
ENCODING_KEYS = (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS)
"""The encoder inputs of one sentence (or of a pair encoded ``cross``), in the encoder's argument order."""

PREDICTIONS = "predictions"
"""The key of the predictions in what ``predict_step`` returns: ``{TASK, SPLIT, IDS, PREDICTIONS}``."""
PROBABILITIES = "probabilities"
"""The key of a classification task's class probabilities ``[B, C]`` in what ``predict_step`` returns."""

PAIR_ENCODINGS: tuple[str, ...] = ("cross", "siamese")


def side_keys(side: str) -> tuple[str, str, str]:
    """Keys of one sentence of a siamese pair: ``side`` is ``"a"`` or ``"b"`` (``""``: :data:`ENCODING_KEYS`)."""
    if not side:
        return ENCODING_KEYS
    return (f"{INPUT_IDS}_{side}", f"{ATTENTION_MASK}_{side}", f"{TOKEN_TYPE_IDS}_{side}")


def side_inputs(batch: Mapping[str, Any], side: str) -> dict[str, Any]:
    """The encoder inputs of one sentence (``side`` ``"a"``, ``"b"`` or ``""``) under the plain
    :data:`ENCODING_KEYS` names (keys the batch lacks left out)."""
    return {k: batch[s] for k, s in zip(ENCODING_KEYS, side_keys(side), strict=True) if s in batch}


def concat_inputs(parts: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Sets of sentences' encoder inputs stacked into one batch, right-padded with 0 to the longest (a key
    some part lacks is left out)."""
    length = max(p[INPUT_IDS].shape[1] for p in parts)
    return {
        key: torch.cat([F.pad(p[key], (0, length - p[key].shape[1]), value=0) for p in parts])
        for key in ENCODING_KEYS
        if all(key in p for p in parts)
    }


def resolve_pair_encoding(pair_encoding: str | dict[str, str], task: str) -> str:
    """The pair encoding used for ``task``: one value for all tasks, or a per-task mapping (``default``,
    else ``cross``, for the tasks it does not name)."""
    if isinstance(pair_encoding, str):
        value = pair_encoding
    else:
        value = pair_encoding.get(task, pair_encoding.get("default", "cross"))
    if value not in PAIR_ENCODINGS:
        raise ValueError(f"pair_encoding {value!r} for task {task!r}: choose one of {PAIR_ENCODINGS}.")
    return value


def mix_batches(batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One mixed batch of the rows of one-task ``batches``, in their order (``labels``, ``ids`` and
    ``indices`` kept when every batch has them)."""
    if not batches:
        raise ValueError("mix_batches needs at least one batch")
    firsts: list[dict[str, torch.Tensor]] = []
    seconds: list[dict[str, torch.Tensor]] = []
    tasks: list[str] = []
    for batch in batches:
        siamese = side_keys("a")[0] in batch
        first = side_inputs(batch, "a" if siamese else "")
        rows = first[INPUT_IDS].shape[0]
        firsts.append(first)
        blank = torch.zeros(rows, 1, dtype=first[INPUT_IDS].dtype, device=first[INPUT_IDS].device)
        second = side_inputs(batch, "b") if siamese else {key: blank for key in first}
        seconds.append({key: second[key] for key in first if key in second})
        tasks += [batch[TASK]] * rows
    for parts in (firsts, seconds):  # a cross pair's segments must survive a batch without token types
        if any(TOKEN_TYPE_IDS in part for part in parts):
            for part in parts:
                part.setdefault(TOKEN_TYPE_IDS, torch.zeros_like(part[INPUT_IDS]))
    mixed: dict[str, Any] = {TASKS: tasks, **concat_inputs(firsts)}
    if any(side_keys("a")[0] in batch for batch in batches):
        b_keys = dict(zip(ENCODING_KEYS, side_keys("b"), strict=True))
        mixed.update({b_keys[key]: value for key, value in concat_inputs(seconds).items()})
    for key in (IDS, INDICES):
        if all(key in batch for batch in batches):
            mixed[key] = [item for batch in batches for item in batch[key]]
    if all(LABELS in batch for batch in batches):
        mixed[LABELS] = torch.cat([torch.as_tensor(batch[LABELS]).float() for batch in batches])
    return mixed

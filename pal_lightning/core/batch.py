"""The batch contract between the data module and the model.

Every batch holds examples of exactly one task and is a plain ``dict``:

================== ============================ ==========================================
key                type                         present
================== ============================ ==========================================
``task``           ``str``                      always: the task's name
``ids``            ``list[str]``                always: example ids (for prediction files)
``indices``        ``list[int]``                always: positions of the examples in their split
                                                (what episodic memories store)
``split``          ``str``                      always: the split the examples come from
``labels``         ``LongTensor[B]`` (classes)  when the split is labelled
                   ``FloatTensor[B]`` (scores,
                   on the task's own scale,
                   e.g. 0..5 for STS)
``input_ids``      ``LongTensor[B, T]``         single sentences, and pairs encoded ``cross``
``attention_mask`` ``LongTensor[B, T]``         with ``input_ids``
``token_type_ids`` ``LongTensor[B, T]``         with ``input_ids``
``*_a`` / ``*_b``  as above, one per sentence   pairs encoded ``siamese``
================== ============================ ==========================================

Padding is per batch (``T`` is the longest sequence of the batch).

A *mixed* batch (per-example task routing: ``MultiTaskModule.forward_mixed``) holds rows of several tasks:

================== ============================ ==========================================
``tasks``          ``list[str]`` or             always: each row's task (names, or indices
                   ``LongTensor[B]``            into the model's task list)
``input_ids``,     ``LongTensor[B, T]``         always: each row's sequence; a siamese
``attention_mask``,                             pair's first sentence
``token_type_ids``
``*_b``            ``LongTensor[B, T_b]``       when a row's task encodes pairs ``siamese``:
                                                its second sentence (other rows: padding,
                                                never read)
``labels``         ``FloatTensor[B]``           optional: classes as floats, each task's loss
                                                casts its rows back
``ids``,           lists, as above              optional
``indices``
================== ============================ ==========================================

:func:`mix_batches` makes one from one-task batches.
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
    """The encoder inputs of one sentence of ``batch`` under the plain :data:`ENCODING_KEYS` names: ``side``
    ``"a"`` or ``"b"`` of a siamese pair, ``""`` for the single sentence (or cross pair). Keys the batch
    lacks (``token_type_ids`` is optional) are left out."""
    return {k: batch[s] for k, s in zip(ENCODING_KEYS, side_keys(side), strict=True) if s in batch}


def concat_inputs(parts: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Sets of sentences' encoder inputs stacked into one batch (rows of ``parts[0]`` first), every key
    right-padded with 0 to the longest; a key some part lacks (``token_type_ids``) is left out.

    Padding with 0 on the right changes neither mean nor CLS pooling (the mask is 0 there).
    """
    length = max(p[INPUT_IDS].shape[1] for p in parts)
    return {
        key: torch.cat([F.pad(p[key], (0, length - p[key].shape[1]), value=0) for p in parts])
        for key in ENCODING_KEYS
        if all(key in p for p in parts)
    }


def resolve_pair_encoding(pair_encoding: str | dict[str, str], task: str) -> str:
    """The pair encoding used for ``task``: one value for all tasks, or a per-task mapping.

    A mapping may hold a ``default`` entry; tasks it does not name use ``cross``.
    """
    if isinstance(pair_encoding, str):
        value = pair_encoding
    else:
        value = pair_encoding.get(task, pair_encoding.get("default", "cross"))
    if value not in PAIR_ENCODINGS:
        raise ValueError(f"pair_encoding {value!r} for task {task!r}: choose one of {PAIR_ENCODINGS}.")
    return value


def mix_batches(batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One mixed batch (module docstring) of the rows of one-task ``batches``, in their order.

    A siamese batch's first sentences become rows of ``input_ids`` and its second ones rows of
    ``input_ids_b``; other rows get an all-padding ``*_b`` row of one token. ``labels`` are kept (as floats)
    when every batch has them; ``ids`` and ``indices`` likewise.

    Raises:
        ValueError: for no batch.
    """
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

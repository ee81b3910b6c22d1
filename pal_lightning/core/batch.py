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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

# The keys of a batch: code reads and writes batches through these names only, never the literal strings.
TASK = "task"
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

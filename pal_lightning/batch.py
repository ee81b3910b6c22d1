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

from typing import Literal

TASK = "task"
IDS = "ids"
INDICES = "indices"
LABELS = "labels"
ENCODING_KEYS = ("input_ids", "attention_mask", "token_type_ids")

PairEncoding = Literal["cross", "siamese"]
PAIR_ENCODINGS: tuple[str, ...] = ("cross", "siamese")


def side_keys(side: str) -> tuple[str, str, str]:
    """Keys of one sentence of a siamese pair: ``side`` is ``"a"`` or ``"b"``."""
    return tuple(f"{k}_{side}" for k in ENCODING_KEYS)  # type: ignore[return-value]


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

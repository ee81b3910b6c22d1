"""Class labels given as names: which names a task's classes have, and a label's class index.

A classification task's label column may hold class indices (``0``, ``1``, ...) or names (``sports``,
``politics``). The names of a task are its ``TaskSpec.label_names`` when given; otherwise those of its
training split: a ``datasets`` ``ClassLabel`` feature's names, or, when the column holds words, the
distinct values sorted (:func:`names_of_values`). A column of numbers has no names. Dev and test rows are
mapped with the same names, so a name the training split never had is a bad row naming it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

#: How many names a message lists before "...".
SHOWN_NAMES = 8


def is_number(value: Any) -> bool:
    """Whether ``value`` reads as a finite number (``3``, ``"0.5"``, ``True``); empty and words do not."""
    if isinstance(value, bool):
        return True
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def is_empty(value: Any) -> bool:
    """A missing or blank label (how unlabelled rows look)."""
    return value is None or (isinstance(value, str) and not value.strip())


def names_of_values(values: Iterable[Any]) -> tuple[str, ...]:
    """The class names a label column's values spell: its distinct words, sorted (so that the classes do not
    depend on the order of the rows), when most of its non-empty values are words; ``()`` when most are
    numbers (class indices: a stray word there is a bad row, not a class)."""
    texts = [str(v).strip() for v in values if not is_empty(v)]
    words = [t for t in texts if not is_number(t)]
    if len(words) * 2 <= len(texts):
        return ()
    return tuple(sorted(set(words)))


def describe_names(names: Sequence[str]) -> str:
    """``a, b, c`` (the first :data:`SHOWN_NAMES` names, then how many more); a name with a line break,
    another unprintable character or surrounding spaces is shown quoted with escapes, so that a message
    naming it stays one line."""
    shown = ", ".join(n if n.isprintable() and n == n.strip() else repr(n) for n in names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


def name_index(value: Any, names: Sequence[str]) -> int | None:
    """The class index of a label given by name (``None`` when ``value`` is not one of ``names``)."""
    if not names or not isinstance(value, str):
        return None
    try:
        return list(names).index(value.strip())
    except ValueError:
        return None

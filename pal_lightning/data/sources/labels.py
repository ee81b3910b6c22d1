"""Class labels given as names (``sports``, ``politics``) or indices: a task's names are its
``label_names``, else its training split's (a ``ClassLabel``'s, or the column's words sorted)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

SHOWN_NAMES = 8


def is_number(value: Any) -> bool:
    """Whether ``value`` reads as a finite number (``3``, ``"0.5"``, ``True``)."""
    if isinstance(value, bool):
        return True
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def is_empty(value: Any) -> bool:
    """A missing or blank value."""
    return value is None or (isinstance(value, str) and not value.strip())


def names_of_values(values: Iterable[Any]) -> tuple[str, ...]:
    """The distinct words of a label column, sorted, when most non-empty values are words; else ``()``."""
    texts = [str(v).strip() for v in values if not is_empty(v)]
    words = [t for t in texts if not is_number(t)]
    if len(words) * 2 <= len(texts):
        return ()
    return tuple(sorted(set(words)))


def describe_names(names: Sequence[str]) -> str:
    """``a, b, c`` and how many more; odd names quoted with escapes, so a message stays one line."""
    shown = ", ".join(n if n.isprintable() and n == n.strip() else repr(n) for n in names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")

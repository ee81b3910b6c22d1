"""Column names of the prediction files: one rule for ``predict``'s files and ``--predict.input``'s
(here, without Lightning, for the command line's fast paths)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def probability_column(label: str) -> str:
    """``p_<label>`` as a safe column name: ``somewhat negative`` -> ``p_somewhat_negative``."""
    return "p_" + (re.sub(r"[^0-9A-Za-z_]+", "_", str(label)).strip("_") or "label")


def probability_columns(names: Sequence[str]) -> list[str]:
    """The probability columns of classes ``names``: safe, and distinct (``_2``, ``_3`` ... added to repeats)."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for name in map(probability_column, names):
        column = name
        while column in out:  # a repeat's name_k may be another class's own name
            seen[name] = seen.get(name, 1) + 1
            column = f"{name}_{seen[name]}"
        out.append(column)
    return out

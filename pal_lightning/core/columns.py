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
    out = []
    for name in map(probability_column, names):
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out

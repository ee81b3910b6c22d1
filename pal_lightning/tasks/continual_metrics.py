"""Continual-learning metrics of GEM (Lopez-Paz & Ranzato, 2017, section 2) and forgetting (Chaudhry et
al., 2018), from ``R[i][j]``, the score of task ``j`` after the training phase of task ``i``."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["continual_metrics"]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else float("nan")


def continual_metrics(
    R: Sequence[Sequence[float]], baseline: Sequence[float] | None = None
) -> dict[str, float]:
    """Average accuracy, backward transfer, forward transfer and forgetting of a ``T x T`` score matrix.

    ``baseline[j]`` is the score of task ``j`` before training (without it ``forward_transfer`` is NaN)::

        average_accuracy  = mean_j R[T-1][j]
        backward_transfer = mean_{j < T-1} (R[T-1][j] - R[j][j])
        forward_transfer  = mean_{j >= 1} (R[j-1][j] - b[j])
        forgetting        = mean_{j < T-1} (max_{l < T-1} R[l][j] - R[T-1][j])

    All but the first are NaN for a single task.

    Raises:
        ValueError: when ``R`` is not square or ``baseline`` has the wrong length.
    """
    rows = [[float(x) for x in row] for row in R]
    T = len(rows)
    if T == 0 or any(len(row) != T for row in rows):
        raise ValueError(
            f"R must be a non-empty T x T matrix, got {T} rows of lengths {[len(r) for r in rows]}."
        )
    b = None if baseline is None else [float(x) for x in baseline]
    if b is not None and len(b) != T:
        raise ValueError(f"baseline must have one score per task ({T}), got {len(b)}.")
    last = rows[T - 1]
    fwt = float("nan") if b is None else _mean([rows[j - 1][j] - b[j] for j in range(1, T)])
    return {
        "average_accuracy": _mean(last),
        "backward_transfer": _mean([last[j] - rows[j][j] for j in range(T - 1)]),
        "forward_transfer": fwt,
        "forgetting": _mean([max(rows[i][j] for i in range(T - 1)) - last[j] for j in range(T - 1)]),
    }

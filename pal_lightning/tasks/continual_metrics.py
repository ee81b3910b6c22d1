"""Continual-learning metrics of the GEM paper (Lopez-Paz & Ranzato, NeurIPS 2017, section 2).

After training on task ``i`` (of ``T`` tasks, in order) every task ``j`` is evaluated:
``R[i][j]`` is the score of task ``j`` after the phase of task ``i``, and ``b[j]`` the score
of task ``j`` before any training (the paper uses a random initialisation; here it is the
pretrained encoder with untrained heads). With the paper's 1-based indices:

.. math::

    \\mathrm{ACC} = \\frac{1}{T} \\sum_{i=1}^{T} R_{T,i}

    \\mathrm{BWT} = \\frac{1}{T-1} \\sum_{i=1}^{T-1} \\left(R_{T,i} - R_{i,i}\\right)

    \\mathrm{FWT} = \\frac{1}{T-1} \\sum_{i=2}^{T} \\left(R_{i-1,i} - \\bar{b}_i\\right)

BWT < 0 is forgetting: the final score of an earlier task is below the score it had just
after its own phase. FWT > 0 means that training on earlier tasks already helped a task
before its own phase. Forgetting (Chaudhry et al., ECCV 2018) looks at the best earlier
score instead of the one right after the task's phase:

.. math::

    F = \\frac{1}{T-1} \\sum_{j=1}^{T-1} \\left(\\max_{l \\in 1..T-1} R_{l,j} - R_{T,j}\\right)

The code uses 0-based indices: ``ACC = mean_j R[T-1][j]``, ``BWT = mean_{j<T-1} (R[T-1][j] -
R[j][j])``, ``FWT = mean_{j>=1} (R[j-1][j] - b[j])``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["continual_metrics"]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else float("nan")


def continual_metrics(
    R: Sequence[Sequence[float]], baseline: Sequence[float] | None = None
) -> dict[str, float]:
    """Average accuracy, backward transfer, forward transfer and forgetting of an accuracy matrix.

    Args:
        R: ``T x T`` scores; ``R[i][j]`` = score of task ``j`` after training phase ``i``
            (tasks and phases in the same order).
        baseline: ``b[j]``, the score of task ``j`` before training (length ``T``); without it
            ``forward_transfer`` is NaN.

    Returns:
        ``{"average_accuracy", "backward_transfer", "forward_transfer", "forgetting"}`` (0-based)::

            average_accuracy  = mean_j R[T-1][j]
            backward_transfer = mean_{j < T-1} (R[T-1][j] - R[j][j])
            forward_transfer  = mean_{j >= 1} (R[j-1][j] - b[j])
            forgetting        = mean_{j < T-1} (max_{l < T-1} R[l][j] - R[T-1][j])

        Backward transfer, forward transfer and forgetting are NaN for a single task (no pair
        of phases to compare).

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
    return {
        "average_accuracy": _mean(last),
        "backward_transfer": _mean([last[j] - rows[j][j] for j in range(T - 1)]),
        "forward_transfer": float("nan")
        if b is None
        else _mean([rows[j - 1][j] - b[j] for j in range(1, T)]),
        "forgetting": _mean([max(rows[i][j] for i in range(T - 1)) - last[j] for j in range(T - 1)]),
    }

"""Statistics of multi-seed benchmark runs: mean and spread, and the paired difference of two methods.

Two methods run with the same seeds see the same data order and initial head weights, so their
scores are paired: the difference ``d_s = A_s - B_s`` per seed removes the seed's own luck. Over
``n`` seeds::

    mean  = sum(d) / n
    sd    = sqrt( sum((d - mean)^2) / (n - 1) )
    95 %  = mean -/+ t_{0.975, n-1} * sd / sqrt(n)

The verdict is "A better" when the whole interval lies above 0, "B better" when it lies below, and
"not separable" otherwise (also when fewer than two pairs exist).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Two-sided 95 % quantiles t_{0.975, df} of Student's t (standard tables), used without scipy.
T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: scipy's value when scipy is installed, else :data:`T_975` (for a df between two
    table rows the smaller df's value, which makes the interval a little wider, never narrower)."""
    if df < 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    try:
        from scipy.stats import t
    except ImportError:
        return T_975[max(k for k in T_975 if k <= df)]
    return float(t.ppf(0.975, df))


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1 in the denominator; ``None`` for one value)."""
    if not values:
        raise ValueError("mean_std needs at least one value")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


@dataclass(frozen=True)
class PairedDifference:
    """The paired difference A - B over seeds, with its 95 % t-interval."""

    n: int
    """Number of seeds where both methods have a score."""
    mean: float
    """Mean of A_s - B_s."""
    sd: float | None
    """Sample standard deviation of the differences (``None`` for n = 1)."""
    low: float | None
    """Lower end of the 95 % interval (``None`` for n < 2)."""
    high: float | None
    """Upper end of the 95 % interval (``None`` for n < 2)."""

    @property
    def verdict(self) -> str:
        """``A better``, ``B better`` or ``not separable`` (the interval holds 0, or n < 2)."""
        if self.low is not None and self.low > 0:
            return "A better"
        if self.high is not None and self.high < 0:
            return "B better"
        return "not separable"


def paired_difference(a: Sequence[float], b: Sequence[float]) -> PairedDifference:
    """Paired difference of the scores ``a[s]`` and ``b[s]`` of two methods on the same seeds.

    Raises:
        ValueError: for sequences of different lengths or no pairs.
    """
    if len(a) != len(b) or not a:
        raise ValueError(
            f"paired_difference needs two equally long, non-empty lists, got {len(a)} and {len(b)}"
        )
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    mean, sd = mean_std(diffs)
    if sd is None:
        return PairedDifference(1, mean, None, None, None)
    half = t_quantile_975(len(diffs) - 1) * sd / math.sqrt(len(diffs))
    return PairedDifference(len(diffs), mean, sd, mean - half, mean + half)

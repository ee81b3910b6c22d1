"""The package's sampling rule, registered under ``capped_inverse`` when the package is imported."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pal_lightning import register_sampling_rule

CAP = 4.0
"""No task is drawn more than this many times as often as the largest one (per example)."""


def capped_inverse(sizes: Mapping[str, int], epoch: int, schedule: Any) -> dict[str, float]:
    """Small tasks up-sampled: ``w_i = min(max_j N_j / N_i, CAP)``, the same at every epoch (a pure function
    of its arguments, so every DDP rank and a resumed run draw the same plan)."""
    largest = max(sizes.values())
    return {task: min(largest / n, CAP) if n else 0.0 for task, n in sizes.items()}


register_sampling_rule("capped_inverse", capped_inverse)

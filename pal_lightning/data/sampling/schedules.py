"""Task sampling schedules: the probability of drawing each task at each epoch (``docs/design.md`` §3)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from pal_lightning.core.errors import PalUserError

#: The values of ``--data.sampling`` (not the task schedule ``--data.schedule``).
SAMPLING_SCHEDULES = ("proportional", "sqrt", "uniform", "round_robin", "annealed", "weights")
#: Fixed alpha of the non-annealed random schedules.
FIXED_ALPHA = {"proportional": 1.0, "sqrt": 0.5, "uniform": 0.0}


@overload
def task_probabilities(sizes: Mapping[str, float], alpha: float) -> dict[str, float]: ...
@overload
def task_probabilities(sizes: Sequence[float], alpha: float) -> list[float]: ...
def task_probabilities(
    sizes: Mapping[str, float] | Sequence[float], alpha: float
) -> dict[str, float] | list[float]:
    """Sampling probabilities ``p_i = N_i^alpha / sum_j N_j^alpha``, a dict or list like ``sizes``.

    Raises:
        ValueError: for no tasks, a negative size, all sizes zero, or a non-finite alpha.
    """
    keys = list(sizes) if isinstance(sizes, Mapping) else None
    values = [float(v) for v in (sizes.values() if isinstance(sizes, Mapping) else sizes)]
    if not values:
        raise ValueError("task_probabilities needs at least one task size.")
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"Task sizes must be finite and >= 0, got {values}.")
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}.")
    # A task with no examples can never be drawn, whatever alpha is (0**0 would be 1).
    weights = [v**alpha if v > 0 else 0.0 for v in values]
    total = math.fsum(weights)
    if total <= 0:
        raise ValueError(f"At least one task needs examples, got sizes {values}.")
    probs = [w / total for w in weights]
    return dict(zip(keys, probs, strict=True)) if keys is not None else probs


def apply_multipliers(
    probs: Mapping[str, float], multipliers: Mapping[str, float] | None
) -> dict[str, float]:
    """``p'_i = m_i p_i / sum_j m_j p_j`` (not named: ``m_i = 1``); a PalUserError for a bad multiplier or task."""
    if not multipliers:
        return dict(probs)
    unknown = [t for t in multipliers if t not in probs]
    if unknown:
        raise PalUserError(
            f"task_multipliers name unknown tasks {unknown}; the training tasks are {list(probs)} "
            "(--data.task_multipliers '{cfimdb: 0.5}')."
        )
    scaled = {t: p * _multiplier(multipliers, t) for t, p in probs.items()}
    total = math.fsum(scaled.values())
    if total <= 0:
        raise PalUserError(f"task_multipliers {dict(multipliers)} leave no task with a chance to be drawn.")
    return {t: v / total for t, v in scaled.items()}


def _multiplier(multipliers: Mapping[str, float], task: str) -> float:
    value = float(multipliers.get(task, 1.0))
    if not (value >= 0 and math.isfinite(value)):
        raise PalUserError(f"task_multipliers must be finite and >= 0, got {task}: {value}.")
    return value


def annealed_alpha(epoch: int, num_epochs: int) -> float:
    """Alpha of annealed sampling at 1-based ``epoch`` of ``E``: ``1 - 0.8 (e - 1) / (E - 1)`` (0.2 past ``E``).

    Raises:
        ValueError: if ``epoch < 1`` or ``num_epochs < 1``.
    """
    if num_epochs < 1:
        raise ValueError(f"num_epochs must be >= 1, got {num_epochs}.")
    if epoch < 1:
        raise ValueError(f"epoch is 1-based and must be >= 1, got {epoch}.")
    return 1.0 if num_epochs == 1 else 1.0 - 0.8 * (min(epoch, num_epochs) - 1) / (num_epochs - 1)


@dataclass
class SamplingSchedule:
    """A named task-sampling schedule: ``SamplingSchedule("annealed", num_epochs=10).probabilities(sizes, 0)``."""

    name: str = "annealed"
    """One of :data:`SAMPLING_SCHEDULES`."""
    num_epochs: int = 1
    """Annealing horizon ``E`` (only used by ``annealed``)."""
    weights: dict[str, float] | None = None
    """Fixed per-task weights (only for ``weights``); normalised to sum to one."""
    multipliers: dict[str, float] | None = None
    """Per-task factors on a random schedule's probabilities (not named: 1), renormalised."""

    def __post_init__(self) -> None:
        if self.name not in SAMPLING_SCHEDULES:
            raise PalUserError(
                f"Unknown sampling schedule {self.name!r}. Choose one of {', '.join(SAMPLING_SCHEDULES)} "
                "(--data.sampling ...)."
            )
        if self.num_epochs < 1:
            raise PalUserError(f"anneal_epochs must be >= 1, got {self.num_epochs} (--data.anneal_epochs).")
        if self.name == "weights":
            if not self.weights:
                raise PalUserError(
                    "sampling='weights' needs task_weights, a mapping task -> weight "
                    "(--data.task_weights '{sst: 1, qqp: 2, sts: 1}')."
                )
            bad = {k: v for k, v in self.weights.items() if not (float(v) >= 0 and math.isfinite(float(v)))}
            if bad or math.fsum(float(v) for v in self.weights.values()) <= 0:
                raise PalUserError(f"task_weights must be finite, >= 0 and not all zero, got {self.weights}.")
        if self.multipliers:
            if self.name == "round_robin":
                raise PalUserError(
                    "task_multipliers scale the probabilities of a random schedule; round_robin is a fixed "
                    "cycle. Use another --data.sampling, or drop task_multipliers."
                )
            for task in self.multipliers:
                _multiplier(self.multipliers, task)

    @property
    def is_round_robin(self) -> bool:
        """Whether tasks follow a fixed cycle instead of random draws."""
        return self.name == "round_robin"

    def alpha(self, epoch: int) -> float | None:
        """The alpha used at 0-based ``epoch`` (``None`` for ``weights`` and ``round_robin``)."""
        if self.name in FIXED_ALPHA:
            return FIXED_ALPHA[self.name]
        if self.name == "annealed":
            return annealed_alpha(epoch + 1, self.num_epochs)
        return None

    def probabilities(self, sizes: Mapping[str, int], epoch: int) -> dict[str, float]:
        """Per-task probabilities at 0-based ``epoch``; a PalUserError when ``weights`` misnames the tasks."""
        if self.name == "weights":
            assert self.weights is not None
            missing = [t for t in sizes if t not in self.weights]
            extra = [t for t in self.weights if t not in sizes]
            if missing or extra:
                raise PalUserError(
                    f"task_weights must name exactly the training tasks {list(sizes)}; "
                    f"missing {missing}, unknown {extra}."
                )
            total = math.fsum(float(self.weights[t]) for t in sizes)
            return apply_multipliers({t: float(self.weights[t]) / total for t in sizes}, self.multipliers)
        if self.name == "round_robin":
            return {t: 1.0 / len(sizes) for t in sizes}
        return apply_multipliers(task_probabilities(dict(sizes), self.alpha(epoch) or 0.0), self.multipliers)


def annealing_horizon(
    max_epochs: int | None, max_steps: int | None, steps_per_epoch: Callable[[], int]
) -> int:
    """The annealing horizon ``E``: ``max_epochs``, else the epochs ``max_steps`` spans, else 1."""
    if max_epochs is not None and max_epochs > 0:
        return int(max_epochs)
    if max_steps and max_steps > 0:
        return max(1, math.ceil(max_steps / steps_per_epoch()))
    return 1

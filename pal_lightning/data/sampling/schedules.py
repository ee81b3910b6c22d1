"""Task sampling schedules: the probability of drawing each task at each epoch (``docs/design.md`` §3).

A schedule names a *sampling rule*, a function of the task sizes and the epoch registered by name
(:func:`register_sampling_rule`); the built-in ones are registered at the end of this module."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from pal_lightning.core.errors import PalUserError

#: Fixed alpha of the non-annealed random schedules.
FIXED_ALPHA = {"proportional": 1.0, "sqrt": 0.5, "uniform": 0.0}
#: The default of ``sampling_temperature``: ``T = 2``, the best of the temperatures (2, 4, 8) that T5's
#: temperature-scaled mixing compared (Raffel et al. 2020, §3.5.2, Table 11); it is square-root sampling.
DEFAULT_TEMPERATURE = 2.0
#: The name of the fixed cycle: its task of each step is not drawn (its probabilities are ``1 / T``).
ROUND_ROBIN = "round_robin"


def _alpha_weights(values: Sequence[float], alpha: float) -> list[float]:
    """``N_i^alpha`` of every size, 0 for an empty task; ValueError for sizes or an alpha it cannot take."""
    if not values:
        raise ValueError("task_probabilities needs at least one task size.")
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError(f"Task sizes must be finite and >= 0, got {list(values)}.")
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}.")
    # A task with no examples can never be drawn, whatever alpha is (0**0 would be 1).
    weights = [v**alpha if v > 0 else 0.0 for v in values]
    if math.fsum(weights) <= 0:
        raise ValueError(f"At least one task needs examples, got sizes {list(values)}.")
    return weights


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
    weights = _alpha_weights(values, alpha)
    total = math.fsum(weights)
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


#: A sampling rule: ``rule(sizes, epoch, schedule)`` -> a non-negative weight per task of ``sizes``
#: (normalised to the probabilities), at 0-based ``epoch``; ``schedule`` carries the options
#: (``num_epochs``, ``temperature``, ``weights``). It must be a pure function of its arguments: every DDP
#: rank and a resumed run compute the same task plan from it.
SamplingRuleFn = Callable[[Mapping[str, int], int, "SamplingSchedule"], Mapping[str, float]]

_RULES: dict[str, SamplingRuleFn] = {}
#: The names of the built-in rules (filled at the end of this module), which cannot be replaced.
_BUILT_IN: set[str] = set()


def register_sampling_rule(name: str, rule: SamplingRuleFn, *, overwrite: bool = False) -> SamplingRuleFn:
    """Make ``rule`` the sampling rule ``name`` (``--data.sampling name``, ``data.init_args.sampling: name``).

    Raises:
        ValueError: if the name is taken and ``overwrite`` is false, or ``rule`` does not take
            ``(sizes, epoch, schedule)``.
    """
    if name in _BUILT_IN:  # their sequences are fixed for a seed (published figures depend on them)
        raise ValueError(f"{name!r} is a built-in sampling rule; register yours under another name.")
    if name in _RULES and not overwrite:
        raise ValueError(f"Sampling rule {name!r} is already registered; pass overwrite=True to replace it.")
    try:
        inspect.signature(rule).bind(None, None, None)
    except (TypeError, ValueError) as err:  # ValueError: a callable without a signature
        raise ValueError(
            f"A sampling rule is called as rule(sizes, epoch, schedule); {rule!r} cannot be ({err})."
        ) from None
    _RULES[name] = rule
    return rule


def sampling_rules() -> tuple[str, ...]:
    """The names ``--data.sampling`` takes: the registered rules and ``round_robin``, in registration order."""
    return tuple(_RULES)


def unknown_rule_message(name: str) -> str:
    """The one line that refuses an unknown ``--data.sampling`` (the choices come from the registry)."""
    return (
        f"Unknown sampling {name!r}. Choose one of {', '.join(sampling_rules())} (--data.sampling ...; "
        "a rule of your own is registered with register_sampling_rule before the data module is built)."
    )


def check_temperature(temperature: float) -> float:
    """``temperature`` as a float; a PalUserError unless it is finite and > 0."""
    value = float(temperature)
    if not (math.isfinite(value) and value > 0):
        raise PalUserError(
            f"sampling_temperature must be finite and > 0 (p_i ~ N_i^(1/T)), got {temperature} "
            "(--data.sampling_temperature 2)."
        )
    return value


@dataclass
class SamplingSchedule:
    """A named task-sampling schedule: ``SamplingSchedule("annealed", num_epochs=10).probabilities(sizes, 0)``."""

    name: str = "annealed"
    """A registered sampling rule (:func:`sampling_rules`)."""
    num_epochs: int = 1
    """Annealing horizon ``E`` (used by ``annealed``, and by rules of your own that read it)."""
    weights: dict[str, float] | None = None
    """Fixed per-task weights (only for ``weights``); normalised to sum to one."""
    multipliers: dict[str, float] | None = None
    """Per-task factors on a random schedule's probabilities (not named: 1), renormalised."""
    temperature: float = DEFAULT_TEMPERATURE
    """``T`` of ``temperature``: ``p_i ~ N_i^(1/T)`` (1: proportional, 2: square root, large: uniform)."""

    def __post_init__(self) -> None:
        if self.name not in _RULES:
            raise PalUserError(unknown_rule_message(self.name))
        if self.num_epochs < 1:
            raise PalUserError(f"anneal_epochs must be >= 1, got {self.num_epochs} (--data.anneal_epochs).")
        check_temperature(self.temperature)
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
            if self.name == ROUND_ROBIN:
                raise PalUserError(
                    "task_multipliers scale the probabilities of a random schedule; round_robin is a fixed "
                    "cycle. Use another --data.sampling, or drop task_multipliers."
                )
            for task in self.multipliers:
                _multiplier(self.multipliers, task)

    @property
    def is_round_robin(self) -> bool:
        """Whether tasks follow a fixed cycle instead of random draws."""
        return self.name == ROUND_ROBIN

    def alpha(self, epoch: int) -> float | None:
        """The alpha used at 0-based ``epoch`` (``None`` for a rule that is not ``N^alpha``)."""
        if self.name in FIXED_ALPHA:
            return FIXED_ALPHA[self.name]
        if self.name == "annealed":
            return annealed_alpha(epoch + 1, self.num_epochs)
        if self.name == "temperature":
            return 1.0 / self.temperature
        return None

    def probabilities(self, sizes: Mapping[str, int], epoch: int) -> dict[str, float]:
        """Per-task probabilities at 0-based ``epoch``: the rule's weights normalised, then the multipliers;
        a PalUserError when the rule's weights do not fit the tasks (``weights``: misnamed tasks)."""
        weights = _RULES[self.name](sizes, epoch, self)
        return apply_multipliers(normalise_weights(self.name, list(sizes), weights), self.multipliers)


def task_values(what: str, noun: str, tasks: Sequence[str], values: Mapping[str, float]) -> list[float]:
    """``values`` in ``tasks``' order; a PalUserError (``what`` must give a ``noun`` ...) when they miss or
    add a task, or are negative, not finite or all zero."""
    missing = [t for t in tasks if t not in values]
    extra = [t for t in values if t not in tasks]
    if missing or extra:
        raise PalUserError(
            f"{what} must give a {noun} to exactly the training tasks {list(tasks)}; "
            f"missing {missing}, unknown {extra}."
        )
    checked = [float(values[t]) for t in tasks]
    if not all(v >= 0 and math.isfinite(v) for v in checked) or math.fsum(checked) <= 0:
        plural = "probabilities" if noun == "probability" else f"{noun}s"
        raise PalUserError(f"{what} must give finite {plural} >= 0, not all zero; got {dict(values)}.")
    return checked


def normalise_weights(rule: str, tasks: Sequence[str], weights: Mapping[str, float]) -> dict[str, float]:
    """``w_i / sum_j w_j`` over ``tasks``; a PalUserError when ``rule``'s weights miss or add a task, or are
    negative, not finite or all zero (:func:`task_values`)."""
    values = task_values(f"Sampling rule {rule!r}", "weight", tasks, weights)
    total = math.fsum(values)
    return {t: v / total for t, v in zip(tasks, values, strict=True)}


def _weights_rule(sizes: Mapping[str, int], epoch: int, schedule: SamplingSchedule) -> dict[str, float]:
    given = schedule.weights or {}
    missing = [t for t in sizes if t not in given]
    extra = [t for t in given if t not in sizes]
    if missing or extra:
        raise PalUserError(
            f"task_weights must name exactly the training tasks {list(sizes)}; missing {missing}, unknown {extra}."
        )
    return {t: float(given[t]) for t in sizes}


def _cycle_rule(sizes: Mapping[str, int], epoch: int, schedule: SamplingSchedule) -> dict[str, float]:
    return dict.fromkeys(sizes, 1.0)  # the share of each task in the cycle


def annealing_horizon(
    max_epochs: int | None, max_steps: int | None, steps_per_epoch: Callable[[], int]
) -> int:
    """The annealing horizon ``E``: ``max_epochs``, else the epochs ``max_steps`` spans, else 1."""
    if max_epochs is not None and max_epochs > 0:
        return int(max_epochs)
    if max_steps and max_steps > 0:
        return max(1, math.ceil(max_steps / steps_per_epoch()))
    return 1


def _power_rule(sizes: Mapping[str, int], epoch: int, schedule: SamplingSchedule) -> dict[str, float]:
    """``w_i = N_i^alpha``, alpha the schedule's at ``epoch`` (:meth:`SamplingSchedule.alpha`: one place says
    each built-in rule's alpha, for the draws and for the training log alike)."""
    values = [float(n) for n in sizes.values()]
    alpha = schedule.alpha(epoch)
    assert alpha is not None, schedule.name  # registered below for the rules alpha() knows only
    return dict(zip(sizes, _alpha_weights(values, alpha), strict=True))


# The built-in rules, in the order the messages list them; round_robin's weights are its cycle's shares.
_RULES.update(
    {
        **dict.fromkeys(FIXED_ALPHA, _power_rule),
        ROUND_ROBIN: _cycle_rule,
        "annealed": _power_rule,
        "weights": _weights_rule,
        "temperature": _power_rule,
    }
)
_BUILT_IN.update(_RULES)

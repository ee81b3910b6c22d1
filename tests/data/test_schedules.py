"""Properties of the sampling maths (hypothesis), and the error messages a user sees."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sampling.schedules import SamplingSchedule, annealed_alpha, task_probabilities

FAST = settings(max_examples=60, deadline=None)
sizes_st = st.lists(st.integers(min_value=1, max_value=10**6), min_size=1, max_size=8)
alpha_st = st.floats(min_value=0.0, max_value=1.5, allow_nan=False)


@FAST
@given(sizes=sizes_st, alpha=alpha_st)
def test_probabilities_sum_to_one_and_follow_n_to_the_alpha(sizes: list[int], alpha: float) -> None:
    probs = task_probabilities(sizes, alpha)
    assert isinstance(probs, list) and len(probs) == len(sizes)
    assert math.fsum(probs) == pytest.approx(1.0, abs=1e-12)
    # p_i / p_j = (N_i / N_j)^alpha for every pair: the formula, independent of the normalisation
    for i in range(len(sizes)):
        for j in range(len(sizes)):
            assert probs[i] / probs[j] == pytest.approx((sizes[i] / sizes[j]) ** alpha, rel=1e-9)


@FAST
@given(sizes=sizes_st, a=alpha_st, b=alpha_st)
def test_larger_alpha_favours_the_larger_task(sizes: list[int], a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    big = max(range(len(sizes)), key=lambda i: sizes[i])
    assert task_probabilities(sizes, hi)[big] >= task_probabilities(sizes, lo)[big] - 1e-12


@FAST
@given(
    sizes=st.dictionaries(st.sampled_from(["sst", "qqp", "sts", "a", "b"]), st.integers(1, 1000), min_size=1)
)
def test_mapping_in_mapping_out(sizes: dict[str, int]) -> None:
    probs = task_probabilities(sizes, 0.5)
    assert isinstance(probs, dict) and list(probs) == list(sizes)
    total = math.fsum(math.sqrt(n) for n in sizes.values())
    assert probs == pytest.approx({t: math.sqrt(n) / total for t, n in sizes.items()})


@FAST
@given(num_epochs=st.integers(1, 60))
def test_annealing_end_points_and_monotonicity(num_epochs: int) -> None:
    alphas = [annealed_alpha(e, num_epochs) for e in range(1, num_epochs + 3)]
    assert alphas[0] == 1.0  # starts proportional
    if num_epochs > 1:
        assert alphas[num_epochs - 1] == pytest.approx(0.2, abs=1e-12)  # ends at 0.2
        # equal steps of 0.8 / (E - 1), strictly decreasing up to the horizon
        steps = [alphas[i] - alphas[i + 1] for i in range(num_epochs - 1)]
        assert steps == pytest.approx([0.8 / (num_epochs - 1)] * (num_epochs - 1), abs=1e-12)
    else:
        assert alphas[:3] == [1.0, 1.0, 1.0]
    assert alphas[num_epochs:] == [alphas[num_epochs - 1]] * 2  # flat past the horizon


@FAST
@given(num_epochs=st.integers(2, 30), epoch=st.integers(0, 40))
def test_schedule_uses_zero_based_epochs(num_epochs: int, epoch: int) -> None:
    """``SamplingSchedule.alpha(epoch)`` is the 1-based formula at ``epoch + 1`` (not one ahead)."""
    sched = SamplingSchedule("annealed", num_epochs=num_epochs)
    e = min(epoch + 1, num_epochs)
    assert sched.alpha(epoch) == pytest.approx(1 - 0.8 * (e - 1) / (num_epochs - 1), abs=1e-12)


def test_fixed_alphas_and_no_alpha() -> None:
    assert [SamplingSchedule(n).alpha(3) for n in ("proportional", "sqrt", "uniform")] == [1.0, 0.5, 0.0]
    assert SamplingSchedule("round_robin").alpha(0) is None
    assert SamplingSchedule("weights", weights={"a": 1}).alpha(0) is None
    assert SamplingSchedule("round_robin").is_round_robin and not SamplingSchedule("uniform").is_round_robin


def test_round_robin_reports_one_over_t() -> None:
    assert SamplingSchedule("round_robin").probabilities({"a": 1, "b": 90, "c": 9}, 0) == pytest.approx(
        {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}
    )


def test_proportional_of_a_mapping_is_n_over_total() -> None:
    assert SamplingSchedule("proportional").probabilities({"a": 1, "b": 3}, 7) == {"a": 0.25, "b": 0.75}


@pytest.mark.parametrize(
    ("sizes", "alpha", "message"),
    [
        ([], 1.0, "at least one task size"),
        ([-1, 2], 1.0, "finite and >= 0"),
        ([1, math.inf], 1.0, "finite and >= 0"),
        ([0, 0], 1.0, "At least one task needs examples"),
        ([1, 2], math.nan, "alpha must be finite"),
    ],
)
def test_bad_sizes_name_the_problem(sizes: list[float], alpha: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        task_probabilities(sizes, alpha)


def test_small_totals_are_fine() -> None:
    """A total weight below one (fractional sizes, alpha 1) is valid: only a zero total is refused."""
    assert task_probabilities([0.25, 0.25], 1.0) == [0.5, 0.5]


def test_annealed_alpha_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="num_epochs must be >= 1"):
        annealed_alpha(1, 0)
    with pytest.raises(ValueError, match="epoch is 1-based"):
        annealed_alpha(0, 3)


def _refused(message: str) -> pytest.RaisesExc[PalUserError]:
    """A PalUserError whose message is ``message`` word for word."""
    return pytest.raises(PalUserError, match=f"^{re.escape(message)}$")


def test_schedule_errors_name_the_option() -> None:
    from pal_lightning.data.sampling.schedules import unknown_rule_message

    with _refused(unknown_rule_message("bogus")):
        SamplingSchedule("bogus")
    with _refused("anneal_epochs must be >= 1, got 0 (--data.anneal_epochs)."):
        SamplingSchedule("annealed", num_epochs=0)
    with _refused(
        "sampling='weights' needs task_weights, a mapping task -> weight "
        "(--data.task_weights '{sst: 1, qqp: 2, sts: 1}')."
    ):
        SamplingSchedule("weights")


def test_temperature_draws_with_alpha_one_over_t() -> None:
    sched = SamplingSchedule("temperature", temperature=4.0)
    assert sched.alpha(0) == sched.alpha(9) == 0.25
    sizes = {"a": 16, "b": 81}
    assert sched.probabilities(sizes, 0) == pytest.approx(task_probabilities(sizes, 0.25))  # 2 : 3
    assert SamplingSchedule("temperature").alpha(0) == 0.5  # T = 2 by default: square-root sampling


@pytest.mark.parametrize(
    "weights", [{"a": -1.0, "b": 2.0}, {"a": math.inf}, {"a": math.nan}, {"a": 0.0, "b": 0.0}]
)
def test_bad_weights_refused(weights: dict[str, float]) -> None:
    with pytest.raises(PalUserError, match="task_weights must be finite, >= 0 and not all zero"):
        SamplingSchedule("weights", weights=weights)


def test_zero_and_fractional_weights_accepted() -> None:
    """A zero weight (task never drawn) and weights below one are valid."""
    sched = SamplingSchedule("weights", weights={"a": 0.0, "b": 0.5})
    assert sched.probabilities({"a": 10, "b": 10}, 0) == {"a": 0.0, "b": 1.0}


@pytest.mark.parametrize(
    ("weights", "missing", "unknown"),
    [({"a": 1, "z": 1}, ["b"], ["z"]), ({"a": 1}, ["b"], []), ({"a": 1, "b": 1, "z": 1}, [], ["z"])],
)
def test_weights_must_name_exactly_the_tasks(
    weights: dict[str, float], missing: list[str], unknown: list[str]
) -> None:
    with _refused(
        f"task_weights must name exactly the training tasks ['a', 'b']; missing {missing}, unknown {unknown}."
    ):
        SamplingSchedule("weights", weights=weights).probabilities({"a": 1, "b": 1}, 0)


def test_multiplier_errors_name_the_option() -> None:
    from pal_lightning.data.sampling.schedules import apply_multipliers

    with pytest.raises(PalUserError, match=r"task_multipliers must be finite and >= 0, got a: -1\.0"):
        SamplingSchedule("uniform", multipliers={"a": -1.0})
    with pytest.raises(PalUserError, match=r"round_robin is a fixed cycle\. Use another --data\.sampling"):
        SamplingSchedule("round_robin", multipliers={"a": 2.0})
    with _refused(
        "task_multipliers name unknown tasks ['z']; the training tasks are ['a'] "
        "(--data.task_multipliers '{cfimdb: 0.5}')."
    ):
        apply_multipliers({"a": 1.0}, {"z": 2.0})


def test_the_per_task_checks_and_refusals_word_for_word() -> None:
    """The messages in full (each names the fix), and the edges of the per-task value check."""
    from pal_lightning.data.sampling.schedules import (
        check_temperature,
        sampling_rules,
        task_values,
        unknown_rule_message,
    )

    assert task_values("Rule 'r'", "weight", ["a", "b"], {"b": 3, "a": 1}) == [1.0, 3.0]
    with pytest.raises(PalUserError) as err:
        task_values("Rule 'r'", "weight", ["a"], {"a": 1, "z": 2})
    assert (
        str(err.value)
        == "Rule 'r' must give a weight to exactly the training tasks ['a']; missing [], unknown ['z']."
    )
    for noun, plural in (("weight", "weights"), ("probability", "probabilities")):
        with pytest.raises(PalUserError) as err:
            task_values("Rule 'r'", noun, ["a", "b"], {"a": 0, "b": 0.0})  # all zero: nothing to draw
        assert (
            str(err.value)
            == f"Rule 'r' must give finite {plural} >= 0, not all zero; got {{'a': 0, 'b': 0.0}}."
        )
    with pytest.raises(PalUserError) as err:
        check_temperature(0)
    assert str(err.value) == (
        "sampling_temperature must be finite and > 0 (p_i ~ N_i^(1/T)), got 0 (--data.sampling_temperature 2)."
    )
    assert unknown_rule_message("bogus") == (
        f"Unknown sampling 'bogus'. Choose one of {', '.join(sampling_rules())} (--data.sampling ...; "
        "a rule of your own is registered with register_sampling_rule before the data module is built)."
    )
    # a task with no rows is never drawn, even where alpha = 0 makes every other weight 1 (0**0 would be 1)
    assert task_probabilities({"empty": 0, "b": 5, "c": 7}, 0.0) == {"empty": 0.0, "b": 0.5, "c": 0.5}
    with pytest.raises(ValueError, match=r"^task_probabilities needs at least one task size\.$"):
        task_probabilities([], 1.0)

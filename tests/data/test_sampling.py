"""The sampling maths: p_i = N_i^a / sum_j N_j^a and a_e = 1 - 0.8 (e - 1) / (E - 1)."""

from __future__ import annotations

import math

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.schedules import (
    SamplingSchedule,
    annealed_alpha,
    apply_multipliers,
    task_probabilities,
)

SIZES = {"sst": 8544, "qqp": 14137, "sts": 6040}


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 0.8, 1.0])
def test_task_probabilities_match_formula(alpha):
    probs = task_probabilities(SIZES, alpha)
    total = sum(n**alpha for n in SIZES.values())
    assert list(probs) == list(SIZES)  # same keys, same order
    for task, n in SIZES.items():
        assert probs[task] == pytest.approx(n**alpha / total, rel=1e-12)
    assert math.fsum(probs.values()) == pytest.approx(1.0, abs=1e-12)


def test_special_cases_alpha_one_half_zero():
    assert task_probabilities(SIZES, 1.0)["qqp"] == pytest.approx(14137 / (8544 + 14137 + 6040))
    sq = {t: math.sqrt(n) for t, n in SIZES.items()}
    assert task_probabilities(SIZES, 0.5)["sst"] == pytest.approx(sq["sst"] / sum(sq.values()))
    assert task_probabilities(SIZES, 0.0) == pytest.approx(dict.fromkeys(SIZES, 1 / 3))


def test_sequence_input_returns_list():
    probs = task_probabilities([1, 3], 1.0)
    assert isinstance(probs, list)
    assert probs == pytest.approx([0.25, 0.75])


def test_empty_task_never_drawn_even_uniform():
    assert task_probabilities([0, 5, 5], 0.0) == pytest.approx([0.0, 0.5, 0.5])


@pytest.mark.parametrize("bad", [[], [-1, 2], [0, 0]])
def test_task_probabilities_rejects_bad_sizes(bad):
    with pytest.raises(ValueError):
        task_probabilities(bad, 1.0)


@pytest.mark.parametrize("num_epochs", [2, 3, 5, 10])
def test_annealed_alpha_formula(num_epochs):
    for e in range(1, num_epochs + 1):
        assert annealed_alpha(e, num_epochs) == pytest.approx(1 - 0.8 * (e - 1) / (num_epochs - 1))
    assert annealed_alpha(1, num_epochs) == 1.0
    assert annealed_alpha(num_epochs, num_epochs) == pytest.approx(0.2)


def test_annealed_alpha_single_epoch_and_beyond_horizon():
    assert annealed_alpha(1, 1) == 1.0
    assert annealed_alpha(7, 3) == pytest.approx(0.2)  # stays at the last value
    with pytest.raises(ValueError):
        annealed_alpha(0, 3)
    with pytest.raises(ValueError):
        annealed_alpha(1, 0)


def test_schedules():
    assert SamplingSchedule("annealed", num_epochs=3).probabilities(SIZES, 0) == pytest.approx(
        task_probabilities(SIZES, 1.0)
    )
    # epoch is 0-based here: the last of 3 epochs uses alpha 0.2
    assert SamplingSchedule("annealed", num_epochs=3).probabilities(SIZES, 2) == pytest.approx(
        task_probabilities(SIZES, 0.2)
    )
    assert SamplingSchedule("sqrt").probabilities(SIZES, 5) == pytest.approx(task_probabilities(SIZES, 0.5))
    assert SamplingSchedule("uniform").probabilities(SIZES, 0) == pytest.approx(dict.fromkeys(SIZES, 1 / 3))
    w = SamplingSchedule("weights", weights={"sst": 1, "qqp": 2, "sts": 1}).probabilities(SIZES, 0)
    assert w == pytest.approx({"sst": 0.25, "qqp": 0.5, "sts": 0.25})


def test_schedule_errors():
    with pytest.raises(PalUserError, match="Unknown sampling"):
        SamplingSchedule("temperature")
    with pytest.raises(PalUserError, match="task_weights"):
        SamplingSchedule("weights")
    with pytest.raises(PalUserError, match="missing"):
        SamplingSchedule("weights", weights={"sst": 1}).probabilities(SIZES, 0)


def _message(error: pytest.ExceptionInfo[BaseException]) -> str:
    return str(error.value)


def test_error_messages_in_full():
    # the whole text the user reads, the fix included (a message is matched to its last character)
    with pytest.raises(ValueError) as error:
        task_probabilities([], 1.0)
    assert _message(error) == "task_probabilities needs at least one task size."
    with pytest.raises(PalUserError) as error:
        SamplingSchedule("temperature")
    assert _message(error) == (
        "Unknown sampling schedule 'temperature'. Choose one of proportional, sqrt, uniform, round_robin, "
        "annealed, weights (--data.sampling ...)."
    )
    with pytest.raises(PalUserError) as error:
        SamplingSchedule("weights")
    assert _message(error) == (
        "sampling='weights' needs task_weights, a mapping task -> weight (--data.task_weights "
        "'{sst: 1, qqp: 2, sts: 1}')."
    )
    with pytest.raises(PalUserError) as error:
        apply_multipliers({"a": 0.5, "b": 0.5}, {"d": 1.0})
    assert _message(error) == (
        "task_multipliers name unknown tasks ['d']; the training tasks are ['a', 'b'] "
        "(--data.task_multipliers '{cfimdb: 0.5}')."
    )

"""Fuzzed option values (issue 13 item 5): every value of every numeric option either builds or is refused
with one :class:`PalUserError` (exit 2 through the CLI, which prints such errors in one line), never
another exception. Hypothesis draws the values that break naive checks: NaN, the infinities, zero,
negatives, huge numbers; the options are those of the data module, the model and the GEM callback.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pal_lightning import MultiTaskDataModule, MultiTaskModule
from pal_lightning.core.errors import PalUserError
from pal_lightning.gem import GEMCallback
from pal_lightning.testing import TINY_BERT

FLOATS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1e300, -1e-300, 1.0, 0.5]),
    st.floats(allow_nan=True, allow_infinity=True),
)
INTS = st.one_of(st.sampled_from([0, -1, 1, 2**63]), st.integers(min_value=-(2**40), max_value=2**40))

DATA_INTS = [
    "batch_size",
    "eval_batch_size",
    "max_length",
    "steps_per_epoch",
    "anneal_epochs",
    "num_workers",
    "limit_examples",
    "seed",
]
MODEL_FLOATS = ["lr", "head_lr", "adapter_lr", "weight_decay", "dropout", "warmup_ratio", "layer_lr_decay"]
# adapter.size is left out: a size is an allocation, so a huge one is an out-of-memory, not a message.
MODEL_INTS = ["warmup_steps", "max_nonfinite_steps"]
GEM_FLOATS = ["margin", "eps"]
GEM_INTS = ["memory_size", "memory_batch_size", "refresh_every"]


def _builds_or_refuses(build: Any, **option: Any) -> bool:
    """True when built, False when refused with a PalUserError; any other exception fails the test."""
    try:
        build(**option)
    except PalUserError as err:
        assert "\n" not in str(err).strip(), f"a multi-line message for {option}: {err}"
        return False
    return True


def _tiny_model(**option: Any) -> MultiTaskModule:
    """A random 2-layer model (no files read) with one option changed."""
    return MultiTaskModule(
        **{"encoder_config": TINY_BERT, "tasks": ["sst"], "adapter": {"size": 8, "num_heads": 2}, **option}
    )


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(name=st.sampled_from(DATA_INTS), value=INTS)
def test_data_module_options(name: str, value: int) -> None:
    _builds_or_refuses(MultiTaskDataModule, tasks=["sst"], **{name: value})


@FUZZ
@given(name=st.sampled_from(GEM_FLOATS + GEM_INTS), data=st.data())
def test_gem_options(name: str, data: st.DataObject) -> None:
    value = data.draw(FLOATS if name in GEM_FLOATS else INTS)
    built = _builds_or_refuses(GEMCallback, **{name: value})
    if name in GEM_FLOATS and not math.isfinite(value):
        assert not built, f"GEMCallback accepted {name}={value}"


@FUZZ
@given(name=st.sampled_from(MODEL_FLOATS + MODEL_INTS), data=st.data())
def test_model_options(name: str, data: st.DataObject) -> None:
    value = data.draw(FLOATS if name in MODEL_FLOATS else INTS)
    built = _builds_or_refuses(_tiny_model, **{name: value})
    if name in ("lr", "head_lr", "adapter_lr", "weight_decay", "dropout") and not math.isfinite(value):
        assert not built, f"MultiTaskModule accepted {name}={value}"


@pytest.mark.parametrize(
    "build, options",
    [
        (MultiTaskDataModule, {"tasks": []}),
        (MultiTaskDataModule, {"tasks": ["sst", "sst"]}),
        (MultiTaskDataModule, {"tasks": ["sst"], "num_workers": -1}),
        (GEMCallback, {"margin": math.nan}),
    ],
    ids=["no task", "a task twice", "negative workers", "NaN margin"],
)
def test_named_bad_values_are_refused(build: Any, options: dict[str, Any]) -> None:
    assert not _builds_or_refuses(build, **options)


@pytest.mark.parametrize("name", ["lr", "head_lr", "weight_decay"])
@pytest.mark.parametrize("value", [math.nan, -1.0])
def test_bad_rates_are_refused(name: str, value: float) -> None:
    with pytest.raises(PalUserError, match=name):
        _tiny_model(**{name: value})

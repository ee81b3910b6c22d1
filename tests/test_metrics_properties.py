"""The overall score's formula for many random scores (hypothesis), and metrics the main tests miss.

Expected values are written out here by hand: the CS224N overall ``(SST acc + QQP acc + (r + 1) / 2) / 3``
and the mean of main metrics mapped to 0..1, a macro F1 and an accuracy counted with numpy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.metrics import build_metric, build_task_metrics, normalised_main_score, overall_score
from pal_lightning.tasks.specs import TaskSpec, get_task

FAST = settings(max_examples=60, deadline=None)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
corr = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)
SPECS = [get_task(n) for n in ("sst", "qqp", "sts", "cfimdb")]


@FAST
@given(sst=unit, qqp=unit, r=corr, extra=unit)
def test_cs224n_overall_by_hand(sst: float, qqp: float, r: float, extra: float) -> None:
    scores = {
        "sst": {"accuracy": sst},
        "qqp": {"accuracy": qqp, "f1": 1.0 - qqp},
        "sts": {"pearson": r, "spearman": -r},
        "cfimdb": {"accuracy": extra},  # ignored when the three CS224N tasks are present
    }
    expected = (sst + qqp + (r + 1.0) / 2.0) / 3.0
    assert overall_score(scores, SPECS) == pytest.approx(expected, abs=1e-12)
    assert 0.0 <= overall_score(scores, SPECS) <= 1.0


@FAST
@given(r=corr, acc=unit)
def test_mean_of_main_metrics_without_all_three(r: float, acc: float) -> None:
    scores = {"sts": {"pearson": r, "spearman": 0.0}, "cfimdb": {"accuracy": acc}}
    assert overall_score(scores, SPECS) == pytest.approx(((r + 1) / 2 + acc) / 2, abs=1e-12)
    assert overall_score({"sts": scores["sts"]}, SPECS) == pytest.approx((r + 1) / 2, abs=1e-12)


@FAST
@given(r=corr)
def test_normalised_main_score(r: float) -> None:
    assert normalised_main_score(get_task("sts"), r) == pytest.approx((r + 1) / 2, abs=1e-15)
    assert normalised_main_score(get_task("sst"), (r + 1) / 2) == (r + 1) / 2  # accuracy unchanged


def test_tasks_without_a_spec_or_main_metric_are_left_out() -> None:
    scores = {"cfimdb": {"accuracy": 0.4}, "unknown": {"accuracy": 0.0}, "sts": {"spearman": 0.9}}
    # only cfimdb counts: "unknown" has no spec, sts lacks its main metric (pearson)
    assert overall_score(scores, SPECS) == pytest.approx(0.4)
    assert overall_score({"unknown": {"accuracy": 0.3}}, SPECS) is None


def test_nan_is_not_hidden() -> None:
    assert np.isnan(overall_score({"sts": {"pearson": float("nan")}, "cfimdb": {"accuracy": 1.0}}, SPECS))


def test_macro_f1_and_accuracy_of_three_classes_by_hand() -> None:
    spec = TaskSpec(name="three", num_labels=3, metrics=("f1", "accuracy"))
    pred = torch.tensor([0, 1, 2, 2, 1, 0, 2, 2])
    gold = torch.tensor([0, 1, 1, 2, 2, 0, 2, 0])
    coll = build_task_metrics(spec)
    coll.update(pred[:3], gold[:3])
    coll.update(pred[3:], gold[3:])
    got = {k: float(v) for k, v in coll.compute().items()}
    # per class F1 = 2 tp / (2 tp + fp + fn): class 0 tp 2 fp 0 fn 1 -> 0.8; class 1 tp 1 fp 1 fn 1 -> 0.5;
    # class 2 tp 2 fp 2 fn 1 -> 4/7. Macro = mean.
    assert got["f1"] == pytest.approx((0.8 + 0.5 + 4 / 7) / 3, abs=1e-6)
    assert got["accuracy"] == pytest.approx(5 / 8, abs=1e-6)


def test_spearman_builds_without_the_memory_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_metric("spearman", get_task("sts"))


def test_unknown_metric_names_the_choices() -> None:
    with pytest.raises(
        PalUserError, match=r"unknown metric 'auc'; choose from accuracy, f1, pearson, spearman"
    ):
        build_metric("auc", get_task("sst"))


def test_scored_tasks_leave_out_auxiliary_ones() -> None:
    from types import SimpleNamespace

    from pal_lightning.tasks.metrics import scored_task_names

    specs = [get_task("sst"), get_task("qqp"), get_task("sts")]
    assert scored_task_names(specs) == ["sst", "qqp", "sts"]
    assert scored_task_names(specs, auxiliary=("qqp",)) == ["sst", "sts"]
    # a spec that marks itself auxiliary (attribute auxiliary=True) is left out too
    marked = SimpleNamespace(name="mlm", auxiliary=True)
    assert scored_task_names([*specs, marked]) == ["sst", "qqp", "sts"]  # type: ignore[list-item]

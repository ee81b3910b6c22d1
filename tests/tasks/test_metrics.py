"""Per-task metrics against numpy references, and the overall score (also for many random scores, by
hypothesis, against formulas written out by hand). DDP state sync: tests/data/test_ddp.py."""

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

SPECS = [get_task(n) for n in ("sst", "qqp", "sts", "cfimdb")]


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), as Spearman's rho needs."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for value in np.unique(x):
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


def _f1(pred: np.ndarray, gold: np.ndarray) -> float:
    tp = np.sum((pred == 1) & (gold == 1))
    fp = np.sum((pred == 1) & (gold == 0))
    fn = np.sum((pred == 0) & (gold == 1))
    return float(2 * tp / (2 * tp + fp + fn))


def _data(n: int = 200, seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    sts_gold = torch.randint(0, 11, (n,), generator=g).float() / 2  # many ties, 0..5
    sts_pred = (sts_gold + torch.randn(n, generator=g)).clamp(0, 5)
    return {
        "sst": (torch.randint(0, 5, (n,), generator=g), torch.randint(0, 5, (n,), generator=g)),
        "qqp": (torch.randint(0, 2, (n,), generator=g), torch.randint(0, 2, (n,), generator=g)),
        "sts": (sts_pred, sts_gold),
    }


def _reference(data: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> dict[str, dict[str, float]]:
    sst_p, sst_y = (t.numpy() for t in data["sst"])
    qqp_p, qqp_y = (t.numpy() for t in data["qqp"])
    sts_p, sts_y = (t.numpy().astype(np.float64) for t in data["sts"])
    return {
        "sst": {"accuracy": float(np.mean(sst_p == sst_y))},
        "qqp": {"accuracy": float(np.mean(qqp_p == qqp_y)), "f1": _f1(qqp_p, qqp_y)},
        "sts": {"pearson": _pearson(sts_p, sts_y), "spearman": _pearson(_ranks(sts_p), _ranks(sts_y))},
    }


def _compute(
    data: dict[str, tuple[torch.Tensor, torch.Tensor]], batch: int = 32
) -> dict[str, dict[str, float]]:
    out = {}
    for task, (pred, gold) in data.items():
        coll = build_task_metrics(get_task(task))
        for i in range(0, len(pred), batch):  # several updates: the result must be the full-set value
            coll.update(pred[i : i + batch], gold[i : i + batch])
        out[task] = {k: float(v) for k, v in coll.compute().items()}
    return out


def test_metrics_match_numpy_reference() -> None:
    data = _data()
    got, ref = _compute(data), _reference(data)
    for task in ref:
        assert set(got[task]) == set(ref[task])
        for name, value in ref[task].items():
            assert got[task][name] == pytest.approx(value, abs=1e-5), (task, name)


def test_prefix_names_keys() -> None:
    coll = build_task_metrics(get_task("qqp"), prefix="val/qqp/")
    coll.update(torch.tensor([0, 1]), torch.tensor([0, 1]))
    assert set(coll.compute()) == {"val/qqp/accuracy", "val/qqp/f1"}


def test_accuracy_on_regression_is_a_user_error() -> None:
    with pytest.raises(PalUserError, match="regression"):
        build_task_metrics(get_task("sts").replace(metrics=("accuracy",)))


def test_multiclass_matthews_by_hand() -> None:
    """MNLI's three classes: Gorodkin's R_K from the confusion counts, ``(c s - sum_k p_k t_k) /
    sqrt((s^2 - sum_k p_k^2)(s^2 - sum_k t_k^2))`` (c correct, s examples, p_k/t_k predicted/true counts)."""
    preds = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0])
    target = torch.tensor([0, 1, 2, 1, 1, 0, 2, 0])
    c, s, p, t = 5, 8, (4, 2, 2), (3, 3, 2)
    expected = (c * s - sum(a * b for a, b in zip(p, t, strict=True))) / np.sqrt(
        (s**2 - sum(a * a for a in p)) * (s**2 - sum(b * b for b in t))
    )
    assert expected == pytest.approx(18 / np.sqrt(40 * 42))
    metric = build_metric("matthews", get_task("glue_mnli"))
    metric.update(preds[:5], target[:5])  # two updates: the full-set value
    metric.update(preds[5:], target[5:])
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-6)


def test_overall_score_without_tasks_and_of_a_spearman_task() -> None:
    assert overall_score({}, SPECS) is None
    custom = TaskSpec(
        name="mine", kind="pair_regression", num_labels=1, metrics=("spearman",), text_columns=("a", "b")
    )
    assert overall_score({"mine": {"spearman": -0.2}}, [custom]) == pytest.approx(0.4)


# --- the overall score for many random scores, and metrics the tests above miss

FAST = settings(max_examples=60, deadline=None)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
corr = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)


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

"""Per-task metrics against numpy references, the overall score, and DDP state sync."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.metrics import build_metric, build_task_metrics, cs224n_overall, overall_score
from pal_lightning.tasks.specs import TaskSpec, get_task
from pal_lightning.testing import run_spawned


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


def test_cs224n_overall_formula() -> None:
    assert cs224n_overall(0.5, 0.8, 0.6) == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    assert cs224n_overall(1.0, 1.0, 1.0) == pytest.approx(1.0)
    assert cs224n_overall(0.0, 0.0, -1.0) == pytest.approx(0.0)


def test_overall_score_cases() -> None:
    specs = [get_task(n) for n in ("sst", "qqp", "sts", "cfimdb")]
    scores = {
        "sst": {"accuracy": 0.5},
        "qqp": {"accuracy": 0.8, "f1": 0.7},
        "sts": {"pearson": 0.6, "spearman": 0.5},
        "cfimdb": {"accuracy": 0.1},
    }
    # all three CS224N tasks present: (SST acc + QQP acc + (STS r + 1) / 2) / 3 by hand, extra tasks
    # ignored (a raw STS Pearson would give (0.5 + 0.8 + 0.6) / 3 = 0.6333)
    assert overall_score(scores, specs) == pytest.approx((0.5 + 0.8 + 0.8) / 3, abs=1e-12)
    assert overall_score(scores, specs) == pytest.approx(0.7, abs=1e-12)
    # otherwise: mean of main metrics on 0..1, pearson -> (r + 1) / 2
    partial = {"sts": scores["sts"], "cfimdb": scores["cfimdb"]}
    assert overall_score(partial, specs) == pytest.approx(((0.6 + 1) / 2 + 0.1) / 2)
    assert overall_score({}, specs) is None
    custom = TaskSpec(
        name="mine", kind="pair_regression", num_labels=1, metrics=("spearman",), text_columns=("a", "b")
    )
    assert overall_score({"mine": {"spearman": -0.2}}, [custom]) == pytest.approx(0.4)


# ---------------------------------------------------------------- DDP sync


def _worker(rank: int, world: int, port: int, queue: mp.Queue) -> None:  # type: ignore[type-arg]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        full = _data()
        # each rank sees a different, uneven shard; compute() must merge states of both ranks
        cut = 130
        shard = {t: (p[:cut], y[:cut]) if rank == 0 else (p[cut:], y[cut:]) for t, (p, y) in full.items()}
        result = _compute(shard, batch=16)
        queue.put((rank, result))
    finally:
        dist.destroy_process_group()


@pytest.mark.ddp
def test_metrics_sync_across_two_gloo_processes() -> None:
    results = dict(run_spawned(_worker, 2, timeout=60))
    ref = _reference(_data())
    for rank in (0, 1):
        for task in ref:
            for name, value in ref[task].items():
                assert results[rank][task][name] == pytest.approx(value, abs=1e-5), (rank, task, name)

"""Real 2-process gloo DDP: same task per step on both ranks, disjoint shares, exact eval, gathered predictions,
and the task metrics synced across the ranks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.ddp

SCRIPT = Path(__file__).with_name("ddp_script.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory, forked_cli: Any) -> Path:
    """One launch of two gloo ranks: the per-task fit, validation and prediction, then the mixed fit."""
    from pal_lightning.testing import write_cs224n_quirks

    out = tmp_path_factory.mktemp("ddp")
    write_cs224n_quirks(out / "data")  # before the ranks start, so both see complete files
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PL_DISABLE_FORK": "1"}
    env.pop("LOCAL_RANK", None)
    # python SCRIPT OUT, forked from the session's driver (forked_cli, tests/conftest.py)
    proc = forked_cli.run_script(out, SCRIPT, [str(out)], env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_two_process_ddp(ranks: Path) -> None:
    r0, r1 = (json.loads((ranks / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == r1["world"] == r0["sampler_world"] == 2
    assert r0["use_distributed_sampler"] is False  # switched off by the data module
    # training: equal lengths, same task each step, disjoint examples
    assert len(r0["train"]) == len(r1["train"]) > 0
    for (e0, t0, ids0), (e1, t1, ids1) in zip(r0["train"], r1["train"], strict=True):
        assert (e0, t0) == (e1, t1)
        assert not set(ids0) & set(ids1)
    # each task's examples cycle without replacement: its first pass holds no repeat across ranks
    for task, n in (("sst", 40), ("qqp", 61), ("sts", 30)):
        stream = [
            i
            for step in zip(r0["train"], r1["train"], strict=True)
            if step[0][1] == task
            for r in step
            for i in r[2]
        ]
        first_pass = stream[: n - n % 6]
        assert len(first_pass) == len(set(first_pass)) > 0
    # validation: every dev example exactly once across ranks (per epoch: 2 epochs ran)
    val = [(t, i) for r in (r0, r1) for t, ids in r["val"] for i in ids]
    assert len(val) == 2 * (12 + 14 + 10) and len(set(val)) == 12 + 14 + 10
    # predictions: gathered by rank 0, each id exactly once
    preds = ranks / "preds"
    lines = (preds / "para-test-output.csv").read_text().splitlines()
    assert lines[0] == "id \t Predicted_Is_Paraphrase "
    ids = [line.split(" , ")[0] for line in lines[1:]]
    assert ids == [f"qqptest{i:03d}" for i in range(7)]
    assert len(list(preds.glob("*-output.csv"))) == 6


def test_two_process_ddp_mixed_shares(ranks: Path) -> None:
    """Mixed-task batches under DDP: each step's rows split between the ranks, no example on both."""
    r0, r1 = (json.loads((ranks / "mixed" / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert len(r0["train"]) == len(r1["train"]) > 0
    for (e0, tasks0, ids0), (e1, tasks1, ids1) in zip(r0["train"], r1["train"], strict=True):
        assert e0 == e1 and len(ids0) == len(tasks0) == len(ids1) == len(tasks1) == 3
        assert not set(ids0) & set(ids1)  # ids carry their task's prefix: disjoint across tasks too
    seen = {t for r in (r0, r1) for _, tasks, _ in r["train"] for t in tasks}
    assert seen == {"sst", "qqp", "sts"}


def test_metrics_sync_across_two_gloo_processes(ranks: Path) -> None:
    """Both ranks' ``compute()`` of their uneven shares equals the one-process value of all rows (which
    tests/tasks/test_metrics.py checks against numpy)."""
    import torch

    from pal_lightning.tasks.metrics import build_task_metrics
    from pal_lightning.tasks.specs import get_task

    records = [json.loads((ranks / f"metrics{rank}.json").read_text()) for rank in (0, 1)]
    assert records[0]["rows"] == records[1]["rows"]
    expected = {}
    for task, (pred, gold) in records[0]["rows"].items():
        metrics = build_task_metrics(get_task(task))
        metrics.update(torch.tensor(pred), torch.tensor(gold))
        expected[task] = {k: float(v) for k, v in metrics.compute().items()}
    assert set(expected) == {"sst", "qqp", "sts"} and set(expected["sts"]) == {"pearson", "spearman"}
    for rank, record in enumerate(records):
        got = record["scores"]
        assert got.keys() == expected.keys()
        for task, scores in expected.items():
            assert got[task] == pytest.approx(scores, abs=1e-5), (rank, task)

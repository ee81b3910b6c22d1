"""metrics.csv shows the method (issue 18, item 8): the task each step trained and only its loss,
steps per task, sampling probabilities per epoch, throughput, gradient norm, one rate per group."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from pal_lightning.callbacks.training_log import distinct_learning_rates, gradient_norm
from pal_lightning.cli.main import main
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config


def test_distinct_learning_rates_and_gradient_norm() -> None:
    groups = [
        {"name": "pretrained", "lr": 1e-4},
        {"name": "pretrained_no_decay", "lr": 1e-4},
        {"name": "new", "lr": 1e-3},
        {"name": "new_no_decay", "lr": 5e-4},  # a different rate is kept
    ]
    assert distinct_learning_rates(groups) == {"pretrained": 1e-4, "new": 1e-3, "new_no_decay": 5e-4}
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    assert gradient_norm([a, b]) is None
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert gradient_norm([a, b]) == pytest.approx(5.0)  # sqrt(3^2 + 4^2)


def test_metrics_csv_rows(tmp_path: Path) -> None:
    data = write_cs224n_data(tmp_path / "data")
    config = write_tiny_fit_config(tmp_path, data)
    steps, head_lr, warmup = 6, 5e-3, 2
    args = ["fit", "--config", str(config), "--trainer.max_steps", str(steps)]
    assert main([*args, "--model.head_lr", str(head_lr), "--model.warmup_steps", str(warmup)]) == 0
    with open(tmp_path / "runs" / "version_0" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    header = set(rows[0])
    assert not any(k.startswith("lr-AdamW") for k in header)  # one rate per group, not four
    tasks = ["sst", "qqp", "sts"]

    ours = [r for r in rows if r["train/task_index"]]
    assert [int(r["step"]) for r in ours] == list(range(steps))
    lightning_loss = {int(r["step"]): float(r["train/loss"]) for r in rows if r["train/loss"]}
    counts = dict.fromkeys(tasks, 0)
    for r in ours:
        step, task = int(r["step"]), tasks[int(float(r["train/task_index"]))]
        counts[task] += 1
        losses = {t for t in tasks if r[f"train/{t}/loss"]}
        assert losses == {task}, r  # the trained task's loss alone
        assert float(r[f"train/{task}/loss"]) == pytest.approx(lightning_loss[step], rel=1e-6)
        assert {t: int(float(r[f"train/steps/{t}"])) for t in tasks} == counts
        assert float(r["train/examples_per_s"]) > 0 and float(r["train/tokens_per_s"]) > 0
        assert float(r["train/grad_norm"]) > 0
        if task == "sts":  # regression: no accuracy
            assert not any(r[f"train/{t}/accuracy"] for t in ("sst", "qqp") if f"train/{t}/accuracy" in r)
        else:  # the accuracy of one batch of 4: a multiple of 1/4, and only for the trained task
            accuracy = float(r[f"train/{task}/accuracy"])
            assert 0 <= accuracy <= 1 and (4 * accuracy) == pytest.approx(round(4 * accuracy))
            assert not any(r.get(f"train/{t}/accuracy") for t in ("sst", "qqp") if t != task)
        # the schedule by hand: (s + 1) / (w + 1) while warming up, then (total - s) / (total - w)
        factor = (step + 1) / (warmup + 1) if step < warmup else (steps - step) / (steps - warmup)
        assert float(r["lr/heads"]) == float(r["lr/adapters"]) == pytest.approx(head_lr * factor, rel=1e-6)
        assert "lr/heads_no_decay" not in r or not r["lr/heads_no_decay"]

    sampling = [r for r in rows if r["sampling/p_sst"]]
    assert len(sampling) == 3  # one row per epoch (2 steps per epoch)
    for r in sampling:
        # the fixture's train files are equally large: every schedule p_i ∝ N_i^alpha gives 1/3
        assert [float(r[f"sampling/p_{t}"]) for t in tasks] == pytest.approx([1 / 3] * 3)

    # TensorBoard gets the same scalars and no hp_metric stuck at its placeholder -1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "runs" / "version_0" / "tensorboard"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert "hp_metric" not in scalars and {"train/grad_norm", "sampling/p_sst", "lr/heads"} <= scalars

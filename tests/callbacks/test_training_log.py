"""metrics.csv shows the method (issue 18, item 8): the task each step trained and only its loss,
steps per task, sampling probabilities per epoch, throughput, gradient norm, one rate per group; and
TrainingLog reads nothing from the device on a training step that writes no row; a validation is logged
at the steps done (the step its checkpoint is named after) and the steps per task continue across a resume."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pal_lightning.callbacks.training_log import TrainingLog, distinct_learning_rates, gradient_norm
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


class _DeviceReads(TorchDispatchMode):
    """Counts the tensor reads that make the host wait for the device (``.item()``, ``int(t)``, ``bool(t)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.reads += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


def test_token_counts_stay_on_the_device_until_a_row_is_written() -> None:
    log = TrainingLog()
    batches: list[dict[str, Any]] = [
        {"ids": ["a", "b"], "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])},
        {
            "ids": ["c"],
            "attention_mask_a": torch.tensor([[1, 1, 1]]),
            "attention_mask_b": torch.tensor([[1, 0]]),
        },
    ]
    with _DeviceReads() as reads:
        for i, batch in enumerate(batches):
            log.on_train_batch_start(None, None, batch, i)  # type: ignore[arg-type]
    assert reads.reads == 0
    assert log._examples == 3
    assert float(log._tokens) == 3 + 4  # non-padding positions, counted by hand


TASKS = ["sst", "qqp", "sts"]


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fit of 6 steps (2 per epoch, a validation per epoch, last.ckpt after the 6th), resumed to 8."""
    root = tmp_path_factory.mktemp("training_log")
    config = write_tiny_fit_config(root, write_cs224n_data(root / "data"))
    args = [
        "fit",
        "--config",
        str(config),
        "--model.optim.head_lr",
        "5e-3",
        "--model.optim.warmup_steps",
        "2",
    ]
    assert main([*args, "--trainer.max_steps", "6"]) == 0
    assert main([*args, "--ckpt_path", "last", "--trainer.max_steps", "8"]) == 0
    return root / "runs"


def test_metrics_csv_rows(resumed: Path) -> None:
    """The first run of :func:`resumed`: 6 steps, head_lr 5e-3, 2 warmup steps, 2 steps per epoch."""
    steps, head_lr, warmup = 6, 5e-3, 2
    rows = _rows(resumed / "version_0")
    header = set(rows[0])
    assert not any(k.startswith("lr-AdamW") for k in header)  # one rate per group, not four

    ours = [r for r in rows if r["train/task_index"]]
    assert [int(r["step"]) for r in ours] == list(range(steps))
    lightning_loss = {int(r["step"]): float(r["train/loss"]) for r in rows if r["train/loss"]}
    counts = dict.fromkeys(TASKS, 0)
    for r in ours:
        step, task = int(r["step"]), TASKS[int(float(r["train/task_index"]))]
        counts[task] += 1
        losses = {t for t in TASKS if r[f"train/{t}/loss"]}
        assert losses == {task}, r  # the trained task's loss alone
        assert float(r[f"train/{task}/loss"]) == pytest.approx(lightning_loss[step], rel=1e-6)
        assert {t: int(float(r[f"train/steps/{t}"])) for t in TASKS} == counts
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
        assert [float(r[f"sampling/p_{t}"]) for t in TASKS] == pytest.approx([1 / 3] * 3)

    # TensorBoard gets the same scalars and no hp_metric stuck at its placeholder -1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(resumed / "version_0" / "tensorboard"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert "hp_metric" not in scalars and {"train/grad_norm", "sampling/p_sst", "lr/heads"} <= scalars


def test_validation_is_logged_at_the_steps_done(resumed: Path) -> None:
    run = resumed / "version_0"
    rows = _rows(run)
    validations = {int(r["step"]): r for r in rows if r.get("val/overall")}
    assert sorted(validations) == [2, 4, 6]  # after the 2nd, 4th and 6th optimizer step
    assert [int(float(validations[s]["epoch"])) for s in (2, 4, 6)] == [0, 1, 2]
    # training rows: the N-th step's row says N - 1 (its loss is of the weights before the update)
    assert sorted(int(r["step"]) for r in rows if r["train/task_index"]) == [0, 1, 2, 3, 4, 5]
    (best,) = (run / "checkpoints").glob("best-step*.ckpt")
    best_step = max(validations, key=lambda s: float(validations[s]["val/overall"]))
    assert best.name.startswith(f"best-step{best_step}-")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/overall")] == [2, 4, 6]


def test_steps_per_task_continue_after_a_resume(resumed: Path) -> None:
    trained = []  # (step, task) of every training row of both runs, in order
    for version in ("version_0", "version_1"):
        rows = [r for r in _rows(resumed / version) if r["train/task_index"]]
        trained += [(int(r["step"]), TASKS[int(float(r["train/task_index"]))], r) for r in rows]
    assert [s for s, _, _ in trained] == list(range(8))
    # by hand: each row's count of a task is how often it was trained up to that step, both runs together
    counts = dict.fromkeys(TASKS, 0)
    for _, task, row in trained:
        counts[task] += 1
        assert {t: int(float(row[f"train/steps/{t}"])) for t in TASKS} == counts, row

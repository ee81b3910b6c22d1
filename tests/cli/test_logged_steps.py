"""The steps metrics.csv shows (issue 18, item 8): a validation is logged at the steps done, the step its
checkpoint is named after (not one less), and the steps per task continue across a resume."""

from __future__ import annotations

import csv
from pathlib import Path

from pal_lightning.cli.main import main
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

TASKS = ["sst", "qqp", "sts"]


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_validation_is_logged_at_the_steps_done(tmp_path: Path) -> None:
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    assert main(["fit", "--config", str(config)]) == 0  # 4 steps, 2 per epoch, a validation per epoch
    run = tmp_path / "runs" / "version_0"
    rows = _rows(run)
    validations = {int(r["step"]): r for r in rows if r.get("val/overall")}
    assert sorted(validations) == [2, 4]  # after the 2nd and the 4th optimizer step
    assert [int(float(validations[s]["epoch"])) for s in (2, 4)] == [0, 1]
    # training rows: the N-th step's row says N - 1 (its loss is of the weights before the update)
    assert sorted(int(r["step"]) for r in rows if r["train/task_index"]) == [0, 1, 2, 3]
    (best,) = (run / "checkpoints").glob("best-step*.ckpt")
    best_step = max(validations, key=lambda s: float(validations[s]["val/overall"]))
    assert best.name.startswith(f"best-step{best_step}-")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("val/overall")] == [2, 4]


def test_steps_per_task_continue_after_a_resume(tmp_path: Path) -> None:
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    assert main(["fit", "--config", str(config)]) == 0  # 4 steps; last.ckpt after the 4th
    resume = ["fit", "--config", str(config), "--ckpt_path", "last", "--trainer.max_steps", "8"]
    assert main(resume) == 0
    trained = []  # (step, task) of every training row of both runs, in order
    for version in ("version_0", "version_1"):
        rows = [r for r in _rows(tmp_path / "runs" / version) if r["train/task_index"]]
        trained += [(int(r["step"]), TASKS[int(float(r["train/task_index"]))], r) for r in rows]
    assert [s for s, _, _ in trained] == list(range(8))
    # by hand: each row's count of a task is how often it was trained up to that step, both runs together
    counts = dict.fromkeys(TASKS, 0)
    for _, task, row in trained:
        counts[task] += 1
        assert {t: int(float(row[f"train/steps/{t}"])) for t in TASKS} == counts, row

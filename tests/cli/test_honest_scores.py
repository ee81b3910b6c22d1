"""An overall score covers every scored task or is reported as partial (issue 18, item 1):
in the logged metric names, the best-checkpoint choice, the printed table and ``scores.json``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pal_lightning.callbacks.best_checkpoint import BestCheckpoint
from pal_lightning.cli.main import main
from pal_lightning.tasks.metrics import overall_over, scored_task_names
from pal_lightning.tasks.specs import get_task
from pal_lightning.testing import quiet_trainer

SPECS = [get_task("sst"), get_task("qqp"), get_task("sts")]


def test_overall_over_is_complete_only_over_every_scored_task() -> None:
    both = {"sst": {"accuracy": 0.5}, "qqp": {"accuracy": 0.7, "f1": 0.1}}
    partial = overall_over(both, SPECS, ["sst", "qqp", "sts"])
    assert not partial.complete
    assert partial.covered == ("sst", "qqp") and partial.missing == ("sts",)
    assert partial.value == pytest.approx((0.5 + 0.7) / 2)
    assert partial.key("val") == "val/overall_partial"

    full = overall_over({**both, "sts": {"pearson": 0.2}}, SPECS, ["sst", "qqp", "sts"])
    assert full.complete and full.key("val") == "val/overall"
    assert full.value == pytest.approx((0.5 + 0.7 + (0.2 + 1) / 2) / 3)

    # an auxiliary task is neither required nor counted: the mean of the other two main metrics
    scored = scored_task_names(SPECS, auxiliary=["qqp"])
    assert scored == ["sst", "sts"]
    aux = overall_over({**both, "sts": {"pearson": 0.2}}, SPECS, scored)
    assert aux.complete and aux.value == pytest.approx((0.5 + (0.2 + 1) / 2) / 2)
    assert not overall_over({"qqp": {"accuracy": 0.7}}, SPECS, scored).complete


class _Scripted(pl.LightningModule):
    """Logs one scripted ``(key, value)`` per validation, as MultiTaskModule logs a full or partial overall."""

    def __init__(self, plan: list[tuple[str, float]]) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)
        self.plan = plan
        self.done = 0
        self.last_scores: dict[str, dict[str, float]] = {}

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        key, value = self.plan[self.done]
        self.done += 1
        self.log(key, value)
        self.last_scores = {"val": {key: value}}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=1)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.ones(1, 1)), batch_size=1)


def _fit(tmp_path: Path, checkpoint: ModelCheckpoint, plan: list[tuple[str, float]]) -> None:
    trainer = quiet_trainer(
        max_steps=len(plan),
        val_check_interval=1,
        callbacks=[checkpoint],
        default_root_dir=tmp_path,
        enable_checkpointing=True,
    )
    trainer.fit(_Scripted(plan))


def test_best_checkpoint_never_ranks_a_partial_validation(tmp_path: Path) -> None:
    plan = [
        ("val/overall_partial", 0.9),  # step 1: partial first (plain ModelCheckpoint stops the run here)
        ("val/overall", 0.5),  # step 2
        ("val/overall_partial", 0.95),  # step 3: callback_metrics still holds the stale 0.5
        ("val/overall", 0.4),  # step 4
    ]
    kwargs = {"monitor": "val/overall", "mode": "max", "save_top_k": 2, "filename": "{step}"}
    kwargs["save_on_train_epoch_end"] = False  # rank at every validation (val_check_interval=1 == 1.0)
    with pytest.raises(MisconfigurationException, match="could not find the monitored key"):
        _fit(tmp_path / "plain", ModelCheckpoint(dirpath=tmp_path / "plain", **kwargs), plan)

    best = BestCheckpoint(dirpath=tmp_path / "best", **kwargs)
    _fit(tmp_path / "best", best, plan)
    assert sorted(p.name for p in (tmp_path / "best").glob("step*.ckpt")) == ["step=2.ckpt", "step=4.ckpt"]
    assert Path(best.best_model_path).name == "step=2.ckpt"
    # the stable alias names the best one (a hard link: same file)
    assert (tmp_path / "best" / "best.ckpt").samefile(tmp_path / "best" / "step=2.ckpt")
    assert float(best.best_model_score) == pytest.approx(0.5)


def test_partial_validation_is_reported_as_partial(
    tiny_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the fixture's dev sets are one batch per task, validated in task order: 2 batches = sst, qqp
    assert main(["fit", "--config", str(tiny_yaml), "--trainer.limit_val_batches", "2"]) == 0
    out = capsys.readouterr().out
    assert "CS224N overall" not in out
    assert "No overall score: validation did not reach sts" in out
    assert "--trainer.limit_val_batches 2" in out and "Partial mean over sst, qqp" in out
    assert "overall (partial: qqp, sst)" in out

    run = tmp_path / "runs" / "version_0"
    payload = json.loads((run / "scores.json").read_text())
    assert payload["complete"] is False and payload["overall"] is None
    assert payload["tasks_covered"] == ["sst", "qqp"] and payload["tasks_missing"] == ["sts"]
    scores = payload["best"]["scores"]
    assert "val/overall" not in scores
    expected = (scores["val/sst/accuracy"] + scores["val/qqp/accuracy"]) / 2
    assert payload["overall_partial"] == pytest.approx(expected)

    with open(run / "metrics.csv", newline="") as f:
        header = next(csv.reader(f))
    assert "val/overall_partial" in header and "val/overall" not in header
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("*.ckpt"))
    assert checkpoints == ["last.ckpt"]  # no validation was complete: nothing is "best"

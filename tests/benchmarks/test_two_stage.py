"""``benchmarks/two_stage.py`` end to end on the fixture data with a tiny model: stage 1 (joint) and
stage 2 (specialise: frozen encoder, from stage 1's best checkpoint) through ``pal-lightning fit``
(the benchmark's command lines, each a process forked from the session's CLI driver:
``forked_benchmark_runs``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedSubprocess, load_benchmark


def _state(path: str | Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def test_two_stage_command_end_to_end(tmp_path: Path, forked_benchmark_runs: ForkedSubprocess) -> None:
    data = write_cs224n_data(tmp_path / "data")
    base = write_tiny_fit_config(tmp_path, data)
    two_stage = load_benchmark("two_stage")
    out = tmp_path / "two_stage"
    code = two_stage.main(
        [
            "--base", str(base), "--data-dir", str(data), "--out", str(out), "--seeds", "3",
            "--stage2-args", "--trainer.max_steps=2 --trainer.check_val_every_n_epoch=1",
        ]
    )  # fmt: skip
    assert code == 0
    assert [cmd[3] for cmd in forked_benchmark_runs.commands] == ["fit", "fit"]  # stage 1, then stage 2
    result = json.loads((out / "seed3" / "two_stage.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    overall = summary["metrics"]["val/overall"]
    assert overall["joint"]["mean"] == result["stage1"]["overall"]
    assert overall["specialise_minus_joint"]["n"] == 1 and overall["specialise_minus_joint"]["low"] is None
    stage1, stage2 = result["stage1"], result["stage2"]
    assert stage2["status"] == "ok"
    for stage in (stage1, stage2):
        assert isinstance(stage["overall"], float) and 0.0 <= stage["overall"] <= 1.0
    assert result["delta_overall"] == pytest.approx(stage2["overall"] - stage1["overall"])

    # stage 2 ran the specialise overlay from stage 1's best checkpoint
    config = yaml.safe_load((Path(stage2["run_dir"]) / "config.yaml").read_text())
    init_args = config["model"]["init_args"]
    assert init_args["optim"]["freeze_encoder"] is True
    assert init_args["init_from"] == stage1["checkpoint"]
    assert Path(stage1["checkpoint"]).parent == Path(stage1["run_dir"]) / "checkpoints"

    # every encoder weight of stage 2's checkpoint is stage 1's, bit for bit; its adapters moved on
    scores = json.loads((Path(stage2["run_dir"]) / "scores.json").read_text())
    before, after = _state(stage1["checkpoint"]), _state(scores["best_model_path"])
    assert set(before) == set(after)
    encoder = [k for k in before if k.startswith("encoder.backbone.")]
    adapters = [k for k in before if k.startswith("encoder.adapters.")]
    assert encoder and adapters
    assert all(torch.equal(before[k], after[k]) for k in encoder)
    assert any(not torch.equal(before[k], after[k]) for k in adapters)


def test_summary_of_seeds_by_hand() -> None:
    """Paired difference specialise - joint over three seeds, against the t-interval computed here."""
    two_stage = load_benchmark("two_stage")
    joint, special = [0.70, 0.72, 0.74], [0.71, 0.74, 0.75]
    results = {
        seed: {
            "stage1": {"overall": j, "scores": {"val/sst/accuracy": j - 0.2, "val/sst/loss": 1.0}},
            "stage2": {"overall": s, "scores": {"val/sst/accuracy": s - 0.2}},
        }
        for seed, j, s in zip((1, 2, 3), joint, special, strict=True)
    }
    summary = two_stage.summarise(results)
    assert set(summary["metrics"]) == {"val/overall", "val/sst/accuracy"}  # no losses
    row = summary["metrics"]["val/overall"]
    assert row["joint"]["mean"] == pytest.approx(0.72) and row["joint"]["sd"] == pytest.approx(0.02)
    diffs = [0.01, 0.02, 0.01]
    mean = sum(diffs) / 3
    sd = (sum((d - mean) ** 2 for d in diffs) / 2) ** 0.5
    half = 4.303 * sd / 3**0.5  # t_{0.975, 2}
    diff = row["specialise_minus_joint"]
    assert diff["mean"] == pytest.approx(mean) and diff["sd"] == pytest.approx(sd)
    assert diff["low"] == pytest.approx(mean - half, abs=1e-4) and diff["high"] == pytest.approx(
        mean + half, abs=1e-4
    )
    assert diff["verdict"] == "not separable"  # the interval holds 0
    results[4] = {"stage1": {"overall": 0.7}, "stage2": {}}  # a failed stage 2 pairs with nothing
    assert two_stage.summarise(results)["metrics"]["val/overall"]["specialise_minus_joint"]["n"] == 3

"""benchmarks/reproduce.py: the results table logic, and a two-run grid end to end on a tiny model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pal_lightning.testing import TINY_BERT

from .conftest import ForkedSubprocess, load_benchmark

reproduce = load_benchmark("reproduce")


def test_overall_and_single_row() -> None:
    assert reproduce.cs224n_overall(0.5, 0.8, 0.6) == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    assert reproduce.cs224n_overall(0.5, None, 0.6) is None
    rows = {}
    for name, task in reproduce.SINGLES.items():
        row = dict.fromkeys(reproduce.COLUMNS)
        row.update(
            method=name,
            config=f"configs/{name}.yaml",
            encoder="e",
            wall_s=10.0,
            steps=30,
            seed=42,
            status="ok",
        )
        row.update(params_per_task=1000 + len(task), params_total=1000 + len(task), stored_params_ratio=1.0)
        row[{"sst": "sst_acc", "qqp": "qqp_acc", "sts": "sts_pearson"}[task]] = {
            "sst": 0.5,
            "qqp": 0.8,
            "sts": 0.6,
        }[task]
        rows[name] = row
    single = reproduce.combine_singles(rows)
    assert single["overall"] == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    assert (
        single["params_total"] == 3009 and single["stored_params_ratio"] == 3.0 and single["wall_s"] == 30.0
    )
    del rows["single_qqp"]
    assert reproduce.combine_singles(rows) is None


def test_quora_dev_subset_links_everything_else(tmp_path: Path, data_dir: Path) -> None:
    target = reproduce.prepare_data_dir(data_dir, tmp_path / "subset", qqp_dev_limit=3)
    assert len((target / "quora-dev.csv").read_text().splitlines()) == 1 + 3
    assert (target / "sts-dev.csv").is_symlink()
    assert (target / "sts-dev.csv").read_text() == (data_dir / "sts-dev.csv").read_text()
    assert reproduce.prepare_data_dir(data_dir, tmp_path / "all", qqp_dev_limit=0) == data_dir


def test_grid_end_to_end_on_a_tiny_model(
    tmp_path: Path, data_dir: Path, forked_benchmark_runs: ForkedSubprocess
) -> None:
    """Two runs of the grid, each through ``pal-lightning fit`` (forked from the session's CLI driver)."""
    out = tmp_path / "bench"
    tiny = json.dumps(TINY_BERT)
    argv = [
        "--steps", "2", "--epochs", "1", "--only", "shared,pals_annealed", "--out", str(out),
        "--data-dir", str(data_dir), "--qqp-dev-limit", "5", "--max-length", "32",
        "--", f"--model.init_args.bert_config={tiny}", "--model.init_args.adapter.num_heads=2",
        "--model.init_args.adapter.size=8", "--data.init_args.batch_size=4", "--data.init_args.cache_dir=false",
    ]  # fmt: skip
    assert reproduce.main(argv) == 0
    assert len(forked_benchmark_runs.commands) == 2  # one fit per method
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == ["shared", "pals_annealed"]
    assert tuple(rows[0]) == reproduce.COLUMNS
    for r in rows:
        assert r["status"] == "ok" and r["steps"] == "2"
        # the row holds its own run's scores.json (the last validation), overall by the formula here
        (scores_file,) = (out / "runs" / r["method"]).glob("version_*/scores.json")
        payload = json.loads(scores_file.read_text())
        last = payload["last"]["scores"]
        sst, qqp, sts = last["val/sst/accuracy"], last["val/qqp/accuracy"], last["val/sts/pearson"]
        assert (float(r["sst_acc"]), float(r["qqp_acc"]), float(r["sts_pearson"])) == pytest.approx(
            (sst, qqp, sts)
        )
        assert float(r["overall"]) == pytest.approx((sst + qqp + (sts + 1) / 2) / 3)
        stored = payload["parameters"]["stored_per_task"]
        assert float(r["params_per_task"]) == round(sum(stored.values()) / len(stored))
        assert float(r["params_total"]) == payload["parameters"]["total"]
    # PALs add task-specific parameters, the shared baseline only heads
    assert float(rows[1]["params_per_task"]) > float(rows[0]["params_per_task"]) > 0
    assert float(rows[1]["stored_params_ratio"]) > float(rows[0]["stored_params_ratio"]) >= 1.0
    md = (out / "results.md").read_text()
    assert "| pals_annealed |" in md and "course winner" in md and "pals_annealed vs shared overall" in md
    assert (out / "logs" / "shared.log").is_file()

"""benchmarks/reproduce.py: the results table logic, a two-run grid end to end on a tiny model, --seeds /
--method / --compare, and the statistics of benchmarks/paired_stats.py."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from pal_lightning.testing import TINY_BERT

from .conftest import ForkedSubprocess, load_benchmark

reproduce = load_benchmark("reproduce")
# imported by reproduce.py from benchmarks/ (a dataclass needs sys.modules)
stats = sys.modules["paired_stats"]


def test_overall_and_single_row() -> None:
    assert reproduce.cs224n_overall(0.5, 0.8, 0.6) == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    assert reproduce.cs224n_overall(0.5, None, 0.6) is None
    rows = {}
    scores = {"sst": ("sst_acc", 0.5), "qqp": ("qqp_acc", 0.8), "sts": ("sts_pearson", 0.6)}
    for name, task in reproduce.SINGLES.items():
        row = dict.fromkeys(reproduce.COLUMNS)
        row.update(method=name, config=f"configs/{name}.yaml", encoder="e", wall_s=10.0, steps=30, seed=42)
        row.update(params_per_task=1000 + len(task), params_total=1000 + len(task), stored_params_ratio=1.0)
        row.update([scores[task], ("status", "ok")])
        rows[name] = row
    single = reproduce.combine_singles(rows)
    assert single["overall"] == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    assert (single["params_total"], single["stored_params_ratio"], single["wall_s"]) == (3009, 3.0, 30.0)
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
        "--", f"--model.init_args.encoder_config={tiny}", "--model.init_args.adapter.num_heads=2",
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


def test_paired_difference_by_hand() -> None:
    # differences 0.10, 0.15, 0.05: mean 0.10, sd sqrt((0 + 0.05^2 + 0.05^2) / 2) = 0.05,
    # half width t(0.975, 2) * 0.05 / sqrt(3) = 4.303 * 0.028868 = 0.12422 -> interval holds 0
    d = stats.paired_difference([0.50, 0.60, 0.70], [0.40, 0.45, 0.65])
    assert d.n == 3 and d.mean == pytest.approx(0.10) and d.sd == pytest.approx(0.05)
    assert d.low == pytest.approx(0.10 - 0.12422, abs=2e-4) and d.high == pytest.approx(
        0.10 + 0.12422, abs=2e-4
    )
    assert d.verdict == "not separable"
    # differences 0.10, 0.11, 0.09: sd 0.01, half width 4.303 * 0.01 / sqrt(3) = 0.02484
    tight = stats.paired_difference([0.60, 0.61, 0.59], [0.50, 0.50, 0.50])
    assert tight.low == pytest.approx(0.10 - 0.02484, abs=2e-4) and tight.verdict == "A better"
    assert stats.paired_difference([0.50, 0.49, 0.51], [0.60, 0.60, 0.60]).verdict == "B better"
    one = stats.paired_difference([0.7], [0.6])
    assert one.n == 1 and one.low is None and one.verdict == "not separable"
    with pytest.raises(ValueError):
        stats.paired_difference([0.1, 0.2], [0.1])


def test_t_quantiles_table_and_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    scipy_values = {df: stats.t_quantile_975(df) for df in (1, 2, 4, 9, 30)}
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # the fallback table
    assert stats.t_quantile_975(2) == 4.303 and stats.t_quantile_975(27) == 2.060  # df 25's row
    for df, value in scipy_values.items():
        assert stats.t_quantile_975(df) == pytest.approx(value, abs=1e-3)
    assert stats.mean_std([1.0, 2.0, 4.0]) == pytest.approx((7 / 3, math.sqrt((16 / 9 + 1 / 9 + 25 / 9) / 2)))


def _args(data_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["--steps", "2", "--epochs", "1", "--out", str(out), "--data-dir", str(data_dir), *extra]


def test_method_definitions_and_bad_arguments(data_dir: Path, tmp_path: Path) -> None:
    name, configs, options = reproduce.parse_method(
        "pals_simcse=pals_annealed+simcse --model.simcse.weight 0.5"
    )
    assert name == "pals_simcse" and options == ["--model.simcse.weight", "0.5"]
    assert [p.name for p in configs] == ["pals_annealed.yaml", "simcse.yaml"]
    args = reproduce.parse_args(
        _args(
            data_dir,
            tmp_path,
            "--only",
            "shared",
            "--seeds",
            "3",
            "--method",
            "x=shared --model.optim.lr 1e-4",
        )
    )
    assert args.seeds == [42, 43, 44] and args.grid == ["shared", "x"]
    cmd = reproduce.run_command("x", args, data_dir, tmp_path / "r", 43)
    assert "--seed_everything=43" in cmd and cmd[-2:] == ["--model.optim.lr", "1e-4"]
    for bad in (
        ["--method", "nameless"],
        ["--method", "y=no_such_config"],
        ["--method", "shared=pals_annealed"],  # a shipped name
        ["--compare", "shared:pals_annealed"],  # pals_annealed is not in the grid
        ["--compare", "shared"],
        ["--seeds", "0"],
    ):
        with pytest.raises(SystemExit) as info:
            reproduce.parse_args(_args(data_dir, tmp_path, "--only", "shared", *bad))
        assert info.value.code == 2, bad


def test_seeds_and_compare_with_recorded_runs(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestration with a stand-in for pal-lightning fit: seed-major order, folders, tables, JSON."""
    # overall scores per (method, seed); b's are a's minus 0.02 +- 0.001, so "a better" is certain
    overall = {("a", 42): 0.70, ("a", 43): 0.72, ("a", 44): 0.69}
    overall.update({("b", s): v - 0.02 + 0.001 * (s - 43) for (_, s), v in list(overall.items())})
    calls: list[tuple[str, int]] = []

    def fake_run(cmd: list[str], root: Path, log: Path, env: Any, cwd: Path, timeout: float) -> Any:
        seed = int(next(a for a in cmd if a.startswith("--seed_everything=")).split("=")[1])
        method = root.parent.name
        calls.append((method, seed))
        run = root / "version_0"
        run.mkdir(parents=True)
        # every task scores the overall: (x + x + (2x - 1 + 1) / 2) / 3 = x
        sst = overall.get((method, seed), 0.6)
        scores = {"val/sst/accuracy": sst, "val/qqp/accuracy": sst, "val/sts/pearson": 2 * sst - 1}
        (run / "scores.json").write_text(json.dumps({"last": {"scores": scores}}))
        return "ok", 1.0, run

    monkeypatch.setattr(reproduce, "run_logged", fake_run)
    out = tmp_path / "bench"
    argv = _args(
        data_dir, out, "--only", "shared", "--seeds", "3", "--qqp-dev-limit", "0",
        "--method", "a=shared", "--method", "b=shared --model.optim.lr 1e-5", "--compare", "a:b",
    )  # fmt: skip
    assert reproduce.main(argv) == 0
    assert calls[:3] == [("shared", 42), ("a", 42), ("b", 42)]  # seed-major
    assert len(calls) == 9 and (out / "runs" / "a" / "seed44" / "version_0").is_dir()
    summary = json.loads((out / "summary.json").read_text())
    a_overall = summary["methods"]["a"]["overall"]
    assert a_overall["n"] == 3 and a_overall["mean"] == pytest.approx((0.70 + 0.72 + 0.69) / 3)
    assert a_overall["std"] == pytest.approx(stats.mean_std([0.70, 0.72, 0.69])[1])
    diff = summary["comparisons"][0]["scores"]["overall"]
    # differences 0.021, 0.020, 0.019: mean 0.020, sd 0.001, half width 4.303 * 0.001 / sqrt(3)
    assert diff["mean"] == pytest.approx(0.020) and diff["high"] - diff["mean"] == pytest.approx(
        4.303 * 0.001 / math.sqrt(3), rel=1e-3
    )
    assert diff["verdict"] == "a better"
    md = (out / "results.md").read_text()
    assert "| a | 3 |" in md and "| a vs b | overall | 3 | +0.0200 |" in md and "a better" in md
    assert "| shared (seed 44) |" in md


def test_defined_method_runs_through_the_cli(
    tmp_path: Path, data_dir: Path, forked_benchmark_runs: ForkedSubprocess
) -> None:
    """A --method with an overlay and an option reaches pal-lightning fit (SimCSE on a tiny model; the fit
    forked from the session's CLI driver)."""
    out = tmp_path / "bench"
    tiny = json.dumps(TINY_BERT)
    argv = _args(
        data_dir, out, "--only", "shared_simcse", "--qqp-dev-limit", "5", "--max-length", "32",
        "--method", "shared_simcse=shared+simcse --model.init_args.simcse.weight=0.5",
        "--", f"--model.init_args.encoder_config={tiny}", "--data.init_args.batch_size=4",
        "--data.init_args.cache_dir=false", "--trainer.log_every_n_steps=1",
    )  # fmt: skip
    assert reproduce.main(argv) == 0
    assert len(forked_benchmark_runs.commands) == 1
    run = next((out / "runs" / "shared_simcse").glob("version_*"))
    config = (run / "config.yaml").read_text()
    assert "weight: 0.5" in config and "temperature: 0.05" in config
    metrics = (run / "metrics.csv").read_text().splitlines()[0]
    assert "train/simcse_loss" in metrics

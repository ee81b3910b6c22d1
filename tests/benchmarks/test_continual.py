"""benchmarks/continual.py: the forgetting target, and naive vs GEM end to end on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pal_lightning.testing import TINY_BERT

from .conftest import ForkedSubprocess, load_benchmark

bench = load_benchmark("continual")


def _result(method: str, bwt: float | None) -> dict:
    return {"method": method, "metrics": None if bwt is None else {"backward_transfer": bwt}}


def test_forgetting_target_is_the_ratio_of_minus_bwt() -> None:
    met = bench.forgetting_target([_result("continual_naive", -0.04), _result("continual_gem", -0.01)])
    assert met["ratio"] == pytest.approx(0.25) and met["met"] is True
    missed = bench.forgetting_target([_result("continual_naive", -0.01), _result("continual_gem", -0.02)])
    assert missed["ratio"] == pytest.approx(2.0) and missed["met"] is False
    # GEM that gains (BWT > 0) against a naive run that forgets: a negative ratio, met
    gains = bench.forgetting_target([_result("continual_naive", -0.01), _result("continual_gem", 0.02)])
    assert gains["ratio"] < 0 and gains["met"] is True
    # naive did not forget: no ratio, and the summary says so instead of dividing by ~0
    none = bench.forgetting_target([_result("continual_naive", 0.01), _result("continual_gem", 0.0)])
    assert none["ratio"] is None and "did not forget" in none["note"]
    assert "not evaluable" in bench.summary_lines([], none)[-1]
    assert "no backward transfer" in bench.forgetting_target([_result("continual_naive", None)])["note"]


def test_naive_and_gem_end_to_end_on_a_tiny_model(
    tmp_path: Path, data_dir: Path, forked_benchmark_runs: ForkedSubprocess
) -> None:
    """Both methods through ``pal-lightning fit`` (each run forked from the session's CLI driver)."""
    out, tiny = tmp_path / "bench", json.dumps(TINY_BERT)
    argv = [
        "--steps-per-task", "2", "--limit-eval", "6", "--only", "continual_naive,continual_gem",
        "--out", str(out), "--data-dir", str(data_dir), "--max-length", "32", "--batch-size", "4",
        "--json", str(tmp_path / "c.json"), "--results-md", str(tmp_path / "R.md"),
        "--", f"--model.init_args.encoder_config={tiny}", "--model.init_args.adapter.num_heads=2",
        "--model.init_args.adapter.size=8", "--data.init_args.cache_dir=false",
    ]  # fmt: skip
    assert bench.main(argv) == 0
    assert len(forked_benchmark_runs.commands) == 2  # one fit per method
    payload = json.loads((tmp_path / "c.json").read_text())
    assert [r["method"] for r in payload["results"]] == ["continual_naive", "continual_gem"]
    for r in payload["results"]:
        assert r["status"] == "ok" and r["complete"]
        assert r["tasks"] == ["sst", "qqp", "sts"]
        assert r["phases"] == [["sst", 0, 2], ["qqp", 2, 4], ["sts", 4, 6]]
        assert len(r["baseline"]) == 3 and len(r["R"]) == 3 and all(len(row) == 3 for row in r["R"])
        assert set(r["metrics"]) == {
            "average_accuracy",
            "backward_transfer",
            "forward_transfer",
            "forgetting",
        }
        # the metrics of this run's R and baseline, by the GEM paper's formulas written out (T = 3)
        R, b = r["R"], r["baseline"]
        expected = {
            "average_accuracy": (R[2][0] + R[2][1] + R[2][2]) / 3,
            "backward_transfer": ((R[2][0] - R[0][0]) + (R[2][1] - R[1][1])) / 2,
            "forward_transfer": ((R[0][1] - b[1]) + (R[1][2] - b[2])) / 2,
            "forgetting": ((max(R[0][0], R[1][0]) - R[2][0]) + (max(R[0][1], R[1][1]) - R[2][1])) / 2,
        }
        assert r["metrics"] == pytest.approx(expected, abs=1e-12)
    # the same seed and the same first phase: nothing constrains SST's phase, so row 0 agrees
    naive, gem = payload["results"]
    assert naive["baseline"] == gem["baseline"] and naive["R"][0] == pytest.approx(gem["R"][0])
    md = (tmp_path / "R.md").read_text()
    assert "R of continual_gem" in md and "| continual_naive |" in md

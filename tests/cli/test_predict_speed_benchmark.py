"""benchmarks/predict_speed.py end to end on a tiny random encoder and the fixture SST files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pal_lightning.testing import TINY_BERT

from .conftest import load_benchmark

bench = load_benchmark("predict_speed")


def test_predict_speed_reports_both_ways_and_writes_json(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "speed.json"
    result = bench.main(
        [
            "--data-dir",
            str(data_dir),
            "--n",
            "12",
            "--batch-size",
            "4",
            "--encoder-config",
            json.dumps(TINY_BERT),
            "--json",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == result
    assert result["n"] == 12  # 10 dev + 2 test sentences of the fixture
    assert result["ratio"] == pytest.approx(result["one_per_call_s"] / result["batched_s"])
    assert result["max_abs_prob_diff"] < 1e-5  # both ways predict the same probabilities
    with pytest.raises(SystemExit, match="only 16 SST sentences"):
        bench.main(["--data-dir", str(data_dir), "--n", "100", "--encoder-config", json.dumps(TINY_BERT)])

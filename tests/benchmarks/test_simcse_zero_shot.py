"""benchmarks/simcse_zero_shot.py end to end on a tiny random encoder and fixture data."""

from __future__ import annotations

import json
from pathlib import Path

from pal_lightning.testing import TINY_BERT

from .conftest import load_benchmark

zero_shot = load_benchmark("simcse_zero_shot")


def test_scores_before_and_after_simcse_steps(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "zs.json"
    argv = [
        "--encoder-config", json.dumps(TINY_BERT), "--data-dir", str(data_dir), "--tasks", "sst",
        "--steps", "4", "--batch-size", "8", "--lr", "1e-3", "--max-length", "32", "--device", "cpu",
        "--json", str(out),
    ]  # fmt: skip
    result = zero_shot.main(argv)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["steps"] == 4 and result["tasks"] == ["sst"]
    assert -1.0 <= result["pearson_before"] <= 1.0 and -1.0 <= result["pearson_after"] <= 1.0
    # the encoder really trained: SimCSE moved its weights, so the score moved
    assert result["pearson_after"] != result["pearson_before"]
    assert abs(result["difference"] - (result["pearson_after"] - result["pearson_before"])) <= 1.5e-4

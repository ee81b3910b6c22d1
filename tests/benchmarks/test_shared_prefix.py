"""benchmarks/shared_prefix.py: its requests by hand, and a --quick run end to end on a tiny 6-layer encoder
(both ways agree; the JSON has every figure)."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import load_benchmark

sp = load_benchmark("shared_prefix")


def test_requests_ask_every_task_of_each_text() -> None:
    module = type("M", (), {"task_specs": {"x": None, "y": None}})()
    calls = sp.requests(module, ["t0", "t1", "t2", "t3", "t4"], 2)
    assert calls == [
        [("x", "t0"), ("y", "t0"), ("x", "t1"), ("y", "t1")],
        [("x", "t2"), ("y", "t2"), ("x", "t3"), ("y", "t3")],
    ]
    assert sp.texts_of(None, 8)[6:] == sp.BUILT_IN[:2]


def test_quick_run_writes_both_ways_and_they_agree(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PAL_DATA_DIR", str(tmp_path / "absent"))  # --quick never reads data
    out = tmp_path / "prefix.json"
    result = sp.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["encoder"] == "tiny" and result["tasks"] == 8 and result["texts"] == "built-in"
    one, batched = result["results"]
    assert (one["texts_per_call"], one["rows_per_call"]) == (1, 8)
    assert (batched["texts_per_call"], batched["rows_per_call"]) == (2, 16)
    for row in result["results"]:
        assert row["max_abs_diff"] < 1e-5 and row["once_ms"] > 0 and row["plain_ms"] > 0
        assert row["ratio"] == row["plain_ms"] / row["once_ms"]
    # PALs beside BERT's post-LN layers: the rows branch at layer 3's join norm
    assert result["branch"] == "join norm of layer 3" and result["arithmetic_bound_at_join"] == 2.4
    assert result["target_met"] == (one["ratio"] >= 1.5)

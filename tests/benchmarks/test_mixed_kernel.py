"""benchmarks/mixed_kernel.py: its ratios by hand, and a --quick run on a tiny encoder end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import load_benchmark

mk = load_benchmark("mixed_kernel")


def test_ratios_are_of_the_medians() -> None:
    summary = mk.summarize({"one": [1.0, 9.0, 2.0], "loop": [3.0, 3.0, 1.0], "gather": [2.5, 2.5, 9.0]})
    assert summary["median_s"] == {"one": 2.0, "loop": 3.0, "gather": 2.5}
    assert summary["loop/one"] == 1.5 and summary["gather/one"] == 1.25
    assert summary["loop/gather"] == pytest.approx(1.2)


def test_quick_run_agrees_and_batches_with_fewer_operators(tmp_path: Path) -> None:
    out = tmp_path / "mk.json"
    mk.main(["--quick", "--methods", "pals,lora", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["encoder"] == "tiny" and {r["method"] for r in result["results"]} == {"pals", "lora"}
    for row in result["results"]:
        assert row["max_abs_diff_loop_gather"] <= 1e-5
        assert row["tasks_present"] > 1  # the mixed rows are mixed
        ops = row["operators"]
        assert ops["one"] < ops["gather"] < ops["loop"]  # the loop's operators grow with the tasks present
        assert len(row["all_s"]["loop"]) == 2 and all(t > 0 for t in row["all_s"]["gather"])

"""The README's and docs' score figures are the ones ``benchmarks/readme_figures.py`` measured.

The record (``benchmarks/results_quality/readme_figures.json``) is what the demo and the main job printed
when last run; the pages quote it. A change that moves a score must re-measure and update both, or
this test fails (the pages would otherwise show figures no command gives).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
RECORD = json.loads((ROOT / "benchmarks" / "results_quality" / "readme_figures.json").read_text())
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {name: (ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "docs/running.md")}


def test_the_demo_score_in_the_readme_and_the_docs_is_the_recorded_one() -> None:
    demo = RECORD["demo"]
    assert f"scored overall {demo['overall']:.3f}" in README
    s = demo["scores"]
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    quoted = (
        f"scored overall {demo['overall']:.3f} (SST {s['val/sst/accuracy']:.3f}, "
        f"Quora {s['val/qqp/accuracy']:.3f}, STS Pearson {s['val/sts/pearson']:.3f})"
    )
    assert quoted in index


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_main_jobs_score_table_is_the_recorded_one(page: str) -> None:
    quick = RECORD["quickstart"]
    block = PAGES[page].split("CS224N overall (dev):", 1)[1].split("```", 1)[0]
    assert block.split()[0] == f"{quick['overall']:.4f}"
    rows = {tuple(m[:2]): m[2] for m in re.findall(r"^\s+(\w+)\s+(\w+)\s+([0-9.]+)$", block, re.M)}
    for key, value in quick["scores"].items():
        _, task, metric = key.split("/")
        assert rows[(task, metric)] == f"{value:.4f}", (page, key)
    assert f"overall{quick['overall']:.4f}.ckpt" in block


def test_the_record_is_what_the_script_reads_from_a_run(tmp_path: Path) -> None:
    """``record_of`` takes the best step's scores from a run folder's scores.json, rounded to 4 places."""
    script = load_benchmark("readme_figures")
    run = tmp_path / "version_0"
    run.mkdir()
    scores = {k: 0.123456 for k in script.METRICS} | {"val/overall": 0.654321, "val/sst/loss": 1.0}
    (run / "scores.json").write_text(json.dumps({"best": {"step": 7, "scores": scores}}))
    record = script.record_of(run)
    assert record == {"overall": 0.6543, "scores": {k: 0.1235 for k in script.METRICS}, "step": 7}

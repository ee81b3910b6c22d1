"""Execute notebooks/results.ipynb headless: the committed results by default, and a run's training curves."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "results.ipynb"
COMMITTED = ROOT / "benchmarks" / "results_cpu.csv"

# A run's metrics.csv as `pal-lightning fit` writes it (one task per step, validation after steps 1 and 3)
METRICS = [
    # step, epoch, train/sst/loss, train/sts/loss, val/overall, val/sst/accuracy, val/sst/loss, lr-AdamW/new
    (0, 0, 1.5, None, None, None, None, 5e-4),
    (1, 0, None, 2.0, None, None, None, 4e-4),
    (1, 0, None, None, 0.5, 0.4, 1.2, None),
    (2, 0, 1.25, None, None, None, None, 3e-4),
    (3, 0, None, 1.75, None, None, None, 2e-4),
    (3, 0, None, None, 0.6, 0.45, 1.1, None),
]


def write_metrics(path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["step", "epoch", "train/sst/loss", "train/sts/loss", "val/overall", "val/sst/accuracy"]
            + ["val/sst/loss", "lr-AdamW/new"]
        )
        writer.writerows([["" if v is None else v for v in row] for row in METRICS])


def execute(tmp_path: Path) -> str:
    """Run the notebook in ``tmp_path`` (not the notebook's folder); returns its text outputs."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any traceback
    return "\n".join(
        str(out.get("data", {}).get("text/plain", "")) + str(out.get("text", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )


def test_notebook_reads_the_committed_results_and_draws_a_runs_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "runs" / "demo" / "version_0"
    run.mkdir(parents=True)
    write_metrics(run / "metrics.csv")
    figures = tmp_path / "figures"
    monkeypatch.delenv("PAL_RESULTS_CSV", raising=False)  # the default: the committed results
    monkeypatch.setenv("PAL_RUN_DIR", str(run))
    monkeypatch.setenv("PAL_FIGURES_DIR", str(figures))
    monkeypatch.setenv("PAL_NUM_EPOCHS", "4")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    text = execute(tmp_path)

    names = ["parameters.png", "sampling.png", "scores.png", "training_curves.png"]
    assert sorted(p.name for p in figures.iterdir()) == names
    assert all(p.stat().st_size > 1000 for p in figures.iterdir())
    # the best method of the committed CSV, found here with the csv module
    with COMMITTED.open() as f:
        rows = [r for r in csv.DictReader(f) if r["overall"]]
    best = max(rows, key=lambda r: float(r["overall"]))
    assert f"best overall: {best['method']} ({float(best['overall']):.4f}) of {len(rows)} methods" in text
    # the annealed table: epoch 1 is proportional (sst share 8544/28721), the last epoch uses alpha = 0.2
    assert "0.297" in text
    # the run's last validation (step 3 above); losses are not scores
    assert "last validation: val/overall=0.6000, val/sst/accuracy=0.4500" in text


def test_notebook_says_when_a_run_has_no_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The curve cell alone (no kernel): a folder without metrics.csv prints what to give instead."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "def read_metrics" in c.source]
    import pandas as pd

    namespace = {"Path": Path, "pd": pd, "RUN_DIR": str(tmp_path)}
    exec(cell.source.split("\n\n\nmetrics =")[0], namespace)  # only the function: nothing is drawn
    assert namespace["read_metrics"](tmp_path) is None
    assert f"No metrics.csv at {tmp_path / 'metrics.csv'}: give a run folder" in capsys.readouterr().out
    write_metrics(tmp_path / "metrics.csv")
    frame = namespace["read_metrics"](tmp_path)
    assert frame["train/sst/loss"].dropna().tolist() == [1.5, 1.25]


def test_notebook_is_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")
    assert os.fspath(NOTEBOOK).endswith(".ipynb")

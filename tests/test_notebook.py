"""Execute notebooks/results.ipynb headless on a small results CSV."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "results.ipynb"

ROWS = [
    # method, sst, qqp, sts, params_per_task, params_total, ratio
    ("shared", 0.48, 0.80, 0.84, 2_000, 22_719_000, 1.0003),
    ("pals_annealed", 0.50, 0.81, 0.86, 620_000, 24_580_000, 1.08),
    ("pals_round_robin", 0.49, 0.79, 0.85, 620_000, 24_580_000, 1.08),
    ("single_sst", 0.51, None, None, 22_715_000, 22_715_000, 1.0),
    ("single_qqp", None, 0.82, None, 22_714_000, 22_714_000, 1.0),
    ("single_sts", None, None, 0.87, 22_713_000, 22_713_000, 1.0),
    ("single", 0.51, 0.82, 0.87, 22_714_000, 68_142_000, 3.0),
]


def write_results(path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["method", "config", "encoder", "sst_acc", "qqp_acc", "sts_pearson", "overall"]
            + ["params_per_task", "params_total", "stored_params_ratio", "wall_s", "steps", "seed", "status"]
        )
        for method, sst, qqp, sts, per_task, total, ratio in ROWS:
            overall = (sst + qqp + (sts + 1) / 2) / 3 if None not in (sst, qqp, sts) else None
            writer.writerow(
                [method, f"configs/{method}.yaml", "tiny", sst, qqp, sts, overall, per_task, total, ratio]
                + [12.5, 40, 42, "ok"]
            )


def test_results_notebook_runs_headless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    csv_path = tmp_path / "results.csv"
    write_results(csv_path)
    figures = tmp_path / "figures"
    monkeypatch.setenv("PAL_RESULTS_CSV", str(csv_path))
    monkeypatch.setenv("PAL_FIGURES_DIR", str(figures))
    monkeypatch.setenv("PAL_NUM_EPOCHS", "4")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()

    assert sorted(p.name for p in figures.iterdir()) == ["parameters.png", "sampling.png", "scores.png"]
    assert all(p.stat().st_size > 1000 for p in figures.iterdir())
    text = "\n".join(
        str(out.get("data", {}).get("text/plain", "")) + str(out.get("text", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    # the annealed table: epoch 1 is proportional (sst share 8544/28721), the last epoch uses alpha = 0.2
    assert "0.297" in text
    assert "pals_annealed" in text


def test_notebook_is_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")
    assert os.fspath(NOTEBOOK).endswith(".ipynb")

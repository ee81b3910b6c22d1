"""The README's notebook command before the benchmark has run: no traceback, the sampling plot alone
(issue 18, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "results.ipynb"


def test_notebook_without_results_csv_draws_the_sampling_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = tmp_path / "figures"
    monkeypatch.setenv("PAL_RESULTS_CSV", str(tmp_path / "not-there.csv"))
    monkeypatch.setenv("PAL_FIGURES_DIR", str(figures))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any traceback
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "No results CSV at" in outputs and "benchmarks/reproduce.py" in outputs
    assert sorted(p.name for p in figures.iterdir()) == ["sampling.png"]


def test_notebook_cites_files_that_exist() -> None:
    text = NOTEBOOK.read_text()
    assert "DESIGN.md" not in text and (ROOT / "docs" / "design.md").is_file()
    assert "docs/design.md" in text

"""What notebooks/results.ipynb draws: each figure's bars and lines against the CSV it read and the
sampling formula written out here (test_notebook.py checks that the figures are written at all)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "results.ipynb"
COLUMNS = ["method", "config", "encoder", "sst_acc", "qqp_acc", "sts_pearson", "overall"]
COLUMNS += ["params_per_task", "params_total", "stored_params_ratio", "wall_s", "steps", "seed", "status"]
# method, sst, qqp, sts, params_per_task, params_total
ROWS = [
    ("shared", 0.48, 0.80, 0.84, 2_000, 22_719_000),
    ("pals_annealed", 0.50, 0.81, 0.86, 620_000, 24_580_000),
    ("single_sst", 0.51, None, None, 22_715_000, 22_715_000),
    ("single_qqp", None, 0.82, None, 22_714_000, 22_714_000),
    ("single_sts", None, None, 0.87, 22_713_000, 22_713_000),
    ("single", 0.51, 0.82, 0.87, 22_714_000, 68_142_000),
]
SIZES = {"sst": 8544, "qqp": 14137, "sts": 6040}  # the notebook's TRAIN_SIZES (the real CS224N files)

#: Appended to the notebook: every axes' title, tick labels, bar heights and line data, as JSON.
DUMP_FIGURES = """
import json as _json
_axes = [
    {
        "title": _ax.get_title(),
        "xticks": [_t.get_text() for _t in _ax.get_xticklabels()],
        "bars": [float(_p.get_height()) for _p in _ax.patches],
        "lines": [[float(_y) for _y in _l.get_ydata()] for _l in _ax.get_lines()],
    }
    for _n in plt.get_fignums()
    for _ax in plt.figure(_n).axes
]
print("FIGURES=" + _json.dumps(_axes))
"""


def _flat(lines: list[list[float]]) -> list[float]:
    assert all(len(line) == 4 for line in lines)  # one point per epoch
    return [y for line in lines for y in line]


def _overall(row: tuple) -> float | None:
    sst, qqp, sts = row[1:4]
    return None if None in (sst, qqp, sts) else (sst + qqp + (sts + 1) / 2) / 3


def test_figures_draw_the_csv_and_the_schedules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in ROWS:
            ratio = row[5] / 22_714_000
            writer.writerow(
                [row[0], "c.yaml", "tiny", *row[1:4], _overall(row), *row[4:6], ratio, 1, 2, 3, "ok"]
            )
    monkeypatch.setenv("PAL_RESULTS_CSV", str(path))
    monkeypatch.setenv("PAL_FIGURES_DIR", "")
    monkeypatch.setenv("PAL_RUN_DIR", "")
    monkeypatch.setenv("PAL_NUM_EPOCHS", "4")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(DUMP_FIGURES))
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    (line,) = [
        text
        for out in nb.cells[-1].outputs
        for text in str(out.get("text", "")).splitlines()
        if text.startswith("FIGURES=")
    ]
    axes = {ax["title"]: ax for ax in json.loads(line.removeprefix("FIGURES="))}

    shown = [r for r in ROWS if not r[0].startswith("single_")]  # single_* are folded into "single"
    scores = axes["Dev scores per method and task"]
    assert scores["xticks"] == [r[0] for r in shown]
    columns = [[r[k] for r in shown] for k in (1, 2, 3)] + [[_overall(r) for r in shown]]
    assert scores["bars"] == pytest.approx([v for col in columns for v in col])  # drawn column by column

    # p_i = N_i^alpha / sum_j N_j^alpha with alpha_e = 1 - 0.8 (e - 1) / (E - 1), E = 4
    alphas = [1 - 0.8 * (e - 1) / 3 for e in (1, 2, 3, 4)]
    annealed = [[SIZES[t] ** a / sum(n**a for n in SIZES.values()) for a in alphas] for t in SIZES]
    assert _flat(axes["annealed"]["lines"]) == pytest.approx(_flat(annealed))
    total = sum(SIZES.values())
    assert _flat(axes["proportional"]["lines"]) == pytest.approx(
        _flat([[n / total] * 4 for n in SIZES.values()])
    )
    assert _flat(axes["round_robin"]["lines"]) == pytest.approx([1 / 3] * 12)

    per_task = axes["Parameters per task"]
    assert per_task["xticks"] == [r[0] for r in shown]
    assert per_task["bars"] == pytest.approx([r[4] / 1e6 for r in shown])
    assert axes["Stored parameters (red: separate fine-tuning)"]["bars"] == pytest.approx(
        [r[5] / 1e6 for r in shown]
    )

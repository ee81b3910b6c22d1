"""Execute notebooks/results.ipynb headless: the committed results by default, and a run's training curves;
what its figures draw (against the CSV it read and the sampling formula written out here); and the
README's notebook command before the benchmark has run (issue 18, item 2).

The runs share one Python kernel (its start and the notebook's imports cost about 6 s of CPU, paid once);
before each run a prelude empties its namespace, closes every figure, and sets the folder and variables.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "results.ipynb"
COMMITTED = ROOT / "benchmarks" / "results_cpu.csv"
#: The variables the notebook reads (its first cell): each run sets or unsets every one.
VARIABLES = ("PAL_RESULTS_CSV", "PAL_RUN_DIR", "PAL_FIGURES_DIR", "PAL_NUM_EPOCHS")

#: Run before the notebook in the shared kernel: what a fresh kernel would start the notebook with.
PRELUDE = """%reset -f
import json as _json
import os as _os

import matplotlib.pyplot as _plt

_plt.close("all")
_os.chdir({folder!r})
for _name, _value in _json.loads({variables!r}).items():
    if _value is None:
        _os.environ.pop(_name, None)
    else:
        _os.environ[_name] = _value
del _json, _os, _plt, _name, _value
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One ``python3`` kernel for the notebook runs of this module (matplotlib's Agg backend)."""
    manager = jupyter_client.KernelManager(kernel_name="python3")
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    manager.start_kernel(cwd=str(tmp_path_factory.mktemp("kernel")), env={**env, "MPLBACKEND": "Agg"})
    yield manager
    manager.shutdown_kernel(now=True)


def execute_notebook(
    kernel: object, folder: Path, variables: dict[str, str | None], extra: str = ""
) -> object:
    """The notebook (with the code ``extra`` appended) run in the shared kernel in ``folder``, its outputs
    written into it, the notebook's variables set as ``variables`` says (one not given: unset); raises
    CellExecutionError on any traceback."""
    assert set(variables) <= set(VARIABLES)
    settings = {name: variables.get(name) for name in VARIABLES}
    nb = nbformat.read(NOTEBOOK, as_version=4)
    prelude = nbformat.v4.new_code_cell(PRELUDE.format(folder=str(folder), variables=json.dumps(settings)))
    nb.cells = [prelude, *nb.cells, *([nbformat.v4.new_code_cell(extra)] if extra else [])]
    client = nbclient.NotebookClient(nb, km=kernel, timeout=120, kernel_name="python3")
    try:
        client.execute()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
    assert not nb.cells.pop(0).get("outputs")  # the prelude itself ran quietly
    return nb


def text_of(nb: object) -> str:
    """The text outputs of the notebook's code cells."""
    return "\n".join(
        str(out.get("data", {}).get("text/plain", "")) + str(out.get("text", ""))
        for cell in nb.cells  # type: ignore[attr-defined]
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )


# A run's metrics.csv as `pal-lightning fit` writes it (one task per step, validation after steps 1 and 3)
METRICS = [  # the columns: METRIC_COLUMNS
    (0, 0, 1.5, None, None, None, None, 5e-4),
    (1, 0, None, 2.0, None, None, None, 4e-4),
    (1, 0, None, None, 0.5, 0.4, 1.2, None),
    (2, 0, 1.25, None, None, None, None, 3e-4),
    (3, 0, None, 1.75, None, None, None, 2e-4),
    (3, 0, None, None, 0.6, 0.45, 1.1, None),
]


METRIC_COLUMNS = (
    "step epoch train/sst/loss train/sts/loss val/overall val/sst/accuracy val/sst/loss lr-AdamW/new"
)


def write_metrics(path: Path) -> None:
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(
            [METRIC_COLUMNS.split(), *([("" if v is None else v) for v in r] for r in METRICS)]
        )


def test_notebook_reads_the_committed_results_and_draws_a_runs_curves(kernel: object, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "demo" / "version_0"
    run.mkdir(parents=True)
    write_metrics(run / "metrics.csv")
    figures = tmp_path / "figures"
    # no PAL_RESULTS_CSV: the default, the committed results
    variables = {"PAL_RUN_DIR": str(run), "PAL_FIGURES_DIR": str(figures), "PAL_NUM_EPOCHS": "4"}
    text = text_of(execute_notebook(kernel, tmp_path, variables))

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


def test_notebook_is_committed_without_outputs_and_cites_files_that_exist() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")
    text = NOTEBOOK.read_text()
    assert "DESIGN.md" not in text and (ROOT / "docs" / "design.md").is_file()
    assert "docs/design.md" in text


# --- what the figures draw (each figure's bars and lines against the CSV it read and the sampling formula
# written out here; test_notebook_reads_the_committed_results_and_draws_a_runs_curves checks that the
# figures are written at all)

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


def test_figures_draw_the_csv_and_the_schedules(kernel: object, tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in ROWS:
            ratio = row[5] / 22_714_000
            writer.writerow(
                [row[0], "c.yaml", "tiny", *row[1:4], _overall(row), *row[4:6], ratio, 1, 2, 3, "ok"]
            )
    variables = {
        "PAL_RESULTS_CSV": str(path),
        "PAL_FIGURES_DIR": "",
        "PAL_RUN_DIR": "",
        "PAL_NUM_EPOCHS": "4",
    }
    nb = execute_notebook(kernel, tmp_path, variables, extra=DUMP_FIGURES)
    (line,) = re.findall(r"^FIGURES=(.*)$", text_of(nb), re.M)
    axes = {ax["title"]: ax for ax in json.loads(line)}

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


# --- without a results CSV (issue 18, item 2)


def test_notebook_without_results_csv_draws_the_sampling_plot(kernel: object, tmp_path: Path) -> None:
    """The README's notebook command before the benchmark has run: no traceback, the sampling plot alone."""
    figures = tmp_path / "figures"
    variables = {"PAL_RESULTS_CSV": str(tmp_path / "not-there.csv"), "PAL_FIGURES_DIR": str(figures)}
    outputs = text_of(execute_notebook(kernel, tmp_path, variables))  # raises on any traceback
    assert "No results CSV at" in outputs and "benchmarks/reproduce.py" in outputs
    assert sorted(p.name for p in figures.iterdir()) == ["sampling.png"]

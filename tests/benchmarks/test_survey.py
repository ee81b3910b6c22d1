"""benchmarks/survey.py end to end on a tiny encoder (--quick): the CSV's rows, columns and values."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from pal_lightning.testing import tiny_bert_config

from .conftest import ROOT, load_benchmark

survey = load_benchmark("survey")


def quickstart_module(**overrides: object) -> object:
    """The quickstart's MultiTaskModule on the --quick encoder, built here without the survey's code."""
    from pal_lightning import MultiTaskModule

    args = dict(yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())["model"]["init_args"])
    method = overrides.pop("adapter", args["adapter"]["method"])
    args.update(encoder_config=tiny_bert_config(layers=6), **overrides)
    args["adapter"] = {**args["adapter"], "method": method, "num_heads": 2}
    return MultiTaskModule(**args)


def test_quick_survey_writes_one_consistent_row_per_configuration_and_snapshot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    from torch import nn
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    from pal_lightning import parameter_report

    out = tmp_path / "out"
    rc = survey.main(["--quick", "--only", "separate,pals", "--out", str(out), "--work", str(tmp_path)])
    assert rc == 0
    with (out / "survey.csv").open() as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, list(reader)
    assert header is not None and "stored_params" in header and "step_ms" in header and "overall" in header
    assert [(r["config"], r["snapshot"], r["step"]) for r in rows] == [
        (c, s, s) for c in ("separate", "pals") for s in ("1", "2")
    ]  # --quick: 2 snapshots, 1 step apart
    by = {(r["config"], int(r["snapshot"])): r for r in rows}
    for r in rows:
        assert r["status"] == "ok" and r["rss_scope"] == "process"
        assert float(r["step_ms"]) > 0 and float(r["step_cpu_ms"]) > 0 and int(r["steps_timed"]) == 2
        assert float(r["peak_rss_mib"]) > 100  # torch alone holds more
        sst, qqp, sts = float(r["sst_acc"]), float(r["qqp_acc"]), float(r["sts_pearson"])
        assert 0 <= sst <= 1 and 0 <= qqp <= 1 and -1 <= sts <= 1
        assert float(r["overall"]) == pytest.approx((sst + qqp + (sts + 1) / 2) / 3, abs=1e-9)
        assert float(r["stored_ratio"]) == pytest.approx(
            int(r["stored_params"])
            / int(by[r["config"], 1]["stored_params"])
            * float(by[r["config"], 1]["stored_ratio"])
        )
    for config in ("separate", "pals"):  # training time grows from snapshot to snapshot
        assert 0 < float(by[config, 1]["train_s"]) < float(by[config, 2]["train_s"])
        assert by[config, 1]["stored_params"] == by[config, 2]["stored_params"]
    assert [by[c, 1]["layer_sharing"] for c in ("separate", "pals")] == ["IIIIII", "SSSSSS"]

    stored = {c: int(by[c, 1]["stored_params"]) for c in ("separate", "pals")}
    # the library's own count of the same model, built here from the quickstart
    assert stored["pals"] == parameter_report(quickstart_module(adapter="pals")).total
    # separate models: two more copies of all six layers than the shared encoder (3 tasks), the layer
    # counted on transformers' own BertLayer
    shared = parameter_report(quickstart_module(adapter="none")).total
    layer = BertLayer(BertConfig(**tiny_bert_config(layers=6)))
    assert isinstance(layer, nn.Module)
    per_layer = sum(p.numel() for p in layer.parameters())
    assert stored["separate"] - shared == 2 * 6 * per_layer

    settings = json.loads((out / "survey.json").read_text())
    assert settings["budget"]["max_steps"] == 2 and settings["quick"] is True
    assert [c["name"] for c in settings["configurations"]] == ["separate", "pals"]
    assert settings["machine"]["cpu_count"] >= 1
    for png in ("survey_params.png", "survey_time.png"):
        assert (out / png).stat().st_size > 1000


def test_quick_overrides_scale_explicit_adapter_sizes_to_the_tiny_width() -> None:
    # 48 * 32 / 384 = 4 and 204 * 32 / 384 = 17 -> 16 (a multiple of the 2 heads); other keys untouched
    given = (
        "model.init_args.adapter.size=48",
        "model.init_args.adapter.size=204",
        "model.init_args.adapter=pff",
    )
    assert survey.quick_overrides(given) == (
        "model.init_args.adapter.size=4",
        "model.init_args.adapter.size=16",
        "model.init_args.adapter=pff",
    )


def test_unknown_configuration_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        survey.main(["--quick", "--only", "shared,nonsense"])
    assert exc.value.code == 2
    assert "nonsense" in capsys.readouterr().err


def test_survey_notebook_draws_score_against_stored_parameters_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("matplotlib")
    pytest.importorskip("pandas")
    # two configurations, two snapshots each: config, snapshot, step, train_s, stored_params, overall
    table = [("a", 1, 10, 5.0, 2_000_000, 0.5), ("a", 2, 20, 9.0, 2_000_000, 0.6)]
    table += [("b", 1, 10, 7.0, 6_000_000, 0.55), ("b", 2, 20, 15.0, 6_000_000, 0.7)]
    keys = ("config", "snapshot", "step", "train_s", "stored_params", "overall")
    path = tmp_path / "survey.csv"
    scores = {"status": "ok", "sst_acc": 0.4, "qqp_acc": 0.7, "sts_pearson": 0.8}
    survey.write_csv(path, [{**dict(zip(keys, r, strict=True)), **scores} for r in table])
    figures_dir = tmp_path / "figures"
    monkeypatch.setenv("PAL_SURVEY_CSV", str(path))
    monkeypatch.setenv("PAL_FIGURES_DIR", str(figures_dir))
    namespace: dict[str, object] = {}
    notebook = nbformat.read(ROOT / "notebooks" / "survey.ipynb", as_version=4)
    for cell in notebook.cells:  # in this process: no kernel to start
        if cell.cell_type == "code":
            exec(compile(cell.source, "survey.ipynb", "exec"), namespace)  # noqa: S102 - our own notebook
    by_stored, by_time = namespace["figures"]  # type: ignore[misc]
    points = by_stored.axes[0].collections[0].get_offsets().tolist()
    assert points == [[2.0, 0.6], [6.0, 0.7]]  # the last snapshot of each, stored params in millions
    curves = [(line.get_xdata().tolist(), line.get_ydata().tolist()) for line in by_time.axes[0].get_lines()]
    assert curves == [([5.0, 9.0], [0.5, 0.6]), ([7.0, 15.0], [0.55, 0.7])]
    assert sorted(p.name for p in figures_dir.iterdir()) == ["survey_params.png", "survey_time.png"]


def test_committed_survey_has_eight_configurations_and_exact_layer_accounting() -> None:
    path = ROOT / "benchmarks" / "results_survey" / "survey.csv"
    with path.open() as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, list(reader)
    assert tuple(header or ()) == survey.COLUMNS
    ok = {r["config"] for r in rows if r["status"] == "ok" and r["overall"]}
    assert len(ok) >= 8  # issue 14's target: at least 8 configurations
    stored = {r["config"]: int(r["stored_params"]) for r in rows}
    # all-MiniLM-L6-v2: width 384, feed-forward 1536; one BERT layer = Q, K, V, output (weights and
    # biases), the feed-forward pair, two LayerNorms
    d, ff = 384, 1536
    layer = 4 * (d * d + d) + (d * ff + ff) + (ff * d + d) + 2 * 2 * d
    assert stored["separate"] - stored["shared"] == 2 * 6 * layer  # 3 tasks: two more copies of 6 layers
    assert stored["FFSSII"] - stored["shared"] == 2 * 2 * layer
    assert stored["FFFFSS"] == stored["shared"]  # freezing stores nothing more

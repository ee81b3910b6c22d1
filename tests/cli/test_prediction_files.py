"""The files ``predict`` writes (issue "A user's own task, end to end", item 10): LF line ends, safe
column names, one precision for every number, and no log folders where the user did not ask for them."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pal_lightning import MultiTaskModule
from pal_lightning.callbacks.prediction_writer import format_value
from pal_lightning.cli.main import main
from pal_lightning.cli.text_predict import output_rows
from pal_lightning.testing import TINY_BERT

SIX_DECIMALS = re.compile(r"^-?\d+\.\d{6}$")


@pytest.fixture
def saved_model(tmp_path: Path) -> Path:
    module = MultiTaskModule(tasks=["sst", "sts"], bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    return module.save_pretrained(tmp_path / "model")


def _predict(model: Path, task: str, source: Path) -> Path:
    args = ["predict", "--predict.model", str(model), "--predict.task", task, "--predict.input", str(source)]
    assert main(args) == 0
    return source.with_name(f"{source.stem}-{task}-predictions.csv")


def test_text_predict_writes_lf_safe_names_and_six_decimals(tmp_path: Path, saved_model: Path) -> None:
    sentences = tmp_path / "mine.csv"
    sentences.write_text("id,sentence\nr1,a fine film\nr2,dull\n")
    out = _predict(saved_model, "sst", sentences)
    raw = out.read_bytes()
    assert b"\r" not in raw and raw.endswith(b"\n")
    header = raw.decode().splitlines()[0].split(",")
    assert header == [
        "id",
        "label",
        "p_negative",
        "p_somewhat_negative",
        "p_neutral",
        "p_somewhat_positive",
        "p_positive",
    ]
    rows = list(csv.reader(raw.decode().splitlines()[1:]))
    assert all(SIX_DECIMALS.match(value) for row in rows for value in row[2:])

    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2\na cat sits,a cat is sitting\nrain,sun\n")
    scores = _predict(saved_model, "sts", pairs).read_bytes()
    assert b"\r" not in scores
    lines = scores.decode().splitlines()
    assert lines[0] == "id,score" and all(SIX_DECIMALS.match(line.split(",")[1]) for line in lines[1:])


def test_column_names_stay_distinct() -> None:
    predictions = SimpleNamespace(
        scores=None,
        probabilities=np.array([[0.25, 0.5, 0.25]]),
        label_names=["very good", "very-good", "ok!"],
        labels=["ok!"],
    )
    header, rows = output_rows(["a"], predictions)
    assert header == ["id", "label", "p_very_good", "p_very_good_2", "p_ok"]
    assert rows == [["a", "ok!", "0.250000", "0.500000", "0.250000"]]


def test_cs224n_files_round_scores_to_six_decimals() -> None:
    assert format_value(3.123456789) == "3.123457"
    assert format_value(2.0) == "2" and format_value(0.25) == "0.25" and format_value(-1e-9) == "0"
    assert format_value(4) == "4"


def test_predict_into_another_folder_makes_no_log_folders(
    tmp_path: Path, tiny_yaml: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit", "--config", str(tiny_yaml)]) == 0
    run = tmp_path / "runs" / "version_0"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = tmp_path / "elsewhere"
    args = ["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]
    assert main([*args, "--predictions.output_dir", str(out)]) == 0
    assert "pal-lightning: wrote 6 prediction file(s)" in capfd.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        "para-dev-output.csv",
        "para-test-output.csv",
        "sst-dev-output.csv",
        "sst-test-output.csv",
        "sts-dev-output.csv",
        "sts-test-output.csv",
    ]
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if not p.is_relative_to(out))
    assert after == before  # no predict/version_N in the run, no config.yaml or log folder anywhere
    for file in out.iterdir():
        assert b"\r" not in file.read_bytes()

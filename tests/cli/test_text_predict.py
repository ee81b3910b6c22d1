"""fit writes <run>/model; `pal-lightning predict --predict.input FILE` on the user's own sentences."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from pal_lightning import MultiTaskModule
from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.core.columns import probability_column as column_name

from .conftest import ForkedCli, ForkedSubprocess, load_benchmark


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_fit_saves_the_best_model_and_predict_reads_csv_and_jsonl(
    tiny_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], forked_cli: ForkedCli
) -> None:
    assert main(["fit", "--config", str(tiny_yaml)]) == 0
    capsys.readouterr()
    run = tmp_path / "runs" / "version_0"
    folder = run / "model"
    config = json.loads((folder / "config.json").read_text())
    best = json.loads((run / "scores.json").read_text())["best"]["scores"]
    assert config["scores"]["val/overall"] == pytest.approx(best["val/overall"])
    assert config["max_length"] == 32  # the data module's, used again at prediction time
    assert "best validation checkpoint" in (folder / "README.md").read_text()

    # the folder holds the best checkpoint's weights, not the final ones
    import torch

    ckpt = json.loads((run / "scores.json").read_text())["best_model_path"]
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    model = MultiTaskModule.from_pretrained(folder)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
    # and a new process loading only the folder predicts exactly what the checkpoint predicts
    # (forked from the session's CLI driver, which has imported but loaded no model: forked_cli)
    benchmark = load_benchmark("pretrained_roundtrip")
    benchmark.subprocess = ForkedSubprocess(forked_cli)  # a fresh module: nothing to restore
    roundtrip = benchmark.main(["--run", str(run), "--data-dir", str(tmp_path / "data"), "--n", "6"])
    assert roundtrip["examples_per_task"] == {"sst": 6, "qqp": 6, "sts": 6}
    assert roundtrip["max_abs_diff_all"] == 0.0

    sentences = tmp_path / "mine.csv"
    sentences.write_text('id,sentence\nr1,"a great, fun movie"\nr2,awful plot\nr3,ok\n', encoding="utf-8")
    assert (
        main(
            [
                "predict",
                "--predict.model",
                str(folder),
                "--predict.task",
                "sst",
                "--predict.input",
                str(sentences),
            ]
        )
        == 0
    )
    rows = _rows(tmp_path / "mine-sst-predictions.csv")
    expected = model.predict("sst", ["a great, fun movie", "awful plot", "ok"])
    assert [r["id"] for r in rows] == ["r1", "r2", "r3"]
    assert [r["label"] for r in rows] == expected.labels
    probs = np.array([[float(r[column_name(n)]) for n in expected.label_names] for r in rows])
    np.testing.assert_allclose(probs, expected.probabilities, atol=1e-6)

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"sentence1": "how do I cook rice", "sentence2": "how is rice cooked"})
        + "\n\n"
        + json.dumps({"sentence1": "a", "sentence2": "b"})
        + "\n"
    )
    out = tmp_path / "sts.csv"
    args = ["predict", "--ckpt_path", str(ckpt), "--predict.task", "sts", "--predict.input", str(pairs)]
    assert main([*args, "--predict.output", str(out)]) == 0
    rows = _rows(out)
    scores = model.predict("sts", [("how do I cook rice", "how is rice cooked"), ("a", "b")]).scores
    assert [r["id"] for r in rows] == ["0", "1"]  # no id column: the row number
    assert [float(r["score"]) for r in rows] == pytest.approx(scores, abs=1e-6)


@pytest.fixture
def saved_model(tmp_path: Path) -> Path:
    from pal_lightning.testing import TINY_BERT

    module = MultiTaskModule(tasks=["sst", "qqp"], bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    return module.save_pretrained(tmp_path / "model")


@pytest.mark.parametrize(
    ("content", "task", "message"),
    [
        ("id,sentence\n1,hello\n", "nope", "Unknown task 'nope': this model predicts sst, qqp"),
        ("", "sst", "holds no rows to predict"),
        ("id,sentence\n", "sst", "holds no rows to predict"),
        ("id,sentence\n1,hello\n", "qqp", "Task 'qqp' takes sentence pairs, but .* has no column"),
        ("id,review\n1,hello\n", "sst", "no column\\(s\\) sentence"),
        ("id,sentence\n1,\n", "sst", "Row 0 .* has an empty sentence"),
    ],
    ids=[
        "unknown-task",
        "empty-file",
        "header-only",
        "pair-task-single-sentences",
        "no-text-column",
        "empty-text",
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    saved_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    task: str,
    message: str,
) -> None:
    source = tmp_path / "in.csv"
    source.write_text(content, encoding="utf-8")
    args = [
        "predict",
        "--predict.model",
        str(saved_model),
        "--predict.task",
        task,
        "--predict.input",
        str(source),
    ]
    assert main(args) == USER_ERROR_EXIT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    import re

    assert re.search(message, err), err
    assert not list(tmp_path.glob("in-*-predictions.csv"))


def test_existing_output_is_not_overwritten_without_the_flag(
    saved_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.csv"
    source.write_text("sentence\nhello there\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    out.write_text("sentinel\n")
    base = [
        "predict",
        "--predict.model",
        str(saved_model),
        "--predict.task",
        "sst",
        "--predict.input",
        str(source),
    ]
    assert main([*base, "--predict.output", str(out)]) == USER_ERROR_EXIT
    assert "already exists" in capsys.readouterr().err and out.read_text() == "sentinel\n"
    assert main([*base, "--predict.output", str(out), "--predict.overwrite", "true"]) == 0
    assert _rows(out)[0]["id"] == "0"
    assert main(["predict", "--predict.task", "sst", "--predict.input", str(source)]) == USER_ERROR_EXIT
    assert "exactly one of --predict.model" in capsys.readouterr().err

"""``pal-lightning predict --predict.input FILE`` on the user's own sentences (one task, or each row's own from
a task column), and its files: LF line ends, safe column names, six decimals (that fit writes <run>/model, and
predict reads csv and jsonl with it: test_cli.py)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import torch

from pal_lightning import MultiTaskModule
from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.testing import TINY_BERT


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _args(model: Path, source: Path, task: str | None = None) -> list[str]:
    """``predict --predict.model MODEL --predict.input SOURCE [--predict.task TASK]``."""
    return ["predict", "--predict.model", str(model), "--predict.input", str(source)] + (
        ["--predict.task", task] if task else []
    )


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=["sst", "qqp", "sts"],
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    return module.save_pretrained(tmp_path_factory.mktemp("saved") / "model")


@pytest.mark.parametrize(
    ("content", "task", "message"),
    [
        ("id,sentence\n1,hello\n", "nope", "Unknown task 'nope': this model predicts sst, qqp, sts"),
        ("", "sst", "holds no rows to predict"),
        ("id,sentence\n", "sst", "holds no rows to predict"),
        ("id,sentence\n1,hello\n", "qqp", "Task 'qqp' takes sentence pairs, but .* has no column"),
        ("id,review\n1,hello\n", "sst", "no column\\(s\\) sentence"),
        ("id,sentence\n1,\n", "sst", "Line 2 of .* has an empty sentence"),
        (
            "task,sentence\nsst,hi\nnope,there\n",
            None,
            "Line 3 of .* has task 'nope', .* its tasks are sst, qqp, sts",
        ),
        ("sentence\nhi\n", None, "Which task\\? Pass --predict.task"),
        ("task,sentence\nsst,hi\nqqp,there\n", None, "Task 'qqp' takes sentence pairs"),
    ],
    ids=[
        "unknown-task",
        "empty-file",
        "header-only",
        "pair-task-single-sentences",
        "no-text-column",
        "empty-text",
        "mixed-unknown-task",
        "mixed-no-task-column",
        "mixed-pair-row-without-pair-columns",
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    saved_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    task: str | None,
    message: str,
) -> None:
    source = tmp_path / "in.csv"
    source.write_text(content, encoding="utf-8")
    assert main(_args(saved_model, source, task)) == USER_ERROR_EXIT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_existing_output_is_not_overwritten_without_the_flag(
    saved_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.csv"
    source.write_text("sentence\nhello there\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    out.write_text("sentinel\n")
    base = _args(saved_model, source, "sst")
    assert main([*base, "--predict.output", str(out)]) == USER_ERROR_EXIT
    assert "already exists" in capsys.readouterr().err and out.read_text() == "sentinel\n"
    assert main([*base, "--predict.output", str(out), "--predict.overwrite", "true"]) == 0
    assert _rows(out)[0]["id"] == "0"
    assert main(["predict", "--predict.task", "sst", "--predict.input", str(source)]) == USER_ERROR_EXIT
    assert "exactly one of --predict.model" in capsys.readouterr().err


def test_an_unknown_option_is_one_line_exit_2(
    saved_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt option (``--predict.tasks``) is one line naming it, not argparse's usage screen."""
    source = tmp_path / "in.csv"
    source.write_text("sentence\nhello\n", encoding="utf-8")
    args = ["predict", "--predict.model", str(saved_model), "--predict.input", str(source)]
    for typo in (["--predict.tasks", "sst"], ["--predict.out", str(tmp_path / "o.csv")]):  # no abbreviation
        assert main([*args, *typo]) == USER_ERROR_EXIT
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("pal-lightning: error: ")
        assert typo[0] in err and "Traceback" not in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


SIX_DECIMALS = re.compile(r"^-?\d+\.\d{6}$")


def _predict(model: Path, task: str, source: Path) -> Path:
    assert main(_args(model, source, task)) == 0
    return source.with_name(f"{source.stem}-{task}-predictions.csv")


def test_text_predict_writes_lf_safe_names_and_six_decimals(tmp_path: Path, saved_model: Path) -> None:
    sentences = tmp_path / "mine.csv"  # with --predict.task, a task column is ignored
    sentences.write_text("id,task,sentence\nr1,something else,a fine film\nr2,sts,dull\n")
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


def test_cli_predicts_each_row_with_its_task_column(
    saved_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = MultiTaskModule.from_pretrained(saved_model)
    source = tmp_path / "stream.csv"
    source.write_text(
        "id,task,sentence,sentence1,sentence2\n"
        "r1,sst,a great film,,\n"
        "r2,qqp,,how do I cook rice?,how is rice cooked?\n"
        "r3,sts,,a man plays,a man is playing a guitar\n"
        "r4,sst,dull and far too long,,\n",
        encoding="utf-8",
    )
    assert main(_args(saved_model, source)) == 0
    assert "wrote 4 predictions (sst, qqp, sts)" in capsys.readouterr().out
    rows = _rows(tmp_path / "stream-predictions.csv")
    assert [(r["id"], r["task"]) for r in rows] == [
        ("r1", "sst"),
        ("r2", "qqp"),
        ("r3", "sts"),
        ("r4", "sst"),
    ]
    sst = module.predict("sst", ["a great film", "dull and far too long"])
    assert [rows[0]["label"], rows[3]["label"]] == sst.labels
    assert float(rows[0]["p_sst_somewhat_negative"]) == pytest.approx(sst.probabilities[0][1], abs=1e-5)
    assert (
        rows[1]["label"] == module.predict("qqp", [("how do I cook rice?", "how is rice cooked?")]).labels[0]
    )
    assert (rows[1]["score"], rows[1]["p_sst_negative"], rows[2]["label"]) == ("", "", "")
    score = module.predict("sts", [("a man plays", "a man is playing a guitar")]).scores[0]
    assert float(rows[2]["score"]) == pytest.approx(score, abs=1e-5)


def test_config_with_new_sentences_is_one_line_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.csv"
    source.write_text("id,sentence\n1,hello\n", encoding="utf-8")
    args = ["predict", "--predict.input", str(source), "--config", "c.yaml"]
    assert main(args) == USER_ERROR_EXIT
    # the option keeps its dashes (jsonargparse's "- " bullets are what the one-line form drops)
    assert capsys.readouterr().err.startswith(
        "pal-lightning: error: --config is not used with --predict.input"
    )


def test_one_line_drops_bullets_not_an_options_dashes() -> None:
    from pal_lightning.cli.main import _one_line

    nested = (
        'Parser key "model":\n  Does not validate against any of the Union subtypes\n  Errors:\n'
        "    - Problem with given class_path 'x.Y':\n      - --model.lr must be a float  \n"
        "    - Expected a <class 'NoneType'>\n  -\n"
    )
    assert (
        _one_line(nested)
        == "Parser key \"model\": Problem with given class_path 'x.Y': --model.lr must be a float"
    )
    assert _one_line("--ckpt_path is a folder") == "--ckpt_path is a folder"

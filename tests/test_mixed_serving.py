"""Serving a mixed stream (issue 30, item 2): ``predict([(task, text), ...])``, ``pal-lightning predict`` with a
task column, and one ONNX graph for every task (``task_ids`` an input), on a tiny random encoder."""

from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule, PalUserError, TaskSpec  # noqa: E402
from pal_lightning.cli.main import USER_ERROR_EXIT, main  # noqa: E402
from pal_lightning.module.export import (  # noqa: E402
    MixedTaskModel,  # noqa: E402
    SingleTaskModel,
    export_onnx,
)
from pal_lightning.testing import TINY_BERT  # noqa: E402

ITEMS: list[tuple[str, Any]] = [
    ("sst", "a great, moving film ."),
    ("qqp", ("how do I cook rice?", "how is rice cooked?")),
    ("sts", ("a man plays the guitar", "someone is playing a guitar on a stage tonight")),
    ("binary", "dull"),
    ("sst", "the music is fun but the end is long and bad and the actors are bored"),
    ("sts", ("x", "y")),
    ("qqp", ("a", "b c d e f g")),
    ("sst", "ok"),
    ("binary", "a fine and long review of a film that goes on"),
]


@pytest.fixture(scope="module")
def module() -> MultiTaskModule:
    torch.manual_seed(0)
    bce = TaskSpec(name="binary", num_labels=2, loss="bce", text_columns=("sentence",))
    return MultiTaskModule(
        tasks=["sst", "qqp", "sts", bce],
        bert_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    ).eval()


def test_mixed_predict_equals_each_tasks_own_predict_in_input_order(module: MultiTaskModule) -> None:
    mixed = module.predict(ITEMS, batch_size=4)
    assert [p.task for p in mixed] == [task for task, _ in ITEMS]
    for task in dict.fromkeys(task for task, _ in ITEMS):
        at = [i for i, (t, _) in enumerate(ITEMS) if t == task]
        own = module.predict(task, [ITEMS[i][1] for i in at])
        for k, i in enumerate(at):
            p = mixed[i]
            if own.scores is not None:
                assert p.score == pytest.approx(own.scores[k], abs=1e-5) and p.label is None
                continue
            assert (p.class_index, p.label, p.label_names) == (own.classes[k], own.labels[k], own.label_names)
            np.testing.assert_allclose(p.probabilities, own.probabilities[k], rtol=0, atol=1e-5)
    assert mixed[0].label in mixed[0].label_names  # sst's names, not class indices
    assert set(mixed[0].record()) == {"task", "label", "probabilities"}
    assert mixed[2].record() == {"task": "sts", "score": mixed[2].score}


def test_mixed_predict_runs_length_sorted_batches_of_several_tasks(
    module: MultiTaskModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    lengths: list[int] = []
    original = module.forward_mixed

    def spy(batch: dict[str, Any]) -> Any:
        seen.append(list(batch["tasks"]))
        lengths.append(int(batch["attention_mask"].sum(1).max()))
        return original(batch)

    monkeypatch.setattr(module, "forward_mixed", spy)
    module.predict(ITEMS, batch_size=4)
    assert len(seen) == math.ceil(len(ITEMS) / 4)
    assert all(len(set(tasks)) > 1 for tasks in seen[:2])  # rows of several tasks in one forward
    assert lengths == sorted(lengths)  # short inputs first, as the one-task predict batches them


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([("nope", "hi")], "Unknown task 'nope': this model predicts sst, qqp, sts, binary"),
        ([("sst", "hi"), "just text"], "takes \\(task, text\\) pairs, but input 1"),
        (
            [("sst", "hi"), ("qqp", "one sentence")],
            "Task 'qqp' takes \\(sentence1, sentence2\\) tuples, but input 1",
        ),
        ([], "Nothing to predict"),
    ],
    ids=["unknown-task", "not-a-pair", "pair-task-single-sentence", "empty"],
)
def test_mixed_predict_user_errors(module: MultiTaskModule, items: list[Any], message: str) -> None:
    with pytest.raises(PalUserError, match=message):
        module.predict(items)


# ---------------------------------------------------------------------------------------------- command line
def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def saved_model(module: MultiTaskModule, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(module.save_pretrained(tmp_path_factory.mktemp("mixed") / "model"))


def test_cli_predicts_each_row_with_its_task_column(
    module: MultiTaskModule, saved_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "stream.csv"
    source.write_text(
        "id,task,sentence,sentence1,sentence2\n"
        "r1,sst,a great film,,\n"
        "r2,qqp,,how do I cook rice?,how is rice cooked?\n"
        "r3,sts,,a man plays,a man is playing a guitar\n"
        "r4,sst,dull and far too long,,\n",
        encoding="utf-8",
    )
    assert main(["predict", "--predict.model", str(saved_model), "--predict.input", str(source)]) == 0
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


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "task,sentence\nsst,hi\nnope,there\n",
            "Row 1 of .* has task 'nope', .* its tasks are sst, qqp, sts, binary",
        ),
        ("sentence\nhi\n", "Which task\\? Pass --predict.task"),
        ("task,sentence\nsst,hi\nqqp,there\n", "Task 'qqp' takes sentence pairs"),
    ],
    ids=["unknown-task", "no-task-column", "pair-row-without-pair-columns"],
)
def test_cli_mixed_errors_are_one_line_exit_2_and_write_nothing(
    saved_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    source = tmp_path / "in.csv"
    source.write_text(content, encoding="utf-8")
    assert (
        main(["predict", "--predict.model", str(saved_model), "--predict.input", str(source)])
        == USER_ERROR_EXIT
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert re.search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_cli_with_a_task_option_ignores_the_task_column(saved_model: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text("task,sentence\nsomething else,hi\n", encoding="utf-8")
    args = [
        "predict",
        "--predict.model",
        str(saved_model),
        "--predict.task",
        "sst",
        "--predict.input",
        str(source),
    ]
    assert main(args) == 0
    assert list(_rows(tmp_path / "in-sst-predictions.csv")[0]) == [
        "id",
        "label",
        "p_negative",
        *["p_somewhat_negative", "p_neutral", "p_somewhat_positive", "p_positive"],
    ]


# ---------------------------------------------------------------------------------------------- export
def _batch(
    module: MultiTaskModule, items: list[tuple[str, Any]], model: MixedTaskModel
) -> tuple[torch.Tensor, ...]:
    """Padded inputs of ``items`` in ``model.input_names`` order (a cross pair in one sequence)."""
    tok, rows_a, rows_b = module.tokenizer, [], []
    for task, text in items:
        siamese = model.siamese[model.task_names.index(task)]
        if isinstance(text, tuple) and not siamese:
            rows_a.append(dict(tok(*text)))
            rows_b.append(dict(tok("")))
        else:
            rows_a.append(dict(tok(text[0] if siamese else text)))
            rows_b.append(dict(tok(text[1] if siamese else "")))
    a, b = tok.pad(rows_a, return_tensors="pt"), tok.pad(rows_b, return_tensors="pt")
    keys = ("input_ids", "attention_mask", "token_type_ids")
    ids = torch.tensor([model.task_names.index(task) for task, _ in items])
    return (*(a[k] for k in keys), ids, *(b[k] for k in keys))


def _single_task_rows(
    module: MultiTaskModule, model: MixedTaskModel, inputs: tuple[torch.Tensor, ...]
) -> dict[int, torch.Tensor]:
    """Each row's output from its own task's SingleTaskModel (the reference)."""
    out = {}
    for t, task in enumerate(model.task_names):
        rows = torch.nonzero(inputs[3] == t)[:, 0]
        if len(rows):
            single = SingleTaskModel(module, task)
            args = [x[rows] for x in inputs[:3]] + ([x[rows] for x in inputs[4:]] if model.siamese[t] else [])
            with torch.no_grad():
                value = single(*args).reshape(len(rows), -1)
            out.update({int(r): v for r, v in zip(rows, value, strict=True)})
    return out


@pytest.fixture(scope="module")
def mixed_onnx(
    module: MultiTaskModule, tmp_path_factory: pytest.TempPathFactory
) -> tuple[MixedTaskModel, Path]:
    pytest.importorskip("onnx", reason="the export extra is not installed")
    model = MixedTaskModel(module)
    path = export_onnx(
        model, tmp_path_factory.mktemp("onnx") / "all.onnx", model.example_inputs(module.tokenizer)
    )
    return model, path


@pytest.mark.parametrize(
    "items", [ITEMS, [ITEMS[2], ITEMS[0], ITEMS[5]]], ids=["all-tasks", "two-tasks-absent"]
)
def test_mixed_onnx_equals_each_rows_single_task_model(
    module: MultiTaskModule, mixed_onnx: tuple[MixedTaskModel, Path], items: list[tuple[str, Any]]
) -> None:
    ort = pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    model, path = mixed_onnx
    assert model.input_names[3] == "task_ids" and model.widths == (5, 2, 1, 1)
    session = ort.InferenceSession(str(path))
    assert session.get_modelmeta().custom_metadata_map == model.onnx_metadata()
    inputs = _batch(module, items, model)  # other rows, order and lengths than the traced example
    out = session.run(None, {n: t.numpy() for n, t in zip(model.input_names, inputs, strict=True)})[0]
    with torch.no_grad():
        eager = model(*inputs)  # the routed one-pass forward
    assert out.shape == (len(items), 5)
    for row, ref in _single_task_rows(module, model, inputs).items():
        width = model.widths[int(inputs[3][row])]
        np.testing.assert_allclose(out[row, :width], ref.numpy(), rtol=0, atol=1e-4)
        np.testing.assert_allclose(eager[row, :width].numpy(), ref.numpy(), rtol=0, atol=1e-5)
        assert not out[row, width:].any()  # zeros after the task's own columns


def test_mixed_model_user_errors(module: MultiTaskModule) -> None:
    with pytest.raises(PalUserError, match="distinct tasks of the model"):
        MixedTaskModel(module, ["sst", "nope"])
    model = MixedTaskModel(module, ["sts", "sst"])  # a subset, in its own index order
    inputs = _batch(module, [ITEMS[0], ITEMS[2]], model)
    with pytest.raises(PalUserError, match="task_ids \\[7\\] are out of range: .* 0=sts, 1=sst"):
        model(*inputs[:3], torch.tensor([1, 7]), *inputs[4:])
    with pytest.raises(PalUserError, match="pass the second sentences"):
        model(*inputs[:4])


# ---------------------------------------------------------------------------------------------- benchmark
def test_benchmark_serves_the_stream_both_ways_and_writes_json(tmp_path: Path) -> None:
    import importlib.util
    import json

    from pal_lightning.testing import write_cs224n_data

    spec = importlib.util.spec_from_file_location(
        "benchmark_mixed_serving", Path(__file__).parents[1] / "benchmarks" / "mixed_serving.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = write_cs224n_data(tmp_path / "data")
    out = tmp_path / "mixed.json"
    result = bench.main(["--data-dir", str(data), "--n", "12", "--reps", "1", "--json", str(out)])
    assert json.loads(out.read_text()) == result
    assert [r["batch"] for r in result["results"]] == [8, 32, 128]
    assert sum(result["tasks_in_stream"].values()) == 12 and "load_avg_1m_before" in result
    assert all(r["max_abs_diff"] < 1e-4 and r["ratio"] > 0 for r in result["results"])

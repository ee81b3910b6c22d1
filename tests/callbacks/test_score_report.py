"""The score report's pure parts and its hooks, driven by stand-in trainers and modules (no training).

Every expected table, headline and ``scores.json`` payload is written out by hand here; the end-to-end
runs through ``pal-lightning fit/validate/test`` are in tests/cli (test_honest_scores, test_cli).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn

from pal_lightning.callbacks import score_report as score_report_module
from pal_lightning.callbacks.score_report import (
    SCORES_FILE,
    ScoreReport,
    _to_float,
    auxiliary_tasks,
    best_validation,
    class_names_of,
    fit_ends_now,
    format_classes,
    format_scores,
    no_scores_reason,
    parameter_counts,
    partial_headline,
    score_headline,
    scored_tasks_of,
    stage_monitor,
    task_coverage,
    validation_scores,
    validation_split_name,
)

SCORES = {
    "val/sst/accuracy": 0.5,
    "val/qqp/accuracy": 0.75,
    "val/qqp/loss": 1.25,  # a loss is not a score: left out of the table
    "val/sts/pearson": -0.25,
    "val/cfimdb/accuracy": 0.875,
    "val/sts/extra/deep": 0.1,  # not <stage>/<task>/<metric>: left out
    "val/overall": 0.6,
}


# ------------------------------------------------------------------------------------------ pure parts


def test_to_float_keeps_finite_numbers_only() -> None:
    assert _to_float(torch.tensor(0.25)) == 0.25
    assert _to_float("1.5") == 1.5 and _to_float(2) == 2.0
    for bad in (None, "abc", [1.0], float("nan"), float("inf"), -math.inf, torch.tensor(float("nan"))):
        assert _to_float(bad) is None, bad


def test_task_coverage_keeps_the_order_of_the_scored_tasks() -> None:
    covered, missing = task_coverage(SCORES, ["sts", "para", "sst"])
    assert covered == ["sts", "sst"] and missing == ["para"]
    # no declared tasks: every task with a three-part key counts, sorted ("extra" of the 4-part key does not)
    assert task_coverage(SCORES, None) == (["cfimdb", "qqp", "sst", "sts"], [])
    assert task_coverage({"val/overall": 1.0}, ["sst"]) == ([], ["sst"])


def test_format_scores_by_hand() -> None:
    table = format_scores(SCORES, auxiliary=["cfimdb", "absent"])
    assert table.split("\n") == [
        "  task       metric          dev",
        "  cfimdb*    accuracy     0.8750",
        "  qqp        accuracy     0.7500",
        "  sst        accuracy     0.5000",
        "  sts        pearson     -0.2500",
        "  overall                 0.6000",
        "  * auxiliary (trained, not in the overall): cfimdb",  # an auxiliary task with no score: not named
    ]
    two = format_scores({"val/b/m": 0.5, "val/a/m": 0.25}, auxiliary=["b", "a"]).split("\n")
    assert two[-1] == "  * auxiliary (trained, not in the overall): b, a"  # in the order given
    # another column and monitor; no auxiliary line when none of them was scored
    test_scores = {"test/sst/accuracy": 0.5, "test/overall": 0.25}
    assert format_scores(test_scores, "test/overall", ["absent"], column="test").split("\n") == [
        "  task       metric         test",
        "  sst        accuracy     0.5000",
        "  overall                 0.2500",
    ]


def test_format_scores_partial_overall_names_its_tasks() -> None:
    scores = {k: v for k, v in SCORES.items() if k != "val/overall"}
    scores["val/overall_partial"] = 0.625
    lines = format_scores(scores, "val/overall", ["cfimdb"]).split("\n")
    assert lines[-2] == "  overall (partial: qqp, sst, sts)   0.6250"  # sorted, the auxiliary task left out
    # a short label (20 characters) is padded to the table's width (21)
    assert format_scores({"val/a/m": 0.5, "val/overall_partial": 0.5}).split("\n")[-1] == (
        "  overall (partial: a)    0.5000"
    )
    # neither the overall nor a partial one: no overall line
    assert format_scores({"val/a/m": 0.5}).split("\n") == [
        "  task       metric          dev",
        "  a          m            0.5000",
    ]


def test_best_validation_takes_the_highest_complete_one() -> None:
    history: list[dict[str, Any]] = [
        {"step": 1, "scores": {"val/overall": 0.5}},
        {"step": 2, "scores": {"val/overall_partial": 0.9}},  # higher, but partial: never the best
        {"step": 3, "scores": {"val/overall": 0.7}},
        {"step": 4, "scores": {"val/overall": 0.7}},  # a tie: the first one stays
        {"step": 5, "scores": {"val/overall": 0.6}},
    ]
    assert best_validation(history, "val/overall") is history[2]
    # no complete validation: the last one
    assert best_validation(history[1:2] + [{"step": 6, "scores": {}}], "val/overall") == {
        "step": 6,
        "scores": {},
    }
    assert best_validation([], "val/overall") is None
    report = ScoreReport()
    assert report.best() is None  # nothing recorded yet
    report.history = history
    assert report.best() is history[2]


def test_stage_monitor() -> None:
    assert stage_monitor("val/overall", "test") == "test/overall"
    assert stage_monitor("val/sst/accuracy", "val") == "val/sst/accuracy"
    assert stage_monitor("overall", "test") == "overall"


def test_auxiliary_and_scored_tasks_of_a_module() -> None:
    assert auxiliary_tasks(SimpleNamespace(hparams={"auxiliary": "cfimdb"})) == ["cfimdb"]
    assert auxiliary_tasks(SimpleNamespace(hparams={"auxiliary": ("a", "b")})) == ["a", "b"]
    assert auxiliary_tasks(SimpleNamespace(hparams={"auxiliary": None})) == []
    assert auxiliary_tasks(SimpleNamespace(hparams={})) == []
    assert auxiliary_tasks(SimpleNamespace()) == []
    assert auxiliary_tasks(SimpleNamespace(hparams=["auxiliary"])) == []  # no mapping: none
    assert scored_tasks_of(SimpleNamespace(scored_tasks=["sst", "sts"])) == ["sst", "sts"]
    assert scored_tasks_of(SimpleNamespace()) is None


REPORT = SimpleNamespace(
    method="pals",
    adapter_size=204,
    base_encoder=1000,
    stored_per_task={"sst": 7},
    total=1300,
    ratio=1.3,
    trainable=300,
)
COUNTS = {
    "adapter": "pals",
    "adapter_size": 204,
    "base_encoder": 1000,
    "stored_per_task": {"sst": 7},
    "total": 1300,
    "ratio": 1.3,
    "trainable": 300,
}


def _payload(stage: str | None = "val", **fields: Any) -> dict[str, Any]:
    """A ``scores.json`` payload by hand: an evaluation's (``stage``) or, with ``stage=None``, a fit's,
    every field empty unless given."""
    monitor = f"{stage or 'val'}/overall"
    overall = {
        "complete": False,
        "overall": None,
        "overall_partial": None,
        "tasks_covered": [],
        "tasks_missing": [],
    }
    if stage:
        return {"stage": stage, "monitor": monitor, **overall, "ckpt_path": None, "scores": {}, **fields}
    fit = {"tasks_auxiliary": [], "parameters": None, "best": None, "last": None, "history": [], "steps": 0}
    return {"monitor": monitor, **overall, **fit, "best_model_path": None, **fields}


def test_parameter_counts() -> None:
    assert parameter_counts(SimpleNamespace(parameter_report=lambda: REPORT)) == COUNTS

    def broken() -> None:
        raise AttributeError("no encoder")

    assert parameter_counts(SimpleNamespace(parameter_report=broken)) is None
    assert parameter_counts(SimpleNamespace()) is None


def test_validation_scores_prefers_the_module_s_latest_scores() -> None:
    stale = {"val/qqp/accuracy": torch.tensor(0.75), "val/sst/accuracy": torch.tensor(0.0)}
    trainer = SimpleNamespace(callback_metrics=stale)
    module = SimpleNamespace(last_scores={"val": {"val/sst/accuracy": 0.5, "val/overall": float("nan")}})
    assert validation_scores(trainer, module) == {"val/sst/accuracy": 0.5}  # stale qqp and the NaN left out
    # a module that keeps no scores: the trainer's metrics of the stage asked for, finite ones only
    metrics = {
        "val/sst/accuracy": torch.tensor(0.5),
        "val/bad": torch.tensor(float("inf")),
        "train/loss": torch.tensor(2.0),
        "valx/a/b": 1.0,
        "test/sst/accuracy": torch.tensor(0.25),
    }
    trainer = SimpleNamespace(callback_metrics=metrics)
    assert validation_scores(trainer, SimpleNamespace()) == {"val/sst/accuracy": 0.5}
    assert validation_scores(trainer, SimpleNamespace(), "test") == {"test/sst/accuracy": 0.25}


PARTIAL_ENTRY = {
    "scores": {"val/overall_partial": 0.625},
    "tasks_covered": ["sst", "qqp"],
    "tasks_missing": ["sts"],
}


def test_headlines_by_hand() -> None:
    cs224n = {"scores": {"val/overall": 0.6}, "tasks_covered": ["sst", "qqp", "sts"]}
    assert score_headline(cs224n, "val/overall", 1.0) == "CS224N overall (dev): 0.6000"
    cs224n_test = {"scores": {"x": 0.25}, "tasks_covered": ["sst", "qqp", "sts", "cfimdb"]}
    assert score_headline(cs224n_test, "x", 2, "test") == "CS224N overall (test): 0.2500"
    assert score_headline({"scores": {}}, "val/overall", 1.0) == "dev scores"
    assert score_headline({"scores": {}}, "val/overall", 1.0, "test") == "test scores"
    assert score_headline(PARTIAL_ENTRY, "val/overall", 2) == (
        "No overall score: validation did not reach sts (--trainer.limit_val_batches 2 stopped the evaluation "
        "before them; leave it at 1.0 for the overall score). Partial mean over sst, qqp: 0.6250"
    )
    # 1.0 is every batch and None no limit: the tasks had no labelled batches; an int 1 is one batch
    for limit in (1.0, None):
        assert partial_headline(0.5, PARTIAL_ENTRY, limit) == (
            "No overall score: validation did not reach sts (no labelled dev batches of them). "
            "Partial mean over sst, qqp: 0.5000"
        )
    assert "--trainer.limit_val_batches 1 stopped" in partial_headline(0.5, PARTIAL_ENTRY, 1)
    two_missing = {"tasks_covered": ["sst"], "tasks_missing": ["qqp", "sts"]}
    assert partial_headline(0.5, two_missing, None) == (
        "No overall score: validation did not reach qqp, sts (no labelled dev batches of them). "
        "Partial mean over sst: 0.5000"
    )
    assert "--trainer.limit_val_batches 0.5 stopped" in partial_headline(0.5, PARTIAL_ENTRY, 0.5)
    assert partial_headline(0.5, {}, 0.25, "test") == (
        "No overall score: the test evaluation did not reach ? (--trainer.limit_test_batches 0.25 stopped the "
        "evaluation before them; leave it at 1.0 for the overall score). Partial mean over ?: 0.5000"
    )
    assert partial_headline(0.5, {"tasks_covered": [], "tasks_missing": None}, 1.0, "test") == (
        "No overall score: the test evaluation did not reach ? (no labelled test batches of them). "
        "Partial mean over ?: 0.5000"
    )


# ------------------------------------------------------------------------------ the callback's hooks


def _trainer(log_dir: Path | None, fn: TrainerFn = TrainerFn.FITTING, **kw: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "log_dir": None if log_dir is None else str(log_dir),
        "is_global_zero": True,
        "sanity_checking": False,
        "state": SimpleNamespace(fn=fn),
        "global_step": 7,
        "current_epoch": 1,
        "callback_metrics": {},
        "limit_val_batches": 2,
        "limit_test_batches": 3,
        "ckpt_path": "/ckpt/best.ckpt",
        "checkpoint_callback": SimpleNamespace(best_model_path="/runs/best.ckpt"),
    }
    values.update(kw)
    return SimpleNamespace(**values)


def _module(scores: dict[str, float], stage: str = "val", **kw: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "last_scores": {stage: scores},
        "scored_tasks": ["sst", "qqp"],
        "hparams": {"auxiliary": ["cfimdb"]},
        "parameter_report": lambda: REPORT,
    }
    values.update(kw)
    return SimpleNamespace(**values)


def _printed(report: ScoreReport, trainer: Any, module: Any, capsys: pytest.CaptureFixture[str]) -> str:
    assert capsys.readouterr().out == ""  # nothing before teardown (the progress bar would redraw below it)
    report.teardown(trainer, module, "fit")
    out = capsys.readouterr().out
    report.teardown(trainer, module, "fit")  # printed once
    assert capsys.readouterr().out == ""
    return out


def test_fit_records_validations_and_saves_the_best(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = ScoreReport()
    trainer = _trainer(tmp_path)
    report.on_fit_start(trainer, None)
    plan = [
        {"val/sst/accuracy": 0.5, "val/qqp/accuracy": 0.5, "val/overall": 0.5},
        {"val/sst/accuracy": 0.75, "val/overall_partial": 0.75},  # qqp not reached
        {
            "val/sst/accuracy": 0.875,
            "val/qqp/accuracy": 0.625,
            "val/cfimdb/accuracy": 0.25,
            "val/overall": 0.75,
        },
        {"val/sst/accuracy": 0.5, "val/qqp/accuracy": 0.75, "val/overall": 0.625},
    ]
    # the sanity check, and a validation with no scores at all, are not recorded
    report.on_validation_end(_trainer(tmp_path, sanity_checking=True), _module(plan[0]))
    report.on_validation_end(trainer, _module({"val/overall": float("nan")}))
    for step, scores in enumerate(plan, start=1):
        trainer.global_step, trainer.current_epoch = step * 10, step // 3
        report.on_validation_end(trainer, _module(scores))
    assert report.history == [
        {"step": 10, "epoch": 0, "scores": plan[0], "complete": True, "tasks_covered": ["sst", "qqp"],
         "tasks_missing": []},
        {"step": 20, "epoch": 0, "scores": plan[1], "complete": False, "tasks_covered": ["sst"],
         "tasks_missing": ["qqp"]},
        {"step": 30, "epoch": 1, "scores": plan[2], "complete": True, "tasks_covered": ["sst", "qqp"],
         "tasks_missing": []},
        {"step": 40, "epoch": 1, "scores": plan[3], "complete": True, "tasks_covered": ["sst", "qqp"],
         "tasks_missing": []},
    ]  # fmt: skip
    assert not (tmp_path / SCORES_FILE).exists()  # validations during fit write nothing
    assert capsys.readouterr().out == ""

    report._start = time.perf_counter() - 100.4  # a fit of 100.4 s, to check the wall time it reports
    module = _module(plan[3])
    report.on_fit_end(trainer, module)
    payload = json.loads((tmp_path / "scores.json").read_text())
    assert 100.4 <= payload.pop("wall_s") < 100.4 + 60
    history, ckpt = report.history, "/runs/best.ckpt"
    tasks = {
        "tasks_covered": ["sst", "qqp"],
        "tasks_auxiliary": ["cfimdb"],
        "parameters": COUNTS,
        "steps": 40,
    }
    assert payload == _payload(
        None,
        complete=True,
        overall=0.75,
        best=history[2],
        last=history[3],
        history=history,
        best_model_path=ckpt,
        **tasks,
    )
    assert _printed(report, trainer, module, capsys) == (
        "\nOverall (dev): 0.7500  [best validation at step 30, 40 steps, 100 s]\n"
        "  task       metric          dev\n"
        "  cfimdb*    accuracy     0.2500\n"
        "  qqp        accuracy     0.6250\n"
        "  sst        accuracy     0.8750\n"
        "  overall                 0.7500\n"
        "  * auxiliary (trained, not in the overall): cfimdb\n"
        "  best checkpoint: /runs/best.ckpt\n"
        f"  run folder: {tmp_path}\n"
    )

    # a new fit starts a new history
    report.on_fit_start(trainer, module)
    assert report.history == [] and time.perf_counter() - report._start < 60


def test_fit_with_partial_validations_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = ScoreReport()
    trainer = _trainer(tmp_path, checkpoint_callback=None)
    scores = {"val/sst/accuracy": 0.75, "val/overall_partial": 0.75}
    module = _module(scores, hparams={}, parameter_report=None)
    report.on_validation_end(trainer, module)
    report._start = time.perf_counter() - 5.2
    report.on_fit_end(trainer, module)
    payload = json.loads((tmp_path / "scores.json").read_text())
    assert payload["complete"] is False and payload["overall"] is None and payload["overall_partial"] == 0.75
    assert payload["tasks_covered"] == ["sst"] and payload["tasks_missing"] == ["qqp"]
    assert payload["tasks_auxiliary"] == [] and payload["parameters"] is None
    assert payload["best_model_path"] is None and payload["best"] == payload["last"] == report.history[0]
    assert _printed(report, trainer, module, capsys) == (
        "\nNo overall score: validation did not reach qqp (--trainer.limit_val_batches 2 stopped the evaluation "
        "before them; leave it at 1.0 for the overall score). Partial mean over sst: 0.7500"
        "  [last validation at step 7, 7 steps, 5 s]\n"
        "  task       metric          dev\n"
        "  sst        accuracy     0.7500\n"
        "  overall (partial: sst)   0.7500\n"
        f"  run folder: {tmp_path}\n"
    )


def test_complete_needs_the_overall_as_well(tmp_path: Path) -> None:
    # every scored task reached but no overall logged (another monitor): not complete
    report = ScoreReport(monitor="val/other", filename="s.json")
    trainer = _trainer(tmp_path)
    module = _module({"val/sst/accuracy": 0.5, "val/qqp/accuracy": 0.5, "val/overall": 0.5})
    report.on_validation_end(trainer, module)
    report.on_fit_end(trainer, module)
    payload = json.loads((tmp_path / "s.json").read_text())
    assert payload["monitor"] == "val/other" and payload["complete"] is False and payload["overall"] is None
    assert payload["best"]["complete"] is True  # the entry itself covered every task


def test_fit_without_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = ScoreReport()
    for steps in (0, 5):
        trainer = _trainer(
            tmp_path, global_step=steps, checkpoint_callback=SimpleNamespace(best_model_path="")
        )
        report.on_fit_start(trainer, None)
        report._start = time.perf_counter() - 3.4
        report.on_fit_end(trainer, SimpleNamespace())
        assert _printed(report, trainer, None, capsys) == (
            f"pal-lightning: fit finished after {steps} steps (3 s) without dev scores: there was no "
            "validation data (no dev batches); check the dev files of --data.data_dir, or score a checkpoint "
            "later: pal-lightning validate --config <run>/config.yaml --ckpt_path last.\n"
        )
        payload = json.loads((tmp_path / "scores.json").read_text())
        assert 3.4 <= payload.pop("wall_s") < 60
        assert payload == _payload(None, steps=steps)


def test_fit_without_a_log_dir_or_off_rank_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = ScoreReport()
    trainer = _trainer(None)
    module = _module({"val/sst/accuracy": 0.5, "val/qqp/accuracy": 0.5, "val/overall": 0.5})
    report.on_validation_end(trainer, module)
    report.on_fit_end(trainer, module)
    assert _printed(report, trainer, module, capsys) == (
        "\nOverall (dev): 0.5000  [best validation at step 7, 7 steps, 0 s]\n"
        "  task       metric          dev\n"
        "  qqp        accuracy     0.5000\n"
        "  sst        accuracy     0.5000\n"
        "  overall                 0.5000\n"  # no auxiliary line: cfimdb has no score here
        "  best checkpoint: /runs/best.ckpt\n"  # and no run folder
    )
    assert list(tmp_path.iterdir()) == []

    other = _trainer(tmp_path, is_global_zero=False)
    report.on_fit_end(other, module)
    report.on_test_end(other, _module({"test/sst/accuracy": 0.5}, "test"))
    assert _printed(report, other, module, capsys) == "" and list(tmp_path.iterdir()) == []


def test_validate_and_test_write_their_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = ScoreReport()
    scores = {"val/sst/accuracy": 0.5, "val/qqp/accuracy": 0.75, "val/overall": 0.625}
    trainer = _trainer(tmp_path, TrainerFn.VALIDATING)
    module = _module(scores)
    report.on_validation_end(trainer, module)
    assert report.history == []  # not a fit: nothing recorded
    text = (tmp_path / "scores.json").read_text()
    assert text.startswith('{\n  "stage": "val",\n  "monitor": "val/overall",\n')  # indented by two, to read
    assert json.loads(text) == _payload(
        complete=True, overall=0.625, tasks_covered=["sst", "qqp"], ckpt_path="/ckpt/best.ckpt", scores=scores
    )
    assert _printed(report, trainer, module, capsys) == (
        "\nOverall (dev): 0.6250  [dev set, checkpoint /ckpt/best.ckpt]\n"
        "  task       metric          dev\n"
        "  qqp        accuracy     0.7500\n"
        "  sst        accuracy     0.5000\n"
        "  overall                 0.6250\n"
        f"  scores saved to {tmp_path / 'scores.json'}\n"
    )
    # the sanity check of a fit does not report
    report.on_validation_end(
        _trainer(tmp_path / "sanity", TrainerFn.VALIDATING, sanity_checking=True), module
    )
    assert not (tmp_path / "sanity").exists()

    # test: a partial evaluation, the test limit named; the auxiliary task marked
    test_scores = {"test/sst/accuracy": 0.5, "test/cfimdb/accuracy": 0.25, "test/overall_partial": 0.5}
    trainer = _trainer(tmp_path / "t", TrainerFn.TESTING, ckpt_path=None)
    (tmp_path / "t").mkdir()
    report.on_test_end(trainer, _module(test_scores, "test"))
    assert json.loads((tmp_path / "t" / "scores.json").read_text()) == _payload(
        "test", overall_partial=0.5, tasks_covered=["sst"], tasks_missing=["qqp"], scores=test_scores
    )
    assert _printed(report, trainer, module, capsys) == (
        "\nNo overall score: the test evaluation did not reach qqp (--trainer.limit_test_batches 3 stopped the "
        "evaluation before them; leave it at 1.0 for the overall score). Partial mean over sst: 0.5000"
        "  [test set, checkpoint None]\n"
        "  task       metric         test\n"
        "  cfimdb*    accuracy     0.2500\n"
        "  sst        accuracy     0.5000\n"
        "  overall (partial: sst)   0.5000\n"
        "  * auxiliary (trained, not in the overall): cfimdb\n"
        f"  scores saved to {tmp_path / 't' / 'scores.json'}\n"
    )
    # no log dir: printed, nothing written
    report.on_test_end(
        _trainer(None, TrainerFn.TESTING, ckpt_path=None), _module({"test/sst/accuracy": 0.5}, "test")
    )
    assert _printed(report, trainer, module, capsys) == (
        "\ntest scores  [test set, checkpoint None]\n"
        "  task       metric         test\n"
        "  sst        accuracy     0.5000\n"
    )


def test_validate_partial_or_without_overall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The dev limit is named for a partial validation; ``complete`` needs every task and the overall."""
    report = ScoreReport()
    # a module that keeps no scores of its own: the trainer's metrics are read
    metrics = {"val/sst/accuracy": torch.tensor(0.5), "val/overall_partial": torch.tensor(0.5)}
    trainer = _trainer(tmp_path, TrainerFn.VALIDATING, callback_metrics=metrics)
    module = SimpleNamespace(scored_tasks=["sst", "qqp"])
    report.on_validation_end(trainer, module)
    payload = json.loads((tmp_path / "scores.json").read_text())
    assert payload["complete"] is False and payload["scores"] == {
        "val/sst/accuracy": 0.5,
        "val/overall_partial": 0.5,
    }
    assert _printed(report, trainer, module, capsys).startswith(
        "\nNo overall score: validation did not reach qqp (--trainer.limit_val_batches 2 stopped the evaluation "
        "before them; leave it at 1.0 for the overall score). Partial mean over sst: 0.5000  [dev set, "
    )
    # an overall logged although a scored task is missing: still not complete
    report.on_validation_end(trainer, _module({"val/sst/accuracy": 0.5, "val/overall": 0.5}))
    payload = json.loads((tmp_path / "scores.json").read_text())
    assert payload["complete"] is False and payload["overall"] == 0.5 and payload["tasks_missing"] == ["qqp"]


def test_fit_reads_the_trainer_metrics_of_a_module_without_scores(tmp_path: Path) -> None:
    report = ScoreReport()
    metrics = {"val/sst/accuracy": torch.tensor(0.5), "val/overall": torch.tensor(0.5), "train/loss": 1.0}
    trainer = _trainer(tmp_path, callback_metrics=metrics)
    report.on_validation_end(trainer, SimpleNamespace())
    assert report.history == [
        {
            "step": 7,
            "epoch": 1,
            "scores": {"val/sst/accuracy": 0.5, "val/overall": 0.5},
            "complete": True,
            "tasks_covered": ["sst"],
            "tasks_missing": [],
        }
    ]
    report.on_fit_end(trainer, SimpleNamespace())
    text = (tmp_path / "scores.json").read_text()
    assert text.startswith('{\n  "monitor": "val/overall",\n  "complete": true,\n')  # indented by two


def _trainer_with(fraction: float | None) -> SimpleNamespace:
    return SimpleNamespace(datamodule=SimpleNamespace(config=SimpleNamespace(validation_fraction=fraction)))


def test_carved_validation_is_not_called_dev() -> None:
    assert validation_split_name(_trainer_with(None)) == "dev"
    assert validation_split_name(_trainer_with(0.1)) == "validation"
    assert validation_split_name(SimpleNamespace(datamodule=None)) == "dev"
    entry = {"scores": {"val/overall": 0.5}, "tasks_covered": ["topics", "reviews"]}
    line = score_headline(entry, "val/overall", 1.0, validation_split_name(_trainer_with(0.1)))
    assert line == "Overall (validation): 0.5000"


def test_fit_ends_now_by_steps_epochs_or_a_stop() -> None:
    def ends(max_steps: int | None = -1, max_epochs: int | None = -1, step: int = 5, epoch: int = 0) -> bool:
        trainer = SimpleNamespace(
            max_steps=max_steps,
            max_epochs=max_epochs,
            global_step=step,
            current_epoch=epoch,
            should_stop=False,
        )
        return fit_ends_now(trainer)

    assert ends(max_steps=5) and ends(max_steps=4) and not ends(max_steps=6)  # the step budget reached
    assert ends(max_steps=0, step=0) and not ends(max_steps=None) and not ends()  # -1 and None: no budget
    assert ends(max_epochs=2, epoch=1) and not ends(max_epochs=2, epoch=0) and ends(max_epochs=0)
    assert not ends(max_epochs=None, epoch=9)
    stopped = SimpleNamespace(max_steps=-1, max_epochs=None, global_step=1, current_epoch=0, should_stop=True)
    assert fit_ends_now(stopped)  # early stopping, a signal


def test_validate_at_end_of_a_fit_that_ran_none(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, Any]] = []
    monkeypatch.setattr(score_report_module, "validate_during_fit", lambda t, m: calls.append((t, m)))
    module = _module({"val/sst/accuracy": 0.5, "val/overall": 0.5})

    def epoch_end(report: ScoreReport, **kw: Any) -> bool:
        fields = {"enable_validation": True, "max_steps": 7, "max_epochs": -1, "should_stop": False, **kw}
        trainer = _trainer(None, **fields)
        calls.clear()
        report.on_train_epoch_end(trainer, module)
        assert calls in ([], [(trainer, module)])  # the fit's own trainer and module
        return bool(calls)

    report = ScoreReport()
    assert epoch_end(report)  # a new report has not validated
    assert not epoch_end(report, max_steps=9)  # the fit goes on: the validation comes later
    assert not epoch_end(report, enable_validation=False)  # no validation loop (limit_val_batches 0)
    assert not epoch_end(ScoreReport(validate_at_end=False))
    report.on_validation_end(_trainer(None), module)  # a validation of the fit
    assert not epoch_end(report)
    report.on_validation_end(_trainer(None, sanity_checking=True), module)
    report.on_fit_start(_trainer(None), module)  # a new fit: validated again at its end
    assert epoch_end(report)
    sanity = ScoreReport()
    sanity.on_validation_end(
        _trainer(None, sanity_checking=True), module
    )  # the sanity check is no validation
    assert epoch_end(sanity)


def test_class_names_are_printed_and_saved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = {"topics": ("business", "sports"), "mood": ("low",)}
    datamodule = SimpleNamespace(label_names=lambda: names, config=SimpleNamespace(validation_fraction=0.1))
    assert class_names_of(SimpleNamespace(datamodule=datamodule)) == {
        "topics": ["business", "sports"],
        "mood": ["low"],
    }
    assert class_names_of(SimpleNamespace(datamodule=None)) == {}
    assert class_names_of(SimpleNamespace(datamodule=SimpleNamespace(label_names=None))) == {}
    assert format_classes({}) == ""
    assert format_classes(names) == "\n  topics classes: 0 business, 1 sports\n  mood classes: 0 low"

    scores = {"val/sst/accuracy": 0.5, "val/qqp/accuracy": 0.75, "val/overall": 0.625}
    for fn in (TrainerFn.VALIDATING, TrainerFn.FITTING):
        report = ScoreReport()
        trainer = _trainer(tmp_path, fn, datamodule=datamodule)
        report.on_fit_start(trainer, None)
        report.on_validation_end(trainer, _module(scores))
        if fn == TrainerFn.FITTING:
            report.on_fit_end(trainer, _module(scores))
        saved = json.loads((tmp_path / "scores.json").read_text())
        assert saved["label_names"] == {"topics": ["business", "sports"], "mood": ["low"]}
        out = _printed(report, trainer, None, capsys)
        assert (
            "Overall (validation): 0.6250" in out and "validation set" * (fn == TrainerFn.VALIDATING) in out
        )
        assert "  task       metric     validation\n" in out  # the carved split names the column
        assert "\n  topics classes: 0 business, 1 sports\n  mood classes: 0 low" in out


def test_why_a_fit_has_no_dev_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    later = "or score a checkpoint later: pal-lightning validate --config <run>/config.yaml --ckpt_path last"
    diverged = (
        "the validation gave no finite score (empty dev files, or a model that diverged); check the dev "
        f"files of --data.data_dir, {later}"
    )
    not_added = (
        f"no validation fell within the run and ScoreReport(validate_at_end=False) added none; {later}"
    )
    turned_off = f"--trainer.limit_val_batches is 0, which turns validation off; set it to 1.0, {later}"
    assert no_scores_reason(_trainer(None, limit_val_batches=0), True) == turned_off
    assert no_scores_reason(_trainer(None), True) == diverged
    assert no_scores_reason(_trainer(None), False, validate_at_end=False) == not_added
    assert no_scores_reason(_trainer(None), True, validate_at_end=False) == diverged
    assert no_scores_reason(_trainer(None), False).startswith("there was no validation data (no dev batches)")
    for report, validated, reason in (
        (ScoreReport(), True, diverged),
        (ScoreReport(validate_at_end=False), False, not_added),
    ):
        trainer = _trainer(tmp_path, checkpoint_callback=None)
        report.on_fit_start(trainer, None)
        if validated:  # a validation of the fit with no finite score: nothing recorded
            report.on_validation_end(trainer, _module({"val/sst/accuracy": math.nan}))
        assert report.history == []
        report.on_fit_end(trainer, _module({}))
        assert _printed(report, trainer, None, capsys).endswith(f"without dev scores: {reason}.\n")
        assert (
            json.loads((tmp_path / "scores.json").read_text())["best_model_path"] is None
        )  # no checkpoint callback
    carved = partial_headline(0.5, PARTIAL_ENTRY, 1.0, "validation")
    assert carved.startswith("No overall score: validation did not reach ")  # not "the validation evaluation"

"""Continual metrics against hand-computed matrices; ContinualEvaluation inside a real Trainer.fit."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from pal_lightning.callbacks.continual_evaluation import ContinualEvaluation, format_continual
from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.tasks.continual_metrics import continual_metrics
from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_continual_metrics_by_hand():
    R = [
        [0.8, 0.1, 0.3],
        [0.6, 0.9, 0.4],
        [0.5, 0.7, 0.7],
    ]
    b = [0.2, 0.0, 0.5]
    m = continual_metrics(R, b)
    assert m["average_accuracy"] == pytest.approx((0.5 + 0.7 + 0.7) / 3)
    # BWT: final minus just-trained, tasks 0 and 1: (0.5 - 0.8 + 0.7 - 0.9) / 2
    assert m["backward_transfer"] == pytest.approx(-0.25)
    # FWT: score just before a task's phase minus its baseline, tasks 1 and 2: (0.1 - 0.0 + 0.4 - 0.5) / 2
    assert m["forward_transfer"] == pytest.approx(0.0)
    # forgetting: best of rows 0..T-2 minus final: task 0 max(0.8, 0.6) - 0.5, task 1 max(0.1, 0.9) - 0.7
    assert m["forgetting"] == pytest.approx((0.3 + 0.2) / 2)
    # forgetting and -BWT differ when a task peaks after a later phase (task 0 peaks after phase 1)
    m2 = continual_metrics([[0.5, 0.2, 0.0], [0.8, 0.9, 0.1], [0.6, 0.7, 0.4]], [0.1, 0.3, 0.2])
    assert m2["backward_transfer"] == pytest.approx((0.1 - 0.2) / 2)
    assert m2["forgetting"] == pytest.approx((0.2 + 0.2) / 2)
    assert m2["forward_transfer"] == pytest.approx((0.2 - 0.3 + 0.1 - 0.2) / 2)
    assert math.isnan(continual_metrics(R)["forward_transfer"])
    one = continual_metrics([[0.7]], [0.1])
    assert one["average_accuracy"] == 0.7 and math.isnan(one["backward_transfer"])
    with pytest.raises(ValueError, match="T x T"):
        continual_metrics([[0.1, 0.2]])
    with pytest.raises(ValueError, match="baseline"):
        continual_metrics(R, [0.1])


def _fit(data_dir: Path, root: Path, callback: ContinualEvaluation, ckpt_path=None, callbacks=()):
    pl.seed_everything(3)
    # no dropout: a resumed run then matches the uninterrupted one without restoring RNG states
    no_dropout = {**TINY_BERT, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    model = MultiTaskModule(
        encoder_config=no_dropout, adapter={"size": 8, "num_heads": 2}, dropout=0.0, optim={"head_lr": 1e-2}
    )
    dm = MultiTaskDataModule(
        data_dir=str(data_dir),
        cache_dir=False,
        batch_size=4,
        eval_batch_size=8,
        max_length=32,
        schedule="sequential",
        steps_per_task=2,
    )
    trainer = quiet_trainer(
        max_epochs=1,
        logger=pl.loggers.CSVLogger(root, name="", version=0),
        enable_checkpointing=bool(callbacks),
        limit_val_batches=0,
        callbacks=[callback, *callbacks],
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return trainer, model


def _printed_report(out: str) -> dict[str, list[str]]:
    """The printed report's lines by their first word (``after``, ``baseline``, a task, ``ACC``)."""
    lines = out[out.index("Continual evaluation (") :].splitlines()
    return {line.split()[0]: line.split()[1:] for line in lines[1:] if line.strip()}


def test_continual_evaluation_in_trainer_fit(tmp_path, capsys):
    data_dir = write_cs224n_data(tmp_path / "data", n_train=16, n_dev=10)
    cb = ContinualEvaluation(limit_eval_examples=6)
    ckpt = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ck", every_n_train_steps=1, save_top_k=-1, filename="{step}"
    )
    trainer, model = _fit(data_dir, tmp_path / "run", cb, callbacks=[ckpt])
    # the end of the run prints R and the figures (issue 43, item 5), as continual.csv/.json hold them
    out = capsys.readouterr().out
    assert "Continual evaluation (dev, first 6 examples per task)" in out
    assert "sst accuracy, qqp accuracy, sts pearson" in out
    printed = _printed_report(out)
    assert printed["after"] == ["sst", "qqp", "sts"]
    for after, row in zip(["baseline", "sst", "qqp", "sts"], [cb.baseline, *cb.R], strict=True):
        assert [float(x) for x in printed[after]] == pytest.approx(row, abs=5e-5)
    words = ["ACC", *printed["ACC"]]  # ACC <v>   BWT <v>   FWT <v>   forgetting <v>
    figures = dict(zip(words[::2], words[1::2], strict=True))
    expected = continual_metrics(cb.R, cb.baseline)
    assert float(figures["ACC"]) == pytest.approx(expected["average_accuracy"], abs=5e-5)
    assert float(figures["BWT"]) == pytest.approx(expected["backward_transfer"], abs=5e-5)
    assert float(figures["FWT"]) == pytest.approx(expected["forward_transfer"], abs=5e-5)
    assert f"saved to {Path(trainer.log_dir) / 'continual.csv'} and continual.json" in out
    assert model.training  # train mode restored after each evaluation
    assert cb.tasks == ["sst", "qqp", "sts"] and cb.phases == [["sst", 0, 2], ["qqp", 2, 4], ["sts", 4, 6]]
    assert cb.baseline is not None and len(cb.R) == 3 and all(len(r) == 3 for r in cb.R)
    # the model changed between evaluations: rows differ from the baseline
    assert any(abs(x - y) > 0 for row in cb.R for x, y in zip(row, cb.baseline, strict=True))
    assert sorted(h["after"] for h in cb.history) == sorted(["baseline", "sst", "qqp", "sts"])
    # SST accuracy on 6 examples, STS Pearson in [-1, 1]
    assert all(v * 6 == pytest.approx(round(v * 6)) for v in [cb.baseline[0], *(r[0] for r in cb.R)])
    assert all(-1 <= r[2] <= 1 for r in cb.R)

    run = Path(trainer.log_dir)
    with open(run / "continual.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["after", "sst", "qqp", "sts"] and [r[0] for r in rows[1:]] == [
        "baseline",
        *rows[0][1:],
    ]
    flat = [float(x) for r in rows[1:] for x in r[1:]]
    assert flat == pytest.approx([x for r in [cb.baseline, *cb.R] for x in r], abs=1e-6)
    payload = json.loads((run / "continual.json").read_text())
    expected = continual_metrics(cb.R, cb.baseline)
    assert payload["complete"] and payload["metrics"] == pytest.approx(expected)
    assert payload["limit_eval_examples"] == 6
    # logged through the trainer's loggers
    trainer.loggers[0].save()
    with open(run / "metrics.csv", newline="") as f:
        header = next(csv.reader(f))
    assert {"continual/R/baseline/sst", "continual/R/sts/qqp", "continual/backward_transfer"} <= set(header)

    # resume in the middle of phase 2 (after 3 batches): earlier rows come from the checkpoint,
    # the remaining phases are evaluated once each, and the matrix equals the uninterrupted run's;
    # run into the same directory, it keeps the first run's files
    state = torch.load(tmp_path / "ck" / "step=3.ckpt", weights_only=True)
    saved = next(v for k, v in state["callbacks"].items() if "ContinualEvaluation" in k)
    assert len(saved["R"]) == 1 and saved["baseline"] is not None
    first = (run / "continual.json").read_text()
    cb3 = ContinualEvaluation(limit_eval_examples=6)
    _fit(data_dir, tmp_path / "run", cb3, ckpt_path=tmp_path / "ck" / "step=3.ckpt")
    assert (run / "continual.json").read_text() == first
    assert (run / "continual_1.csv").is_file() and (run / "continual_1.json").is_file()
    assert [h["after"] for h in cb3.history] == ["baseline", "sst", "qqp", "sts"]
    assert cb3.baseline == cb.baseline
    assert [x for r in cb3.R for x in r] == pytest.approx([x for r in cb.R for x in r], abs=1e-5)


def test_needs_a_sequential_schedule(tmp_path):
    data_dir = write_cs224n_data(tmp_path / "data", n_train=8, n_dev=4)
    model = MultiTaskModule(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    dm = MultiTaskDataModule(data_dir=str(data_dir), cache_dir=False, batch_size=4, max_length=32)
    trainer = quiet_trainer(
        max_steps=1, limit_val_batches=0, default_root_dir=tmp_path, callbacks=[ContinualEvaluation()]
    )
    with pytest.raises(PalUserError, match="schedule='sequential'"):
        trainer.fit(model, datamodule=dm)
    with pytest.raises(PalUserError, match="limit_eval_examples"):
        ContinualEvaluation(limit_eval_examples=0)


def test_the_report_of_a_run_that_ended_early():
    rows = [("baseline", [0.2, 0.5]), ("sst", [0.8, 0.25])]
    text = format_continual(["sst", "qqp"], ["accuracy", "accuracy"], rows, None, "dev")
    lines = text.splitlines()
    assert (
        lines[2].split() == "baseline 0.2000 0.5000".split()
        and lines[3].split() == "sst 0.8000 0.2500".split()
    )
    assert lines[-1].strip() == "ACC, BWT, FWT: after all 2 phases (1 evaluated; the run ended before)"
    rows = [("baseline", [0.1, 0.2]), ("a", [0.8, 0.3]), ("b", [0.7, 0.9])]
    summary = continual_metrics([[0.8, 0.3], [0.7, 0.9]], [0.1, 0.2])
    done = format_continual(["a", "b"], ["accuracy", "accuracy"], rows, summary, "dev")
    assert done.splitlines()[-1].split() == "ACC 0.8000 BWT -0.1000 FWT +0.1000 forgetting 0.1000".split()

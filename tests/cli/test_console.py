"""The console of ``pal-lightning fit`` without Lightning's noise a user cannot act on (checkpoint warnings,
datasets' progress bars), one line per progress bar in a file. The runs are forked from the session's CLI
driver (``forked_cli``) with stdout and stderr in files; the quickstart's console in a real process is
test_cli_subprocess.py's."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli, subprocess_env


def test_quiet_lightning_drops_only_the_listed_lines() -> None:
    import logging

    from pal_lightning.cli.console import quiet_lightning

    quiet_lightning()
    quiet_lightning()  # idempotent: one filter per logger
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda"):
        logger = logging.getLogger(name)
        assert len(logger.filters) == 1
        handler = Keep()
        logger.addHandler(handler)
        try:
            logger.warning("GPU available: True (cuda), used: True")
            logger.warning("LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]")
            logger.warning("`Trainer.fit` stopped: `max_steps=4` reached.")
            logger.warning("Checkpoint directory exists and is not empty.")  # actionable: kept
        finally:
            logger.removeHandler(handler)
    assert seen == ["Checkpoint directory exists and is not empty."] * 2


LIGHTNING_CHECKPOINT_WARNINGS = ("could not find the monitored key", "The dirpath has changed")


@pytest.fixture
def _cli(forked_cli: ForkedCli) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        # stdout is a file, as when a run is logged to one
        return forked_cli.run([(cwd, args)], env={**subprocess_env(), "COLUMNS": ""})[0]

    return run


def _bars(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("Epoch ")]


def test_quiet_trainer_builds_and_fits_without_a_line(capfd: pytest.CaptureFixture[str]) -> None:
    """pal_lightning.testing.quiet_trainer: no GPU-available line, no logger tip, nothing at fit's end."""
    import logging

    from pal_lightning.cli import console
    from pal_lightning.testing import quiet_trainer
    from pal_lightning.testing.batches import TinyData, tiny_module

    seen: list[str] = []

    class Keep(logging.Handler):  # what reaches Lightning's handlers, whichever stream they were bound to
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    for name in console._LIGHTNING_LOGGERS:  # as in a fresh process, before anything made Lightning quiet
        logging.getLogger(name).removeFilter(console._keep)
        logging.getLogger(name).addHandler(handler)
    try:
        module, data = tiny_module(), TinyData()
        data.steps = 2
        capfd.readouterr()
        trainer = quiet_trainer(max_steps=2, limit_val_batches=0)
        trainer.fit(module, datamodule=data)
    finally:
        for name in console._LIGHTNING_LOGGERS:
            logging.getLogger(name).removeHandler(handler)
    assert trainer.global_step == 2
    assert seen == [] and capfd.readouterr() == ("", "")


def test_a_resumed_run_logged_to_a_file_with_a_task_read_through_datasets(
    tmp_path: Path, _cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    data = write_cs224n_data(tmp_path / "data")
    reviews = data / "reviews"
    reviews.mkdir()
    for split, n in (("train", 16), ("dev", 8)):
        rows = [f"{'a fine film' if i % 2 else 'dull and long'} {i},{i % 2}" for i in range(n)]
        (reviews / f"{split}.csv").write_text("text,positive\n" + "\n".join(rows) + "\n")
    task = {
        "name": "reviews",
        "num_labels": 2,
        "format": "hf",
        "files": {"train": "reviews/train.csv", "dev": "reviews/dev.csv"},
        "text_columns": ["text"],
        "label_column": "positive",
        "id_column": None,
    }
    my_sts = {  # a task of the CS224N files defined inline (no registration): model and data agree on it
        "name": "my_sts",
        "kind": "pair_regression",
        "num_labels": 1,
        "label_range": [0, 5],
        "metrics": ["pearson"],
        "files": {"train": "sts-train.csv", "dev": "sts-dev.csv"},
        "text_columns": ["sentence1", "sentence2"],
        "label_column": "similarity",
    }
    config = write_tiny_fit_config(tmp_path, data, tasks=["sst", task, my_sts])
    settings = yaml.safe_load(config.read_text())
    settings["trainer"].update(enable_progress_bar=True, max_steps=9)
    settings["data"]["init_args"]["steps_per_epoch"] = 6
    config.write_text(yaml.safe_dump(settings))
    stop = tmp_path / "stop.yaml"  # SIGTERM after step 3, in the middle of the first epoch
    callback = {"class_path": "pal_lightning.testing.callbacks.SignalAtStep", "init_args": {"step": 3}}
    stop.write_text(yaml.safe_dump({"trainer": {"callbacks": [callback]}}))
    first = _cli(tmp_path, "fit", "--config", str(config), "--config", str(stop))
    assert first.returncode == 143, first.stderr[-3000:]
    resumed = _cli(tmp_path, "fit", "--config", str(config), "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    console = resumed.stdout + resumed.stderr
    for warning in LIGHTNING_CHECKPOINT_WARNINGS:
        assert warning not in console, warning
    assert "Restored all states" not in console  # the CLI already said "resuming from <checkpoint>"
    bars = _bars(resumed.stdout)
    assert len(bars) == 2, resumed.stdout
    for bar in bars:  # one line each, metrics included
        assert re.search(r" \d+/\d+ ", bar) and "train/loss:" in bar, bar
    # the task read through datasets was validated, and datasets showed no progress bars
    assert "val/reviews" in (tmp_path / "runs" / "version_1" / "metrics.csv").read_text()
    # the inline task was trained and validated (a tiny random model may give a NaN Pearson, which the
    # report leaves out, so check its loss)
    scores = json.loads((tmp_path / "runs" / "version_1" / "scores.json").read_text())
    assert "val/my_sts/loss" in scores["best"]["scores"]
    assert "my_sts" in (tmp_path / "runs" / "version_1" / "hparams.yaml").read_text()
    for proc in (first, resumed):
        assert "Generating" not in proc.stdout + proc.stderr and "split:" not in proc.stderr


def test_validation_off_gives_no_checkpoint_warning(
    tmp_path: Path, _cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    proc = _cli(tmp_path, "fit", "--config", str(config), "--trainer.limit_val_batches", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stale in (*LIGHTNING_CHECKPOINT_WARNINGS, "no validation ran", "set it to at most"):
        assert stale not in proc.stdout + proc.stderr, stale
    assert "without dev scores: --trainer.limit_val_batches is 0, which turns validation off" in proc.stdout
    assert "pal-lightning validate --config <run>/config.yaml --ckpt_path last" in proc.stdout
    assert json.loads((tmp_path / "runs" / "version_0" / "scores.json").read_text())["overall"] is None
    # a misspelled monitor is still an error once a validation has run
    bad = _cli(tmp_path, "fit", "--config", str(config), "--checkpoint.monitor", "val/overal")
    assert bad.returncode != 0 and "could not find the monitored key" in bad.stderr

"""The console of ``pal-lightning fit``: progress, the scores and where the files went, without Lightning's
noise a user cannot act on (checkpoint warnings, datasets' progress bars), one line per progress bar in a
file. The quickstart runs as ``python -m pal_lightning``; the other runs are forked from the session's CLI
driver (``forked_cli``) with stdout and stderr in files."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import TINY_BERT, write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli, subprocess_env

ROOT = Path(__file__).resolve().parents[2]
NOISE = (
    "Tip:",
    "litlogger",
    "GPU available",
    "TPU available",
    "LeafSpec",
    "Restoring states",
    "Traceback",
)


def test_quickstart_console_is_quiet_and_complete(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    data = write_cs224n_data(tmp_path / "data")
    train = data / "ids-sst-train.csv"
    train.write_text(train.read_text() + "99\tbad\tno label here\tX\n")  # one bad row: one warning
    tiny = {
        "trainer": {"accelerator": "cpu", "max_steps": 4, "check_val_every_n_epoch": 1},
        "model": {"init_args": {"encoder_config": TINY_BERT, "adapter": {"size": 8, "num_heads": 2}}},
        "data": {
            "init_args": {
                "data_dir": str(data),
                "batch_size": 4,
                "eval_batch_size": 16,
                "max_length": 32,
                "steps_per_epoch": 2,
                "cache_dir": str(tmp_path / "cache"),  # prepare_data caches, setup reloads: still one warning
            }
        },
    }
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    proc = subprocess.run(
        [sys.executable, "-m", "pal_lightning", "fit", "--config", str(ROOT / "configs" / "quickstart.yaml")]
        + ["--config", str(tmp_path / "tiny.yaml"), "--trainer.default_root_dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    for noise in NOISE:
        assert noise not in console, noise
    assert console.count("bad row") == 1, console
    run = tmp_path / "runs" / "version_0"
    assert "Epoch 0" in proc.stdout  # progress
    table = proc.stdout.index("CS224N overall (dev):")
    assert table > proc.stdout.rindex("Epoch ")  # the bar is not redrawn under the scores
    assert f"best checkpoint: {run / 'checkpoints'}" in proc.stdout and f"run folder: {run}" in proc.stdout

    # predict says where it wrote
    capfd.readouterr()
    assert main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]) == 0
    out, err = capfd.readouterr()
    assert f"pal-lightning: wrote 6 prediction file(s) to {run / 'predictions'}: " in out
    for noise in NOISE:
        assert noise not in out + err, noise


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


def test_a_resumed_run_logged_to_a_file(
    tmp_path: Path, _cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
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


def test_validation_off_gives_no_checkpoint_warning(
    tmp_path: Path, _cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    proc = _cli(tmp_path, "fit", "--config", str(config), "--trainer.limit_val_batches", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for warning in LIGHTNING_CHECKPOINT_WARNINGS:
        assert warning not in proc.stdout + proc.stderr, warning
    assert "without dev scores: --trainer.limit_val_batches is 0" in proc.stdout
    # a misspelled monitor is still an error once a validation has run
    bad = _cli(tmp_path, "fit", "--config", str(config), "--checkpoint.monitor", "val/overal")
    assert bad.returncode != 0 and "could not find the monitored key" in bad.stderr


def test_a_task_read_through_datasets_shows_no_progress_bars(
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
    config = write_tiny_fit_config(tmp_path, data, tasks=["sst", task])
    proc = _cli(tmp_path, "fit", "--config", str(config))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "val/reviews" in (tmp_path / "runs" / "version_0" / "metrics.csv").read_text()
    assert "Generating" not in proc.stdout + proc.stderr and "split:" not in proc.stderr

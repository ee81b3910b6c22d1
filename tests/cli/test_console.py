"""The console of ``pal-lightning fit --config configs/quickstart.yaml`` (on a tiny model, issue 18,
item 7): what is trained, progress, the scores and where the files went, without Lightning's noise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import TINY_BERT, write_cs224n_data

from .conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
NOISE = (
    "Tip:",
    "litlogger",
    "GPU available",
    "TPU available",
    "LeafSpec",
    "FLOPs",
    "Total params",
    "/-2",
    "Restoring states",
    "Traceback",
)


def test_quickstart_console_is_quiet_and_complete(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    data = write_cs224n_data(tmp_path / "data")
    train = data / "ids-sst-train.csv"
    train.write_text(train.read_text() + "99\tbad\tno label here\tX\n")  # one bad row: one warning
    tiny = {
        "trainer": {"accelerator": "cpu", "max_steps": 4, "check_val_every_n_epoch": 1},
        "model": {"init_args": {"bert_config": TINY_BERT, "adapter": {"size": 8, "num_heads": 2}}},
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
    summary = (
        "pal-lightning: fit MultiTaskModule on sst, qqp, sts (adapter pals (size 8, num_heads 2); randomly initialised encoder)"
    )
    assert summary in proc.stdout and f"run folder {run}" in proc.stdout
    assert "Epoch 0 (max 4 steps)" in proc.stdout  # progress
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

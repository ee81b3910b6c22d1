"""A logger given with ``--trainer.logger`` is used as given (docs/scaling.md, "Other loggers"): the CLI adds its own
CSV and TensorBoard loggers only when none is given."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ROOT


def _trained_steps(metrics: Path) -> list[int]:
    with metrics.open() as f:
        rows = list(csv.DictReader(f))
    assert any(r.get("val/overall") for r in rows)
    return sorted(
        {int(r["step"]) for r in rows if any(r.get(f"train/{t}/loss") for t in ("sst", "qqp", "sts"))}
    )


def test_fit_logs_to_a_user_given_logger(tmp_path: Path) -> None:
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    logs = tmp_path / "my_logs"
    logger = (
        "{class_path: lightning.pytorch.loggers.CSVLogger, "
        f"init_args: {{save_dir: {logs}, name: mine, version: first}}}}"
    )
    assert main(["fit", "--config", str(config), "--trainer.logger", logger]) == 0
    run = logs / "mine" / "first"
    assert _trained_steps(run / "metrics.csv") == [0, 1, 2, 3]  # 4 steps of the tiny config, 0-based
    # everything of the run follows the user's logger: no TensorBoard events, no default run folder
    assert (run / "config.yaml").is_file() and list((run / "checkpoints").glob("*.ckpt"))
    assert not (run / "tensorboard").exists() and not (tmp_path / "runs" / "version_0").exists()


def test_the_docs_logger_list_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loggers.yaml of docs/scaling.md, with TensorBoard standing in for W&B (not installed here)."""
    readme = (ROOT / "docs" / "scaling.md").read_text()
    section = readme.split("## Other loggers\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    values = yaml.safe_load(block)
    loggers = values["trainer"]["logger"]
    assert [entry["class_path"].rsplit(".", 1)[1] for entry in loggers] == ["CSVLogger", "WandbLogger"]
    loggers[1] = {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": loggers[1]["init_args"]["save_dir"], "name": "tb"},
    }
    (tmp_path / "loggers.yaml").write_text(yaml.safe_dump(values))
    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)  # the README's save_dir is relative
    assert main(["fit", "--config", str(config), "--config", "loggers.yaml"]) == 0
    run = tmp_path / "runs" / "quickstart_wandb" / "version_0"
    assert _trained_steps(run / "metrics.csv") == [0, 1, 2, 3]
    assert (run / "config.yaml").is_file() and list((run / "checkpoints").glob("*.ckpt"))
    assert list((tmp_path / "runs" / "quickstart_wandb" / "tb").rglob("events.out.tfevents.*"))

"""Run folders: ``--ckpt_path last``/``best`` and what a failed command leaves (the evaluations of a run's
checkpoint logging into that run are test_cli.py's fit test), version folders, and loggers given in the
config are used as given (docs/scaling.md, "Other loggers"): the CLI adds its own CSV and TensorBoard
loggers only when none is given."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.cli.run_folders import (
    claim_version_dir,
    discard_unused,
    find_newest,
    next_version_dir,
)
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ROOT, error_line


def test_best_without_a_best_checkpoint_says_where_it_looked(
    tiny_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--config", str(tiny_yaml), "--ckpt_path", "best"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert f"No best.ckpt to load from under {tmp_path / 'runs'}" in err
    assert "covers every scored task" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_discard_unused_keeps_results(tmp_path: Path) -> None:
    empty = tmp_path / "root" / "run" / "validate" / "version_0"
    (empty / "tensorboard").mkdir(parents=True)
    (empty / "tensorboard" / "events.out").write_text("x")
    assert discard_unused(empty, stop=tmp_path / "root" / "run")
    assert not (tmp_path / "root" / "run" / "validate").exists() and (tmp_path / "root" / "run").is_dir()

    logged = tmp_path / "root" / "version_2"  # failed after logging some steps: its logs stay
    logged.mkdir(parents=True)
    (logged / "metrics.csv").write_text("epoch,step,train/loss\n0,0,0.5\n")
    assert not discard_unused(logged, stop=tmp_path)
    (logged / "metrics.csv").write_text("epoch,step,train/loss\n")  # a header alone is no result
    assert discard_unused(logged, stop=tmp_path)

    kept = tmp_path / "root" / "version_1"
    (kept / "checkpoints").mkdir(parents=True)
    (kept / "checkpoints" / "last.ckpt").write_bytes(b"w")
    assert not discard_unused(kept, stop=tmp_path)
    assert (kept / "checkpoints" / "last.ckpt").is_file()


def test_a_run_this_user_cannot_write_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pal_lightning.cli import run_folders

    ckpt = tmp_path / "run" / "checkpoints" / "best.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"w")
    assert run_folders.evaluation_log_root(ckpt, "validate") == tmp_path / "run" / "validate"
    # (tests run as root here, for whom every folder is writable: simulate a colleague's run)
    monkeypatch.setattr(run_folders.os, "access", lambda path, mode: False)
    assert run_folders.evaluation_log_root(ckpt, "validate") is None  # a new run folder instead


def test_next_version_dir_follows_the_highest(tmp_path: Path) -> None:
    assert next_version_dir(tmp_path / "absent") == "version_0"
    for name in ("version_0", "version_2", "version_x", "other"):
        (tmp_path / name).mkdir()
    assert next_version_dir(tmp_path) == "version_3"


def test_claim_skips_a_number_taken_after_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pal_lightning.cli.run_folders as rf

    (tmp_path / "version_0").mkdir()  # another run created it after this one scanned the root
    stale = iter(["version_0"])
    real = rf.next_version_dir
    monkeypatch.setattr(rf, "next_version_dir", lambda root: next(stale, None) or real(root))
    assert claim_version_dir(tmp_path) == tmp_path / "version_1"
    assert (tmp_path / "version_1").is_dir()


def test_concurrent_claims_get_different_folders(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path / "new" / "runs"  # created by the first claim
    with ThreadPoolExecutor(max_workers=8) as pool:
        folders = list(pool.map(lambda _: claim_version_dir(root), range(40)))
    assert len(set(folders)) == 40
    assert sorted(f.name for f in folders) == sorted(f"version_{i}" for i in range(40))


def test_a_full_disk_while_saving_a_checkpoint_is_one_line(
    tiny_yaml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    import pal_lightning.core.files as files

    publish = files._publish

    def full_for_checkpoints(tmp: str, path: Path) -> None:
        if path.suffix == ".ckpt":
            raise OSError(errno.ENOSPC, "No space left on device", tmp)
        publish(tmp, path)

    monkeypatch.setattr(files, "_publish", full_for_checkpoints)
    assert main(["fit", "--config", str(tiny_yaml)]) == USER_ERROR_EXIT
    line = error_line(capsys.readouterr().err)
    assert ".ckpt: No space left on device" in line and "free some disk space" in line
    checkpoints = tmp_path / "runs" / "version_0" / "checkpoints"
    assert not any(checkpoints.glob("*.ckpt")) and not any(checkpoints.glob(".*.tmp"))


def test_find_newest_last_checkpoint(tmp_path: Path) -> None:
    assert find_newest(tmp_path, "last*.ckpt") is None
    paths = []
    for version, mtime in ((0, 100), (1, 300), (2, 200)):
        path = tmp_path / f"version_{version}" / "checkpoints" / "last.ckpt"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x")
        os.utime(path, ns=(mtime * 10**9, mtime * 10**9))
        paths.append(path)
    (tmp_path / "version_2" / "checkpoints" / ".last.ckpt.abc.tmp").write_bytes(b"half")
    assert find_newest(tmp_path, "last*.ckpt") == paths[1]


def _trained_steps(metrics: Path) -> list[int]:
    with metrics.open() as f:
        rows = list(csv.DictReader(f))
    assert any(r.get("val/overall") for r in rows)
    return sorted(
        {int(r["step"]) for r in rows if any(r.get(f"train/{t}/loss") for t in ("sst", "qqp", "sts"))}
    )


def test_the_docs_logger_list_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loggers.yaml of docs/scaling.md, with TensorBoard standing in for W&B (not installed here), is
    used as given."""
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
    # everything of the run follows the user's loggers: not the CLI's TensorBoard, not its default folder
    assert not (run / "tensorboard").exists() and not (tmp_path / "runs" / "version_0").exists()

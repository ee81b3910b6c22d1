"""SIGTERM (a cluster scheduler) and Ctrl-C (SIGINT) during ``fit`` through the real entry point (issue 13,
item 3): the run stops at the end of the step, writes a resumable ``last.ckpt``, prints one line saying
how to resume, exits ``128 + signal`` with no traceback, and ``--ckpt_path last`` then ends with the
weights of an uninterrupted run. Each run is a process of its own, forked from the session's CLI driver
(``forked_cli``: ``sys.exit(main())`` after the imports)."""

from __future__ import annotations

import csv
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pal_lightning.callbacks.graceful_stop import stop_message, stop_status
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli

STEPS_PER_EPOCH, EVERY, SIGNAL_AT, MAX_STEPS = 4, 3, 7, 12
SIGNALS = ("SIGTERM", "SIGINT")


def _job(cwd: Path, *args: str) -> tuple[Path, list[str]]:
    """The job of ``pal-lightning fit --config tiny.yaml ARGS`` in ``cwd``, for ``ForkedCli.run``."""
    return cwd, ["fit", "--config", "tiny.yaml", *args]


def _config(folder: Path, data: Path, signal_name: str | None) -> None:
    folder.mkdir(parents=True)
    path = write_tiny_fit_config(folder, data)
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    config["trainer"]["max_steps"] = MAX_STEPS
    config["data"]["init_args"]["steps_per_epoch"] = STEPS_PER_EPOCH
    config["model"]["init_args"]["dropout"] = 0.2  # the random state matters for an exact resume
    config["last_checkpoint"] = {"every_n_train_steps": EVERY}  # periodic saves at 3, 6, 9: not at 7
    if signal_name is not None:
        config["trainer"]["callbacks"] = [
            {
                "class_path": "pal_lightning.testing.callbacks.SignalAtStep",
                "init_args": {"step": SIGNAL_AT, "signal_name": signal_name},
            }
        ]
    path.write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, Any]:
    """An uninterrupted run and one run per signal (in parallel), then the resumes."""
    root = tmp_path_factory.mktemp("signals")
    data = write_cs224n_data(root / "data")
    folders = {"full": root / "full", **{name: root / name for name in SIGNALS}}
    for name, folder in folders.items():
        _config(folder, data, None if name == "full" else name)
    out: dict[str, Any] = {"folders": folders}
    first = forked_cli.run([_job(folder) for folder in folders.values()])
    out["first"] = dict(zip(folders, first, strict=True))
    out["saved"] = {
        name: torch.load(
            folders[name] / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True
        )
        for name in SIGNALS
        if (folders[name] / "runs" / "version_0" / "checkpoints" / "last.ckpt").is_file()
    }
    resumes = [_job(folders[name], "--trainer.callbacks", "[]", "--ckpt_path", "last") for name in SIGNALS]
    out["resumed"] = dict(zip(SIGNALS, forked_cli.run(resumes), strict=True))
    return out


def test_stop_status_and_message_by_hand() -> None:
    assert stop_status(signal.SIGTERM) == 143 and stop_status(signal.SIGINT) == 130  # the shell's 128 + n
    line = stop_message("SIGTERM", 7, "/r/last.ckpt")
    assert line.startswith("pal-lightning: stopped by SIGTERM after step 7;") and "--ckpt_path last" in line
    assert "no checkpoint was written" in stop_message("SIGINT", 2, None)


@pytest.mark.parametrize("signal_name", SIGNALS)
def test_a_signal_during_fit_stops_cleanly_and_resume_is_exact(
    runs: dict[str, Any], signal_name: str
) -> None:
    full = runs["first"]["full"]
    assert full.returncode == 0, full.stderr[-3000:]
    stopped = runs["first"][signal_name]
    ckpt_dir = runs["folders"][signal_name] / "runs" / "version_0" / "checkpoints"
    assert stopped.returncode == 128 + signal.Signals[signal_name], stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    lines = [line for line in stopped.stderr.splitlines() if line.startswith("pal-lightning: stopped")]
    assert lines == [stop_message(signal_name, SIGNAL_AT, str(ckpt_dir / "last.ckpt"))]

    # last.ckpt holds step 7, the step the signal arrived in (periodic saves were at 3 and 6 only)
    saved = runs["saved"][signal_name]
    assert saved["global_step"] == SIGNAL_AT and saved["epoch"] == 1  # mid-epoch (steps 5-8)
    assert not list(ckpt_dir.glob(".*.tmp"))

    resumed = runs["resumed"][signal_name]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {ckpt_dir / 'last.ckpt'}" in resumed.stderr
    folders = runs["folders"]
    final = torch.load(
        folders[signal_name] / "runs" / "version_1" / "checkpoints" / "last.ckpt", weights_only=True
    )
    reference = torch.load(
        folders["full"] / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True
    )
    assert final["global_step"] == reference["global_step"] == MAX_STEPS
    assert final["state_dict"].keys() == reference["state_dict"].keys()
    for name, value in reference["state_dict"].items():
        assert torch.allclose(final["state_dict"][name], value, atol=1e-6, rtol=0), name
    assert final["MultiTaskDataModule"] == reference["MultiTaskDataModule"]
    # the last validation (step 12) logs the uninterrupted run's scores
    last_val = [
        _last_validation(folders[k] / "runs" / v)
        for k, v in ((signal_name, "version_1"), ("full", "version_0"))
    ]
    assert last_val[0] == last_val[1] and last_val[0][0] == MAX_STEPS


def _last_validation(run: Path) -> tuple[int, float]:
    with (run / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/overall")]
    return int(rows[-1]["step"]), round(float(rows[-1]["val/overall"]), 6)


@pytest.mark.parametrize("where", ["reading the data", "building the model"])
def test_ctrl_c_before_training_is_one_line(
    where: str, tiny_yaml: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pal_lightning.data.split_cache as split_cache
    from pal_lightning.cli.main import main

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # Ctrl-C while the data is read (before Lightning's own handling starts)

    if (
        where == "reading the data"
    ):  # inside Lightning's Trainer.fit (prepare_data): Lightning's handler first
        monkeypatch.setattr(split_cache, "read_split", interrupted)
    else:  # before the Trainer runs
        import pal_lightning.module.multitask as module

        monkeypatch.setattr(module.MultiTaskModule, "__init__", interrupted)
    assert main(["fit", "--config", str(tiny_yaml)]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("pal-lightning:")] == [
        "pal-lightning: interrupted (Ctrl-C); no checkpoint was written at this point "
        "(a fit resumes from its last last.ckpt with --ckpt_path last)."
    ]
    assert not (tiny_yaml.parent / "runs").exists() or not any((tiny_yaml.parent / "runs").iterdir())


@pytest.mark.ddp
def test_a_signal_to_one_ddp_rank_stops_every_rank_at_the_same_step(
    tmp_path: Path, forked_cli: ForkedCli
) -> None:
    """SIGTERM to rank 1 alone (2 CPU processes, gloo; rank 0 forked from the session's CLI driver,
    rank 1 started by Lightning as from ``python -m pal_lightning``): the ranks agree at the step's end,
    write one last.ckpt of that step together and all exit 143, with one line from rank 0 and no hang."""
    _config(tmp_path / "run", write_cs224n_data(tmp_path / "data"), "SIGTERM")
    path = tmp_path / "run" / "tiny.yaml"
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    config["trainer"]["callbacks"][0]["init_args"]["rank"] = 1
    config["trainer"].update(devices=2, strategy="ddp_find_unused_parameters_true")
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    (proc,) = forked_cli.run([_job(tmp_path / "run")])
    ckpt = tmp_path / "run" / "runs" / "version_0" / "checkpoints" / "last.ckpt"
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("pal-lightning: stopped")]
    assert lines == [stop_message("SIGTERM", SIGNAL_AT, str(ckpt))]
    assert torch.load(ckpt, weights_only=True)["global_step"] == SIGNAL_AT

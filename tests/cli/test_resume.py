"""Kill, signal and resume through the real entry point (issue 13, item 3). A run SIGKILLed mid-epoch (in the
middle of writing a checkpoint), resumed with ``--ckpt_path last``, ends with the weights (and GEM memories)
of an uninterrupted run: the plain, the GEM (with a mixed layer-sharing regime: F frozen + I individual layers)
and the two-stage variant (stage 2: ``init_from`` a stage-1 checkpoint, encoder frozen, an auxiliary task
drawn at half its rate). SIGTERM (a cluster scheduler) and
Ctrl-C (SIGINT) stop at the end of the step, write a resumable ``last.ckpt``, print one line saying how to
resume and exit ``128 + signal`` with no traceback; the resume ends as the plain uninterrupted run. All runs
come from one module fixture, each a process of its own forked from the session's CLI driver."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pal_lightning.callbacks.graceful_stop import stop_message, stop_status
from pal_lightning.core.checkpoint_io import AtomicCheckpointIO
from pal_lightning.testing import TINY_GEM as GEM
from pal_lightning.testing import save_stage1_checkpoint, write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli

STEPS_PER_EPOCH, EVERY, KILL_AT, SIGNAL_AT, MAX_STEPS = 4, 3, 9, 7, 12
VARIANTS = ("plain", "gem", "stage2")
SIGNALS = ("SIGTERM", "SIGINT")


def _fit(cwd: Path, *args: str) -> tuple[Path, list[str]]:
    """The job of ``pal-lightning fit --config tiny.yaml ARGS`` in ``cwd``, for ``ForkedCli.run``."""
    return cwd, ["fit", "--config", "tiny.yaml", *args]


def _config(folder: Path, data: Path, callbacks: list[dict[str, Any]], variant: str = "plain") -> None:
    folder.mkdir(parents=True)
    path = write_tiny_fit_config(folder, data)
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    if variant == "gem":  # TINY_BERT's two layers: the bottom one frozen, the top one a copy per task
        config["model"]["init_args"]["layer_sharing"] = "FI"
    if variant == "stage2":
        model = config["model"]["init_args"]
        model["init_from"] = str(save_stage1_checkpoint(folder / "stage1.ckpt", model))
        model.update(optim={"freeze_encoder": True}, auxiliary=["sts"])
        config["data"]["init_args"]["task_multipliers"] = {"sts": 0.5}
    config["trainer"]["max_steps"] = MAX_STEPS
    config["data"]["init_args"]["steps_per_epoch"] = STEPS_PER_EPOCH  # validation after steps 4, 8, 12
    config["model"]["init_args"]["dropout"] = 0.2  # dropout everywhere: the random state matters
    config["last_checkpoint"] = {"every_n_train_steps": EVERY}  # periodic saves at 3, 6, 9
    config["trainer"]["callbacks"] = callbacks
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _at_step(name: str, step: int, **init_args: Any) -> dict[str, Any]:
    return {"class_path": f"pal_lightning.testing.callbacks.{name}", "init_args": {"step": step, **init_args}}


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, dict[str, Any]]:
    """Per variant the uninterrupted and the killed run, and one run per signal (four at a time), then the
    resumes."""
    root = tmp_path_factory.mktemp("resume")
    data = write_cs224n_data(root / "data")
    out: dict[str, dict[str, Any]] = {}
    kill = _at_step("KillAtStep", KILL_AT, during_save=True)
    for variant in VARIANTS:
        out[variant] = {"full": root / variant / "full", "killed": root / variant / "killed"}
        for kind in ("full", "killed"):
            callbacks = ([GEM] if variant == "gem" else []) + ([kill] if kind == "killed" else [])
            _config(out[variant][kind], data, callbacks, variant)
    for name in SIGNALS:
        out[name] = {"killed": root / name}
        _config(root / name, data, [_at_step("SignalAtStep", SIGNAL_AT, signal_name=name)])
    jobs = [(v, kind) for v in VARIANTS for kind in ("full", "killed")] + [(s, "killed") for s in SIGNALS]
    first = forked_cli.run([_fit(out[name][kind]) for name, kind in jobs], workers=4)
    for (name, kind), proc in zip(jobs, first, strict=True):
        out[name][f"{kind}_proc"] = proc
    resumes = []
    for name in (*VARIANTS, *SIGNALS):
        run_dir = out[name]["killed"] / "runs" / "version_0"
        out[name]["before"] = _digests(run_dir)
        out[name]["saved"] = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
        # the same callbacks minus the kill switch
        callbacks = json.dumps([GEM] if name == "gem" else [])
        resumes.append(_fit(out[name]["killed"], "--trainer.callbacks", callbacks, "--ckpt_path", "last"))
    for name, proc in zip((*VARIANTS, *SIGNALS), forked_cli.run(resumes, workers=4), strict=True):
        out[name]["resumed_proc"] = proc
    return out


def _resumed_is_the_uninterrupted_run(run: dict[str, Any], full: Path) -> tuple[dict, dict]:
    """The resume's final checkpoint equals the uninterrupted run's in weights, data position and last
    validation; the interrupted run's files stay as they were. Returns both checkpoints."""
    killed = run["killed"]
    resumed = run["resumed_proc"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {killed / 'runs' / 'version_0' / 'checkpoints' / 'last.ckpt'}" in resumed.stderr
    assert _digests(killed / "runs" / "version_0") == run["before"]
    final = torch.load(killed / "runs" / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)
    reference = torch.load(full / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == reference["global_step"] == MAX_STEPS
    assert final["state_dict"].keys() == reference["state_dict"].keys()
    for name, value in reference["state_dict"].items():
        assert torch.allclose(final["state_dict"][name], value, atol=1e-6, rtol=0), name
    # the data module continued at the same position of its task schedule
    assert final["MultiTaskDataModule"] == reference["MultiTaskDataModule"]
    # metrics.csv's steps per task continued from the checkpoint's counts, not from zero
    counts = final["callbacks"]["TrainingLog"]["steps_per_task"]
    assert counts == reference["callbacks"]["TrainingLog"]["steps_per_task"]
    assert sum(counts.values()) == MAX_STEPS
    # the last validation (step 12) logs the uninterrupted run's scores
    last_val = [_last_validation(f / "runs" / v) for f, v in ((killed, "version_1"), (full, "version_0"))]
    assert last_val[0] == last_val[1] and last_val[0][0] == MAX_STEPS
    return final, reference


def _last_validation(run: Path) -> tuple[int, float]:
    with (run / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/overall")]
    return int(rows[-1]["step"]), round(float(rows[-1]["val/overall"]), 6)


@pytest.mark.parametrize("variant", VARIANTS)
def test_sigkill_mid_epoch_during_a_checkpoint_write_then_resume_last_is_exact(
    runs: dict[str, dict[str, Any]], variant: str
) -> None:
    run = runs[variant]
    assert run["full_proc"].returncode == 0, run["full_proc"].stderr[-3000:]
    killed_proc = run["killed_proc"]
    assert killed_proc.returncode == -9, killed_proc.stderr[-3000:]  # SIGKILL, in the step-9 save
    # the write of step 9 was cut half-way: last.ckpt is still the complete one of step 6
    ckpt_dir = run["killed"] / "runs" / "version_0" / "checkpoints"
    stray = list(ckpt_dir.glob(".last.ckpt.*.tmp"))
    assert len(stray) == 1 and 0 < stray[0].stat().st_size < (ckpt_dir / "last.ckpt").stat().st_size
    saved = run["saved"]
    assert saved["global_step"] == 6 and saved["epoch"] == 1  # mid-epoch (the epoch covers steps 5-8)
    assert len(saved["callbacks"]["RNGStateCallback"]["states"]) == 1
    final, reference = _resumed_is_the_uninterrupted_run(run, run["full"])
    if variant == "gem":
        gem_final, gem_reference = final["callbacks"]["GEMCallback"], reference["callbacks"]["GEMCallback"]
        assert gem_final == gem_reference and gem_reference["memory"]  # the same memories
        assert saved["callbacks"]["GEMCallback"]["memory"]  # restored from the checkpoint, not rebuilt
        assert gem_reference["projections"] > 0  # GEM did project (the memories mattered)
        assert any(".individual." in k for k in reference["state_dict"])
    if variant == "stage2":  # the frozen encoder is still the stage-1 checkpoint's, bit for bit
        start = torch.load(run["killed"] / "stage1.ckpt", weights_only=True)["state_dict"]
        encoder = [k for k in start if k.startswith("encoder.backbone.")]
        assert encoder and all(torch.equal(final["state_dict"][k], start[k]) for k in encoder)
        assert any(not torch.equal(final["state_dict"][k], start[k]) for k in start if k.startswith("heads."))


def test_stop_status_and_message_by_hand() -> None:
    assert stop_status(signal.SIGTERM) == 143 and stop_status(signal.SIGINT) == 130  # the shell's 128 + n
    line = stop_message("SIGTERM", 7, "/r/last.ckpt")
    assert line.startswith("pal-lightning: stopped by SIGTERM after step 7;") and "--ckpt_path last" in line
    assert "no checkpoint was written" in stop_message("SIGINT", 2, None)


@pytest.mark.parametrize("signal_name", SIGNALS)
def test_a_signal_during_fit_stops_cleanly_and_resume_is_exact(
    runs: dict[str, dict[str, Any]], signal_name: str
) -> None:
    run = runs[signal_name]
    stopped = run["killed_proc"]
    ckpt_dir = run["killed"] / "runs" / "version_0" / "checkpoints"
    assert stopped.returncode == 128 + signal.Signals[signal_name], stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    lines = [line for line in stopped.stderr.splitlines() if line.startswith("pal-lightning: stopped")]
    assert lines == [stop_message(signal_name, SIGNAL_AT, str(ckpt_dir / "last.ckpt"))]
    # last.ckpt holds step 7, the step the signal arrived in (periodic saves were at 3 and 6 only)
    assert run["saved"]["global_step"] == SIGNAL_AT and run["saved"]["epoch"] == 1  # mid-epoch (steps 5-8)
    assert not list(ckpt_dir.glob(".*.tmp"))
    assert runs["plain"]["full_proc"].returncode == 0
    _resumed_is_the_uninterrupted_run(run, runs["plain"]["full"])


@pytest.mark.parametrize("where", ["reading the data", "building the model"])
def test_ctrl_c_before_training_is_one_line(
    where: str, tiny_yaml: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pal_lightning.data.split_cache as split_cache
    from pal_lightning.cli.main import main

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # Ctrl-C while the data is read (before Lightning's own handling starts)

    if where == "reading the data":  # inside Lightning's Trainer.fit (prepare_data): its handler first
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
    stop = _at_step("SignalAtStep", SIGNAL_AT, signal_name="SIGTERM", rank=1)
    _config(tmp_path / "run", write_cs224n_data(tmp_path / "data"), [stop])
    ddp = ["--trainer.devices", "2", "--trainer.strategy", "ddp"]
    (proc,) = forked_cli.run([_fit(tmp_path / "run", *ddp)])
    ckpt = tmp_path / "run" / "runs" / "version_0" / "checkpoints" / "last.ckpt"
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("pal-lightning: stopped")]
    assert lines == [stop_message("SIGTERM", SIGNAL_AT, str(ckpt))]
    assert torch.load(ckpt, weights_only=True)["global_step"] == SIGNAL_AT


def test_atomic_write_interrupted_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = AtomicCheckpointIO()
    target = tmp_path / "last.ckpt"
    io.save_checkpoint({"global_step": 1, "w": torch.ones(3)}, target)

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 2, "w": torch.zeros(3)}, target)
    monkeypatch.undo()
    assert io.load_checkpoint(target, weights_only=True)["global_step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # the temporary file is gone
    io.save_checkpoint({"global_step": 3}, target)
    assert io.load_checkpoint(target, weights_only=True)["global_step"] == 3

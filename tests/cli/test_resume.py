"""Kill and resume through the real entry point: a run SIGKILLed mid-epoch (in the middle of writing a
checkpoint), resumed with ``--ckpt_path last``, ends with the weights (and GEM memories) of an
uninterrupted run. The plain, the GEM and the two-stage variant (stage 2: ``init_from`` a stage-1
checkpoint, encoder frozen, an auxiliary task drawn at half its rate) run side by side from one module
fixture, each run a process of its own forked from the session's CLI driver (``forked_cli``)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pal_lightning.core.checkpoint_io import AtomicCheckpointIO
from pal_lightning.testing import TINY_GEM as GEM
from pal_lightning.testing import save_stage1_checkpoint, write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli

STEPS_PER_EPOCH, EVERY, KILL_AT, MAX_STEPS = 4, 3, 9, 12
VARIANTS = ("plain", "gem", "stage2")


def _fit(cwd: Path, *args: str) -> tuple[Path, list[str]]:
    """The job of ``pal-lightning fit --config tiny.yaml ARGS`` in ``cwd``, for ``ForkedCli.run``."""
    return cwd, ["fit", "--config", "tiny.yaml", *args]


def _config(folder: Path, data: Path, kill: bool, gem: bool, stage2: bool = False) -> None:
    folder.mkdir(parents=True)
    path = write_tiny_fit_config(folder, data)
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    if stage2:
        model = config["model"]["init_args"]
        model["init_from"] = str(save_stage1_checkpoint(folder / "stage1.ckpt", model))
        model.update(freeze_encoder=True, auxiliary=["sts"])
        config["data"]["init_args"]["task_multipliers"] = {"sts": 0.5}
    config["trainer"]["max_steps"] = MAX_STEPS
    config["data"]["init_args"]["steps_per_epoch"] = STEPS_PER_EPOCH  # validation after steps 4, 8, 12
    config["model"]["init_args"]["dropout"] = 0.2  # dropout everywhere: the random state matters
    config["last_checkpoint"] = {"every_n_train_steps": EVERY}
    callbacks: list[dict[str, Any]] = [GEM] if gem else []
    if kill:
        kill_cb = {
            "class_path": "pal_lightning.testing.callbacks.KillAtStep",
            "init_args": {"step": KILL_AT, "during_save": True},
        }
        callbacks.append(kill_cb)
    config["trainer"]["callbacks"] = callbacks
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, dict[str, Any]]:
    """Per variant: the uninterrupted and the killed run (four at a time), then the resumes."""
    root = tmp_path_factory.mktemp("resume")
    data = write_cs224n_data(root / "data")
    out: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        out[variant] = {"full": root / variant / "full", "killed": root / variant / "killed"}
        for kind in ("full", "killed"):
            _config(
                out[variant][kind],
                data,
                kill=kind == "killed",
                gem=variant == "gem",
                stage2=variant == "stage2",
            )
    jobs = [(variant, kind) for variant in VARIANTS for kind in ("full", "killed")]
    first = forked_cli.run([_fit(out[variant][kind]) for variant, kind in jobs], workers=4)
    for (variant, kind), proc in zip(jobs, first, strict=True):
        out[variant][f"{kind}_proc"] = proc
    resumes = []
    for variant in VARIANTS:
        run_dir = out[variant]["killed"] / "runs" / "version_0"
        out[variant]["before"] = _digests(run_dir)
        out[variant]["saved"] = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
        # the same callbacks minus the kill switch
        callbacks = json.dumps([GEM] if variant == "gem" else [])
        resumes.append(_fit(out[variant]["killed"], "--trainer.callbacks", callbacks, "--ckpt_path", "last"))
    for variant, proc in zip(VARIANTS, forked_cli.run(resumes), strict=True):
        out[variant]["resumed_proc"] = proc
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_sigkill_mid_epoch_during_a_checkpoint_write_then_resume_last_is_exact(
    runs: dict[str, dict[str, Any]], variant: str
) -> None:
    run = runs[variant]
    full, killed = run["full"], run["killed"]
    assert run["full_proc"].returncode == 0, run["full_proc"].stderr[-3000:]
    assert run["killed_proc"].returncode == -9, run["killed_proc"].stderr[
        -3000:
    ]  # SIGKILL, in the step-9 save

    # the write of step 9 was cut half-way: last.ckpt is still the complete one of step 6
    ckpt_dir = killed / "runs" / "version_0" / "checkpoints"
    stray = list(ckpt_dir.glob(".last.ckpt.*.tmp"))
    assert len(stray) == 1 and 0 < stray[0].stat().st_size < (ckpt_dir / "last.ckpt").stat().st_size
    saved = run["saved"]
    assert saved["global_step"] == 6 and saved["epoch"] == 1  # mid-epoch (the epoch covers steps 5-8)
    assert len(saved["callbacks"]["RNGStateCallback"]["states"]) == 1

    resumed = run["resumed_proc"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {ckpt_dir / 'last.ckpt'}" in resumed.stderr
    assert (
        _digests(killed / "runs" / "version_0") == run["before"]
    )  # the killed run's files stay as they were
    final = torch.load(killed / "runs" / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)
    reference = torch.load(full / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == reference["global_step"] == MAX_STEPS
    assert final["state_dict"].keys() == reference["state_dict"].keys()
    for name, value in reference["state_dict"].items():
        assert torch.allclose(final["state_dict"][name], value, atol=1e-6, rtol=0), name
    # the data module continued at the same position of its task schedule
    assert final["MultiTaskDataModule"] == reference["MultiTaskDataModule"]
    # metrics.csv's steps per task continued from the checkpoint's counts (of step 6), not from zero
    counts = final["callbacks"]["TrainingLog"]["steps_per_task"]
    assert (
        counts == reference["callbacks"]["TrainingLog"]["steps_per_task"]
        and sum(counts.values()) == MAX_STEPS
    )
    if variant == "gem":
        gem_final, gem_reference = final["callbacks"]["GEMCallback"], reference["callbacks"]["GEMCallback"]
        assert gem_final == gem_reference and gem_reference["memory"]  # the same memories
        assert saved["callbacks"]["GEMCallback"]["memory"]  # restored from the checkpoint, not rebuilt
        assert gem_reference["projections"] > 0  # GEM did project (the memories mattered)
    if variant == "stage2":  # the frozen encoder is still the stage-1 checkpoint's, bit for bit
        start = torch.load(killed / "stage1.ckpt", weights_only=True)["state_dict"]
        encoder = [k for k in start if k.startswith("encoder.bert.")]
        assert encoder and all(torch.equal(final["state_dict"][k], start[k]) for k in encoder)
        assert any(not torch.equal(final["state_dict"][k], start[k]) for k in start if k.startswith("heads."))


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

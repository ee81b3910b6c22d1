"""An external launcher: ``torchrun --nproc_per_node 2`` starts both ranks of ``pal-lightning fit`` (CPU, gloo)
and Lightning's TorchElasticEnvironment takes the ranks from its variables; rank 1 is not a child of rank 0.

The invariants are those of tests/cli/test_ddp_cli.py (Lightning's own launcher): the same task on
every rank at every step with disjoint examples, bit-identical weights, one run folder, and validation
that scores each dev example once (the fit's scores equal a single-process ``validate`` of the checkpoint).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pal_lightning.cli import main
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import subprocess_env

pytestmark = pytest.mark.ddp

#: What the trainer needs under torchrun: devices x num_nodes must equal torchrun's world size.
TRAINER = ["--trainer.accelerator", "cpu", "--trainer.devices", "2"]
TRAINER += ["--trainer.strategy", "ddp_find_unused_parameters_true"]


def _record(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / "record" / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("torchrun")
    config_path = write_tiny_fit_config(folder, write_cs224n_data(folder / "data"))
    config = yaml.safe_load(config_path.read_text())
    recorder = {"class_path": "pal_lightning.testing.callbacks.RankRecorder", "init_args": {"out": "record"}}
    config["trainer"]["callbacks"] = [recorder]
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd = [*launcher, "-m", "pal_lightning", "fit", "--config", str(config_path), *TRAINER]
    env = subprocess_env()
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return folder


def test_torchrun_ranks_train_the_same_task_on_disjoint_examples_to_identical_weights(run: Path) -> None:
    r0, r1 = _record(run, "fit_rank0"), _record(run, "fit_rank1")
    assert (r0["rank"], r1["rank"], r0["world"], r1["world"]) == (0, 1, 2, 2)
    assert len(r0["tasks"]) == len(r1["tasks"]) == 4  # max_steps of the tiny config
    for (step0, task0, ids0), (step1, task1, ids1) in zip(r0["tasks"], r1["tasks"], strict=True):
        assert (step0, task0) == (step1, task1)
        assert ids0 and ids1 and not set(ids0) & set(ids1)
    assert r0["params_digest"] == r1["params_digest"]
    assert r0["val"] == r1["val"] and "val/overall" in r0["val"]  # reduced over ranks: one value


def test_torchrun_leaves_one_run_folder(run: Path) -> None:
    # rank 1 has no parent process to learn rank 0's folder from: it must not claim a folder of its own
    assert [p.name for p in (run / "runs").iterdir()] == ["version_0"]
    checkpoints = run / "runs" / "version_0" / "checkpoints"
    assert (checkpoints / "last.ckpt").is_file() and (run / "runs" / "version_0" / "config.yaml").is_file()


def test_single_process_validation_matches_the_torchrun_fit(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in this process: the CLI leaves the run folder it picked in the environment; monkeypatch restores it
    for key in ("PAL_RUN_VERSION", "PAL_RESUME_CKPT"):
        monkeypatch.setenv(key, "")
    for key in ("LOCAL_RANK", "RANK", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(run)
    ckpt = run / "runs" / "version_0" / "checkpoints" / "last.ckpt"
    assert main(["validate", "--config", str(run / "tiny.yaml"), "--ckpt_path", str(ckpt)]) == 0
    fit, validated = _record(run, "fit_rank0")["val"], _record(run, "validate_rank0")["val"]
    assert set(validated) == set(fit)
    for key, value in fit.items():
        assert validated[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key

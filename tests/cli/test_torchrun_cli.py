"""External launchers: ``torchrun --nproc_per_node 2`` starts both ranks of ``pal-lightning fit`` (CPU, gloo) as
fresh interpreters, and two processes get the variables ``srun`` sets for 2 nodes of 1 task each
(``SLURM_PROCID``, ...: the second "node"'s process has local rank 0 and global rank 1); Lightning's
TorchElasticEnvironment / SLURMEnvironment take the ranks from them. The srun pair is forked from the
session's CLI driver, each with its variables as its whole environment (what a fresh interpreter would
read); neither is the other's child. The invariants are those of test_ddp_cli.py: the same task on every
rank at every step with disjoint examples, bit-identical weights, one run folder, and validation that scores
each dev example once (the fit's scores equal a single-process ``validate`` of the checkpoint).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import free_port, write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli, subprocess_env

#: What the trainer needs under either launcher: devices x num_nodes must equal the world size.
TRAINER = ["--trainer.accelerator", "cpu", "--trainer.strategy", "ddp"]
#: devices x num_nodes = the launcher's world size: 1 node x 2 for torchrun, 2 nodes x 1 for srun
NODES = {
    "torchrun": ["--trainer.devices", "2"],
    "srun": ["--trainer.devices", "1", "--trainer.num_nodes", "2"],
}
LAUNCHERS = ("torchrun", "srun")


def _record(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / "record" / f"{name}.json").read_text())


def _launch(
    launcher: str, folder: Path, config: Path, forked_cli: ForkedCli
) -> list[subprocess.CompletedProcess[str]]:
    """``pal-lightning fit`` on 2 ranks started by ``launcher``; the finished processes."""
    fit = ["-m", "pal_lightning", "fit", "--config", str(config), *TRAINER, *NODES[launcher]]
    env = subprocess_env()
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    for key in [k for k in env if k.startswith("SLURM_")]:
        env.pop(key)
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *fit]
        return [subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)]
    slurm = {  # what srun sets for --nodes=2 --ntasks-per-node=1 (both "nodes" on this machine)
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "pal",  # not "bash"/"interactive", which Lightning leaves to other environments
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NNODES": "2",
        "SLURM_NODELIST": "localhost",
        "MASTER_PORT": str(free_port()),
    }
    slurm["SLURM_LOCALID"] = "0"
    ranks = [{**env, **slurm, "SLURM_PROCID": str(r), "SLURM_NODEID": str(r)} for r in (0, 1)]
    return forked_cli.run([(folder, fit[2:], rank) for rank in ranks], workers=2)  # after -m pal_lightning


def _setup(folder: Path) -> Path:
    config_path = write_tiny_fit_config(folder, write_cs224n_data(folder / "data"))
    config = yaml.safe_load(config_path.read_text())
    recorder = {"class_path": "pal_lightning.testing.callbacks.RankRecorder", "init_args": {"out": "record"}}
    config["trainer"]["callbacks"] = [recorder]
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config_path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, Path]:
    folders = {name: tmp_path_factory.mktemp(name) for name in LAUNCHERS}
    configs = {name: _setup(folder) for name, folder in folders.items()}
    with ThreadPoolExecutor(len(LAUNCHERS)) as pool:
        launched = pool.map(lambda n: _launch(n, folders[n], configs[n], forked_cli), LAUNCHERS)
        done = dict(zip(LAUNCHERS, launched, strict=True))
    for name, procs in done.items():
        for proc in procs:
            assert proc.returncode == 0, f"{name}: {proc.stderr[-4000:]}"
    return folders


@pytest.mark.ddp
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_ranks_train_the_same_task_on_disjoint_examples_to_identical_weights(
    runs: dict[str, Path], launcher: str
) -> None:
    r0, r1 = _record(runs[launcher], "fit_rank0"), _record(runs[launcher], "fit_rank1")
    assert (r0["rank"], r1["rank"], r0["world"], r1["world"]) == (0, 1, 2, 2)
    assert len(r0["tasks"]) == len(r1["tasks"]) == 4  # max_steps of the tiny config
    for (step0, task0, ids0), (step1, task1, ids1) in zip(r0["tasks"], r1["tasks"], strict=True):
        assert (step0, task0) == (step1, task1)
        assert ids0 and ids1 and not set(ids0) & set(ids1)
    assert r0["params_digest"] == r1["params_digest"]
    assert r0["val"] == r1["val"] and "val/overall" in r0["val"]  # reduced over ranks: one value


@pytest.mark.ddp
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_one_run_folder(runs: dict[str, Path], launcher: str) -> None:
    # rank 1 has no parent process to learn rank 0's folder from: it must not claim a folder of its own
    run = runs[launcher]
    assert [p.name for p in (run / "runs").iterdir()] == ["version_0"]
    checkpoints = run / "runs" / "version_0" / "checkpoints"
    assert (checkpoints / "last.ckpt").is_file() and (run / "runs" / "version_0" / "config.yaml").is_file()


@pytest.mark.ddp
def test_single_process_validation_matches_the_torchrun_fit(
    runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = runs["torchrun"]
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


def test_devices_that_do_not_match_torchruns_world_size_name_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # rank 0 of a 2-process torchrun job (its variables), with the config's devices: 1 and no DDP strategy:
    # without the check, each process would train a model of its own into the same run folder
    torchrun = {"TORCHELASTIC_RUN_ID": "test", "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    torchrun |= {"GROUP_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for key, value in {**torchrun, "PAL_RUN_VERSION": "", "PAL_RESUME_CKPT": ""}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    config = _setup(tmp_path)
    assert main(["fit", "--config", str(config), "--trainer.accelerator", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pal-lightning: error: The launcher started 2 processes"), err
    for fragment in ("the Trainer runs 1", "--trainer.devices", "--trainer.num_nodes"):
        assert fragment in err[0]
    assert not (tmp_path / "runs").exists()  # the folder claimed before fit is removed again

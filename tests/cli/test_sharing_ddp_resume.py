"""A mixed layer-sharing regime (F frozen + I individual layers, with PALs) through the real entry point:
two DDP processes (gloo, unused-parameter handling, GEM on the shared parameters) end with identical
weights, and a run SIGKILLed mid-epoch resumes to the weights of an uninterrupted run. Each run (the
DDP run's rank 0) is forked from the session's CLI driver (``forked_cli``); Lightning starts rank 1 as
from ``python -m pal_lightning``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pal_lightning.testing import TINY_GEM as GEM
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli

REGIME = "FI"  # TINY_BERT has two layers: the bottom one frozen, the top one a copy per task
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy"]
MAX_STEPS, EVERY, KILL_AT = 9, 3, 5  # last.ckpt every 3 steps, so one at the end (9)


def _config(folder: Path, data: Path, callbacks: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True)
    path = write_tiny_fit_config(folder, data)
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    config["model"]["init_args"].update(layer_sharing=REGIME, dropout=0.2)
    config["trainer"]["max_steps"] = MAX_STEPS
    config["data"]["init_args"]["steps_per_epoch"] = 4
    config["last_checkpoint"] = {"every_n_train_steps": EVERY}
    config["trainer"]["callbacks"] = callbacks
    path.write_text(yaml.safe_dump(config, sort_keys=False))  # folder/tiny.yaml


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sharing")
    data = write_cs224n_data(root / "data")
    recorder = {
        "class_path": "pal_lightning.testing.callbacks.RankRecorder",
        "init_args": {"out": str(root / "ddp" / "record")},
    }
    kill = {"class_path": "pal_lightning.testing.callbacks.KillAtStep", "init_args": {"step": KILL_AT}}
    _config(root / "ddp", data, [recorder, GEM])
    _config(root / "full", data, [])
    _config(root / "killed", data, [kill])
    out: dict[str, Any] = {"root": root}
    fit = ["fit", "--config", "tiny.yaml"]
    ddp = [*fit, *DDP, "ddp_find_unused_parameters_true"]
    first = forked_cli.run([(root / "ddp", ddp), (root / "full", fit), (root / "killed", fit)])
    out["ddp"], out["full"], out["killed"] = first
    resume = [*fit, "--trainer.callbacks", "[]", "--ckpt_path", "last"]
    (out["resumed"],) = forked_cli.run([(root / "killed", resume)])
    return out


@pytest.mark.ddp
def test_ddp_with_individual_and_frozen_layers_keeps_the_ranks_identical(runs: dict[str, Any]) -> None:
    assert runs["ddp"].returncode == 0, runs["ddp"].stderr[-4000:]
    record = runs["root"] / "ddp" / "record"
    r0, r1 = (json.loads((record / f"fit_rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["world"], len(r0["tasks"])) == (2, MAX_STEPS)
    assert r0["params_digest"] == r1["params_digest"]
    ckpt = torch.load(
        runs["root"] / "ddp" / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True
    )
    trained = {task for _, task, _ in r0["tasks"]}
    assert len(trained) >= 2  # the test exercises unused parameters: other tasks' copies each step
    keys = ckpt["state_dict"].keys()
    for task in ("sst", "qqp", "sts"):
        assert any(k.startswith(f"encoder.individual.{task}.1.") for k in keys), task
    assert not any(k.startswith("encoder.bert.encoder.layer.1.") for k in keys)  # the I layer's slot


def test_resume_with_individual_layers_is_exact(runs: dict[str, Any]) -> None:
    assert runs["full"].returncode == 0, runs["full"].stderr[-3000:]
    assert runs["killed"].returncode == -9, runs["killed"].stderr[-3000:]
    assert runs["resumed"].returncode == 0, runs["resumed"].stderr[-3000:]
    root = runs["root"]
    final = torch.load(
        root / "killed" / "runs" / "version_1" / "checkpoints" / "last.ckpt", weights_only=True
    )
    reference = torch.load(
        root / "full" / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True
    )
    assert final["global_step"] == reference["global_step"] == MAX_STEPS
    assert final["state_dict"].keys() == reference["state_dict"].keys()
    assert any(".individual." in k for k in reference["state_dict"])
    for name, value in reference["state_dict"].items():
        assert torch.allclose(final["state_dict"][name], value, atol=1e-6, rtol=0), name

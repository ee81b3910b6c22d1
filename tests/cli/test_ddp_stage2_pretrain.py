"""DDP (2 gloo processes) through the command line for the new training paths: a stage-2 fit
(``init_from``, frozen encoder, an auxiliary task with a sampling multiplier; too short for its configured
validation, so validated once at its end by both ranks) and ``pretrain``. Each
command's rank 0 is forked from the session's CLI driver (``forked_cli``); Lightning starts rank 1 as
from ``python -m pal_lightning``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pal_lightning.testing import (
    save_stage1_checkpoint,
    save_tiny_encoder,
    write_cs224n_data,
    write_tiny_fit_config,
    write_tiny_pretrain_config,
)

from .conftest import ForkedCli

pytestmark = pytest.mark.ddp

DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy"]
#: stage 2 stops before its configured validation: validated once at its end, by both ranks
SHORT = ["--trainer.max_steps", "3", "--trainer.check_val_every_n_epoch", "4"]


def _stage2_config(folder: Path, data: Path) -> Path:
    path = write_tiny_fit_config(folder, data)
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    model = config["model"]["init_args"]
    model["init_from"] = str(save_stage1_checkpoint(folder / "stage1.ckpt", model))
    model.update(optim={"freeze_encoder": True}, auxiliary=["sts"])
    config["data"]["init_args"]["task_multipliers"] = {"sts": 0.5}
    config["trainer"]["callbacks"] = [
        {
            "class_path": "pal_lightning.testing.callbacks.RankRecorder",
            "init_args": {"out": str(folder / "record")},
        }
    ]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ddp_new")
    data = write_cs224n_data(root / "data")
    stage2, pretrain = root / "stage2", root / "pretrain"
    stage2.mkdir()
    pretrain.mkdir()
    jobs = {
        "stage2": (stage2, ["fit", "--config", str(_stage2_config(stage2, data)), *DDP, "ddp_find_unused_parameters_true", *SHORT]),
        "pretrain": (
            pretrain,
            ["pretrain", "--config", str(write_tiny_pretrain_config(pretrain, save_tiny_encoder(pretrain / "bert", False), data)), *DDP, "ddp"],
        ),
    }  # fmt: skip
    procs = dict(zip(jobs, forked_cli.run(list(jobs.values()), workers=2), strict=True))
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}: {proc.stderr[-4000:]}"
    return {"stage2": stage2, "pretrain": pretrain, "procs": procs}


def test_stage2_ranks_agree_and_the_encoder_stays_frozen(runs: dict[str, Any]) -> None:
    folder = runs["stage2"]
    r0, r1 = (json.loads((folder / "record" / f"fit_rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == 2 and len(r0["tasks"]) == 3
    for (step0, task0, ids0), (step1, task1, ids1) in zip(r0["tasks"], r1["tasks"], strict=True):
        assert (step0, task0) == (step1, task1)  # the same task at every step on both ranks
        assert not set(ids0) & set(ids1)
    assert r0["params_digest"] == r1["params_digest"]
    start = torch.load(folder / "stage1.ckpt", weights_only=True)["state_dict"]
    final = torch.load(folder / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)[
        "state_dict"
    ]
    encoder = [k for k in start if k.startswith("encoder.backbone.")]
    assert encoder and all(torch.equal(final[k], start[k]) for k in encoder)
    # val/overall leaves the auxiliary task out: here the mean of SST and Quora accuracy
    val = r0["val"]
    assert val["val/overall"] == pytest.approx((val["val/sst/accuracy"] + val["val/qqp/accuracy"]) / 2)


def test_every_rank_takes_part_in_the_final_validation(runs: dict[str, Any]) -> None:
    run = runs["stage2"] / "runs" / "version_0"
    scores = json.loads((run / "scores.json").read_text())
    assert scores["complete"] is True and [h["step"] for h in scores["history"]] == [3]
    assert (run / "checkpoints" / "best.ckpt").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    # the score table, printed by rank 0 alone (its overall leaves the auxiliary task out: "Overall")
    assert runs["procs"]["stage2"].stdout.count("Overall (dev):") == 1


def test_pretrain_under_ddp_writes_one_loadable_encoder(runs: dict[str, Any]) -> None:
    from pal_lightning.module.multitask import MultiTaskModule

    folder = runs["pretrain"]
    # one run folder for both ranks
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["version_0"]
    out = folder / "runs" / "version_0" / "encoder"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert runs["procs"]["pretrain"].stdout.count("wrote the pre-trained encoder") == 1  # rank 0 only
    model = MultiTaskModule(tasks=["sst"], encoder=str(out), adapter={"size": 8, "num_heads": 2})
    assert model.encoder.loading_info.missing_new

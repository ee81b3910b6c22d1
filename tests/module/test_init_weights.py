"""Two-stage training, in process: stage 2 starts from stage 1's weights (``init_from``) and, with
``freeze_encoder``, leaves every encoder weight bit-identical while adapters and heads train."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.module.checkpoint_check import load_initial_weights
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TASKS = ["sst", "qqp", "sts"]


def tiny(**kw: Any) -> MultiTaskModule:
    args: dict[str, Any] = dict(
        tasks=TASKS,
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2},
        pair_encoding="siamese",
    )
    args.update(kw, optim={"head_lr": 1e-2, **kw.get("optim", {})})
    return MultiTaskModule(**args)


def fit(model: MultiTaskModule, data: Path, steps: int = 3, tasks: list[str] = TASKS) -> pl.Trainer:
    dm = MultiTaskDataModule(
        tasks=tasks,
        data_dir=data,
        pair_encoding="siamese",
        sampling="round_robin",  # every task trains within three steps
        batch_size=4,
        steps_per_epoch=steps,
        cache_dir=False,
    )
    trainer = quiet_trainer(max_steps=steps, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    return trainer


@pytest.fixture(scope="module")
def stage1(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    """A 'joint' stage-1 run of 3 steps; its checkpoint and weights."""
    root = tmp_path_factory.mktemp("two_stage")
    data = write_cs224n_data(root / "data")
    torch.manual_seed(0)
    model = tiny()
    trainer = fit(model, data)
    ckpt = root / "joint.ckpt"
    trainer.save_checkpoint(ckpt)
    return data, ckpt, {k: v.clone() for k, v in model.state_dict().items()}


def test_init_from_copies_every_weight(stage1: tuple[Path, Path, dict[str, torch.Tensor]]) -> None:
    _, ckpt, weights = stage1
    torch.manual_seed(123)  # another random start
    model = tiny(optim={"freeze_encoder": True}, init_from=str(ckpt))
    assert any(not torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    load_initial_weights(model, str(ckpt))
    state = model.state_dict()
    assert set(state) == set(weights)
    assert all(torch.equal(state[k], weights[k]) for k in weights)


def test_stage2_freezes_the_encoder_bit_identically(
    stage1: tuple[Path, Path, dict[str, torch.Tensor]],
) -> None:
    data, ckpt, weights = stage1
    torch.manual_seed(5)
    model = tiny(optim={"freeze_encoder": True}, init_from=str(ckpt))
    trainer = fit(model, data, steps=4)
    assert trainer.global_step == 4  # a fresh run: its own step count, not stage 1's
    pretrained = {id(p) for _, p in model.encoder.pretrained_parameters()}
    names = {n for n, p in model.named_parameters() if id(p) in pretrained}
    assert names and all(n.startswith("encoder.backbone.") for n in names)
    state = model.state_dict()
    changed_encoder = [n for n in names if not torch.equal(state[n], weights[n])]
    assert changed_encoder == []
    # what stage 2 trains did move from stage 1's values: every task's adapter, and the heads that have
    # weights (the siamese STS head is a parameter-free cosine)
    for task in TASKS:
        for prefix in (f"heads.{task}.", f"encoder.adapters.{task}."):
            trained = [n for n, _ in model.named_parameters() if n.startswith(prefix)]
            assert trained or prefix == "heads.sts.", prefix
            assert not trained or any(not torch.equal(state[n], weights[n]) for n in trained), prefix


def test_init_from_refuses_another_model(
    stage1: tuple[Path, Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    _, ckpt, _ = stage1
    other = tiny(tasks=["sst", "qqp"], init_from=str(ckpt))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(PalUserError) as err:
        load_initial_weights(other, str(ckpt))
    message = str(err.value)
    assert "does not fit this model" in message and "sst, qqp, sts" in message and "\n" not in message
    assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())  # nothing half-loaded
    # read when fit starts, not at construction: a stage-2 checkpoint loads where stage 1's file is gone
    gone = tiny(init_from=str(tmp_path / "missing.ckpt"))
    with pytest.raises(PalUserError, match="init_from checkpoint .*missing.ckpt does not exist"):
        gone.setup("fit")
    gone.setup("validate")  # nothing to read outside fit
    bad = tmp_path / "bad.ckpt"  # a truncated copy: one line naming the file, no traceback
    bad.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    with pytest.raises(PalUserError, match="bad.ckpt"):
        load_initial_weights(tiny(), str(bad))

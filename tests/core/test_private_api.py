"""pal_lightning.core.private_api: the private names it relies on still exist, and its public hooks dispatch."""

from __future__ import annotations

import os
from types import SimpleNamespace

from jsonargparse import ArgumentParser
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringModel

from pal_lightning.core import private_api as compat
from pal_lightning.testing import quiet_trainer


def test_the_private_names_still_exist() -> None:
    # an upgrade that renames one of these fails here, with the name, before anything else breaks
    for owner, name in [
        (ModelCheckpoint, "_save_topk_checkpoint"),
        (ModelCheckpoint, "_save_checkpoint"),
        (RichProgressBar, "_get_train_description"),
        (LightningCLI, "_prepare_subcommand_parser"),
        (LightningCLI, "_parse_ckpt_path"),
    ]:
        assert callable(getattr(owner, name, None)), f"{owner.__name__}.{name}"
    saved = ModelCheckpoint()
    assert hasattr(saved, "_last_global_step_saved") and hasattr(saved, "_last_checkpoint_saved")
    trainer = quiet_trainer()
    assert hasattr(trainer, "_accelerator_connector")
    assert hasattr(trainer._accelerator_connector, "use_distributed_sampler")
    assert hasattr(BoringModel(), "_trainer")
    # precision: the Trainer's precision type, the fused-optimizer flag, the CPU's bf16 probes
    import torch
    from lightning.fabric import connector

    assert hasattr(connector, "_PRECISION_INPUT")
    fused = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))], fused=True)
    assert fused._step_supports_amp_scaling and compat.optimizer_unscales_itself(fused)
    assert not compat.optimizer_unscales_itself(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))
    for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        assert callable(getattr(torch.cpu, probe, None)), f"torch.cpu.{probe}"
    # GEM's flat write-back: every x += y in one operator
    xs, ys = [torch.ones(2), torch.ones(3)], [torch.full((2,), 2.0), torch.full((3,), 3.0)]
    compat.foreach_add_(xs, ys)
    assert xs[0].tolist() == [3.0, 3.0] and xs[1].tolist() == [4.0, 4.0, 4.0]
    # the operator-counting mode of benchmarks/op_count.py
    assert isinstance(compat.TorchDispatchMode, type) and hasattr(
        compat.TorchDispatchMode, "__torch_dispatch__"
    )


def test_checkpoint_hooks_receive_lightnings_private_calls(tmp_path: os.PathLike[str]) -> None:
    calls: list[tuple[str, object]] = []

    class Recording(compat.CheckpointHooks):
        def rank_checkpoint(self, trainer, monitor_candidates):  # type: ignore[no-untyped-def]
            calls.append(("rank", dict(monitor_candidates)))

        def write_checkpoint(self, trainer, filepath):  # type: ignore[no-untyped-def]
            calls.append(("write", os.path.basename(filepath)))
            super().write_checkpoint(trainer, filepath)

    cb = Recording(dirpath=tmp_path, monitor=None, save_last=True, save_top_k=0)
    trainer = quiet_trainer(max_steps=2, callbacks=[cb], enable_checkpointing=True)
    trainer.fit(BoringModel())
    assert [c[0] for c in calls].count("rank") >= 1
    assert ("write", "last.ckpt") in calls
    assert (tmp_path / "last.ckpt").is_file()  # type: ignore[operator]
    path, step = compat.last_saved(cb)
    assert (os.path.basename(path), step) == ("last.ckpt", 2)
    unsaved = compat.CheckpointHooks()
    assert compat.last_saved(unsaved)[0] == ""  # nothing written yet
    unsaved.record_saved(SimpleNamespace(global_step=7), "/x/best.ckpt")  # type: ignore[arg-type]
    assert compat.last_saved(unsaved) == ("/x/best.ckpt", 7)


def test_attached_trainer_and_distributed_sampler() -> None:
    model = BoringModel()
    assert compat.attached_trainer(model) is None
    trainer = quiet_trainer(use_distributed_sampler=True)
    model.trainer = trainer
    assert compat.attached_trainer(model) is trainer
    assert compat.disable_distributed_sampler(trainer) is True
    assert compat.disable_distributed_sampler(trainer) is False  # already off
    assert compat.disable_distributed_sampler(object()) is None  # type: ignore[arg-type]


def test_subcommand_help_actions() -> None:
    parser = ArgumentParser()
    sub = parser.add_subcommands()
    sub.add_subcommand("fit", ArgumentParser(), help="cut off")
    actions = compat.subcommand_help_actions(parser)
    assert [(a.dest, a.help) for a in actions] == [("fit", "cut off")]
    assert compat.subcommand_help_actions(ArgumentParser()) == []
    assert list(compat.subcommand_parsers(parser)) == ["fit"]
    assert compat.subcommand_parsers(ArgumentParser()) == {}

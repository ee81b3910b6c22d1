"""``MultiTaskModule(optim=...)``: the optimizer options as one group, its checks, a flat name refused with its
new place, hyper-parameters saved plain, and files saved before the group existed (flat ``lr``, ``head_lr``,
...) loaded through every path: ``load_from_checkpoint``, the pipeline's loader, ``init_from`` and
``from_pretrained``."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

from pal_lightning import MultiTaskModule, OptimConfig, PalUserError
from pal_lightning.core.version import __version__
from pal_lightning.module.checkpoint_check import VERSION_KEY, load_initial_weights
from pal_lightning.module.optim_config import OPTIM_FIELDS, as_optim_config, with_optim_group
from pal_lightning.module.pretrained import CONFIG_NAME
from pal_lightning.module.saved_class import module_from_checkpoint
from pal_lightning.testing.batches import tiny_module

CHOSEN = OptimConfig(
    lr=2e-4, head_lr=3e-3, adapter_lr=4e-3, layer_lr_decay=0.8, weight_decay=0.05, warmup_steps=3,
    freeze_embeddings=True,
)  # fmt: skip


def test_the_defaults_are_the_former_arguments_defaults() -> None:
    assert asdict(OptimConfig()) == {
        "lr": 3e-5, "head_lr": 5e-4, "adapter_lr": None, "layer_lr_decay": 1.0, "weight_decay": 0.01,
        "warmup_ratio": 0.1, "warmup_steps": None, "freeze_embeddings": False, "freeze_encoder": False,
    }  # fmt: skip
    assert tiny_module().optim_config == OptimConfig()
    assert as_optim_config(None) == as_optim_config({}) == OptimConfig()
    assert as_optim_config({"lr": 1e-4, "adapter_lr": "None"}) == OptimConfig(lr=1e-4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"warmup_ratio": 1.5}, r"optim.warmup_ratio must lie in \[0, 1\], got 1.5"),
        ({"warmup_steps": -1}, "optim.warmup_steps must be >= 0"),
        ({"layer_lr_decay": 0.0}, r"optim.layer_lr_decay must lie in \(0, 1\]"),
        ({"lr": float("nan")}, r"optim.lr must be a finite number > 0, got nan \(--model.optim.lr\)"),
        ({"head_lr": 0.0}, "optim.head_lr must be a finite number > 0"),
        ({"lr": None}, "optim.lr must be a finite number > 0, got None"),  # only adapter_lr has a None
        ({"weight_decay": "0.1"}, "optim.weight_decay must be a finite number >= 0, got 0.1"),
        ({"weight_decay": -0.1}, r"optim.weight_decay must be a finite number >= 0 \(or"),
        ({"learning_rate": 1.0}, r"optim has no option\(s\) \['learning_rate'\]"),
        ({"lr": True}, r"optim.lr must be a finite number > 0, got True \(--model.optim.lr\)"),  # not 1
        ({"warmup_ratio": True}, r"optim.warmup_ratio must lie in \[0, 1\], got True"),
    ],
)
def test_bad_values_name_the_option(options: dict[str, Any], message: str) -> None:
    message = message.replace(r" \(or", "")
    with pytest.raises(PalUserError, match=message):
        tiny_module(optim=options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"warmup_ratio": "0.1"}, r"optim.warmup_ratio must lie in \[0, 1\], got 0.1"),
        ({"warmup_ratio": None}, r"optim.warmup_ratio must lie in \[0, 1\], got None"),
        ({"layer_lr_decay": "0.9"}, r"optim.layer_lr_decay must lie in \(0, 1\]"),
        ({"warmup_steps": "5"}, "optim.warmup_steps must be >= 0"),
        ({"warmup_steps": float("nan")}, "optim.warmup_steps must be >= 0"),  # was a NaN learning rate
        ({"warmup_steps": float("inf")}, "optim.warmup_steps must be >= 0"),  # was a zero rate throughout
    ],
)
def test_values_of_the_wrong_type_are_one_user_error(options: dict[str, Any], message: str) -> None:
    # a string, None or NaN failed with a TypeError, or passed and gave every step a NaN rate
    with pytest.raises(PalUserError, match=message):
        as_optim_config(options)


def test_a_flat_name_fails_with_its_new_place() -> None:
    for name in OPTIM_FIELDS:
        with pytest.raises(PalUserError) as err:
            tiny_module(**{name: 1.0})
        assert str(err.value) == (
            f"{name} moved: use optim.{name} (--model.optim.{name}; in YAML model.init_args.optim.{name})."
        )
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        tiny_module(no_such_option=1)
    with pytest.raises(PalUserError, match="lr moved: use optim.lr"):
        MultiTaskModule.load_from_checkpoint("unused.ckpt", lr=1.0)


def test_the_config_drives_the_groups_and_the_freezing() -> None:
    module = tiny_module(optim=CHOSEN)
    assert module.optim_config == CHOSEN
    assert tiny_module(optim=asdict(CHOSEN)).optim_config == CHOSEN  # a mapping (YAML, a checkpoint)
    assert not any(p.requires_grad for p in module.encoder.embeddings.parameters())
    rates = {g["name"]: (g["lr"], g["weight_decay"]) for g in module.parameter_groups()}
    assert rates["adapters"] == (4e-3, 0.05) and rates["heads"] == (3e-3, 0.05)
    assert rates["heads_no_decay"] == (3e-3, 0.0)


def _flat(hparams: dict[str, Any]) -> dict[str, Any]:
    """``hparams`` as a version before ``optim`` saved them: its options at the top level."""
    old = {k: v for k, v in hparams.items() if k != "optim"}
    return {**old, **hparams["optim"]}


def test_with_optim_group_gathers_the_flat_options_only() -> None:
    module = tiny_module(optim=CHOSEN)
    hparams = dict(module.hparams)
    assert isinstance(hparams["optim"], dict)  # plain: checkpoints load with weights_only=True
    assert with_optim_group(hparams) == hparams
    assert with_optim_group(_flat(hparams)) == hparams
    # a file that saved only some of them: the others are today's defaults
    assert with_optim_group({"tasks": ["sst"], "lr": 1e-4})["optim"] == asdict(OptimConfig(lr=1e-4))


def _write_old_checkpoint(module: MultiTaskModule, path: Path, **extra: Any) -> Path:
    old = {**_flat(dict(module.hparams)), **extra}
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": old,
            VERSION_KEY: __version__,
            "pytorch-lightning_version": "2.6.0",
        },
        path,
    )
    loaded = torch.load(path, weights_only=True)
    assert "optim" not in loaded["hyper_parameters"] and loaded["hyper_parameters"]["lr"] == CHOSEN.lr
    return path


def _same_weights(a: MultiTaskModule, b: MultiTaskModule) -> bool:
    theirs = b.state_dict()
    return all(torch.equal(v, theirs[k]) for k, v in a.state_dict().items())


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {
            "_class_path": "pal_lightning.MultiTaskModule",
            "_instantiator": "lightning.pytorch.cli.instantiate_module",
        },
    ],
    ids=["python", "cli"],
)
def test_an_old_shape_checkpoint_loads(tmp_path: Path, extra: dict[str, Any]) -> None:
    torch.manual_seed(0)
    module = tiny_module(optim=CHOSEN)
    path = _write_old_checkpoint(module, tmp_path / "old.ckpt", **extra)

    native = MultiTaskModule.load_from_checkpoint(path, weights_only=True)
    assert native.optim_config == CHOSEN and native.hparams["optim"] == asdict(CHOSEN)
    assert "lr" not in native.hparams and _same_weights(module, native)

    checkpoint = torch.load(path, weights_only=True)
    rebuilt = module_from_checkpoint(MultiTaskModule, checkpoint, str(path))  # the pipeline's loader
    assert rebuilt.optim_config == CHOSEN and _same_weights(module, rebuilt)

    fresh = tiny_module(optim=CHOSEN)
    load_initial_weights(fresh, str(path))  # init_from
    assert _same_weights(module, fresh)

    # resuming it compares the old file's options with today's
    frozen = tiny_module(optim={**asdict(CHOSEN), "freeze_embeddings": False})
    with pytest.raises(
        PalUserError, match="optim.freeze_embeddings is True in the checkpoint but False here"
    ):
        frozen.on_load_checkpoint({**checkpoint, "optimizer_states": [{}]})
    tiny_module(optim=CHOSEN).on_load_checkpoint({**checkpoint, "optimizer_states": [{}]})


def test_an_old_shape_folder_loads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = tiny_module(optim=CHOSEN)
    folder = module.save_pretrained(tmp_path / "model")
    config = json.loads((folder / CONFIG_NAME).read_text())
    assert config["hparams"]["optim"] == asdict(CHOSEN)
    config["hparams"] = _flat(config["hparams"])
    (folder / CONFIG_NAME).write_text(json.dumps(config))
    loaded = MultiTaskModule.from_pretrained(folder)
    assert loaded.optim_config == CHOSEN and _same_weights(module, loaded)

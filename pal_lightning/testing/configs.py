"""A quiet ``Trainer``, and config files and checkpoints for tests of the ``pal-lightning`` CLI on a tiny
random encoder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pal_lightning.testing.encoders import TINY_BERT

if TYPE_CHECKING:
    import lightning.pytorch as pl

#: A GEM callback sized for the tiny model, as it appears under ``trainer.callbacks`` in a config.
TINY_GEM: dict[str, Any] = {
    "class_path": "pal_lightning.gem.GEMCallback",
    "init_args": {"memory_size": 8, "memory_batch_size": 2},
}


#: What :func:`quiet_trainer` passes to ``Trainer`` unless overridden: one CPU device, nothing logged,
#: saved or printed.
QUIET_TRAINER = {
    "accelerator": "cpu",
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
}


def quiet_trainer(**overrides: Any) -> pl.Trainer:
    """A ``Trainer`` with :data:`QUIET_TRAINER`'s settings; ``overrides`` win. Building and fitting it print
    nothing: Lightning's hardware lines and tips are dropped as the CLI drops them
    (:func:`pal_lightning.cli.console.quiet_lightning`, for the whole process)."""
    import lightning.pytorch as pl

    from pal_lightning.cli.console import quiet_lightning

    quiet_lightning()
    return pl.Trainer(**{**QUIET_TRAINER, **overrides})


def _quiet_trainer_settings(folder: Path, **settings: Any) -> dict[str, Any]:
    # a CLI run logs (a line every step) and checkpoints under <folder>/runs
    quiet = {k: v for k, v in QUIET_TRAINER.items() if k not in ("logger", "enable_checkpointing")}
    return {**quiet, "default_root_dir": str(folder / "runs"), "log_every_n_steps": 1, **settings}


def _dump(config: dict[str, Any], path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_tiny_fit_config(
    folder: str | os.PathLike[str], data_dir: str | os.PathLike[str], tasks: list[Any] | None = None
) -> Path:
    """``<folder>/tiny.yaml``: a ``fit`` config of 4 steps of a :data:`TINY_BERT` model on ``data_dir``."""
    folder = Path(folder)
    config = {
        "seed_everything": 7,
        "trainer": _quiet_trainer_settings(folder, max_steps=4),
        "model": {
            "class_path": "pal_lightning.MultiTaskModule",
            "init_args": {
                "tasks": tasks if tasks is not None else ["sst", "qqp", "sts"],
                "adapter": {"num_heads": 2, "size": 8},
                "pair_encoding": {"sts": "siamese", "default": "cross"},
                "encoder_config": TINY_BERT,
            },
        },
        "data": {
            "class_path": "pal_lightning.MultiTaskDataModule",
            "init_args": {
                "data_dir": str(data_dir),
                "batch_size": 4,
                "eval_batch_size": 16,
                "max_length": 32,
                "steps_per_epoch": 2,
                "cache_dir": False,
            },
        },
    }
    return _dump(config, folder / "tiny.yaml")


def write_tiny_pretrain_config(
    folder: str | os.PathLike[str],
    encoder: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    **model: Any,
) -> Path:
    """``<folder>/pretrain.yaml``: a ``pretrain`` config of 3 steps of ``encoder`` on ``data_dir`` (``model``:
    more module arguments)."""
    folder = Path(folder)
    config = {
        "seed_everything": 3,
        "trainer": _quiet_trainer_settings(folder, max_steps=3, val_check_interval=3),
        "model": {"init_args": {"encoder": str(encoder), "lr": 1e-3, **model}},
        "data": {
            "init_args": {
                "data_dir": str(data_dir),
                "batch_size": 8,
                "max_length": 32,
                "max_val_sentences": 16,
            }
        },
    }
    return _dump(config, folder / "pretrain.yaml")


def save_stage1_checkpoint(path: str | os.PathLike[str], model_args: dict[str, Any], seed: int = 11) -> Path:
    """A stand-in stage-1 checkpoint for ``init_from``: a new ``MultiTaskModule(**model_args)``'s weights and
    hyper-parameters."""
    import torch

    from pal_lightning.module.multitask import MultiTaskModule

    torch.manual_seed(seed)
    model = MultiTaskModule(**model_args)
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, path)
    return Path(path)

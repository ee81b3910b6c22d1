"""Config files and checkpoints for tests of the ``pal-lightning`` CLI on a tiny random encoder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pal_lightning.testing.encoders import TINY_BERT

#: A GEM callback sized for the tiny model, as it appears under ``trainer.callbacks`` in a config.
TINY_GEM: dict[str, Any] = {
    "class_path": "pal_lightning.gem.GEMCallback",
    "init_args": {"memory_size": 8, "memory_batch_size": 2},
}


def _quiet_trainer_settings(folder: Path, **settings: Any) -> dict[str, Any]:
    """The ``trainer`` block of a test config: one CPU device, runs under ``<folder>/runs``, a log line
    every step, no progress bar, model summary or sanity validation; ``settings`` add to it."""
    return {
        "accelerator": "cpu",
        "devices": 1,
        "default_root_dir": str(folder / "runs"),
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "log_every_n_steps": 1,
        "num_sanity_val_steps": 0,
        **settings,
    }


def _dump(config: dict[str, Any], path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_tiny_fit_config(
    folder: str | os.PathLike[str], data_dir: str | os.PathLike[str], tasks: list[Any] | None = None
) -> Path:
    """``<folder>/tiny.yaml``: a complete ``fit`` config of 4 steps of a :data:`TINY_BERT` model with
    small PALs on the data in ``data_dir`` (e.g. :func:`~pal_lightning.testing.write_cs224n_data`), runs
    under ``<folder>/runs``, no data cache; returns its path."""
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
                "bert_config": TINY_BERT,
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
    """``<folder>/pretrain.yaml``: a ``pretrain`` config of 3 steps of the encoder folder ``encoder``
    (e.g. :func:`~pal_lightning.testing.save_tiny_encoder` with a head) on the data in ``data_dir``,
    validated at the end; ``model`` adds module arguments; returns its path."""
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
    """A stand-in stage-1 checkpoint for ``init_from``: the weights and hyper-parameters of a new
    ``MultiTaskModule(**model_args)``, as ``fit`` writes them; returns ``path``."""
    import torch

    from pal_lightning.module.multitask import MultiTaskModule

    torch.manual_seed(seed)
    model = MultiTaskModule(**model_args)
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, path)
    return Path(path)

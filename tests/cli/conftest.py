"""Fixtures for the CLI tests: CS224N-format data files and a tiny-model config in tmp_path."""

from __future__ import annotations

import importlib.util
import os
import types
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning.testing import TINY_BERT, write_cs224n_data  # noqa: E402 (re-exported for the tests)

#: A GEM callback for the tiny model, as it appears under ``trainer.callbacks`` in a config.
TINY_GEM = {
    "class_path": "pal_lightning.callbacks.GEMCallback",
    "init_args": {"memory_size": 8, "memory_batch_size": 2},
}
HERE = Path(__file__).resolve().parent


ROOT = HERE.parents[1]


def load_benchmark(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def subprocess_env() -> dict[str, str]:
    """Environment of a CLI subprocess: offline, one thread, ``tests/cli`` importable (test-only
    callbacks in configs), and none of the variables a parent run may have set for its ranks."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    for key in ("PAL_DEBUG", "LOCAL_RANK", "PAL_RUN_VERSION", "PAL_RESUME_CKPT"):
        env.pop(key, None)
    return env


def tiny_config(tmp_path: Path, data_dir: Path, tasks: list | None = None) -> Path:
    """A complete fit config for a tiny random encoder on the fixture data; returns its path."""
    import yaml

    config = {
        "seed_everything": 7,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": 4,
            "default_root_dir": str(tmp_path / "runs"),
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 1,
            "num_sanity_val_steps": 0,
        },
        "model": {
            "class_path": "pal_lightning.MultiTaskModule",
            "init_args": {
                "tasks": tasks if tasks is not None else ["sst", "qqp", "sts"],
                "pal_heads": 2,
                "pal_size": 8,
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
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_cs224n_data(tmp_path / "data")


@pytest.fixture
def tiny_yaml(tmp_path: Path, data_dir: Path) -> Path:
    return tiny_config(tmp_path, data_dir)

"""Fixtures for the CLI tests: CS224N-format data files and a tiny-model config in tmp_path (both from
:mod:`pal_lightning.testing`), benchmark scripts loaded as modules, the environment of a CLI subprocess."""

from __future__ import annotations

import importlib.util
import os
import types
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# TINY_BERT: still imported from here by tests/cli/test_peers.py; new tests import pal_lightning.testing
from pal_lightning.testing import TINY_BERT, write_cs224n_data, write_tiny_fit_config  # noqa: E402, F401

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def subprocess_env() -> dict[str, str]:
    """Environment of a CLI subprocess: offline, one thread, and none of the variables a parent run may
    have set for its ranks. (Test-only callbacks in configs come from ``pal_lightning.testing.callbacks``.)"""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for key in ("PAL_DEBUG", "LOCAL_RANK", "PAL_RUN_VERSION", "PAL_RESUME_CKPT"):
        env.pop(key, None)
    return env


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_cs224n_data(tmp_path / "data")


@pytest.fixture
def tiny_yaml(tmp_path: Path, data_dir: Path) -> Path:
    return write_tiny_fit_config(tmp_path, data_dir)

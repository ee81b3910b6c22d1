"""Fixtures for the CLI tests: CS224N-format data files and a tiny-model config in tmp_path (both from
:mod:`pal_lightning.testing`), benchmark scripts loaded as modules, and ``forked_benchmark_runs``: a
benchmark's command lines through ``forked_cli`` (tests/conftest.py; the harness is in forked.py, whose
names are imported from here too)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# TINY_BERT: still imported from here by tests/cli/test_peers.py; new tests import pal_lightning.testing
from pal_lightning.testing import TINY_BERT, write_cs224n_data, write_tiny_fit_config  # noqa: E402, F401

from .forked import ForkedCli, ForkedSubprocess, subprocess_env  # noqa: E402, F401

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_cs224n_data(tmp_path / "data")


@pytest.fixture
def tiny_yaml(tmp_path: Path, data_dir: Path) -> Path:
    return write_tiny_fit_config(tmp_path, data_dir)


@pytest.fixture
def forked_benchmark_runs(monkeypatch: pytest.MonkeyPatch, forked_cli: ForkedCli) -> ForkedSubprocess:
    """The ``pal-lightning fit`` command lines of the benchmarks (``benchmarks/cli_runs.py``) run through
    ``forked_cli`` for this test (see :class:`ForkedSubprocess`)."""
    if str(ROOT / "benchmarks") not in sys.path:  # as the benchmarks themselves add it
        monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    cli_runs = importlib.import_module("cli_runs")
    forked = ForkedSubprocess(forked_cli)
    monkeypatch.setattr(cli_runs, "subprocess", forked)
    return forked

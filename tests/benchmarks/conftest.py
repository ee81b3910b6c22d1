"""Fixtures for the tests of the benchmark scripts: ``load_benchmark`` (a script of benchmarks/ as a module)
and ``forked_benchmark_runs`` (a benchmark's command lines through ``forked_cli``, tests/conftest.py)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest
from cli.forked import ForkedCli, ForkedSubprocess  # noqa: F401 - tests/ is on sys.path

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

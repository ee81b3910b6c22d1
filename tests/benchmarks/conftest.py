"""Fixtures for the tests of the benchmark scripts: ``load_benchmark`` (a script of benchmarks/ as a module),
``gpu_check_dry_run`` and ``forked_benchmark_runs`` (a benchmark's command lines through ``forked_cli``,
tests/conftest.py)."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli.forked import ForkedCli, ForkedSubprocess  # noqa: F401 - tests/ is on sys.path

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap() -> Iterator[None]:
    """Leave the objects alive when a module starts out of garbage collection until it ends: the full
    collections a benchmark (or transformers' Trainer) runs between its runs then scan only their own
    objects, not the whole test process's (about 0.4 s each; ten in a loop_overhead --quick run)."""
    gc.freeze()
    yield
    gc.unfreeze()


def load_benchmark(name: str) -> types.ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_check_dry_run(folder: Path, *options: str, **env: str) -> list[str]:
    """The benchmark command lines of ``benchmarks/gpu_check.sh --dry-run [options] folder`` (exit 0 asserted;
    ``env`` over this process's, ``PYTHON`` this interpreter unless given)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", *options, str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": sys.executable, **env},
    )
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if "benchmarks/" in line]


def option(line: str, name: str) -> str:
    """The value after ``name`` in a command line."""
    words = line.split()
    return words[words.index(name) + 1]


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

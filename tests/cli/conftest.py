"""The CLI tests' names: the forked-CLI harness (forked.py) and ``load_benchmark``
(tests/benchmarks/conftest.py), imported from here by the test files of this folder."""

from __future__ import annotations

from benchmarks.conftest import ROOT, load_benchmark  # noqa: F401

from .forked import ForkedCli, ForkedSubprocess, subprocess_env  # noqa: F401

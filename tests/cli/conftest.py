"""The CLI tests' names: the forked-CLI harness (forked.py), ``load_benchmark`` (tests/benchmarks/conftest.py)
and :func:`error_line`, imported from here by the test files of this folder."""

from __future__ import annotations

from benchmarks.conftest import ROOT, load_benchmark  # noqa: F401

from .forked import ForkedCli, ForkedSubprocess, subprocess_env  # noqa: F401


def error_line(err: str) -> str:
    """The one ``pal-lightning: error:`` line of ``err`` (a user mistake's stderr), checked to be alone and
    without a traceback; other lines (Lightning's "Seed set to 7") may be there."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("pal-lightning: error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]

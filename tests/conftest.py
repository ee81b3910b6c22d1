"""Settings shared by every test folder: hypothesis profiles, and the type checker started early.

``HYPOTHESIS_PROFILE=mutation`` (set by tools/mutation/run.sh) skips shrinking: under mutation
testing a failing example only has to fail, and shrinking it can take longer than mutmut's timeout.
No example database is written (the property tests are derandomised: the same examples every run).

mypy (``tests/test_typing.py``) takes about 30 s of one core when its cache is cold, as on CI, while
the suite leaves the second core mostly idle: when that test is collected, mypy starts in the
background as soon as collection ends, and the test waits for its result (the ``mypy_result`` fixture).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

import pytest
from hypothesis import Phase, settings

settings.register_profile("pal", database=None, derandomize=True)
settings.register_profile(
    "mutation", database=None, derandomize=True, phases=(Phase.explicit, Phase.generate)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pal"))


ROOT = Path(__file__).resolve().parents[1]
MYPY_TEST = "test_mypy_is_clean_on_the_package"
_mypy: dict[str, tuple[subprocess.Popen[bytes], IO[bytes]]] = {}


def _start_mypy() -> None:
    if "run" not in _mypy:
        # a file, not a pipe: a full pipe would stall mypy while no test reads it
        log = tempfile.TemporaryFile()
        # from the repository root, so that mypy reads pyproject.toml's [tool.mypy]
        proc = subprocess.Popen(
            [sys.executable, "-m", "mypy"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
        _mypy["run"] = (proc, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.name == MYPY_TEST for item in session.items):
        _start_mypy()


def pytest_unconfigure(config: pytest.Config) -> None:
    if "run" in _mypy and _mypy["run"][0].poll() is None:
        _mypy["run"][0].kill()  # the mypy test was interrupted or deselected after collection


@pytest.fixture
def mypy_result() -> tuple[int, str]:
    """mypy's exit status and report: from the run started after collection, else a run started now."""
    _start_mypy()
    proc, log = _mypy["run"]
    returncode = proc.wait(timeout=600)
    log.seek(0)
    return returncode, log.read().decode()

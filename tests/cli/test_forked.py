"""The test harness's own contract (tests/cli/forked.py): a forked script that hangs is killed at its
timeout together with the processes it started, as ``subprocess.run(timeout=...)`` would end it, and
the session's driver goes on serving the tests after it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

HANGS = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open("child.pid", "w").write(str(child.pid))
print("waiting", flush=True)
time.sleep(600)
"""


def _ended(pid: int) -> bool:
    """Whether ``pid`` is gone (or a zombie no one has reaped yet: it no longer runs)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_hung_script_is_killed_with_its_children_at_the_timeout(tmp_path: Path, forked_cli: Any) -> None:
    script = tmp_path / "hangs.py"
    script.write_text(HANGS)
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        forked_cli.run_script(tmp_path, script, [], dict(os.environ), timeout=2)
    assert 2 <= time.monotonic() - start < 60
    assert raised.value.timeout == 2 and raised.value.output == "waiting\n"
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while not _ended(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _ended(child), "the script's own child outlived the timeout"
    # the driver is still there for the rest of the session
    (tmp_path / "ok.py").write_text("print('fine')")
    done = forked_cli.run_script(tmp_path, tmp_path / "ok.py", [], dict(os.environ))
    assert (done.returncode, done.stdout) == (0, "fine\n")
    assert done.args[0] == sys.executable

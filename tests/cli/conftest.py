"""Fixtures for the CLI tests: CS224N-format data files and a tiny-model config in tmp_path (both from
:mod:`pal_lightning.testing`), benchmark scripts loaded as modules, the environment of a CLI subprocess,
and ``forked_cli``: command lines run as processes forked from one interpreter that imported the CLI."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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


DRIVER = Path(__file__).with_name("cli_driver.py")


class ForkedCli:
    """``pal-lightning`` command lines, each in a process of its own, forked from one driver process
    (``cli_driver.py --serve``) that imported the CLI once for the whole session: this saves the ~6 s of
    CPU that each ``python -m pal_lightning`` spends on imports on the 2-core machine.

    A child is what ``python -m pal_lightning ARGS`` and the console script are, ``sys.exit(main())``
    with ``sys.argv`` set, in its own working folder, with its own output files and environment: a
    ``KillAtStep`` SIGKILL, a ``SignalAtStep`` SIGTERM/SIGINT and an exit status reach the test as they
    would from :func:`subprocess.run` (status ``-9`` for SIGKILL). Under DDP the child is rank 0, and
    Lightning's launcher starts rank 1 as from a real run, ``sys.executable -m pal_lightning.__main__
    ARGS`` with its environment, a child of rank 0 whose output goes to the child's files: the job's
    spare process, forked before the run began, becomes that command (``cli_driver.py``), which saves
    rank 1's ~6 s of imports. What the interpreter start-up
    itself does (``-m pal_lightning``, the console script, what is printed while the CLI imports) is
    tested with real processes in test_cli_subprocess.py and test_console.py, and ranks that no
    ``pal-lightning`` process starts (torchrun's, srun's) are real processes too. One batch at a time:
    calls from several threads wait for each other.
    """

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, str(DRIVER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=subprocess_env(),
            text=True,
        )
        assert self._proc.stdout is not None and self._proc.stdout.readline().strip() == "ready", (
            "the CLI driver did not start"
        )

    def run(
        self,
        jobs: Sequence[tuple[Path, Sequence[str]]],
        workers: int = 3,
        env: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> list[subprocess.CompletedProcess[str]]:
        """Run every ``(working folder, arguments after pal-lightning)`` job, ``workers`` at a time; their
        exit statuses and outputs, in the order of ``jobs``. ``env``: the children's whole environment
        (default: the driver's, :func:`subprocess_env` when the session started); ``log``: one file for
        stdout and stderr together (of a single job), as ``stderr=subprocess.STDOUT`` writes them."""
        assert log is None or len(jobs) == 1
        batch: list[dict[str, Any]] = []
        for cwd, args in jobs:
            name = f"job{next(self._ids)}"
            out, err = (log, log) if log else (self._logs / f"{name}.out", self._logs / f"{name}.err")
            job: dict[str, Any] = {"name": name, "cwd": str(cwd), "args": list(args)}
            job.update(stdout=str(out), stderr=str(err), **({"env": env} if env is not None else {}))
            batch.append(job)
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            assert self._proc.poll() is None, "the CLI driver is gone"
            self._proc.stdin.write(json.dumps({"jobs": batch, "workers": workers}) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        assert line, "the CLI driver stopped"
        codes = json.loads(line)
        return [
            subprocess.CompletedProcess(
                ["pal-lightning", *job["args"]],
                codes[job["name"]],
                "" if log else Path(job["stdout"]).read_text(),
                "" if log else Path(job["stderr"]).read_text(),
            )
            for job in batch
        ]

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


@pytest.fixture(scope="session")
def forked_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkedCli]:
    """One CLI driver per test process (per xdist worker), started when a test first asks for it: see
    :class:`ForkedCli`."""
    cli = ForkedCli(tmp_path_factory.mktemp("forked_cli"))
    yield cli
    cli.close()


class ForkedSubprocess:
    """Stands in for the ``subprocess`` module of ``benchmarks/cli_runs.py`` in a benchmark's test
    (``monkeypatch.setattr(cli_runs, "subprocess", ForkedSubprocess(forked_cli))``): the command lines
    the benchmark builds, ``sys.executable -m pal_lightning ARGS`` with the output in a log file, run
    through :class:`ForkedCli` with the same arguments, working folder, environment and log file; any
    other command runs as usual. ``commands`` lists the command lines it forked."""

    STDOUT = subprocess.STDOUT
    PIPE = subprocess.PIPE
    DEVNULL = subprocess.DEVNULL
    TimeoutExpired = subprocess.TimeoutExpired
    CompletedProcess = subprocess.CompletedProcess

    def __init__(self, cli: ForkedCli) -> None:
        self._cli = cli
        self.commands: list[list[str]] = []

    def run(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        cmd = list(cmd)
        stdout = kwargs.get("stdout")
        if (
            cmd[:3] != [sys.executable, "-m", "pal_lightning"]
            or kwargs.get("stderr") != subprocess.STDOUT
            or not isinstance(getattr(stdout, "name", None), str)
        ):
            return subprocess.run(cmd, **kwargs)
        self.commands.append(cmd)
        assert stdout is not None
        stdout.flush()
        cwd = Path(kwargs.get("cwd") or os.getcwd())
        env = kwargs.get("env")
        done = self._cli.run([(cwd, cmd[3:])], 1, dict(env) if env is not None else None, Path(stdout.name))[
            0
        ]
        return subprocess.CompletedProcess(cmd, done.returncode)


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

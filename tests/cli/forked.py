"""Command lines and scripts forked from one interpreter that imported the CLI once (``cli_driver.py``):
:class:`ForkedCli` (the ``forked_cli`` fixture of tests/conftest.py) and :class:`ForkedSubprocess`."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def subprocess_env() -> dict[str, str]:
    """Environment of a CLI subprocess: offline, one thread, none of the variables a parent run sets for ranks."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for key in ("PAL_DEBUG", "LOCAL_RANK", "PAL_RUN_VERSION", "PAL_RESUME_CKPT"):
        env.pop(key, None)
    return env


DRIVER = Path(__file__).with_name("cli_driver.py")
JOB_TIMEOUT = 600.0  # far above any run of the suite: only a hang (a DDP rank waiting) meets it


class ForkedCli:
    """``pal-lightning`` command lines, each a process of its own forked from one driver that imported the
    CLI once (saving ~6 s of imports per command). A child is ``sys.exit(main())`` in its own folder with
    its own output files and environment; signals and exit statuses reach the test as from
    :func:`subprocess.run`; under DDP, rank 1 is the job's spare (``cli_driver.py``). One batch at a time.
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
        jobs: Sequence[tuple[Path, Sequence[str]] | tuple[Path, Sequence[str], dict[str, str]]],
        workers: int = 3,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        timeout: float = JOB_TIMEOUT,
    ) -> list[subprocess.CompletedProcess[str]]:
        """Run every ``(working folder, arguments after pal-lightning)`` job, ``workers`` at a time; their
        results in the order of ``jobs``. ``env`` (or a job's third item): the whole environment; ``log``:
        one file for stdout and stderr (of a single job); ``timeout``: past it, the job and its ranks are
        killed and :class:`subprocess.TimeoutExpired` is raised once the batch has ended."""
        assert log is None or len(jobs) == 1
        batch = [
            self._job(cwd, args, own_env[0] if own_env else env, timeout, log) for cwd, args, *own_env in jobs
        ]
        return self._send(batch, workers)

    def run_script(
        self, cwd: Path, script: Path, args: Sequence[str], env: dict[str, str], timeout: float = JOB_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """``python SCRIPT ARGS`` in ``cwd`` with ``env``, forked from the driver, as :func:`subprocess.run`
        with ``capture_output=True, text=True, timeout=timeout`` gives it."""
        job = self._job(cwd, [str(a) for a in args], env, timeout, script=str(Path(script).resolve()))
        return self._send([job], 1)[0]

    def _job(
        self,
        cwd: Path,
        args: Sequence[str],
        env: dict[str, str] | None,
        timeout: float,
        log: Path | None = None,
        script: str | None = None,
    ) -> dict[str, Any]:
        name = f"job{next(self._ids)}"
        out, err = (log, log) if log else (self._logs / f"{name}.out", self._logs / f"{name}.err")
        job: dict[str, Any] = {"name": name, "cwd": str(cwd), "args": list(args), "timeout": timeout}
        job.update(stdout=str(out), stderr=str(err))
        job.update({"env": env} if env is not None else {}, **({"script": script} if script else {}))
        return job

    def _send(self, batch: list[dict[str, Any]], workers: int) -> list[subprocess.CompletedProcess[str]]:
        """Each job's result (its output ``""`` when it went to one log file), or
        :class:`subprocess.TimeoutExpired` for one killed at its timeout."""
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            assert self._proc.poll() is None, "the CLI driver is gone"
            self._proc.stdin.write(json.dumps({"jobs": batch, "workers": workers}) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        assert line, "the CLI driver stopped"
        answer = json.loads(line)
        done = []
        for job in batch:
            out, err = (Path(job[key]) for key in ("stdout", "stderr"))
            command = [sys.executable, job["script"]] if "script" in job else ["pal-lightning"]
            if job["name"] in answer["timed_out"]:
                raise subprocess.TimeoutExpired(
                    [job.get("script", "pal-lightning"), *job["args"]],
                    job["timeout"],
                    out.read_text() if out.is_file() else None,
                    err.read_text() if err.is_file() and err != out else None,
                )
            captured = ("", "") if out == err else (out.read_text(), err.read_text())
            done.append(
                subprocess.CompletedProcess([*command, *job["args"]], answer["codes"][job["name"]], *captured)
            )
        return done

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class ForkedSubprocess:
    """The ``subprocess`` module of ``benchmarks/cli_runs.py`` in a benchmark's test: ``sys.executable -m
    pal_lightning ARGS`` into a log file runs through :class:`ForkedCli`, ``sys.executable SCRIPT ARGS``
    captured as text through :meth:`ForkedCli.run_script`, anything else as usual; ``commands`` lists
    what it forked."""

    STDOUT = subprocess.STDOUT
    PIPE = subprocess.PIPE
    DEVNULL = subprocess.DEVNULL
    TimeoutExpired = subprocess.TimeoutExpired
    CompletedProcess = subprocess.CompletedProcess
    SCRIPT_KWARGS = frozenset({"capture_output", "text", "check", "cwd", "env", "timeout"})

    def __init__(self, cli: ForkedCli) -> None:
        self._cli = cli
        self.commands: list[list[str]] = []

    def run(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        cmd = list(cmd)
        stdout = kwargs.get("stdout")
        if (
            cmd[:1] == [sys.executable]
            and cmd[1:2]
            and cmd[1].endswith(".py")
            and kwargs.get("capture_output")
        ):
            return self._script(cmd, **kwargs)  # python SCRIPT ARGS with its output captured as text
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
        timeout = kwargs.get("timeout") or JOB_TIMEOUT
        job_env = dict(env) if env is not None else None
        [done] = self._cli.run([(cwd, cmd[3:])], 1, job_env, Path(stdout.name), timeout)
        return subprocess.CompletedProcess(cmd, done.returncode)

    def _script(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """``subprocess.run([sys.executable, SCRIPT, *ARGS], capture_output=True, ...)`` through the driver."""
        assert kwargs.get("text") and set(kwargs) <= self.SCRIPT_KWARGS, kwargs
        self.commands.append(cmd)
        env = kwargs.get("env")
        cwd = Path(kwargs.get("cwd") or os.getcwd())
        script_env = dict(env if env is not None else os.environ)
        done = self._cli.run_script(
            cwd, Path(cmd[1]), cmd[2:], script_env, kwargs.get("timeout") or JOB_TIMEOUT
        )
        if kwargs.get("check") and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
        return subprocess.CompletedProcess(cmd, done.returncode, done.stdout, done.stderr)

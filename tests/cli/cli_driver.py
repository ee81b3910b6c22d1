"""Run ``pal-lightning`` command lines as processes forked from one interpreter that imported the CLI once.

``python cli_driver.py --serve`` reads one JSON line ``{"jobs": [...], "workers": N}`` at a time and
answers ``{"codes": {name: exit status}, "timed_out": [names]}`` when the batch has ended. A job is
``{"name", "cwd", "args"}`` plus optional ``"stdout"``/``"stderr"`` paths (may be one file), ``"env"``
(the whole environment), ``"timeout"`` and ``"script"``. Each child is what the console script is,
``sys.exit(main())`` (or ``python SCRIPT ARGS`` with ``"script"``); an uncaught exception prints its
traceback and exits 1; a child killed by signal N has status -N. Each child leads its own process group,
so a job past its timeout is SIGKILLed with the ranks it started (a hung DDP rank fails its test instead
of hanging the session).

A job that may run DDP forks a spare process first, as pristine as the job then was; when Lightning's
launcher starts rank 1 (``sys.executable -m pal_lightning.__main__ ARGS``, or ``sys.executable SCRIPT
ARGS``), the spare becomes that process, which saves a fresh interpreter's ~6 s of imports. Real
interpreter starts are tested in test_cli_subprocess.py, test_help.py and test_torchrun_cli.py.
Forking after the imports is safe: the driver has run no torch operation, so no thread pool exists yet.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

RANK_COMMAND = [sys.executable, "-m", "pal_lightning.__main__"]  # how Lightning starts rank 1 of a job
_spare: dict[str, Any] = {}  # the spare's pid, its pipe's write end (until taken), command and script


def _preload() -> None:
    import lightning.pytorch  # noqa: F401
    import transformers.models.bert.modeling_bert  # noqa: F401

    import pal_lightning.cli.fit  # noqa: F401
    import pal_lightning.data  # noqa: F401
    import pal_lightning.module.multitask  # noqa: F401


def _redirect(fd: int, path: Path) -> None:
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, fd)
    os.close(out)


def _set_environment(env: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)
    # a fresh interpreter puts its PYTHONPATH's folders on sys.path (a user's package: PYTHONPATH=. pal-lightning)
    entries = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1] = [p for p in dict.fromkeys(entries) if p not in sys.path]
    # what Lightning reads off the environment when it is imported (a fresh rank 1 imports it as rank 1)
    from lightning.fabric.utilities.rank_zero import _get_rank, rank_zero_only

    rank_zero_only.rank = _get_rank() or 0


def _child(job: dict[str, Any]) -> None:
    os.setpgid(0, 0)  # its own group: a timeout kills the job with the ranks it starts (see run)
    cwd = Path(job["cwd"])
    os.chdir(cwd)
    if "env" in job:
        _set_environment(job["env"])
    stdout = Path(job.get("stdout", cwd / f"{job['name']}.out"))
    stderr = Path(job.get("stderr", cwd / f"{job['name']}.err"))
    _redirect(1, stdout)
    if stderr == stdout:
        os.dup2(1, 2)
    else:
        _redirect(2, stderr)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # a run reads no input (under --serve, stdin is the driver's job stream)
    os.close(null)
    if "script" in job:  # python SCRIPT ARGS (Lightning's launcher: rank 1 is sys.executable SCRIPT ARGS)
        sys.argv = [job["script"], *job["args"]]
        _fork_spare([sys.executable, job["script"]], job["script"])
        _run_script(job["script"])
    sys.argv = ["pal-lightning", *job["args"]]
    if _may_run_ddp(job["args"]):
        _fork_spare(RANK_COMMAND, None)
    _run_main()


def _run_main() -> None:
    """``sys.exit(main())`` here, as ``python -m pal_lightning`` (Lightning starts ranks from ``__spec__``)."""
    sys.modules["__main__"].__spec__ = importlib.util.find_spec("pal_lightning.__main__")
    from pal_lightning.cli.main import main

    _finish(main)


def _run_script(path: str) -> None:
    """``python PATH ARGS`` here (no ``__spec__``: Lightning starts rank 1 as ``sys.executable PATH ARGS``)."""
    sys.path.insert(0, str(Path(path).parent))

    def script() -> int:
        runpy.run_path(path, run_name="__main__")
        return 0

    _finish(script)


def _finish(run: Any) -> None:
    """``run()`` as the interpreter runs a program, then wait for the processes it started and exit."""
    try:
        code = run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if "fd" in _spare:  # no rank 1 was started: the spare reads the end of its pipe and exits
        os.close(_spare.pop("fd"))
    # end with the ranks it started (they write to the same files), as a caller reading pipes would
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    os._exit(code)


def _may_run_ddp(args: list[str]) -> bool:
    """Whether the command line or a config file it names mentions ``ddp`` (a strategy that starts ranks)."""
    if any("ddp" in arg for arg in args):
        return True
    for flag, value in zip(args, args[1:], strict=False):
        if flag == "--config" and Path(value).is_file() and "ddp" in Path(value).read_text(errors="replace"):
            return True
    return False


def _fork_spare(command: list[str], script: str | None) -> None:
    """Fork the spare and have Lightning's launcher take it as rank 1 when it starts ``command + ARGS``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write)
        _become_rank(read)
    os.close(read)
    _spare.update(pid=pid, fd=write, command=list(command), script=script)
    import lightning.pytorch.strategies.launchers.subprocess_script as launcher

    shim = types.ModuleType("subprocess")
    shim.__dict__.update(vars(subprocess))
    shim.Popen = _popen  # type: ignore[attr-defined]
    launcher.subprocess = shim  # type: ignore[attr-defined]


def _popen(command: list[str], *args: Any, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` for Lightning's launcher: rank 1 is the spare; anything else starts as usual."""
    start = _spare.get("command", RANK_COMMAND)
    if "fd" not in _spare or args or set(kwargs) - {"env", "cwd"} or list(command[: len(start)]) != start:
        return subprocess.Popen(command, *args, **kwargs)
    request = {
        "args": list(command[len(start) :]),
        "env": kwargs.get("env"),
        "cwd": kwargs.get("cwd"),
        "script": _spare["script"],
    }
    fd = _spare.pop("fd")
    os.write(fd, json.dumps(request).encode())
    os.close(fd)
    proc = subprocess.Popen.__new__(subprocess.Popen)  # a started child: what Popen.__init__ leaves
    proc.args, proc.pid, proc.returncode = list(command), _spare.pop("pid"), None
    proc.stdin = proc.stdout = proc.stderr = None
    proc.text_mode, proc.encoding, proc.errors, proc.pipesize = False, None, None, -1
    proc._child_created, proc._waitpid_lock = True, threading.Lock()  # type: ignore[attr-defined]
    proc._sigint_wait_secs, proc._closed_child_pipe_fds = 0.25, True  # type: ignore[attr-defined]
    proc._communication_started, proc._input = False, None  # type: ignore[attr-defined]
    return proc


def _become_rank(read: int) -> None:
    """The spare: wait for the launcher's request (or the end of the pipe: exit), then be that process."""
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    if not chunks:
        os._exit(0)
    request = json.loads(b"".join(chunks))
    if request["cwd"] is not None:
        os.chdir(request["cwd"])
    _set_environment(request["env"] if request["env"] is not None else dict(os.environ))
    if request["script"] is not None:
        sys.argv = [request["script"], *request["args"]]
        _run_script(request["script"])
    spec = importlib.util.find_spec("pal_lightning.__main__")
    assert spec is not None and spec.origin is not None
    sys.argv = [spec.origin, *request["args"]]  # as ``python -m pal_lightning.__main__ ARGS`` sets it
    _run_main()


def run(jobs: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """Fork ``jobs``, ``workers`` at a time; exit statuses by name and the names killed at their timeout."""
    pending = list(jobs)
    running: dict[int, tuple[str, float]] = {}  # pid (= its process group) -> name, deadline
    codes: dict[str, int] = {}
    timed_out: list[str] = []
    while pending or running:
        while pending and len(running) < workers:
            job = pending.pop(0)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(job)
            try:  # set here too, so that the group exists whichever of the two runs first
                os.setpgid(pid, pid)
            except OSError:  # the child has already set it, or has already ended
                pass
            running[pid] = (job["name"], time.monotonic() + float(job.get("timeout", "inf")))
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            codes[running.pop(pid)[0]] = os.waitstatus_to_exitcode(status)
            continue
        now = time.monotonic()
        for pid, (name, deadline) in running.items():
            if now > deadline and name not in timed_out:
                timed_out.append(name)
                os.killpg(pid, signal.SIGKILL)
        time.sleep(0.02)
    return {"codes": codes, "timed_out": timed_out}


def serve() -> None:
    _preload()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip():
            batch = json.loads(line)
            print(json.dumps(run(batch["jobs"], batch["workers"])), flush=True)


if __name__ == "__main__":
    assert sys.argv[1:] == ["--serve"], "usage: python cli_driver.py --serve"
    serve()

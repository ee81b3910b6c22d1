"""Run many ``pal-lightning`` command lines as separate processes that share one interpreter start-up.

Usage: ``python cli_driver.py JOBS.json [WORKERS]`` with ``JOBS.json`` a list of
``{"name", "cwd", "args"}``. The driver imports the CLI (torch, Lightning, transformers: most of a
run's start-up) once, then forks one child per job, ``WORKERS`` at a time. A child is what the
``pal-lightning`` console script is, ``sys.exit(main())``: it changes into ``cwd``, sends its
stdout/stderr to ``<cwd>/<name>.out``/``.err`` (or to the job's ``"stdout"``/``"stderr"`` paths,
which may be one file), and an uncaught exception prints its traceback to stderr and exits 1, as
the interpreter does; under DDP, Lightning starts the other ranks with ``sys.executable -m
pal_lightning.__main__ ARGS`` (fresh interpreters), as it does from ``python -m pal_lightning ARGS``.
The exit statuses go to ``JOBS.json.results``: a child killed by signal N has
status -N, as in :class:`subprocess.CompletedProcess`. A job's ``"env"``, if given, is the child's
whole environment.

``python cli_driver.py --serve`` does the same for batches read from stdin, one JSON object
``{"jobs": [...], "workers": N}`` a line, and answers each with one JSON line of exit statuses on
stdout once the batch has finished, until stdin closes: one import for all the command lines of a
test session (``ForkedCli`` in tests/cli/conftest.py).

Forking after the imports is safe here: the driver has run no torch operation, so no thread pool
exists yet. This saves the 5-6 s of imports per command that a catalogue of ~20 commands would pay.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


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


def _child(job: dict[str, Any]) -> None:
    cwd = Path(job["cwd"])
    os.chdir(cwd)
    if "env" in job:
        os.environ.clear()
        os.environ.update(job["env"])
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
    sys.argv = ["pal-lightning", *job["args"]]
    # and it is ``python -m pal_lightning ARGS`` to Lightning's DDP launcher, which starts the other
    # ranks from ``__main__.__spec__``: ``sys.executable -m pal_lightning.__main__ ARGS``, as for a real run
    sys.modules["__main__"].__spec__ = importlib.util.find_spec("pal_lightning.__main__")
    from pal_lightning.cli.main import main

    try:
        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # the processes the run started (the other DDP ranks) write to the same files: end with them, as a
    # caller reading a run's output through pipes ends only when every writer has closed them
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    os._exit(code)


def run(jobs: list[dict[str, Any]], workers: int) -> dict[str, int]:
    _preload()
    pending = list(jobs)
    running: dict[int, str] = {}
    codes: dict[str, int] = {}
    while pending or running:
        while pending and len(running) < workers:
            job = pending.pop(0)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(job)
            running[pid] = job["name"]
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    return codes


def serve() -> None:
    _preload()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip():
            batch = json.loads(line)
            print(json.dumps(run(batch["jobs"], batch["workers"])), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve()
    else:
        path = Path(sys.argv[1])
        codes = run(json.loads(path.read_text()), int(sys.argv[2]) if len(sys.argv) > 2 else 3)
        Path(f"{path}.results").write_text(json.dumps(codes))

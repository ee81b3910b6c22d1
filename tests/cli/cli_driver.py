"""Run many ``pal-lightning`` command lines as separate processes that share one interpreter start-up.

Usage: ``python cli_driver.py JOBS.json [WORKERS]`` with ``JOBS.json`` a list of
``{"name", "cwd", "args"}``. The driver imports the CLI (torch, Lightning, transformers: most of a
run's start-up) once, then forks one child per job, ``WORKERS`` at a time. A child is what the
``pal-lightning`` console script is, ``sys.exit(main())``: it changes into ``cwd``, sends its
stdout/stderr to ``<cwd>/<name>.out``/``.err``, and an uncaught exception prints its traceback to
stderr and exits 1, as the interpreter does. The exit statuses go to ``JOBS.json.results``.

Forking after the imports is safe here: the driver has run no torch operation, so no thread pool
exists yet. This saves the 5-6 s of imports per command that a catalogue of ~20 commands would pay.
"""

from __future__ import annotations

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


def _child(job: dict[str, Any]) -> None:
    cwd = Path(job["cwd"])
    os.chdir(cwd)
    for stream, suffix in ((1, ".out"), (2, ".err")):
        fd = os.open(cwd / f"{job['name']}{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, stream)
        os.close(fd)
    sys.argv = ["pal-lightning", *job["args"]]
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
    os._exit(code)


def run(jobs: list[dict[str, Any]], workers: int) -> dict[str, int]:
    _preload()
    pending = list(jobs)
    running: dict[int, str] = {}
    codes: dict[str, int] = {}
    while pending or running:
        while pending and len(running) < workers:
            job = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                _child(job)
            running[pid] = job["name"]
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    return codes


if __name__ == "__main__":
    path = Path(sys.argv[1])
    codes = run(json.loads(path.read_text()), int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    Path(f"{path}.results").write_text(json.dumps(codes))

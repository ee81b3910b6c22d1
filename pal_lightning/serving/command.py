"""``pal-lightning serve MODEL``: an HTTP server for every task of one model, on LitServe (the ``serve`` extra)::

    pal-lightning serve runs/demo/version_0/model --port 8000 --max_batch_size 8 --batch_timeout 0.01

Routes: ``POST /predict``, ``GET /tasks``, ``GET /stats``, ``GET /health`` (LitServe's) and ``GET /`` (a page
to try it); docs/serving.md tells more.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from pal_lightning.core.config_fields import field_docs
from pal_lightning.core.errors import PalUserError
from pal_lightning.serving.schema import TaskInfo
from pal_lightning.serving.stats import BatchCounters
from pal_lightning.serving.subset import parse_task_list

#: The environment variable read for the API key when ``--api_key`` is not given.
API_KEY_ENV = "PAL_API_KEY"
#: The hosts LitServe binds to.
HOSTS = ("127.0.0.1", "0.0.0.0", "::")
ACCELERATORS = ("auto", "cpu", "cuda", "mps")
#: How a worker runs a batch of requests of several tasks (``--batching``).
BATCHING = ("mixed", "per_task")


@dataclass(frozen=True)
class ServeOptions:
    """The server's settings (the command's options)."""

    model: str
    """A ``save_pretrained`` folder (``runs/<name>/version_N/model``), a hub id, or a ``.ckpt`` file."""
    host: str = "127.0.0.1"
    """The interface to listen on: ``127.0.0.1`` (this machine only), ``0.0.0.0`` or ``::`` (every one)."""
    port: int = 8000
    """The port (1024 to 65535)."""
    max_batch_size: int = 8
    """The most requests one forward pass answers (LitServe's dynamic batching)."""
    batch_timeout: float = 0.01
    """Seconds a worker waits for a batch to fill before it runs what it has."""
    workers_per_device: int = 1
    """Inference processes per device, each with its own copy of the model."""
    accelerator: str = "auto"
    """``auto`` (a GPU when there is one), ``cpu``, ``cuda`` or ``mps``."""
    devices: str = "auto"
    """How many devices of the accelerator to use: ``auto`` (all) or a number."""
    timeout: float = 30.0
    """Seconds a request may wait for its answer (504 after)."""
    max_inputs: int = 64
    """The most inputs one request may list (413 above)."""
    max_body_bytes: int = 1_000_000
    """The largest request body accepted, in bytes (413 above)."""
    api_key: str | None = None
    """The key every route but ``/`` and ``/health`` requires in the ``X-API-Key`` header; else $PAL_API_KEY, else none."""
    model_class: str | None = None
    """The ``MultiTaskModule`` subclass (``pkg.module.Class``) the model was saved from, imported to build it."""
    batching: str = "mixed"
    """``mixed``: one forward pass for a batch, whatever its tasks; ``per_task``: one per task in the batch."""
    tasks: str | None = None
    """Serve only these tasks (``sst,qqp``): the others are refused as unknown and their weights dropped."""
    rows_per_forward: int = 0
    """The most (task, text) rows one forward pass runs, a batch's rows sorted by length; 0: 8 on the CPU, all
    of a batch's rows on a GPU."""


def parser() -> argparse.ArgumentParser:
    """The command's options: :class:`ServeOptions`' fields, documented by their docstrings."""
    p = argparse.ArgumentParser(
        prog="pal-lightning serve",
        description="Serve every task of a saved model over HTTP (POST /predict, GET /tasks, GET /health).",
        exit_on_error=False,
    )
    docs = field_docs(ServeOptions)
    p.add_argument("model", help=docs["model"])
    for field in dataclasses.fields(ServeOptions)[1:]:
        kind = {"int": int, "float": float}.get(str(field.type), str)
        text = f"{docs[field.name]} (default: {field.default})".replace("``", "").replace("%", "%%")
        flag = "model.class_path" if field.name == "model_class" else field.name  # as fit and predict name it
        p.add_argument(f"--{flag}", dest=field.name, type=kind, default=field.default, help=text)
    return p


def options(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> ServeOptions:
    """The checked options of a command line (after ``serve``).

    Raises:
        PalUserError: for a value the server cannot use, naming the option and what it takes.
    """
    ns = vars(parser().parse_args(list(argv)))
    ns["api_key"] = ns["api_key"] or environ.get(API_KEY_ENV) or None
    o = ServeOptions(**ns)
    problems = [
        (o.host not in HOSTS, f"--host {o.host!r}: use one of {', '.join(HOSTS)}"),
        (  # the key itself stays out of the message; clients send other characters in other encodings
            o.api_key is not None and not (o.api_key.isascii() and o.api_key.isprintable()),
            f"--api_key (or ${API_KEY_ENV}): use printable ASCII characters only",
        ),
        (not 1024 <= o.port <= 65535, f"--port {o.port}: use a port from 1024 to 65535"),
        (
            o.accelerator not in ACCELERATORS,
            f"--accelerator {o.accelerator!r}: use {', '.join(ACCELERATORS)}",
        ),
        (
            o.devices != "auto" and not (o.devices.isdigit() and int(o.devices) > 0),
            f"--devices {o.devices!r}: use auto or a positive number",
        ),
        (o.max_batch_size < 1, f"--max_batch_size {o.max_batch_size}: use 1 or more"),
        (o.workers_per_device < 1, f"--workers_per_device {o.workers_per_device}: use 1 or more"),
        (o.max_inputs < 1, f"--max_inputs {o.max_inputs}: use 1 or more"),
        (o.max_body_bytes < 1, f"--max_body_bytes {o.max_body_bytes}: use 1 or more"),
        (
            not 0 < o.timeout < math.inf,  # nan fails it too
            f"--timeout {o.timeout}: use a positive number of seconds",
        ),
        (o.batching not in BATCHING, f"--batching {o.batching!r}: use {' or '.join(BATCHING)}"),
        (o.rows_per_forward < 0, f"--rows_per_forward {o.rows_per_forward}: use 0 (automatic) or more"),
        (
            not 0 <= o.batch_timeout < o.timeout,
            f"--batch_timeout {o.batch_timeout}: use 0 or more, below --timeout ({o.timeout})",
        ),
    ]
    for bad, message in problems:
        if bad:
            raise PalUserError(f"Invalid {message}.")
    parse_task_list(o.tasks)
    if o.accelerator == "cuda":
        import torch

        have, want = torch.cuda.device_count(), int(o.devices) if o.devices != "auto" else 1
        if want > have:
            raise PalUserError(
                f"Invalid --accelerator cuda --devices {o.devices}: this machine has {have} CUDA device(s). "
                "Use fewer devices, or --accelerator cpu."
            )
    if o.accelerator == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise PalUserError(
                "Invalid --accelerator mps: this machine has no MPS device (Apple silicon). Use --accelerator "
                "cpu, or auto."
            )
    return o


def require_litserve() -> None:
    """Raises: PalUserError when LitServe (the ``serve`` extra) is not installed."""
    if importlib.util.find_spec("litserve") is None:
        raise PalUserError(
            "pal-lightning serve needs LitServe, which is not installed: pip install 'pal-lightning[serve]'."
        )


def source(model: str) -> tuple[str | None, str | None]:
    """``(folder or hub id, None)``, or ``(None, checkpoint)`` for a ``.ckpt`` file (``load_model``'s arguments).

    Raises:
        PalUserError: for a ``.ckpt`` file that does not exist (other mistakes: when a worker loads the model).
    """
    if Path(model).suffix != ".ckpt":
        return (model, None)
    if not Path(model).is_file():
        raise PalUserError(
            f"Checkpoint {model} does not exist. Pass a .ckpt file, a model folder or a hub id."
        )
    return (None, model)


def build_server(o: ServeOptions, on_ready: Callable[[Mapping[str, TaskInfo]], None]) -> Any:
    """The server of ``o``, not started (``.run(...)`` starts it). Its workers load the model; the first to
    do so tells the server its tasks (:class:`~pal_lightning.serving.api.PalServer`), which then calls
    ``on_ready(tasks)`` and starts answering."""
    import multiprocessing

    from pal_lightning.serving.api import PalAPI, PalServer
    from pal_lightning.serving.guard import Guard
    from pal_lightning.serving.page import add_page

    announce = multiprocessing.get_context("spawn").SimpleQueue()  # LitServe spawns its workers
    counters = BatchCounters(o.max_batch_size)  # shared memory: made before the workers and HTTP processes
    api = PalAPI(
        *source(o.model),
        o.max_batch_size,
        o.batch_timeout,
        announce=announce,
        model_class=o.model_class,
        batching=o.batching,
        tasks=parse_task_list(o.tasks),
        counters=counters,
        rows_per_forward=o.rows_per_forward,
    )
    tasks: dict[str, TaskInfo] = {}  # filled before the HTTP processes start (they are forked after)
    guard = dict(tasks=tasks, max_inputs=o.max_inputs, max_body_bytes=o.max_body_bytes, api_key=o.api_key)
    server = PalServer(
        api,
        tasks,
        on_ready,
        accelerator=o.accelerator,
        devices=o.devices if o.devices == "auto" else int(o.devices),
        workers_per_device=o.workers_per_device,
        timeout=o.timeout,
        middlewares=[(Guard, guard)],
    )

    async def describe_tasks() -> dict[str, Any]:
        return {"tasks": {name: info.describe() for name, info in tasks.items()}}

    async def batch_stats() -> dict[str, Any]:
        return {"batching": o.batching, **counters.snapshot()}

    server.app.add_api_route("/tasks", describe_tasks, methods=["GET"])
    server.app.add_api_route("/stats", batch_stats, methods=["GET"])
    add_page(server.app)  # GET /: the page to try it
    return server


def _stop_on_sigterm() -> None:
    """SIGTERM (``docker stop``, ``kill``) stops the server as Ctrl-C does, workers included."""
    main = os.getpid()

    def stop(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != main:  # an HTTP process forked from this one, once uvicorn has shut it down
            raise SystemExit(0)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def run(argv: Sequence[str]) -> int:
    """Run ``pal-lightning serve`` (``argv``: after ``serve``) until stopped; user mistakes raise PalUserError."""
    o = options(argv)
    require_litserve()
    where = f"http://{'localhost' if o.host != '127.0.0.1' else o.host}:{o.port}"

    def ready(tasks: Mapping[str, TaskInfo]) -> None:
        print(
            f"pal-lightning: serving {', '.join(tasks)} of {o.model} at {where}/predict (GET /tasks, /health); "
            "Ctrl-C stops it",
            flush=True,
        )

    server = build_server(o, ready)
    _stop_on_sigterm()
    server.run(host=o.host, port=o.port, generate_client_file=False, log_level="warning")
    return 0

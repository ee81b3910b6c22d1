"""Several local processes for distributed tests: a free TCP port for gloo, and spawned (not forked:
no inherited threads or process group) workers; a served model's health and JSON routes over HTTP."""

from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_spawned(worker: Callable[..., None], world_size: int, timeout: float = 120.0) -> list[Any]:
    """Run ``worker(rank, world_size, port, queue)`` in ``world_size`` spawned processes; what they put on
    ``queue`` (one item each, in arrival order), once every one exited with status 0."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(rank, world_size, port, queue)) for rank in range(world_size)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=timeout) for _ in procs]
    for proc in procs:
        proc.join(timeout=timeout)
        assert proc.exitcode == 0, f"a spawned process exited with {proc.exitcode}"
    return results


def get_json(port: int, path: str, timeout: float = 60.0) -> Any:
    """The decoded JSON answer of ``GET path`` on ``127.0.0.1:port`` (``RuntimeError`` unless 200)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status}")
        return json.loads(response.read())
    finally:
        connection.close()


def wait_healthy(port: int, process: subprocess.Popen, timeout: float, output: Callable[[], str]) -> None:
    """Poll ``GET /health`` of the server ``process`` on ``port`` until it answers 200 (LitServe: a worker
    is ready); ``RuntimeError`` with the end of ``output()`` if the process stops first, or after ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"the server on port {port} stopped: {output()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server on port {port} did not start in {timeout:g} s")
        time.sleep(0.2)

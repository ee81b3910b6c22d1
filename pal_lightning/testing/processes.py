"""Several local processes for distributed tests: a free TCP port for gloo, and spawned (not forked:
no inherited threads or process group) workers."""

from __future__ import annotations

import multiprocessing as mp
import socket
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

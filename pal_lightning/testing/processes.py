"""Local processes for tests: a free TCP port for gloo process groups; a served model's health and JSON
routes over HTTP."""

from __future__ import annotations

import http.client
import json
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

"""The client side of ``benchmarks/serve_load.py``: a small asyncio HTTP/1.1 client (keep-alive connections,
one pool per server, no dependency: it must not eat the cores the servers are measured on), the task mix and
the texts of the requests, the two ways of driving load (closed loop: C clients each sending its next request
when its answer comes; open loop: Poisson arrivals at a given rate, whatever the answers) and the summary of
their latencies. Latency is counted from the moment a request was due, so that an open-loop request that waits
for a free connection counts its wait.
"""

from __future__ import annotations

import asyncio
import csv
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pal_lightning.data.sources.demo import demo_data_dir


class Connection:
    """One keep-alive HTTP/1.1 connection to ``127.0.0.1:port``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, bool]:
        """``(status, body, keep)`` of one request; ``keep``: the server keeps the connection open."""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode("latin-1") + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b"\n", b""):
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while size := int((await self.reader.readline()).strip() or b"0", 16):
                data += await self.reader.readexactly(size)
                await self.reader.readline()
            await self.reader.readline()
        else:
            data = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, data, headers.get("connection", "").lower() != "close"

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Idle connections to one server, opened as needed and reused while fresh: one idle for longer than
    :attr:`FRESH` seconds may have been closed by the server (uvicorn's keep-alive timeout is 5 s), so it is
    closed here instead, and a reused connection the server closed is retried once on a new one."""

    FRESH = 2.0

    def __init__(self, port: int) -> None:
        self.port, self.idle = port, list[tuple[Connection, float]]()

    async def _connection(self) -> tuple[Connection, bool]:
        while self.idle:
            connection, since = self.idle.pop()
            if time.perf_counter() - since < self.FRESH:
                return connection, True
            connection.close()
        return await Connection.open(self.port), False

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        connection, reused = await self._connection()
        try:
            status, data, keep = await connection.request("POST", path, body)
        except (OSError, asyncio.IncompleteReadError, ConnectionError, ValueError):
            connection.close()
            if not reused:
                raise
            connection = await Connection.open(self.port)
            status, data, keep = await connection.request("POST", path, body)
        if keep:
            self.idle.append((connection, time.perf_counter()))
        else:
            connection.close()
        return status, data

    def close(self) -> None:
        while self.idle:
            self.idle.pop()[0].close()


def demo_texts() -> tuple[list[str], list[tuple[str, str]]]:
    """Real sentences and pairs for the requests: the packaged demo set's SST dev sentences, and its STS and
    Quora dev pairs (pal_lightning/data/sources/demo, offline)."""

    def rows(name: str) -> list[dict[str, str]]:
        with open(demo_data_dir() / name, encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f, delimiter="\t"))

    singles = [r["sentence"].strip() for r in rows("ids-sst-dev.csv") if r["sentence"].strip()]
    pairs = [
        (r["sentence1"].strip(), r["sentence2"].strip())
        for name in ("sts-dev.csv", "quora-dev.csv")
        for r in rows(name)
        if r["sentence1"].strip() and r["sentence2"].strip()
    ]
    return singles, pairs


def mix_weights(n: int, mix: str, zipf_s: float = 1.1) -> list[float]:
    """The share of requests each of ``n`` tasks gets: ``uniform``, or ``zipf`` (task k's share ∝ 1/k^s)."""
    if mix == "uniform":
        return [1.0 / n] * n
    raw = [1.0 / (k**zipf_s) for k in range(1, n + 1)]
    return [w / sum(raw) for w in raw]


@dataclass
class Requests:
    """An endless, seeded stream of one-task requests over ``tasks`` (``{name: sentences it takes}``)."""

    tasks: dict[str, int]
    weights: Sequence[float]
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.singles, self.pairs = demo_texts()
        self.names = list(self.tasks)

    def next(self) -> tuple[str, bytes]:
        task = self.rng.choices(self.names, self.weights)[0]
        text: Any = self.rng.choice(self.pairs) if self.tasks[task] == 2 else self.rng.choice(self.singles)
        return task, json.dumps(
            {"task": task, "text": list(text) if isinstance(text, tuple) else text}
        ).encode()


@dataclass
class Sample:
    """One request: when it was due, how long its answer took (seconds), its status (0: no answer)."""

    due: float
    latency: float
    status: int


Route = Callable[[str], Pool]


async def _send(route: Route, task: str, body: bytes, due: float, out: list[Sample]) -> None:
    try:
        status, _ = await route(task).post("/predict", body)
    except (OSError, asyncio.IncompleteReadError, ConnectionError, ValueError):
        status = 0
    out.append(Sample(due, time.perf_counter() - due, status))


async def closed_loop(
    route: Route, requests: Requests, clients: int, max_requests: int, max_seconds: float
) -> list[Sample]:
    """``clients`` clients, each sending its next request when the last is answered, until ``max_requests``
    were sent or ``max_seconds`` passed."""
    out: list[Sample] = []
    sent = 0
    end = time.perf_counter() + max_seconds

    async def client() -> None:
        nonlocal sent
        while sent < max_requests and time.perf_counter() < end:
            sent += 1
            task, body = requests.next()
            await _send(route, task, body, time.perf_counter(), out)

    await asyncio.gather(*(client() for _ in range(clients)))
    return out


async def open_loop(
    route: Route, requests: Requests, rate: float, max_requests: int, max_seconds: float, seed: int = 0
) -> list[Sample]:
    """Poisson arrivals at ``rate`` requests a second (each sent when due, whatever is still unanswered),
    until ``max_requests`` arrived or ``max_seconds`` passed; then waits for the answers."""
    rng = random.Random(seed)
    out: list[Sample] = []
    pending: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    at = 0.0
    for _ in range(max_requests):
        at += rng.expovariate(rate)
        if at > max_seconds:
            break
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        task, body = requests.next()
        pending.append(asyncio.create_task(_send(route, task, body, start + at, out)))
    await asyncio.gather(*pending)
    return out


def summary(samples: Sequence[Sample]) -> dict[str, Any]:
    """Throughput (answered requests a second, from the first due to the last answer), latency percentiles
    (ms) of the answered requests, and the counts of answers and failures (``statuses``: per HTTP status,
    0 for no answer: a connection refused or closed)."""
    ok = [s for s in samples if s.status == 200]
    out: dict[str, Any] = {"requests": len(samples), "answered": len(ok), "failed": len(samples) - len(ok)}
    out["statuses"] = {str(k): n for k, n in sorted(Counter(s.status for s in samples).items())}
    if not ok:
        return {**out, "seconds": None, "throughput": None, "p50_ms": None, "p95_ms": None, "p99_ms": None}
    first, last = min(s.due for s in samples), max(s.due + s.latency for s in samples)
    latencies = np.array([s.latency for s in ok]) * 1000
    p50, p95, p99 = (float(np.percentile(latencies, q)) for q in (50, 95, 99))
    out.update(seconds=last - first, throughput=len(ok) / (last - first), p50_ms=p50, p95_ms=p95, p99_ms=p99)
    out["mean_ms"] = float(latencies.mean())
    return out

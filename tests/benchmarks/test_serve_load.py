"""benchmarks/serve_load.py: the task mixes, the latency summary, the ratios of issue 44; its asyncio client
against a small in-process HTTP server (closed loop bounded in requests, open loop in seconds, keep-alive and
a server that closes); and one ``--quick`` run end to end (a tiny model served as one server per task, real ``pal-lightning
serve`` subprocesses)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import load_benchmark

pytest.importorskip("litserve", reason="the serve extra is not installed")
bench = load_benchmark("serve_load")
client = bench.client


def test_the_task_mixes() -> None:
    assert client.mix_weights(4, "uniform") == [0.25] * 4
    zipf = client.mix_weights(8, "zipf", 1.0)
    assert sum(zipf) == pytest.approx(1.0) and zipf == sorted(zipf, reverse=True)
    assert zipf[0] / zipf[1] == pytest.approx(2.0) and zipf[0] / zipf[7] == pytest.approx(8.0)
    stream = client.Requests({"sst": 1, "qqp": 2}, [0.5, 0.5], seed=3)
    bodies = [json.loads(stream.next()[1]) for _ in range(200)]
    assert {b["task"] for b in bodies} == {"sst", "qqp"}
    assert all(isinstance(b["text"], str) == (b["task"] == "sst") for b in bodies)
    assert all(len(b["text"]) == 2 for b in bodies if b["task"] == "qqp")


def test_the_summary_counts_failures_apart_and_gives_percentiles() -> None:
    samples = [client.Sample(due=i * 0.01, latency=0.001 * (i + 1), status=200) for i in range(100)]
    samples.append(client.Sample(due=0.5, latency=0.2, status=0))
    out = client.summary(samples)
    assert (out["requests"], out["answered"], out["failed"]) == (101, 100, 1)
    assert out["p50_ms"] == pytest.approx(50.5) and out["p99_ms"] == pytest.approx(99.01)
    assert out["seconds"] == pytest.approx(1.09) and out["throughput"] == pytest.approx(100 / 1.09)
    assert client.summary([client.Sample(0, 1, 503)])["throughput"] is None


def _result(rss: list[float], throughput: float, p50: float = 10, p99: float = 20) -> dict[str, Any]:
    memory = [{"rss_mib": r, "pss_mib": r / 2} for r in rss]
    return {
        "memory": {"per_server": memory, "rss_mib": sum(rss), "pss_mib": sum(rss) / 2},
        "saturation": {"throughput": throughput},
        "open_loop": [{"p99_over_p50": p99 / p50}],
    }


def test_the_ratios_of_done_means() -> None:
    out = bench.ratios(
        {
            "mixed": _result([500], 120, 10, 25),
            "per_task": _result([500], 80),
            "single": _result([400] * 8, 100),
        }
    )
    assert out["memory_ntask_server_over_1task_server"]["value"] == pytest.approx(1.25)
    assert out["memory_8_servers_over_1task_server"]["value"] == pytest.approx(8.0)
    assert out["saturation_mixed_over_single"]["value"] == pytest.approx(1.2)
    assert out["saturation_mixed_over_per_task"]["value"] == pytest.approx(1.5)
    assert out["p99_over_p50_at_half_saturation"]["value"] == pytest.approx(2.5)
    assert bench.ratios({"mixed": _result([500], 120)})["saturation_mixed_over_single"]["value"] is None
    merged = bench.merged_stats(
        [
            {
                **dict.fromkeys(("batches", "requests", "inputs", "forwards", "busy_seconds"), 1),
                "batch_sizes": {"1": 1},
                "tasks_per_batch": {"1": 1},
            },
            {
                **dict.fromkeys(("batches", "requests", "inputs", "forwards", "busy_seconds"), 2),
                "batch_sizes": {"2": 1, "1": 1},
                "tasks_per_batch": {"1": 2},
            },
        ]
    )
    assert (
        merged["batches"] == 3
        and merged["batch_sizes"] == {"1": 2, "2": 1}
        and merged["tasks_per_batch"] == {"1": 3}
    )


async def _serve(closing_every: int) -> tuple[asyncio.base_events.Server, list[bytes]]:
    """An HTTP/1.1 server answering ``{"ok": true}`` (chunked every third answer), which closes the
    connection after every ``closing_every``-th answer; the bodies it got."""
    bodies: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
            )
            bodies.append(await reader.readexactly(length))
            close = len(bodies) % closing_every == 0
            extra = b"Connection: close\r\n" if close else b""
            if len(bodies) % 3 == 0:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                    + extra
                    + b'\r\n5\r\n{"ok"\r\n7\r\n: true}\r\n0\r\n\r\n'
                )
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n" + extra + b'\r\n{"ok": true}')
            await writer.drain()
            if close:
                writer.close()
                return

    return await asyncio.start_server(handle, "127.0.0.1", 0), bodies


def test_the_client_drives_closed_and_open_loops() -> None:
    async def run() -> tuple[list[Any], list[Any], list[bytes], int]:
        server, bodies = await _serve(closing_every=7)
        port = server.sockets[0].getsockname()[1]
        pool = client.Pool(port)
        requests = client.Requests({"sst": 1}, [1.0])
        closed = await client.closed_loop(
            lambda task: pool, requests, clients=4, max_requests=50, max_seconds=30
        )
        opened = await client.open_loop(
            lambda task: pool, requests, rate=200, max_requests=10_000, max_seconds=0.5
        )
        idle = len(pool.idle)
        pool.close()
        server.close()
        return closed, opened, bodies, idle

    closed, opened, bodies, idle = asyncio.run(run())
    assert len(closed) == 50 and {s.status for s in closed} == {200}  # bounded in requests
    assert 40 <= len(opened) <= 180 and {s.status for s in opened} == {200}  # bounded in seconds (~100)
    assert len(bodies) == len(closed) + len(opened) and json.loads(bodies[0])["task"] == "sst"
    assert 1 <= idle <= 4 + len(opened)  # connections kept alive and reused
    assert max(s.due for s in opened) <= min(s.due for s in opened) + 0.5


def test_a_quick_run_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # one server per task (the mode with the most parts: two servers started together, each request routed to
    # its task's); the mixed server's own answers and /stats are tests/serving/test_server.py's, the ratios
    # test_the_ratios_of_done_means's: one mode keeps this run to two server starts
    out = tmp_path / "quick.json"
    record = bench.main(["--quick", "--modes", "single", "--out", str(out), "--cores", "1"])
    assert json.loads(out.read_text())["ratios"] == record["ratios"]
    single = record["results"]["single"]
    assert single["servers"] == 2 and record["tasks"] == {"sst": 1, "qqp": 2}
    assert single["saturation"]["answered"] == 40 and single["saturation"]["failed"] == 0
    assert single["saturation"]["batches"]["requests"] == 40  # every request counted by a server
    assert single["open_loop"][0]["failed"] == 0 and single["open_loop"][0]["answered"] > 0
    assert all(m["processes"] >= 2 and m["rss_mib"] > 50 for m in single["memory"]["per_server"])
    assert single["saturation"]["batches"]["tasks_per_batch"] == {
        "1": single["saturation"]["batches"]["batches"]
    }
    assert record["ratios"]["memory_2_servers_over_1task_server"]["value"] == pytest.approx(2.0, rel=0.2)
    assert "memory_2_servers_over_1task_server" in capsys.readouterr().out

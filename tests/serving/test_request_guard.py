"""The server's front door (pal_lightning.serving.guard.Guard), driven as an ASGI app with a fake app behind it:
refused requests never reach the app; accepted ones reach it with the canonical body."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pal_lightning.serving.guard import Guard
from pal_lightning.serving.schema import ServeRequest, TaskInfo

TASKS = {"sst": TaskInfo("sst", "single_classification", 1, ("neg", "pos"), 2)}


class Behind:
    """The app behind the guard: records the body it read and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[bytes, bytes]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        self.headers.append(dict(scope["headers"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def call(
    guard: Guard,
    body: bytes,
    path: str = "/predict",
    method: str = "POST",
    headers: Any = (),
    chunks: int = 1,
) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of one request through ``guard`` (its body sent in ``chunks`` parts)."""
    size = max(1, -(-len(body) // chunks))
    parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    messages = [
        {"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "path": path,
        "method": method,
        "headers": [(b"content-type", b"text/plain"), *headers],
    }
    asyncio.run(guard(scope, receive, send))
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(payload)


def make(**kw: Any) -> tuple[Guard, Behind]:
    behind = Behind()
    return Guard(behind, tasks=TASKS, max_inputs=2, max_body_bytes=100, **kw), behind


def test_a_good_request_reaches_the_app_rewritten_and_a_bad_one_does_not() -> None:
    guard, behind = make()
    status, _ = call(guard, b'{"task": "sst", "text": "a fine film"}', chunks=3)
    assert status == 200
    assert ServeRequest.from_canonical(json.loads(behind.bodies[0])).queries[0].text == "a fine film"
    assert behind.headers[0][b"content-type"] == b"application/json"  # not the client's text/plain
    assert behind.headers[0][b"content-length"] == str(len(behind.bodies[0])).encode()
    for body, status_wanted in (
        (b"{", 400),
        (b'{"task": "x", "text": "a"}', 422),
        (b"[" + b"1," * 60 + b"1]", 413),
    ):
        status, out = call(guard, body)
        assert status == status_wanted and set(out) == {"error"}
    status, out = call(guard, b'{"task": "sst", "text": "' + b"a" * 200 + b'"}', chunks=4)  # no length sent
    assert status == 413 and "limit of 100 bytes" in out["error"]
    big = [(b"content-length", b"5000")]  # refused on its declared length, before reading
    assert call(guard, b"{}", headers=big)[0] == 413
    assert len(behind.bodies) == 1


def test_other_routes_pass_and_the_api_key_guards_all_but_health_and_the_page() -> None:
    guard, behind = make()
    assert call(guard, b"", path="/tasks", method="GET") == (200, {})
    keyed, behind = make(api_key="s3cret")
    status, out = call(keyed, b'{"task": "sst", "text": "a"}')
    assert status == 401 and "X-API-Key" in out["error"]
    assert call(keyed, b"", path="/tasks", method="GET", headers=[(b"x-api-key", b"wrong")])[0] == 401
    assert call(keyed, b"", path="/health", method="GET")[0] == 200  # a load balancer's probe
    assert call(keyed, b"", path="/", method="GET")[0] == 200  # the page: a browser opens it without headers
    assert call(keyed, b"", path="/index.html", method="GET")[0] == 401  # "/" alone, not a prefix
    assert call(keyed, b'{"task": "sst", "text": "a"}', headers=[(b"X-API-Key", b"s3cret")])[0] == 200
    assert len(behind.bodies) == 3

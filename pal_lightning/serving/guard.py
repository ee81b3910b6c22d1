"""The server's front door, an ASGI middleware in the HTTP process: the API key, the body's size and the
request checked (:func:`~pal_lightning.serving.schema.parse_body`); a refused request gets a 4xx and
``{"error": "<one line>"}``, an accepted one goes on rewritten canonically. Here, not in the worker: LitServe
decodes a batch of requests together, and one failing there would fail the whole batch.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from pal_lightning.serving.schema import BadRequest, TaskInfo, error_body, parse_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The route of predictions (LitServe's).
PREDICT_PATH = "/predict"
#: Routes open without the API key: a load balancer's health probe, and the page (``GET /``), which a browser
#: opens without headers; the page sends the key the user types with each of its calls.
OPEN_PATHS = ("/health", "/")
#: The request header carrying the API key (LitServe's own name for it).
API_KEY_HEADER = "x-api-key"


class Guard:
    """ASGI middleware in front of the served app (``LitServer(middlewares=[(Guard, {...})])``).

    Args:
        app: the app behind it.
        tasks: the served model's tasks.
        max_inputs: the most inputs a request may list (413 above).
        max_body_bytes: the largest body accepted (413 above).
        api_key: the key every route but :data:`OPEN_PATHS` requires in the ``X-API-Key`` header
            (401 without it); ``None``: no key.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        tasks: Mapping[str, TaskInfo],
        max_inputs: int,
        max_body_bytes: int,
        api_key: str | None = None,
    ) -> None:
        self.app, self.tasks, self.api_key = app, tasks, api_key  # tasks: read as it is when a request comes
        self.max_inputs, self.max_body_bytes = max_inputs, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.api_key is not None and path not in OPEN_PATHS and not self._authorized(scope):
            message = 'Missing or wrong API key: send it in the "X-API-Key" header.'
            await reply(send, 401, error_body(message))
            return
        if path != PREDICT_PATH or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        try:
            body = await self._body(scope, receive)
            request = parse_body(body, self.tasks, self.max_inputs)
        except BadRequest as err:
            await reply(send, err.status, error_body(str(err)))
            return
        data = json.dumps(request.canonical()).encode("utf-8")
        replaced = (b"content-length", b"content-type", b"content-encoding", b"transfer-encoding")
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in replaced]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()  # a disconnect, while the answer is computed

        await self.app({**scope, "headers": headers}, replay, send)

    def _authorized(self, scope: Scope) -> bool:
        given = header(scope, API_KEY_HEADER)
        assert self.api_key is not None
        return given is not None and hmac.compare_digest(given.encode(), self.api_key.encode())

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        too_large = BadRequest(
            413, f"The body is larger than this server's limit of {self.max_body_bytes} bytes."
        )
        declared = header(scope, "content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise too_large
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise BadRequest(400, "The client closed the connection before the body ended.")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def header(scope: Scope, name: str) -> str | None:
    """The value of the request header ``name`` (lower case), if sent."""
    wanted = name.encode("latin-1")
    for key, value in scope.get("headers", []):
        if key.lower() == wanted:
            return bytes(value).decode("latin-1")
    return None


async def reply(send: Send, status: int, body: bytes) -> None:
    """Answer with ``status`` and a JSON ``body``."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

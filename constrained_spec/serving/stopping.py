"""Requests cancelled by the server's shutdown answer 503, in OpenAI's error body.

On SIGTERM uvicorn stops accepting, gives the requests in flight ``shutdown_timeout`` seconds, then
cancels the tasks still running. A cancelled ASGI app is, to uvicorn, an app that raised: it logs a
traceback and answers a bare 500. :class:`CancelledAsStopping` answers such a request
``503 server_shutting_down`` with ``Retry-After`` instead, and a stream already under way ends with
that error as its last event, so a client knows to retry elsewhere and the log holds no traceback.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from constrained_spec.serving.errors import api_error
from constrained_spec.serving.refusals import ServerStopping

__all__ = ["CancelledAsStopping"]

log = logging.getLogger(__name__)


@dataclass
class ResponseProgress:
    """What one request has sent so far."""

    started: bool = False
    stream: bool = False
    ended: bool = False


def _is_event_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)


class CancelledAsStopping:
    """ASGI middleware: a request whose task is cancelled before it has answered gets a 503
    (:class:`~constrained_spec.serving.refusals.ServerStopping`); a stream whose task is cancelled
    ends with the error event; the cancellation is not re-raised (the request is over)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        progress = ResponseProgress()

        async def tracked(message: dict) -> None:
            if message["type"] == "http.response.start":
                progress.started = True
                progress.stream = _is_event_stream(message.get("headers") or [])
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                progress.ended = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if progress.ended:
                return
            log.warning("%s %s cancelled at shutdown before it finished: answered 503", scope.get("method"), scope.get("path"))
            await self._answer(send, progress)

    @staticmethod
    async def _answer(send: Any, progress: ResponseProgress) -> None:
        error = api_error(ServerStopping())
        try:
            if not progress.started:
                body = error.to_json()
                await send({"type": "http.response.start", "status": error.status,
                            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                        (b"retry-after", b"1"), (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": body})
            elif progress.stream:
                await send({"type": "http.response.body", "body": b"data: " + error.to_json() + b"\n\n"})
                await send({"type": "http.response.body", "body": b""})
            else:
                await send({"type": "http.response.body", "body": b""})
        except (OSError, RuntimeError):  # the connection is gone already: nothing to answer
            pass

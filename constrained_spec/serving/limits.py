"""What a request must meet to be admitted: the API key, the body and schema size caps, the
``max_tokens`` limit, and the defaults of the queue size and the request timeout.

``api_key`` (``--api-key`` or ``CONSTRAINED_SPEC_API_KEY``): every route but ``/health`` needs
``Authorization: Bearer <key>`` (compared in constant time), else 401. ``max_body_bytes``: a
larger body is a 413, by its ``Content-Length`` or, for a chunked body, as soon as the bytes read
pass the cap. ``max_schema_chars``: the response_format schema and the tools, as compact JSON,
beyond it are a 400 naming the limit. ``max_grammar_chars``: the grammar and regex texts of a
request (``guided_grammar``, ``structured_outputs``, custom tools' formats), in characters, beyond
it are a 400 naming the limit (a custom tool's grammar counts there, not in the schema cap). A
full queue is a 429 (:mod:`.scheduler`).
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from constrained_spec.serving.errors import APIError

__all__ = ["API_KEY_ENV", "DEFAULT_MAX_QUEUE", "DEFAULT_REQUEST_TIMEOUT", "MAX_BODY_BYTES", "MAX_GRAMMAR_CHARS", "MAX_SCHEMA_CHARS",
           "Guard", "check_grammar_size", "check_max_tokens", "check_schema_size"]

#: the environment variable ``constrained-spec serve`` reads its API key from (read, never written)
API_KEY_ENV = "CONSTRAINED_SPEC_API_KEY"
MAX_BODY_BYTES = 1 << 20
MAX_SCHEMA_CHARS = 32_768
#: the grammar and regex texts of one request, in characters
MAX_GRAMMAR_CHARS = 32_768
#: requests that may wait behind the running one
DEFAULT_MAX_QUEUE = 16
#: seconds a request may take, compiling and waiting included
DEFAULT_REQUEST_TIMEOUT = 600.0


def check_max_tokens(max_tokens: int | None, limit: int | None) -> None:
    """A 400 when ``max_tokens`` asks for more than the server's ``limit``."""
    if max_tokens is not None and limit is not None and max_tokens > limit:
        raise APIError(400, f"max_tokens={max_tokens} exceeds this server's limit of {limit}", param="max_tokens")


def check_schema_size(response_format: Any, tools: Any, limit: int | None) -> None:
    """The response_format schema and the tools together, as compact JSON, fit ``limit`` characters."""
    if limit is None:
        return
    sizes = {param: len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
             for param, value in (("response_format", response_format), ("tools", tools)) if value is not None}
    total = sum(sizes.values())
    if total > limit:
        raise APIError(400, f"the request's schemas (response_format and tools) have {total} characters as compact JSON, over "
                       f"this server's limit of {limit} (max_schema_chars)", param=max(sizes, key=sizes.__getitem__), code="schema_too_large")


def check_grammar_size(texts: dict[str, str], limit: int | None) -> None:
    """The grammar texts of a request (by the field each is in) together fit ``limit`` characters."""
    if limit is None or not texts:
        return
    total = sum(len(t) for t in texts.values())
    if total > limit:
        raise APIError(400, f"the request's grammars have {total} characters, over this server's limit of {limit} (max_grammar_chars)",
                       param=max(texts, key=lambda k: len(texts[k])), code="grammar_too_large")


class Guard:
    """ASGI middleware: the API key (401) and the body cap (413) before the app sees a request.

    The body is read here, up to ``max_body_bytes``: a ``Content-Length`` over the cap is refused
    at once, a chunked body as soon as the bytes read pass it. The app then gets the body as one
    message, and later ``receive`` calls (a disconnect) from the server.
    """

    def __init__(self, app: Any, api_key: str | None, max_body_bytes: int | None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    async def _refuse(self, send: Any, error: APIError, headers: list | None = None) -> None:
        body = error.to_json()
        await send({"type": "http.response.start", "status": error.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.api_key is not None and scope.get("path") != "/health":
            given = headers.get(b"authorization", b"")
            token = given[7:].strip() if given[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(token, self.api_key):
                message = "incorrect API key provided" if token else "missing API key: send 'Authorization: Bearer <key>'"
                await self._refuse(send, APIError(401, message, code="invalid_api_key"), [(b"www-authenticate", b"Bearer")])
                return
        cap = self.max_body_bytes
        if cap is None or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        too_large = APIError(413, f"the request body is over this server's limit of {cap} bytes (max_body_bytes)", code="request_too_large")
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            declared = 0
        if declared > cap:
            await self._refuse(send, too_large)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                await self._refuse(send, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

"""What a request must meet to be admitted: the API key, the body and schema size caps, the
``max_tokens`` limit, and the defaults of the queue size and the request timeout.

``api_key`` (``--api-key`` or ``CONSTRAINED_SPEC_API_KEY``): every route but ``/health`` needs
``Authorization: Bearer <key>`` (compared in constant time; exactly one such header), else 401.
``body_timeout``: the whole body must arrive within it, else 408 and the connection closes;
``max_body_readers``: requests reading their bodies at once, 429 beyond. ``max_body_bytes``: a
larger body is a 413, by its ``Content-Length`` or, for a chunked body, as soon as the bytes read
pass the cap. ``max_schema_chars``: the response_format schema and the tools, as compact JSON,
beyond it are a 400 naming the limit. ``max_grammar_chars``: the grammar and regex texts of a
request (``guided_grammar``, ``structured_outputs``, custom tools' formats), in characters, beyond
it are a 400 naming the limit (a custom tool's grammar counts there, not in the schema cap).
``max_schema_properties``: the properties the response_format schema and the tools declare in all
(every ``properties`` object's keys), beyond it a 400 ``compile_limit`` before any compile. A full
queue is a 429 (:mod:`.scheduler`), a full compile queue too (:mod:`.compiles`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any

from constrained_spec.errors import CompileLimitError
from constrained_spec.serving.errors import APIError, api_error
from constrained_spec.serving.refusals import AmbiguousCredentials, BodyReadersFull, BodyTimeout

__all__ = ["API_KEY_ENV", "DEFAULT_BODY_TIMEOUT", "DEFAULT_MAX_BODY_READERS", "DEFAULT_MAX_QUEUE", "DEFAULT_REQUEST_TIMEOUT", "MAX_BODY_BYTES", "MAX_GRAMMAR_CHARS", "MAX_SCHEMA_CHARS",
           "MAX_SCHEMA_PROPERTIES", "Guard", "check_schema_properties", "check_grammar_size", "check_max_tokens", "check_particles",
           "check_schema_size"]

#: the environment variable ``constrained-spec serve`` reads its API key from (read, never written)
API_KEY_ENV = "CONSTRAINED_SPEC_API_KEY"
MAX_BODY_BYTES = 1 << 20
MAX_SCHEMA_CHARS = 32_768
#: properties the schemas of one request (response_format and tools) may declare in all
MAX_SCHEMA_PROPERTIES = 1000
#: the grammar and regex texts of one request, in characters
MAX_GRAMMAR_CHARS = 32_768
#: requests that may wait behind the running one
DEFAULT_MAX_QUEUE = 16
#: seconds a request may take, compiling and waiting included
DEFAULT_REQUEST_TIMEOUT = 600.0
#: seconds a request's whole body may take to arrive, from its start (408 after)
DEFAULT_BODY_TIMEOUT = 30.0
#: requests that may be reading their bodies at once (429 beyond)
DEFAULT_MAX_BODY_READERS = 64


def check_max_tokens(max_tokens: int | None, limit: int | None) -> None:
    """A 400 when ``max_tokens`` asks for more than the server's ``limit``."""
    if max_tokens is not None and limit is not None and max_tokens > limit:
        raise APIError(400, f"max_tokens={max_tokens} exceeds this server's limit of {limit}", param="max_tokens")


def check_particles(particles: int | None, limit: int | None) -> None:
    """A 400 when ``particles`` asks for more SMC particles than the server's ``limit``."""
    if particles is not None and limit is not None and particles > limit:
        raise APIError(400, f"particles={particles} exceeds this server's limit of {limit} (max_particles)", param="particles")


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


def count_properties(value: Any) -> int:
    """Keys of every ``properties`` object in ``value`` (a JSON document), walked without recursion."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                count += len(props)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def check_schema_properties(response_format: Any, tools: Any, limit: int | None) -> None:
    """The request's schemas declare at most ``limit`` properties in all: a cheap check of shape
    before any compile (the cost of compiling grows faster than the property count), else a 400
    ``compile_limit``."""
    if limit is None:
        return
    counts = {param: count_properties(value) for param, value in (("response_format", response_format), ("tools", tools))
              if value is not None}
    total = sum(counts.values())
    if total > limit:
        exc = CompileLimitError(f"the request's schemas declare {total} properties, over this server's limit of {limit} "
                                "(max_schema_properties)")
        raise api_error(exc, param=max(counts, key=counts.__getitem__))


def check_grammar_size(texts: dict[str, str], limit: int | None) -> None:
    """The grammar texts of a request (by the field each is in) together fit ``limit`` characters."""
    if limit is None or not texts:
        return
    total = sum(len(t) for t in texts.values())
    if total > limit:
        raise APIError(400, f"the request's grammars have {total} characters, over this server's limit of {limit} (max_grammar_chars)",
                       param=max(texts, key=lambda k: len(texts[k])), code="grammar_too_large")


class Guard:
    """ASGI middleware: the API key (401), the body cap (413) and the body's read time (408)
    before the app sees a request.

    Two ``Authorization`` headers are a 401 whatever they hold (the one that counts is not
    guessed). The body is read here, up to ``max_body_bytes``: a ``Content-Length`` over the cap
    is refused at once, a chunked body as soon as the bytes read pass it. The whole body must
    arrive within ``body_timeout`` seconds of the request's start, else a 408 and the connection
    is closed; at most ``max_body_readers`` requests read their bodies at once (a 429 with
    ``Retry-After`` beyond), so slow senders hold at most ``max_body_readers * max_body_bytes``
    bytes, for ``body_timeout`` seconds. The app then gets the body as one message, and later
    ``receive`` calls (a disconnect) from the server.
    """

    def __init__(self, app: Any, api_key: str | None, max_body_bytes: int | None, body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
                 max_body_readers: int | None = DEFAULT_MAX_BODY_READERS) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.max_body_readers = max_body_readers
        self.readers = 0  # requests reading their bodies now (all on the event loop: no lock)

    async def _refuse(self, send: Any, error: APIError, headers: list | None = None) -> None:
        body = error.to_json()
        extra = [(b"retry-after", b"1")] if error.status == 429 else []
        await send({"type": "http.response.start", "status": error.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close"), *extra, *(headers or [])]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers") or []
        headers = dict(raw)
        if self.api_key is not None and scope.get("path") != "/health":
            given = [v for k, v in raw if k.lower() == b"authorization"]
            if len(given) > 1:
                await self._refuse(send, api_error(AmbiguousCredentials()), [(b"www-authenticate", b"Bearer")])
                return
            token = given[0][7:].strip() if given and given[0][:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(token, self.api_key):
                message = "incorrect API key provided" if token else "missing API key: send 'Authorization: Bearer <key>'"
                await self._refuse(send, APIError(401, message, code="invalid_api_key"), [(b"www-authenticate", b"Bearer")])
                return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        cap = self.max_body_bytes
        too_large = APIError(413, f"the request body is over this server's limit of {cap} bytes (max_body_bytes)", code="request_too_large")
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            declared = 0
        if cap is not None and declared > cap:
            await self._refuse(send, too_large)
            return
        if self.max_body_readers is not None and self.readers >= self.max_body_readers:
            await self._refuse(send, api_error(BodyReadersFull(self.max_body_readers)))
            return
        self.readers += 1
        try:
            chunks = await self._read_body(receive, send, cap, too_large)
        finally:
            self.readers -= 1
        if chunks is None:
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, receive: Any, send: Any, cap: int | None, too_large: APIError) -> list[bytes] | None:
        """The body's chunks, or None once refused (413, 408) or the client left."""
        loop = asyncio.get_running_loop()
        deadline = None if self.body_timeout is None else loop.time() + self.body_timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), None if deadline is None else max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                chunks.clear()
                await self._refuse(send, api_error(BodyTimeout(float(self.body_timeout or 0))))
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if cap is not None and size > cap:
                chunks.clear()
                await self._refuse(send, too_large)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks

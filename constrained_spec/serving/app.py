"""An OpenAI-compatible HTTP server over one :class:`~constrained_spec.api.Generator`.

``create_app(generator)`` returns a FastAPI app with

* ``POST /v1/chat/completions`` - OpenAI chat completions. Every reply is produced under an
  exact constraint and validated before it is returned:

  - ``response_format``: ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``
    (always enforced exactly; ``strict`` is accepted and ignored), ``{"type": "json_object"}``
    (any JSON object) or ``{"type": "text"}`` / absent (free text, ends at EOS or ``max_tokens``).
  - ``tools`` / ``tool_choice`` (``"auto"``, ``"required"``, ``"none"`` or a named function) /
    ``parallel_tool_calls`` (default true, as OpenAI's: the model may write 1-4 calls): see
    :mod:`constrained_spec.tools`. With ``"auto"`` the model picks between a text reply and a
    call inside one grammar; with ``response_format`` as well, the text reply follows that schema.
  - ``temperature`` (default 1, as OpenAI), ``top_p``, ``seed``, ``max_tokens`` /
    ``max_completion_tokens``, ``stream``, ``stream_options``; extensions ``top_k``,
    ``num_draft_tokens``, ``schema_in_prompt``. ``user``, ``metadata``, ``store``,
    ``service_tier``, ``prompt_cache_key`` and ``safety_identifier`` are accepted and ignored
    (they do not change the output).
  - Refused by name with a 400 (they would change what the constraint guarantees or the sampled
    distribution, or this server has no such thing): ``n`` other than 1, ``stop``,
    ``logprobs: true`` / ``top_logprobs``, non-zero ``presence_penalty`` / ``frequency_penalty``,
    a non-empty ``logit_bias``, ``functions`` / ``function_call`` (use ``tools``), ``audio``,
    ``modalities`` other than ``["text"]``, ``prediction``, ``web_search_options``,
    ``reasoning_effort``, ``verbosity``; any other field is unrecognized (400, as OpenAI does).
  - ``model`` must be the served model's id (``GET /v1/models``); another is a 404
    ``model_not_found``.
  - Messages need a ``role`` (system, developer, user, assistant, tool, function) and text
    content (a string or a list of text parts; an assistant turn with ``tool_calls`` may have
    none); anything else, and text that is not valid Unicode (a lone surrogate), is a 400.
  - ``stream: true`` answers with server-sent events (``chat.completion.chunk``): a chunk with
    the role, then the content as it is generated (the decoder's ``on_tokens`` hook hands over
    each step's final tokens; a multi-byte character split across tokens is held back until it
    is whole), a chunk with ``finish_reason`` (and the decoding stats), an optional usage chunk
    (``stream_options.include_usage``) and ``data: [DONE]``. The deltas concatenate to exactly
    the non-streamed ``content``. Tool calls stream as OpenAI's do: a first delta per call with
    its ``id``, ``type`` and ``function.name``, then ``function.arguments`` pieces as the model
    writes them (:class:`~constrained_spec.tools.ToolCallStream` reads the wrapper object the
    grammar holds the model to); they concatenate to the non-streamed ``arguments``, which are
    the model's own JSON text (validated against the tool's parameters). The text reply of
    ``tool_choice: "auto"`` comes as one chunk at the end. Errors found before the first token
    (a schema that does not compile, a prompt over the context, a full queue, a timeout while
    waiting) are ordinary HTTP errors; later ones (post-validation, timeout) arrive as an
    ``{"error": {...}}`` event followed by ``data: [DONE]``.

  The response has the OpenAI shape (``choices[0].message.content`` holds the JSON text, or
  ``tool_calls``), ``usage``, and an extra ``constrained_spec`` field with the decoding stats.
  A token budget (``max_tokens``) that runs out before the output is complete is a 200 with
  ``finish_reason: "length"`` and the partial text (partial tool-call arguments), as OpenAI's;
  such text is not a complete value of the constraint.

* ``GET /v1/models``, ``GET /v1/models/{id}`` and ``GET /health``.

Errors use OpenAI's ``{"error": {"message", "type", "param", "code"}}`` body, request validation
and unknown routes included: schema and grammar errors (an unsupported keyword is named), bad
tools, messages and parameters are 400, a prompt whose tokens plus ``max_tokens`` exceed the
model's context is a 400 ``context_length_exceeded`` (checked after tokenizing, before any
forward), a missing or wrong API key is 401, an unknown model 404, a value that fails
post-validation 422, a full queue 429, a request that outlives ``request_timeout`` 504, anything
unexpected a 500 without internals (logged). Invalid output is never returned.

Limits: ``api_key`` (``--api-key`` or ``CONSTRAINED_SPEC_API_KEY``): every route but ``/health``
needs ``Authorization: Bearer <key>`` (compared in constant time). ``max_body_bytes`` (default
1 MiB): a larger body is a 413, by its ``Content-Length`` or, for a chunked body, as soon as the
bytes read pass the cap. ``max_schema_chars`` (default 32,768): the response_format schema and
the tools, as compact JSON, beyond it are a 400 naming the limit. The schema hint in the prompt
is cut at ``api.SCHEMA_HINT_MAX_CHARS``; compilation past its caps (regex size, automaton states,
the generator's ``compile_timeout``) is a 400 naming the cap.

One generation runs at a time (the Generator holds one KV cache): requests wait in a bounded
queue of ``max_queue`` behind the running one. Constraints compile on their own threads, off the
generation worker, so a slow compile holds no other request. A timed-out request that has not
started is dropped; one already decoding stops after its current decode step (the ``on_tokens``
hook raises), as does a request (streamed or not) whose client went away.

``main(argv)`` runs the server with uvicorn (``constrained-spec serve``), on 127.0.0.1 unless
``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

try:  # the endpoints' annotations are strings (postponed): their Request must be a module name
    from starlette.requests import Request
except ImportError:  # pragma: no cover - without the serve extra, create_app says what to install
    Request = Any  # type: ignore[misc,assignment]

from constrained_spec.errors import (
    CompileLimitError,
    ConstrainedSpecError,
    ContextLengthError,
    EmptyLanguageError,
    GrammarError,
    ModelLoadError,
    OutputValidationError,
    SchemaError,
    TokenBudgetExceeded,
    UnsupportedKeywordError,
    VocabularyMismatchError,
)
from constrained_spec.grammar import Regex
from constrained_spec.tools import (
    ToolCallStream,
    ToolError,
    normalize_tool_choice,
    normalize_tools,
    parse_tool_output,
    partial_json_string,
    plain_messages,
    tool_call_schema,
    tool_prompt,
)

__all__ = ["create_app", "main", "ChatCompletionRequest", "APIError", "GenerationQueue"]

log = logging.getLogger(__name__)

FREE_TEXT = Regex(r"[\s\S]*")  # response_format text / absent: any text, ended by EOS or the budget
#: the environment variable ``constrained-spec serve`` reads its API key from (read, never written)
API_KEY_ENV = "CONSTRAINED_SPEC_API_KEY"
MAX_BODY_BYTES = 1 << 20
MAX_SCHEMA_CHARS = 32_768
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
#: fields OpenAI defines that this server cannot serve, and why (refused with a 400 when given)
REFUSED = {
    "functions": "the legacy functions API; use 'tools'",
    "function_call": "the legacy functions API; use 'tool_choice'",
    "audio": "this server writes text only",
    "prediction": "predicted outputs",
    "web_search_options": "this server has no web search",
    "reasoning_effort": "not a reasoning model",
    "verbosity": "the constraint decides the length",
}


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions``; fields it does not declare are refused."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    seed: int | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    modalities: list[str] | None = None
    num_draft_tokens: int | None = Field(default=None, ge=0)
    schema_in_prompt: bool | None = None
    # accepted and ignored: they do not change the output
    user: Any = None
    metadata: Any = None
    store: Any = None
    service_tier: Any = None
    prompt_cache_key: Any = None
    safety_identifier: Any = None


class APIError(Exception):
    """An error answered in OpenAI's error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _error_json(error: APIError, headers: dict | None = None) -> Any:
    """The JSON response of ``error``; ASCII-escaped, so no text of any request can break it."""
    from fastapi.responses import Response

    return Response(json.dumps(error.body(), ensure_ascii=True), status_code=error.status, media_type="application/json", headers=headers)


def api_error(exc: BaseException, param: str | None = None, max_tokens: int | None = None) -> APIError:
    """Map a library exception to the HTTP error it answers as."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, Cancelled):
        return APIError(499, "the client closed the request", code="client_closed_request")
    if isinstance(exc, ContextLengthError):
        return APIError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, TokenBudgetExceeded):
        return APIError(
            400,
            f"the token budget of {exc.max_new_tokens} new tokens (max_tokens) ran out before the output was "
            "complete; raise max_tokens or bound the schema (maxLength, maxItems, number ranges)",
            param="max_tokens", code="token_budget_exceeded",
        )
    if isinstance(exc, UnsupportedKeywordError):
        return APIError(400, str(exc), param=param, code="unsupported_schema_keyword")
    if isinstance(exc, ToolError):
        return APIError(400, str(exc), param=param or "tools", code="invalid_tools")
    if isinstance(exc, SchemaError):
        return APIError(400, f"invalid JSON Schema: {exc}", param=param, code="invalid_schema")
    if isinstance(exc, EmptyLanguageError):
        return APIError(400, f"the constraint admits no output: {exc}", param=param, code="empty_language")
    if isinstance(exc, CompileLimitError):
        return APIError(400, f"the constraint is too large to compile: {exc}", param=param, code="compile_limit")
    if isinstance(exc, GrammarError):
        return APIError(400, f"the constraint cannot be compiled: {exc}", param=param, code="grammar_error")
    if isinstance(exc, OutputValidationError):
        return APIError(422, str(exc), type="output_validation_error", param=param, code="output_validation_failed")
    if isinstance(exc, (ModelLoadError, VocabularyMismatchError)):
        return APIError(500, str(exc), type="server_error", code="model_error")
    if isinstance(exc, ConstrainedSpecError):
        return APIError(400, str(exc), param=param, code="constraint_error")
    if isinstance(exc, ValueError):
        return APIError(400, str(exc), param=param)
    log.error("internal error while serving a request", exc_info=exc)
    return APIError(500, f"internal server error ({type(exc).__name__}); the server log has the details", type="server_error")


class QueueFull(Exception):
    """The queue holds ``max_queue`` waiting requests already."""


class QueueTimeout(Exception):
    """A request outlived the timeout (waiting and/or decoding)."""


class Cancelled(Exception):
    """Raised from the ``on_tokens`` hook to stop a generation nobody waits for any more."""


class GenerationQueue:
    """Runs jobs one at a time on a worker thread, with a bounded wait queue and a timeout.

    ``max_queue`` requests may wait behind the running one; more are refused with
    :class:`QueueFull`. ``timeout`` (seconds, None for none) covers waiting plus running; a job
    that times out before it starts is skipped; for a running one ``cancel`` is set (a job
    that checks it, as the server's ``on_tokens`` hook does, stops early) and its result is
    discarded.
    """

    def __init__(self, max_queue: int = 16, timeout: float | None = 600.0) -> None:
        if max_queue < 0:
            raise ValueError("max_queue must be >= 0")
        self.max_queue = max_queue
        self.timeout = timeout
        self.pending = 0  # running + waiting (including timed-out jobs still occupying the worker)
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="constrained-spec-gen")

    @property
    def waiting(self) -> int:
        return max(self.pending - 1, 0)

    async def run(self, fn: Callable[[], Any], cancel: threading.Event | None = None, timeout: float | None = None) -> Any:
        """Run ``fn`` on the worker; ``timeout`` (default: the queue's) in seconds from now."""
        with self._lock:
            if self.pending > self.max_queue:
                raise QueueFull()
            self.pending += 1
        abandoned = cancel if cancel is not None else threading.Event()

        def job() -> Any:
            try:
                if abandoned.is_set():
                    return None
                return fn()
            finally:
                with self._lock:
                    self.pending -= 1

        future = asyncio.get_running_loop().run_in_executor(self._executor, job)
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # a discarded job's error is not "never retrieved"
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout if timeout is None else timeout)
        except asyncio.TimeoutError as exc:
            abandoned.set()
            raise QueueTimeout() from exc

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass
class _Plan:
    """What one request generates: the output type, prompt and how to read the value back."""

    output_type: Any
    prompt: list[dict]
    schema_in_prompt: bool
    param: str  # the request field a schema error points at
    mode: Literal["text", "json", "tools"]
    tools: list = field(default_factory=list)
    content_is_text: bool = True  # for mode tools: whether the reply branch is a plain string
    template_tools: list[dict] | None = None  # tool dicts for the chat template's own tool rendering


def _plan(req: ChatCompletionRequest, tokenizer: Any = None) -> _Plan:
    rf = req.response_format or {"type": "text"}
    rf_type = rf.get("type")
    content_schema: Any = None
    if rf_type == "json_schema":
        spec = rf.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise APIError(400, "response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}", param="response_format")
        content_schema = spec["schema"]
        if not isinstance(content_schema, (dict, bool)):
            raise APIError(400, "response_format.json_schema.schema must be a JSON Schema object", param="response_format.json_schema.schema")
    elif rf_type == "json_object":
        content_schema = {"type": "object"}
    elif rf_type != "text":
        raise APIError(400, f"response_format type {rf_type!r} is not supported; use 'json_schema', 'json_object' or 'text'", param="response_format")

    tools = normalize_tools(req.tools or [])
    requested = req.tool_choice if req.tool_choice is not None else "auto"
    if not tools and requested == "auto":
        requested = "none"  # tool_choice "auto" without tools: nothing to call
    choice = normalize_tool_choice(requested, tools)
    explicit = req.schema_in_prompt
    if tools and choice != "none":
        parallel = req.parallel_tool_calls is not False  # OpenAI's default: parallel calls allowed
        schema = tool_call_schema(tools, requested, parallel=parallel, content_schema=content_schema)
        prompt, template_tools = tool_prompt(tokenizer, req.messages, tools, requested, parallel=parallel, content_schema=content_schema)
        return _Plan(schema, prompt, bool(explicit), "tools", "tools", tools, content_schema is None, template_tools)
    prompt = plain_messages(req.messages)
    if content_schema is None:
        return _Plan(FREE_TEXT, prompt, False, "response_format", "text")
    return _Plan(content_schema, prompt, True if explicit is None else explicit, "response_format.json_schema.schema", "json")


def _check_unsupported(req: ChatCompletionRequest) -> None:
    """Refuse, by name, every field that is given and that this server cannot serve."""
    for name in req.model_extra or {}:
        if name in REFUSED:
            raise APIError(400, f"{name!r} is not supported ({REFUSED[name]})", param=name, code="unsupported_parameter")
        raise APIError(400, f"unrecognized request argument supplied: {name}", param=name, code="unsupported_parameter")
    if req.n not in (None, 1):
        raise APIError(400, f"n={req.n} is not supported: this server returns exactly one choice (n=1)", param="n", code="unsupported_parameter")
    if req.stop not in (None, [], ""):
        raise APIError(400, "stop sequences are not supported: the output ends where its constraint is complete", param="stop", code="unsupported_parameter")
    if req.logprobs or req.top_logprobs:
        name = "logprobs" if req.logprobs else "top_logprobs"
        raise APIError(400, f"{name} is not supported", param=name, code="unsupported_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise APIError(400, f"{name} is not supported (it would change the sampled distribution)", param=name, code="unsupported_parameter")
    if req.logit_bias:
        raise APIError(400, "logit_bias is not supported (it would change the sampled distribution)", param="logit_bias", code="unsupported_parameter")
    if req.modalities not in (None, [], ["text"]):
        raise APIError(400, f"modalities {req.modalities} are not supported; only ['text']", param="modalities", code="unsupported_parameter")


def _invalid_text(obj: Any, path: str) -> str | None:
    """The path of the first string (value or key) in ``obj`` that is not valid Unicode, if any."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            bad = _invalid_text(key, sub) or _invalid_text(value, sub)
            if bad:
                return bad
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            bad = _invalid_text(value, f"{path}[{i}]")
            if bad:
                return bad
    return None


def _check_messages(messages: list[dict[str, Any]]) -> None:
    """Each message has a known role and text content (a string or text parts); 400 otherwise."""
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role")
        if role is None:
            raise APIError(400, f"{where} has no 'role'", param=f"{where}.role", code="invalid_message")
        if role not in ROLES:
            raise APIError(400, f"{where}.role must be one of {list(ROLES)}, got {role!r}", param=f"{where}.role", code="invalid_message")
        content = m.get("content")
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant" or not isinstance(calls, list):
                raise APIError(400, f"{where}.tool_calls must be a list, on an assistant message", param=f"{where}.tool_calls", code="invalid_message")
            for j, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments", ""), (str, dict)):
                    raise APIError(400, f"{where}.tool_calls[{j}] must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}",
                                   param=f"{where}.tool_calls[{j}]", code="invalid_message")
        if content is None:
            if role == "assistant" and calls:
                continue
            raise APIError(400, f"{where} has no 'content'", param=f"{where}.content", code="invalid_message")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise APIError(400, f"{where}.content must be a string or a list of text parts, got {type(content).__name__}",
                           param=f"{where}.content", code="invalid_message")
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind != "text" or not isinstance(part.get("text"), str):
                raise APIError(400, f"{where}.content[{j}]: only text parts ({{'type': 'text', 'text': ...}}) are supported, got {kind!r}",
                               param=f"{where}.content[{j}]", code="invalid_message")


def _check_schema_size(req: ChatCompletionRequest, limit: int | None) -> None:
    """The response_format schema and the tools together, as compact JSON, fit ``limit`` characters."""
    if limit is None:
        return
    sizes = {param: len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
             for param, value in (("response_format", req.response_format), ("tools", req.tools)) if value is not None}
    total = sum(sizes.values())
    if total > limit:
        raise APIError(400, f"the request's schemas (response_format and tools) have {total} characters as compact JSON, over "
                       f"this server's limit of {limit} (max_schema_chars)", param=max(sizes, key=sizes.__getitem__), code="schema_too_large")


def _model_name(generator: Any) -> str:
    target = getattr(generator, "target", None)
    for obj in (target, getattr(target, "model", None)):
        name = getattr(obj, "name_or_path", None) or getattr(getattr(obj, "config", None), "_name_or_path", None)
        if name:
            return str(name)
    return "constrained-spec"


class _Guard:
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
        body = json.dumps(error.body(), ensure_ascii=True).encode()
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


async def _watch_disconnect(request: Any, cancel: threading.Event, every: float = 0.05) -> None:
    """Set ``cancel`` once the client of ``request`` has gone away."""
    while not cancel.is_set():
        if await request.is_disconnected():
            cancel.set()
            return
        await asyncio.sleep(every)


def create_app(
    generator: Any,
    *,
    model_name: str | None = None,
    max_queue: int = 16,
    request_timeout: float | None = 600.0,
    max_tokens_limit: int | None = None,
    api_key: str | None = None,
    max_body_bytes: int | None = MAX_BODY_BYTES,
    max_schema_chars: int | None = MAX_SCHEMA_CHARS,
    compile_threads: int = 2,
) -> Any:
    """The FastAPI app serving ``generator`` (see the module docstring).

    ``max_queue``: requests allowed to wait behind the running one (more get 429).
    ``request_timeout``: seconds a request may take, compiling and waiting included (504 after).
    ``max_tokens_limit``: the largest ``max_tokens`` accepted (default: no limit).
    ``api_key``: the bearer token every route but ``/health`` needs (None: no key).
    ``max_body_bytes`` / ``max_schema_chars``: the request body and schema caps (None: none).
    ``compile_threads``: threads that compile constraints, off the generation worker.
    """
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    name = model_name or _model_name(generator)
    queue = GenerationQueue(max_queue=max_queue, timeout=request_timeout)
    compile_pool = ThreadPoolExecutor(max_workers=max(compile_threads, 1), thread_name_prefix="constrained-spec-compile")

    @contextlib.asynccontextmanager
    async def lifespan(_: Any):
        yield
        queue.shutdown()
        compile_pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="constrained-spec", description="Exact grammar-constrained speculative decoding, OpenAI-compatible.",
                  lifespan=lifespan)
    app.state.generator = generator
    app.state.queue = queue
    app.state.model_name = name
    app.add_middleware(_Guard, api_key=api_key, max_body_bytes=max_body_bytes)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> Any:
        return _error_json(exc, {"Retry-After": "1"} if exc.status == 429 else None)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> Any:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or None
        return _error_json(APIError(400, "invalid request: " + "; ".join(parts), param=param, code="invalid_request"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Any:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return _error_json(APIError(exc.status_code, str(exc.detail), code=kind))

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> Any:
        return _error_json(api_error(exc))  # logged there; no internals in the body

    def _model_card() -> dict:
        return {"id": name, "object": "model", "created": 0, "owned_by": "constrained-spec"}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": name, "queue": {"pending": queue.pending, "waiting": queue.waiting, "max_queue": queue.max_queue}}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [_model_card()]}

    def _unknown_model(model: str) -> APIError:
        return APIError(404, f"the model {model!r} does not exist; this server serves {name!r}", param="model", code="model_not_found")

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        if model_id != name:
            raise _unknown_model(model_id)
        return _model_card()

    async def _compile(plan: _Plan, deadline: float | None) -> Any:
        """The plan's output type compiled on a compile thread (off the worker): its OutputSpec,
        which ``generator.run`` finds in the compile cache; the output type itself where the
        generator cannot compile ahead."""
        compile_ = getattr(generator, "compile", None)
        if not callable(compile_):
            return plan.output_type
        future = asyncio.get_running_loop().run_in_executor(compile_pool, compile_, plan.output_type)
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # an abandoned compile's error is not "never retrieved"
        try:
            compiled = await asyncio.wait_for(asyncio.shield(future), None if deadline is None else max(deadline - time.monotonic(), 0.0))
        except asyncio.TimeoutError as exc:
            raise QueueTimeout() from exc
        return getattr(compiled, "spec", plan.output_type)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Any:
        deadline = None if request_timeout is None else time.monotonic() + request_timeout
        _check_unsupported(req)
        if req.model is not None and req.model != name:
            raise _unknown_model(req.model)
        bad = _invalid_text(req.model_dump(), "")
        if bad:
            raise APIError(400, f"{bad} is not valid Unicode text (it holds a lone surrogate such as an unpaired \\ud800 escape)",
                           param=bad, code="invalid_text")
        _check_messages(req.messages)
        max_tokens = req.max_completion_tokens or req.max_tokens
        if max_tokens is not None and max_tokens_limit is not None and max_tokens > max_tokens_limit:
            raise APIError(400, f"max_tokens={max_tokens} exceeds this server's limit of {max_tokens_limit}", param="max_tokens")
        _check_schema_size(req, max_schema_chars)
        try:
            plan = _plan(req, getattr(generator, "tokenizer", None))
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, param="tools" if req.tools else "response_format") from exc

        options: dict[str, Any] = {
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "top_p": 1.0 if req.top_p is None else req.top_p,
            "top_k": req.top_k or 0,
            "seed": req.seed,
            "schema_in_prompt": plan.schema_in_prompt,
        }
        if max_tokens is not None:
            options["max_new_tokens"] = max_tokens
        if req.num_draft_tokens is not None:
            options["num_draft_tokens"] = req.num_draft_tokens
        if plan.template_tools:
            options["tools"] = plan.template_tools
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        cancel = threading.Event()
        watcher = asyncio.ensure_future(_watch_disconnect(request, cancel))
        streaming = False  # once the SSE response is returned, the watcher runs until the stream ends
        try:
            try:
                output_type = await _compile(plan, deadline)
            except Exception as exc:  # noqa: BLE001
                raise _request_error(exc, plan) from exc
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if req.stream:
                include_usage = bool((req.stream_options or {}).get("include_usage"))
                response = await _stream(plan, output_type, options, completion_id, created, include_usage, cancel, remaining)
                streaming = True
                return response

            def stop_if_cancelled(_: list[int]) -> None:
                if cancel.is_set():
                    raise Cancelled()

            try:
                result = await queue.run(lambda: generator.run(plan.prompt, output_type, on_tokens=stop_if_cancelled, **options),
                                         cancel, remaining)
                if result is None and cancel.is_set():
                    raise Cancelled()
            except TokenBudgetExceeded as exc:  # OpenAI's answer: the partial output, finish_reason "length"
                message, usage = _partial_message(plan, exc.partial_text), _budget_usage(exc)
                extra: dict[str, Any] = {"stats": None, "mode": plan.mode}
                finish = "length"
            except Exception as exc:  # noqa: BLE001
                raise _request_error(exc, plan) from exc
            else:
                message, finish = _message(plan, result)
                usage, extra = _usage(result), _extra(plan, result)
        finally:
            if not streaming:
                watcher.cancel()
        return {
            "id": completion_id, "object": "chat.completion", "created": created, "model": name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage, "system_fingerprint": None, "constrained_spec": extra,
        }

    def _request_error(exc: BaseException, plan: _Plan) -> APIError:
        if isinstance(exc, QueueFull):
            return APIError(429, f"the server is busy: {queue.max_queue} requests are already waiting; retry later",
                            type="rate_limit_error", code="queue_full")
        if isinstance(exc, QueueTimeout):
            return APIError(504, f"the request did not finish within {request_timeout} s", type="timeout_error", code="timeout")
        return api_error(exc, param=plan.param)

    async def _stream(plan: _Plan, output_type: Any, options: dict, cid: str, created: int, include_usage: bool,
                      cancel: threading.Event, timeout: float | None) -> Any:
        """Start the generation; at its first event (the first tokens, or its end), answer with the
        SSE stream, or with the HTTP error it failed with before any token."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        vocab = getattr(generator, "vocab", None)
        stream_text = hasattr(vocab, "text_stream")

        def on_tokens(ids: list[int]) -> None:  # from the worker thread
            if cancel.is_set():
                raise Cancelled()
            if stream_text:
                loop.call_soon_threadsafe(events.put_nowait, ("tokens", list(ids)))

        async def produce() -> None:
            try:
                result = await queue.run(lambda: generator.run(plan.prompt, output_type, on_tokens=on_tokens, **options), cancel, timeout)
                if result is None and cancel.is_set():
                    raise Cancelled()
            except Exception as exc:  # noqa: BLE001 - every failure reaches the client
                events.put_nowait(("error", exc))
            else:
                events.put_nowait(("done", result))  # after every ("tokens", ...): same loop, FIFO

        task = asyncio.ensure_future(produce())
        running_tasks.add(task)
        task.add_done_callback(running_tasks.discard)
        try:
            first = await events.get()
        except asyncio.CancelledError:
            cancel.set()
            raise
        if first[0] == "error" and not isinstance(first[1], TokenBudgetExceeded):
            cancel.set()
            raise _request_error(first[1], plan) from first[1]
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name, "system_fingerprint": None}

        def chunk(delta: dict, finish_reason: str | None = None, **more: Any) -> str:
            return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}], **more})

        def error_event(exc: BaseException) -> list[str]:
            return [_sse(_request_error(exc, plan).body()), "data: [DONE]\n\n"]

        async def body() -> Any:
            text = vocab.text_stream() if stream_text else None
            calls = ToolCallStream() if plan.mode == "tools" else None
            call_ids: dict[int, str] = {}
            sent: list[str] = []  # text streamed as content (modes text and json)
            pending: list[tuple] = [first]
            try:
                yield chunk({"role": "assistant", "content": None if plan.mode == "tools" else ""})
                while True:
                    kind, payload = pending.pop() if pending else await events.get()
                    if kind == "tokens":
                        piece = text.push(payload)
                        if calls is not None:
                            for delta in _tool_call_deltas(calls.push(piece), call_ids):
                                yield chunk({"tool_calls": [delta]})
                        elif piece:
                            sent.append(piece)
                            yield chunk({"content": piece})
                        continue
                    if kind == "error" and isinstance(payload, TokenBudgetExceeded):  # a 200 ending in "length"
                        if calls is None:
                            so_far = "".join(sent)
                            rest = payload.partial_text[len(so_far):] if payload.partial_text.startswith(so_far) else ""
                            if rest:
                                yield chunk({"content": rest})
                        elif not calls.calls:  # no call streamed: the reply's partial text (or calls, if no token stream)
                            partial = _partial_message(plan, payload.partial_text)
                            if partial.get("tool_calls"):
                                yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(partial["tool_calls"])]})
                            elif partial.get("content"):
                                yield chunk({"content": partial["content"]})
                        yield chunk({}, "length", constrained_spec={"stats": None, "mode": plan.mode})
                        if include_usage:
                            yield _sse({**base, "choices": [], "usage": _budget_usage(payload)})
                        yield "data: [DONE]\n\n"
                        return
                    if kind == "error":
                        for event in error_event(payload):
                            yield event
                        return
                    result = payload
                    if text is not None and calls is not None:
                        for delta in _tool_call_deltas(calls.push(text.flush()), call_ids):
                            yield chunk({"tool_calls": [delta]})
                    try:
                        message, finish = _message(plan, result)
                    except Exception as exc:  # noqa: BLE001
                        for event in error_event(exc):
                            yield event
                        return
                    if message.get("tool_calls"):
                        streamed = calls.calls if calls is not None else []
                        final = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
                        if not streamed:  # no token stream to read (a generator without a vocabulary)
                            yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]})
                        elif streamed != final:  # cannot happen: both are read off the same text
                            for event in error_event(RuntimeError("the streamed tool calls differ from the generated value")):
                                yield event
                            return
                    elif message.get("content") is not None:
                        so_far, content = ("".join(sent), message["content"]) if plan.mode != "tools" else ("", message["content"])
                        if not content.startswith(so_far):  # cannot happen: content is the decoded token ids
                            for event in error_event(RuntimeError("the streamed text differs from the generated value")):
                                yield event
                            return
                        if content[len(so_far):]:
                            yield chunk({"content": content[len(so_far):]})
                    yield chunk({}, finish, constrained_spec=_extra(plan, result))
                    if include_usage:
                        yield _sse({**base, "choices": [], "usage": _usage(result)})
                    yield "data: [DONE]\n\n"
                    return
            finally:
                cancel.set()  # finished, or the client went away: a generation still running stops at its next step

        return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    running_tasks: set = set()
    return app


def _usage(result: Any) -> dict:
    prompt_tokens = int(getattr(result, "prompt_tokens", 0) or 0)  # counted by Generator.run when it tokenized the prompt
    return {"prompt_tokens": prompt_tokens, "completion_tokens": len(result.token_ids),
            "total_tokens": prompt_tokens + len(result.token_ids)}


def _budget_usage(exc: TokenBudgetExceeded) -> dict:
    """Usage of a generation whose budget ran out (``Generator.run`` attaches the counts)."""
    prompt_tokens = int(exc.prompt_tokens or 0)
    completion = len(exc.token_ids) if exc.token_ids is not None else int(exc.max_new_tokens)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}


def _extra(plan: _Plan, result: Any) -> dict:
    return {"stats": result.stats.as_dict(), "mode": plan.mode}


def _new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _tool_call_deltas(events: list[tuple[str, int, str]], ids: dict[int, str]) -> list[dict]:
    """OpenAI ``delta.tool_calls`` entries for :class:`ToolCallStream` events: a call's first entry
    carries its id, type and name (and empty arguments), the next ones pieces of its arguments."""
    out = []
    for kind, index, value in events:
        if kind == "name":
            ids[index] = _new_call_id()
            out.append({"index": index, "id": ids[index], "type": "function", "function": {"name": value, "arguments": ""}})
        else:
            out.append({"index": index, "function": {"arguments": value}})
    return out


def _message(plan: _Plan, result: Any) -> tuple[dict, str]:
    finish = "length" if getattr(result.stats, "stop_reason", "") == "max_new_tokens" else "stop"
    if plan.mode == "tools":
        reply = parse_tool_output(result.value, plan.tools)
        if reply.tool_calls:
            calls = [c.to_openai() for c in reply.tool_calls]
            read = ToolCallStream()
            read.push(result.text)
            if [name for name, _ in read.calls] == [c["function"]["name"] for c in calls]:
                for call, (_, raw) in zip(calls, read.calls):
                    call["function"]["arguments"] = raw  # the model's own (validated) JSON text, as streamed
            return {"role": "assistant", "content": None, "tool_calls": calls, "refusal": None}, "tool_calls"
        content = reply.content if plan.content_is_text and isinstance(reply.content, str) else json.dumps(reply.content, ensure_ascii=False)
        return {"role": "assistant", "content": content, "refusal": None}, finish
    return {"role": "assistant", "content": result.text, "refusal": None}, finish


def _partial_message(plan: _Plan, text: str) -> dict:
    """The message of a generation cut by its token budget: the partial text, or for tools the
    calls begun so far (arguments cut where the budget ran out) or the reply's partial content."""
    if plan.mode != "tools":
        return {"role": "assistant", "content": text, "refusal": None}
    read = ToolCallStream()
    read.push(text)
    if read.calls:
        calls = [{"id": _new_call_id(), "type": "function", "function": {"name": n, "arguments": a}} for n, a in read.calls]
        return {"role": "assistant", "content": None, "tool_calls": calls, "refusal": None}
    raw = read.content
    if raw is None:
        content = ""
    else:
        content = partial_json_string(raw) if plan.content_is_text else raw.strip()
    return {"role": "assistant", "content": content, "refusal": None}


def _sse(obj: Any) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"


# -- command line ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from constrained_spec.api import NUM_DRAFT_TOKENS
    from constrained_spec.cli.args import add_model_arguments

    p = argparse.ArgumentParser(prog="constrained-spec serve", description="Serve an OpenAI-compatible /v1/chat/completions endpoint.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000)
    add_model_arguments(p)
    p.add_argument("-k", "--num-draft-tokens", type=int, default=NUM_DRAFT_TOKENS, help=f"draft tokens per step (default {NUM_DRAFT_TOKENS})")
    p.add_argument("--max-new-tokens", type=int, default=512, help="default max_tokens when a request gives none")
    p.add_argument("--max-tokens-limit", type=int, default=None, help="refuse requests asking for more max_tokens")
    p.add_argument("--max-queue", type=int, default=16, help="requests that may wait behind the running one (429 beyond)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request, waiting included (504 after)")
    p.add_argument("--model-name", default=None, help="the model id reported by /v1/models and in responses")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on every route but /health (default: ${API_KEY_ENV} if set, else no key)")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, help=f"largest request body in bytes, 413 beyond (default {MAX_BODY_BYTES})")
    p.add_argument("--max-schema-chars", type=int, default=MAX_SCHEMA_CHARS,
                   help=f"largest response_format schema / tools as compact JSON, 400 beyond (default {MAX_SCHEMA_CHARS})")
    p.add_argument("--compile-timeout", type=float, default=60.0, help="seconds one constraint may take to compile, 400 beyond (default 60)")
    p.add_argument("--log-level", default="info")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``constrained-spec serve``: load the models, then run uvicorn until interrupted."""
    import uvicorn

    from constrained_spec.api import Generator

    args = build_parser().parse_args(argv)
    draft = None if str(args.draft).lower() in {"none", ""} else args.draft
    generator = Generator(args.model, draft, num_draft_tokens=args.num_draft_tokens, max_new_tokens=args.max_new_tokens,
                          cache_dir=args.cache_dir, dtype=args.dtype, draft_dtype=args.draft_dtype,
                          compile_timeout=args.compile_timeout)
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    app = create_app(generator, model_name=args.model_name or args.model, max_queue=args.max_queue,
                     request_timeout=args.timeout, max_tokens_limit=args.max_tokens_limit, api_key=api_key,
                     max_body_bytes=args.max_body_bytes, max_schema_chars=args.max_schema_chars)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""An OpenAI-compatible HTTP server over one :class:`~constrained_spec.api.Generator`.

``create_app(generator)`` returns a FastAPI app with

* ``POST /v1/chat/completions`` - OpenAI chat completions. Every reply is produced under an
  exact constraint and validated before it is returned:

  - ``response_format``: ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``
    (always enforced exactly; ``strict`` is accepted and ignored), ``{"type": "json_object"}``
    (any JSON object) or ``{"type": "text"}`` / absent (free text, ends at EOS or ``max_tokens``).
  - ``tools`` / ``tool_choice`` (``"auto"``, ``"required"``, ``"none"`` or a named function) /
    ``parallel_tool_calls``: see :mod:`constrained_spec.tools`. With ``"auto"`` the model picks
    between a text reply and a call inside one grammar; with ``response_format`` as well, the
    text reply follows that schema.
  - ``temperature`` (default 1, as OpenAI), ``top_p``, ``seed``, ``max_tokens`` /
    ``max_completion_tokens``; extensions ``top_k``, ``num_draft_tokens``, ``schema_in_prompt``.
  - ``model`` is accepted but not checked (one model is served). ``n`` must be 1; ``stop``,
    ``logprobs`` and non-zero penalties are refused with a 400 (they would change what the
    constraint guarantees or the sampled distribution).
  - ``stream: true`` answers with server-sent events (``chat.completion.chunk``): a chunk with
    the role, then the content as it is generated (the decoder's ``on_tokens`` hook hands over
    each step's final tokens; a multi-byte character split across tokens is held back until it
    is whole), a chunk with ``finish_reason`` (and the decoding stats), an optional usage chunk
    (``stream_options.include_usage``) and ``data: [DONE]``. The deltas concatenate to exactly
    the non-streamed ``content``. Tool-enabled requests stream the role chunk at once but their
    tool calls (or the ``"auto"`` text reply) as one chunk at the end: the model writes a
    wrapper object (``{"name", "arguments"}``, ``{"tool_calls": [...]}`` or ``{"content": ...}``)
    whose arguments are re-serialised after validation, so streaming its raw text would need an
    incremental JSON reader and would not concatenate to the non-streamed arguments string.
    Errors found before decoding starts (a schema that does not compile, a full queue, a timeout
    while waiting) are ordinary HTTP errors; later ones (token budget, post-validation, timeout)
    arrive as an ``{"error": {...}}`` event followed by ``data: [DONE]``. Content is sent before
    the finished value is validated: the grammar guarantees it, and a value that should still
    fail validation ends the stream with such an error event.

  The response has the OpenAI shape (``choices[0].message.content`` holds the JSON text, or
  ``tool_calls``), ``usage``, and an extra ``constrained_spec`` field with the decoding stats.

* ``GET /v1/models`` and ``GET /health``.

Errors use OpenAI's ``{"error": {"message", "type", "param", "code"}}`` body: schema and grammar
errors (an unsupported keyword is named), bad tools and bad parameters are 400, a token budget
that runs out is a 400 saying so, a value that fails post-validation is 422, a full queue is 429,
a request that outlives ``request_timeout`` is 504. Invalid output is never returned.

One generation runs at a time (the Generator holds one KV cache): requests wait in a bounded
queue of ``max_queue`` behind the running one. A timed-out request that has not started is
dropped; one already decoding stops after its current decode step (the ``on_tokens`` hook
raises), as does a stream whose client went away.

``main(argv)`` runs the server with uvicorn (``constrained-spec serve``), on 127.0.0.1 unless
``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from .errors import (
    CompileLimitError,
    ConstrainedSpecError,
    EmptyLanguageError,
    GrammarError,
    ModelLoadError,
    OutputValidationError,
    SchemaError,
    TokenBudgetExceeded,
    UnsupportedKeywordError,
    VocabularyMismatchError,
)
from .grammar import Regex
from .tools import (
    ToolError,
    normalize_tool_choice,
    normalize_tools,
    parse_tool_output,
    plain_messages,
    tool_call_schema,
    tool_prompt,
)

__all__ = ["create_app", "main", "ChatCompletionRequest", "APIError", "GenerationQueue"]

FREE_TEXT = Regex(r"[\s\S]*")  # response_format text / absent: any text, ended by EOS or the budget


class ChatCompletionRequest(BaseModel):
    """The accepted body of ``POST /v1/chat/completions`` (unknown fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

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
    num_draft_tokens: int | None = Field(default=None, ge=0)
    schema_in_prompt: bool | None = None


class APIError(Exception):
    """An error answered in OpenAI's error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def api_error(exc: BaseException, param: str | None = None, max_tokens: int | None = None) -> APIError:
    """Map a library exception to the HTTP error it answers as."""
    if isinstance(exc, APIError):
        return exc
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
    return APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")


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

    async def run(self, fn: Callable[[], Any], cancel: threading.Event | None = None) -> Any:
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
            return await asyncio.wait_for(asyncio.shield(future), self.timeout)
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
        parallel = bool(req.parallel_tool_calls)
        schema = tool_call_schema(tools, requested, parallel=parallel, content_schema=content_schema)
        prompt, template_tools = tool_prompt(tokenizer, req.messages, tools, requested, parallel=parallel, content_schema=content_schema)
        return _Plan(schema, prompt, bool(explicit), "tools", "tools", tools, content_schema is None, template_tools)
    prompt = plain_messages(req.messages)
    if content_schema is None:
        return _Plan(FREE_TEXT, prompt, False, "response_format", "text")
    return _Plan(content_schema, prompt, True if explicit is None else explicit, "response_format.json_schema.schema", "json")


def _check_unsupported(req: ChatCompletionRequest) -> None:
    if req.n not in (None, 1):
        raise APIError(400, f"n={req.n} is not supported: this server returns exactly one choice (n=1)", param="n")
    if req.stop not in (None, [], ""):
        raise APIError(400, "stop sequences are not supported: the output ends where its constraint is complete", param="stop")
    if req.logprobs or req.top_logprobs:
        raise APIError(400, "logprobs are not supported", param="logprobs")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise APIError(400, f"{name} is not supported (it would change the sampled distribution)", param=name)


def _model_name(generator: Any) -> str:
    target = getattr(generator, "target", None)
    for obj in (target, getattr(target, "model", None)):
        name = getattr(obj, "name_or_path", None) or getattr(getattr(obj, "config", None), "_name_or_path", None)
        if name:
            return str(name)
    return "constrained-spec"


def create_app(
    generator: Any,
    *,
    model_name: str | None = None,
    max_queue: int = 16,
    request_timeout: float | None = 600.0,
    max_tokens_limit: int | None = None,
) -> Any:
    """The FastAPI app serving ``generator`` (see the module docstring).

    ``max_queue``: requests allowed to wait behind the running one (more get 429).
    ``request_timeout``: seconds a request may take, waiting included (504 after).
    ``max_tokens_limit``: the largest ``max_tokens`` accepted (default: no limit).
    """
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    name = model_name or _model_name(generator)
    queue = GenerationQueue(max_queue=max_queue, timeout=request_timeout)
    @contextlib.asynccontextmanager
    async def lifespan(_: Any):
        yield
        queue.shutdown()

    app = FastAPI(title="constrained-spec", description="Exact grammar-constrained speculative decoding, OpenAI-compatible.",
                  lifespan=lifespan)
    app.state.generator = generator
    app.state.queue = queue
    app.state.model_name = name

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or None
        return JSONResponse(APIError(400, "invalid request: " + "; ".join(parts), param=param).body(), status_code=400)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": name, "queue": {"pending": queue.pending, "waiting": queue.waiting, "max_queue": queue.max_queue}}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "constrained-spec"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest) -> Any:
        _check_unsupported(req)
        max_tokens = req.max_completion_tokens or req.max_tokens
        if max_tokens is not None and max_tokens_limit is not None and max_tokens > max_tokens_limit:
            raise APIError(400, f"max_tokens={max_tokens} exceeds this server's limit of {max_tokens_limit}", param="max_tokens")
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
        if req.stream:
            include_usage = bool((req.stream_options or {}).get("include_usage"))
            return await _stream(plan, options, completion_id, created, include_usage)

        cancel = threading.Event()

        def stop_if_cancelled(_: list[int]) -> None:
            if cancel.is_set():
                raise Cancelled()

        try:
            result = await queue.run(lambda: generator.run(plan.prompt, plan.output_type, on_tokens=stop_if_cancelled, **options), cancel)
        except Exception as exc:  # noqa: BLE001
            raise _request_error(exc, plan) from exc

        message, finish = _message(plan, result)
        return {
            "id": completion_id, "object": "chat.completion", "created": created, "model": name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": _usage(result), "system_fingerprint": None, "constrained_spec": _extra(plan, result),
        }

    def _request_error(exc: BaseException, plan: _Plan) -> APIError:
        if isinstance(exc, QueueFull):
            return APIError(429, f"the server is busy: {queue.max_queue} requests are already waiting; retry later",
                            type="rate_limit_error", code="queue_full")
        if isinstance(exc, QueueTimeout):
            return APIError(504, f"the request did not finish within {request_timeout} s", type="timeout_error", code="timeout")
        return api_error(exc, param=plan.param)

    async def _stream(plan: _Plan, options: dict, cid: str, created: int, include_usage: bool) -> Any:
        """Start the generation; once it is compiled and about to decode, answer with its SSE stream."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        vocab = getattr(generator, "vocab", None)
        stream_text = plan.mode != "tools" and hasattr(vocab, "text_stream")

        def put(item: tuple) -> None:  # from the worker thread
            loop.call_soon_threadsafe(events.put_nowait, item)

        def on_tokens(ids: list[int]) -> None:
            if cancel.is_set():
                raise Cancelled()
            if stream_text:
                put(("tokens", list(ids)))

        def work() -> Any:
            compile_ = getattr(generator, "compile", None)
            if callable(compile_):
                compile_(plan.output_type)  # cached: run() finds it; a bad schema is still an HTTP 400
            put(("ready", None))
            return generator.run(plan.prompt, plan.output_type, on_tokens=on_tokens, **options)

        async def produce() -> None:
            try:
                result = await queue.run(work, cancel)
            except Exception as exc:  # noqa: BLE001 - every failure reaches the client
                events.put_nowait(("error", exc))
            else:
                events.put_nowait(("done", result))  # after every ("tokens", ...): same loop, FIFO

        task = asyncio.ensure_future(produce())
        running_tasks.add(task)
        task.add_done_callback(running_tasks.discard)
        try:
            kind, payload = await events.get()
        except asyncio.CancelledError:
            cancel.set()
            raise
        if kind == "error":
            raise _request_error(payload, plan) from payload
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name, "system_fingerprint": None}

        def chunk(delta: dict, finish_reason: str | None = None, **more: Any) -> str:
            return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}], **more})

        def error_event(exc: BaseException) -> list[str]:
            return [_sse(_request_error(exc, plan).body()), "data: [DONE]\n\n"]

        async def body() -> Any:
            text = vocab.text_stream() if stream_text else None
            sent: list[str] = []
            try:
                yield chunk({"role": "assistant", "content": None if plan.mode == "tools" else ""})
                while True:
                    kind, payload = await events.get()
                    if kind == "tokens":
                        piece = text.push(payload)
                        if piece:
                            sent.append(piece)
                            yield chunk({"content": piece})
                        continue
                    if kind == "error":
                        for event in error_event(payload):
                            yield event
                        return
                    result = payload
                    try:
                        message, finish = _message(plan, result)
                    except Exception as exc:  # noqa: BLE001
                        for event in error_event(exc):
                            yield event
                        return
                    if message.get("tool_calls"):
                        yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]})
                    elif message.get("content") is not None:
                        so_far, content = "".join(sent), message["content"]
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


def _extra(plan: _Plan, result: Any) -> dict:
    return {"stats": result.stats.as_dict(), "mode": plan.mode}


def _message(plan: _Plan, result: Any) -> tuple[dict, str]:
    finish = "length" if getattr(result.stats, "stop_reason", "") == "max_new_tokens" else "stop"
    if plan.mode == "tools":
        reply = parse_tool_output(result.value, plan.tools)
        if reply.tool_calls:
            return {"role": "assistant", "content": None, "tool_calls": [c.to_openai() for c in reply.tool_calls], "refusal": None}, "tool_calls"
        content = reply.content if plan.content_is_text and isinstance(reply.content, str) else json.dumps(reply.content, ensure_ascii=False)
        return {"role": "assistant", "content": content, "refusal": None}, finish
    return {"role": "assistant", "content": result.text, "refusal": None}, finish


def _sse(obj: Any) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"


# -- command line ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from .api import NUM_DRAFT_TOKENS
    from .cli import add_model_arguments

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
    p.add_argument("--log-level", default="info")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``constrained-spec serve``: load the models, then run uvicorn until interrupted."""
    import uvicorn

    from .api import Generator

    args = build_parser().parse_args(argv)
    draft = None if str(args.draft).lower() in {"none", ""} else args.draft
    generator = Generator(args.model, draft, num_draft_tokens=args.num_draft_tokens, max_new_tokens=args.max_new_tokens,
                          cache_dir=args.cache_dir, dtype=args.dtype, draft_dtype=args.draft_dtype)
    app = create_app(generator, model_name=args.model_name or args.model, max_queue=args.max_queue,
                     request_timeout=args.timeout, max_tokens_limit=args.max_tokens_limit)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

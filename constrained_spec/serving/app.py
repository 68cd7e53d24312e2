"""``create_app(generator)``: the FastAPI app, wiring the protocol, the admission limits, the
scheduler, streaming and the error answers together (see :mod:`constrained_spec.serving`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

try:  # the endpoints' annotations are strings (postponed): their Request must be a module name
    from starlette.requests import Request
except ImportError:  # pragma: no cover - without the serve extra, create_app says what to install
    Request = Any  # type: ignore[misc,assignment]

from constrained_spec.errors import TokenBudgetExceeded
from constrained_spec.serving.compiles import (
    DEFAULT_COMPILE_BUDGET,
    DEFAULT_MAX_COMPILE_QUEUE,
    DEFAULT_MAX_COMPILES_PER_CLIENT,
    CompileAdmission,
)
from constrained_spec.serving.completion import Plan, make_plan, partial_message, reply_message, stats_extra
from constrained_spec.serving.errors import APIError, api_error, error_response, http_error, validation_error
from constrained_spec.serving.grammars import grammar_texts, tools_for_schema_limit
from constrained_spec.serving.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_MAX_BODY_READERS,
    DEFAULT_MAX_QUEUE,
    DEFAULT_REQUEST_TIMEOUT,
    MAX_BODY_BYTES,
    MAX_GRAMMAR_CHARS,
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_PROPERTIES,
    Guard,
    check_grammar_size,
    check_max_tokens,
    check_schema_properties,
    check_schema_size,
)
from constrained_spec.serving.memory import DEFAULT_TRIM_INTERVAL, IdleTrimmer
from constrained_spec.serving.metrics import install_metrics
from constrained_spec.serving.protocol import (
    ChatCompletionRequest,
    budget_usage,
    check_messages,
    check_unsupported,
    check_values,
    completion_body,
    new_completion_id,
    usage,
)
from constrained_spec.serving.scheduler import Scheduler, watch_disconnect
from constrained_spec.serving.streaming import stream_completion

__all__ = ["create_app", "public_model_id", "served_model_name"]


def public_model_id(name: str) -> str:
    """``name`` as a model id that shows no file system path: a local folder or file (an absolute
    or relative path, or one that exists here) by its last component; a hub id or a short name
    as it is."""
    text = str(name)
    looks_local = os.path.isabs(text) or text.startswith(("./", "../", "~")) or os.sep in text and os.path.exists(text)
    if looks_local:
        return os.path.basename(os.path.normpath(os.path.expanduser(text))) or "constrained-spec"
    return text


def served_model_name(generator: Any) -> str:
    """The id the server reports for ``generator``: its target model's name (a local path by its
    last component, :func:`public_model_id`)."""
    target = getattr(generator, "target", None)
    for obj in (target, getattr(target, "model", None)):
        name = getattr(obj, "name_or_path", None) or getattr(getattr(obj, "config", None), "_name_or_path", None)
        if name:
            return public_model_id(str(name))
    return "constrained-spec"


def sampling_options(req: ChatCompletionRequest, plan: Plan, max_tokens: int | None) -> dict[str, Any]:
    """The keyword arguments of ``generator.run`` for ``req``."""
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
    if req.alignment is not None:
        options["alignment"] = req.alignment
    if req.particles is not None:
        options["particles"] = req.particles
    if plan.template_tools:
        options["tools"] = plan.template_tools
    return options


def create_app(
    generator: Any,
    *,
    model_name: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    max_tokens_limit: int | None = None,
    api_key: str | None = None,
    max_body_bytes: int | None = MAX_BODY_BYTES,
    max_schema_chars: int | None = MAX_SCHEMA_CHARS,
    compile_threads: int = 2,
    max_grammar_chars: int | None = MAX_GRAMMAR_CHARS,
    max_compile_queue: int = DEFAULT_MAX_COMPILE_QUEUE,
    max_compiles_per_client: int | None = DEFAULT_MAX_COMPILES_PER_CLIENT,
    compile_budget: float | None = DEFAULT_COMPILE_BUDGET,
    max_schema_properties: int | None = MAX_SCHEMA_PROPERTIES,
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
    max_body_readers: int | None = DEFAULT_MAX_BODY_READERS,
    trim_interval: float | None = DEFAULT_TRIM_INTERVAL,
) -> Any:
    """The FastAPI app serving ``generator`` (see :mod:`constrained_spec.serving`).

    ``max_queue``: requests allowed to wait beyond the running ones (more get 429); as many run at
    once as ``generator.batch`` has slots (continuous batching), else one.
    ``request_timeout``: seconds a request may take, compiling and waiting included (504 after).
    ``max_tokens_limit``: the largest ``max_tokens`` accepted (default: no limit).
    ``api_key``: the bearer token every route but ``/health`` needs, ``/metrics`` included (None: no key).
    ``max_body_bytes`` / ``max_schema_chars`` / ``max_grammar_chars``: the request body, schema
    and grammar caps (None: none).
    ``compile_threads``: threads that compile constraints, off the generation worker;
    ``max_compile_queue``: compiles that may wait beyond those (429 beyond);
    ``max_compiles_per_client``: compiles one client (by address) may have under way at once
    (joining another's counts not; 429 beyond; None: no limit); ``compile_budget``:
    seconds one compile may run before it is stopped (400 ``compile_limit``; None: no budget);
    ``max_schema_properties``: properties the request's schemas may declare in all, 400
    ``compile_limit`` beyond, before any compile (None: no limit) (:mod:`.compiles`).
    ``body_timeout``: seconds the whole body may take to arrive (408 after; None: no limit);
    ``max_body_readers``: requests reading their bodies at once (429 beyond; None: no limit).
    ``trim_interval``: seconds idle after some work before freed memory is given back to the
    system (:mod:`.memory`; None: never).
    """
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    name = model_name or served_model_name(generator)
    compiles = CompileAdmission(threads=max(compile_threads, 1), max_waiting=max_compile_queue, budget=compile_budget,
                                per_client=max_compiles_per_client)
    scheduler = Scheduler(generator, max_queue=max_queue, request_timeout=request_timeout, compiles=compiles)
    queue = scheduler.queue

    trimmer = None if trim_interval is None else IdleTrimmer(
        lambda: queue.pending > 0 or compiles.running > 0 or compiles.waiting > 0, trim_interval)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any):
        if trimmer is not None:
            trimmer.start()
        yield
        if trimmer is not None:
            await trimmer.stop()
        scheduler.shutdown()

    app = FastAPI(title="constrained-spec", description="Exact grammar-constrained speculative decoding, OpenAI-compatible.",
                  lifespan=lifespan)
    app.state.generator = generator
    app.state.queue = queue
    app.state.compiles = compiles
    app.state.trimmer = trimmer
    app.state.model_name = name
    app.add_middleware(Guard, api_key=api_key, max_body_bytes=max_body_bytes, body_timeout=body_timeout, max_body_readers=max_body_readers)
    install_metrics(app, scheduler)  # GET /metrics; outermost middleware: counts 401/413 too

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> Any:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> Any:
        return error_response(validation_error(list(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Any:
        return error_response(http_error(exc.status_code, exc.detail))

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> Any:
        return error_response(api_error(exc))  # logged there; no internals in the body

    def request_error(exc: BaseException, plan: Plan) -> APIError:
        return api_error(exc, plan.param, request_timeout=request_timeout)

    def model_card() -> dict:
        return {"id": name, "object": "model", "created": 0, "owned_by": "constrained-spec"}

    def unknown_model(model: str) -> APIError:
        return APIError(404, f"the model {model!r} does not exist; this server serves {name!r}", param="model", code="model_not_found")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": name, "queue": {"pending": queue.pending, "running": queue.running, "waiting": queue.waiting,
                                                                   "max_queue": queue.max_queue}}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        if model_id != name:
            raise unknown_model(model_id)
        return model_card()

    @app.post("/v1/responses")
    async def responses() -> Any:  # refused by name: no client this server is tested with needs it
        raise APIError(404, "the OpenAI Responses API (/v1/responses) is not served here: use /v1/chat/completions; its "
                       "response_format {'type': 'json_schema', 'json_schema': {...}} is what text.format json_schema asks "
                       "(LangChain: ChatOpenAI(use_responses_api=False), its default)", code="unsupported_endpoint")

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Any:
        deadline = scheduler.deadline()
        if trimmer is not None:
            trimmer.touch()
        check_unsupported(req)
        if req.model is not None and req.model != name:
            raise unknown_model(req.model)
        check_values(req.model_dump())
        check_messages(req.messages)
        max_tokens = req.max_completion_tokens or req.max_tokens
        check_max_tokens(max_tokens, max_tokens_limit)
        check_schema_size(req.response_format, tools_for_schema_limit(req.tools), max_schema_chars)
        check_schema_properties(req.response_format, tools_for_schema_limit(req.tools), max_schema_properties)
        check_grammar_size(grammar_texts(req), max_grammar_chars)
        try:
            plan = make_plan(req, getattr(generator, "tokenizer", None))
        except Exception as exc:  # noqa: BLE001 - a bad tool is a 400; anything else a 500
            raise api_error(exc, param="tools" if req.tools else "response_format") from exc  # an APIError keeps its own param

        options = sampling_options(req, plan, max_tokens)
        completion_id = new_completion_id()
        created = int(time.time())
        cancel = threading.Event()
        watcher = asyncio.ensure_future(watch_disconnect(request, cancel))
        streaming = False  # once the SSE response is returned, the watcher runs until the stream ends
        try:
            try:
                client = request.client.host if request.client else None
                output_type = await scheduler.compile(plan.output_type, deadline, cancel, client)
            except Exception as exc:  # noqa: BLE001
                raise request_error(exc, plan) from exc
            remaining = scheduler.remaining(deadline)
            if req.stream:
                include_usage = bool((req.stream_options or {}).get("include_usage"))
                response = await stream_completion(scheduler, plan, output_type, options, completion_id=completion_id, created=created,
                                                   model=name, include_usage=include_usage, cancel=cancel, timeout=remaining)
                streaming = True
                return response
            try:
                result = await scheduler.generate(plan.prompt, output_type, options, cancel, remaining)
            except TokenBudgetExceeded as exc:  # OpenAI's answer: the partial output, finish_reason "length"
                message, used = partial_message(plan, exc.partial_text), budget_usage(exc)
                extra: dict[str, Any] = {"stats": None, "mode": plan.mode}
                finish = "length"
            except Exception as exc:  # noqa: BLE001
                raise request_error(exc, plan) from exc
            else:
                message, finish = reply_message(plan, result)
                used, extra = usage(result), stats_extra(plan, result)
        finally:
            if not streaming:
                watcher.cancel()
        return completion_body(completion_id, created, name, message, finish, used, extra)

    return app

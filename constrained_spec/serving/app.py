"""``create_app(generator, ServerConfig(...))``: the FastAPI app, wiring the protocol, the
admission limits, the scheduler, streaming and the error answers together (see
:mod:`constrained_spec.serving`). Its routes are registered by concern (``add_*`` below); one
chat request is checked, planned, compiled, then streamed or generated (:func:`chat_completion`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
import time
from contextlib import AbstractAsyncContextManager
from typing import Any, AsyncIterator, Callable

try:  # the endpoints' annotations are strings (postponed): their Request must be a module name
    from starlette.requests import Request
except ImportError:  # pragma: no cover - without the serve extra, create_app says what to install
    Request = Any  # type: ignore[misc,assignment]

from constrained_spec.errors import TokenBudgetExceeded
from constrained_spec.serving.compiles import CompileAdmission
from constrained_spec.serving.completion import Plan, make_plan, partial_message, reply_message, stats_extra
from constrained_spec.serving.config import ServerConfig
from constrained_spec.serving.errors import APIError, api_error, error_response, http_error, validation_error
from constrained_spec.serving.grammars import grammar_texts, tools_for_schema_limit
from constrained_spec.serving.limits import (
    Guard,
    check_grammar_size,
    check_max_tokens,
    check_particles,
    check_schema_properties,
    check_schema_size,
)
from constrained_spec.serving.memory import IdleTrimmer, pin_mmap_threshold
from constrained_spec.serving.metrics import install_metrics
from constrained_spec.serving.openapi import install_openapi
from constrained_spec.serving.protocol import (
    ChatCompletionRequest,
    budget_usage,
    check_messages,
    check_typed,
    check_unsupported,
    check_values,
    completion_body,
    new_completion_id,
    usage,
)
from constrained_spec.serving.scheduler import Scheduler, watch_disconnect
from constrained_spec.serving.stopping import CancelledAsStopping
from constrained_spec.serving.streaming import stream_completion

__all__ = ["ServerConfig", "create_app", "public_model_id", "served_model_name"]


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


@dataclasses.dataclass(frozen=True)
class Served:
    """What the routes share: the generator and its id, the config, the scheduler (and its queue),
    the compile admission and the idle trimmer (None: never trims)."""

    generator: Any
    config: ServerConfig
    name: str
    scheduler: Scheduler
    compiles: CompileAdmission
    trimmer: IdleTrimmer | None

    def request_error(self, exc: BaseException, plan: Plan) -> APIError:
        """``exc`` as the API error of a request for ``plan``."""
        return api_error(exc, plan.param, request_timeout=self.config.request_timeout)

    def model_card(self) -> dict:
        """The served model as ``/v1/models`` lists it."""
        return {"id": self.name, "object": "model", "created": 0, "owned_by": "constrained-spec"}

    def unknown_model(self, model: str) -> APIError:
        """The 404 for a request naming another model."""
        return APIError(404, f"the model {model!r} does not exist; this server serves {self.name!r}", param="model", code="model_not_found")


def serving_state(generator: Any, config: ServerConfig) -> Served:
    """The scheduler, compile admission and idle trimmer that serve ``generator`` under ``config``."""
    name = config.model_name or served_model_name(generator)
    compiles = CompileAdmission(threads=max(config.compile_threads, 1), max_waiting=config.max_compile_queue, budget=config.compile_budget,
                                per_client=config.max_compiles_per_client)
    scheduler = Scheduler(generator, max_queue=config.max_queue, request_timeout=config.request_timeout, compiles=compiles)
    queue = scheduler.queue
    trimmer = None if config.trim_interval is None else IdleTrimmer(
        lambda: queue.pending > 0 or compiles.running > 0 or compiles.waiting > 0, config.trim_interval)
    return Served(generator, config, name, scheduler, compiles, trimmer)


def lifespan(served: Served) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the mmap threshold is pinned and the idle trimmer runs while the app
    does; at shutdown the scheduler stops."""

    @contextlib.asynccontextmanager
    async def run(_: Any) -> AsyncIterator[None]:
        if served.config.mmap_threshold is not None:
            pin_mmap_threshold(served.config.mmap_threshold)
        if served.trimmer is not None:
            served.trimmer.start()
        yield
        if served.trimmer is not None:
            await served.trimmer.stop()
        served.scheduler.shutdown()

    return run


def create_app(generator: Any, config: ServerConfig | None = None) -> Any:
    """The FastAPI app serving ``generator`` (see :mod:`constrained_spec.serving`) as ``config``
    says (None: :class:`ServerConfig`'s defaults, those of ``constrained-spec serve``)."""
    from fastapi import FastAPI

    served = serving_state(generator, config or ServerConfig())
    app = FastAPI(title="constrained-spec", description="Exact grammar-constrained speculative decoding, OpenAI-compatible.",
                  lifespan=lifespan(served))
    app.state.generator = generator
    app.state.queue = served.scheduler.queue
    app.state.compiles = served.compiles
    app.state.trimmer = served.trimmer
    app.state.model_name = served.name
    add_middleware(app, served)
    add_error_handlers(app)
    add_model_routes(app, served)
    add_refused_routes(app)
    add_chat_routes(app, served)
    install_openapi(app, served.config)
    return app


def add_middleware(app: Any, served: Served) -> None:
    """The API key and body limits (:class:`Guard`), then requests cancelled at shutdown as 503s
    (:class:`~constrained_spec.serving.stopping.CancelledAsStopping`), then the metrics (``GET /metrics``; the
    outermost middleware: it counts 401/413 too)."""
    config = served.config
    app.add_middleware(Guard, api_key=config.api_key, max_body_bytes=config.max_body_bytes, body_timeout=config.body_timeout,
                       max_body_readers=config.max_body_readers)
    app.add_middleware(CancelledAsStopping)  # outside the guard (a body read cut by shutdown), inside the metrics (which count the 503)
    install_metrics(app, served.scheduler)


def add_error_handlers(app: Any) -> None:
    """Every error answers OpenAI's error body: API errors, request validation, HTTP errors
    (unknown routes, methods) and anything else (a 500 naming no internals)."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> Any:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> Any:
        return error_response(validation_error(list(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Any:
        return error_response(http_error(exc.status_code, exc.detail, exc.headers))

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> Any:
        return error_response(api_error(exc))  # logged there; no internals in the body


def add_model_routes(app: Any, served: Served) -> None:
    """``GET /health``, ``GET /v1/models`` and ``GET /v1/models/{id}``."""
    queue = served.scheduler.queue

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": served.name, "queue": {"pending": queue.pending, "running": queue.running, "waiting": queue.waiting,
                                                                          "max_queue": queue.max_queue}}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [served.model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict:
        if model_id != served.name:
            raise served.unknown_model(model_id)
        return served.model_card()


def add_refused_routes(app: Any) -> None:
    """Endpoints refused by name: ``POST /v1/responses`` (no client this server is tested with needs it)."""

    @app.post("/v1/responses")
    async def responses() -> Any:
        raise APIError(404, "the OpenAI Responses API (/v1/responses) is not served here: use /v1/chat/completions; its "
                       "response_format {'type': 'json_schema', 'json_schema': {...}} is what text.format json_schema asks "
                       "(LangChain: ChatOpenAI(use_responses_api=False), its default)", code="unsupported_endpoint")


def add_chat_routes(app: Any, served: Served) -> None:
    """``POST /v1/chat/completions`` (:func:`chat_completion`)."""

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Any:
        return await chat_completion(served, req, request)


def check_request(served: Served, req: ChatCompletionRequest) -> int | None:
    """Refuse, before any compile, what this server does not serve and what its limits bound;
    the request's ``max_tokens`` (None: the generator's default)."""
    config = served.config
    check_unsupported(req)
    if req.model is not None and req.model != served.name:
        raise served.unknown_model(req.model)
    check_values(req.model_dump())
    check_messages(req.messages)
    max_tokens = req.max_completion_tokens or req.max_tokens
    check_max_tokens(max_tokens, config.max_tokens_limit)
    check_particles(req.particles, config.max_particles)
    check_schema_size(req.response_format, tools_for_schema_limit(req.tools), config.max_schema_chars)
    check_schema_properties(req.response_format, tools_for_schema_limit(req.tools), config.max_schema_properties)
    check_grammar_size(grammar_texts(req), config.max_grammar_chars)
    return max_tokens


def request_plan(served: Served, req: ChatCompletionRequest) -> Plan:
    """What ``req`` generates (a bad tool or schema is a 400; anything else a 500)."""
    try:
        return make_plan(req, getattr(served.generator, "tokenizer", None))
    except Exception as exc:  # noqa: BLE001 - a bad tool is a 400; anything else a 500
        raise api_error(exc, param="tools" if req.tools else "response_format") from exc  # an APIError keeps its own param


async def chat_completion(served: Served, req: ChatCompletionRequest, request: Request) -> Any:
    """Answer one chat request: check it, compile its constraint (off the generation workers),
    then stream the reply or generate it whole; a client gone meanwhile stops the work."""
    deadline = served.scheduler.deadline()
    if served.trimmer is not None:
        served.trimmer.touch()
    max_tokens = check_request(served, req)
    plan = request_plan(served, req)
    check_typed(await request.json())  # what the checks above let through holds to the document's typed body
    options = sampling_options(req, plan, max_tokens)
    completion_id = new_completion_id()
    created = int(time.time())
    cancel = threading.Event()
    watcher = asyncio.ensure_future(watch_disconnect(request, cancel))
    streaming = False  # once the SSE response is returned, the watcher runs until the stream ends
    try:
        try:
            client = request.client.host if request.client else None
            output_type = await served.scheduler.compile(plan.output_type, deadline, cancel, client)
        except Exception as exc:  # noqa: BLE001
            raise served.request_error(exc, plan) from exc
        remaining = served.scheduler.remaining(deadline)
        if req.stream:
            include_usage = bool((req.stream_options or {}).get("include_usage"))
            response = await stream_completion(served.scheduler, plan, output_type, options, completion_id=completion_id, created=created,
                                               model=served.name, include_usage=include_usage, cancel=cancel, timeout=remaining)
            streaming = True
            return response
        message, finish, used, extra = await generate_reply(served, plan, output_type, options, cancel, remaining)
    finally:
        if not streaming:
            watcher.cancel()
    return completion_body(completion_id, created, served.name, message, finish, used, extra)


async def generate_reply(served: Served, plan: Plan, output_type: Any, options: dict[str, Any], cancel: threading.Event,
                         timeout: float | None) -> tuple[dict, str, dict, dict[str, Any]]:
    """A non-streamed reply: its message, finish reason, usage and ``constrained_spec`` field. A
    token budget run out is OpenAI's answer: the partial output, finish reason ``"length"``."""
    try:
        result = await served.scheduler.generate(plan.prompt, output_type, options, cancel, timeout)
    except TokenBudgetExceeded as exc:
        return partial_message(plan, exc.partial_text), "length", budget_usage(exc), {"stats": exc.stats.as_dict() if exc.stats is not None else None,
                                                                                 "mode": plan.mode}
    except Exception as exc:  # noqa: BLE001
        raise served.request_error(exc, plan) from exc
    message, finish = reply_message(plan, result)
    return message, finish, usage(result), stats_extra(plan, result)

"""The server as a Ray Serve application: replicas, autoscaling, constraint affinity.

Two deployments (see docs/ray.md):

* ``ConstrainedSpecReplica`` (the model replicas): each loads one
  :class:`~constrained_spec.api.Generator` in its constructor (so Serve counts it ready only once
  its models are loaded) and runs the project's FastAPI app (:func:`~constrained_spec.serving.create_app`)
  in process, unchanged in its routes, errors and limits.
* ``ConstrainedSpecGateway`` (the HTTP ingress, ``serve.ingress``): reads each body, derives the
  request's constraint key (a hash of ``response_format``, ``tools``, grammars...) and forwards
  the request to a replica through Serve's model multiplexing with that key as the model id.
  Serve's router then prefers a replica that has served (so compiled) the constraint, falls back
  to the least-loaded-with-keys replica and then to any when those are busy. Serve's HTTP proxy
  routes on headers only, which is why the body is read here.

Errors the gateway adds, in OpenAI's error body: 503 ``all_replicas_busy`` when Serve's queue
for the replicas is full (never a hang), 503 ``replica_failed`` when a replica died under a
request and the retry (one, before any byte was sent) failed too, 504 when no replica answered
within ``request_timeout`` plus a margin. Each response carries ``x-constrained-spec-replica``
(the replica's id) and, for a constrained request, ``x-constrained-spec-constraint-cache``
(``hit`` when this replica served the same constraint before); ``GET /ray/replica`` answers one
replica's counters.

Ray is imported only by the functions that need it; without it they raise
:class:`RayUnavailableError` naming ``pip install 'constrained-spec[ray]'``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections import OrderedDict
from typing import Any, AsyncIterator

from constrained_spec.errors import ConfigError, ConstrainedSpecError
from constrained_spec.serving.errors import SERVER, APIError
from constrained_spec.serving.limits import MAX_BODY_BYTES, Guard

__all__ = ["RAY_EXTRA", "RayServeOptions", "RayUnavailableError", "ReplicaOptions", "app_builder", "build_app", "constraint_key",
           "import_ray_serve"]

log = logging.getLogger(__name__)

#: what to install for the Ray Serve application
RAY_EXTRA = "pip install 'constrained-spec[ray]'"
#: request fields that decide the compiled constraint (the affinity key)
CONSTRAINT_FIELDS = ("response_format", "tools", "tool_choice", "parallel_tool_calls", "structured_outputs", "guided_grammar", "guided_regex")
REPLICA_HEADER = "x-constrained-spec-replica"
CACHE_HEADER = "x-constrained-spec-constraint-cache"
#: how many replicas the gateway tried (2 when the first died under the request)
ATTEMPTS_HEADER = "x-constrained-spec-attempts"
#: seconds past request_timeout the gateway waits for a replica before its own 504
GATEWAY_TIMEOUT_MARGIN = 30.0


class RayUnavailableError(ConstrainedSpecError):
    """Ray Serve is not installed (the ``ray`` extra)."""


def import_ray_serve() -> tuple[Any, Any]:
    """``(ray, ray.serve)``; :class:`RayUnavailableError` with the install command without them."""
    try:
        import ray
        from ray import serve
    except ImportError as exc:
        raise RayUnavailableError(f"the Ray Serve application needs ray[serve], which is not installed ({exc.name or exc}): {RAY_EXTRA}") from None
    return ray, serve


def constraint_key(body: bytes) -> str:
    """A short stable hash of the fields of a chat request that decide its compiled constraint
    (``""`` when the body is not a JSON object or has none of them)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(data, dict):
        return ""
    picked = {name: data[name] for name in CONSTRAINT_FIELDS if data.get(name) is not None}
    if not picked:
        return ""
    canonical = json.dumps(picked, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "c-" + hashlib.sha256(canonical.encode()).hexdigest()[:24]


@dataclasses.dataclass(frozen=True)
class ReplicaOptions:
    """What one replica loads and how its app answers (plain values: they travel to the replicas)."""

    model: str
    draft: str | None = None
    dtype: str = "auto"
    draft_dtype: str | None = None
    cache_dir: str | None = None
    #: auto: CUDA when the replica sees a GPU (Ray shows it the ones num_gpus_per_replica reserved), else the CPU
    device: str = "auto"
    num_draft_tokens: int | None = None
    max_new_tokens: int = 512
    compile_timeout: float = 60.0
    #: continuous batching inside the replica (Generator's max_batch_size, batch_max_tokens, prefix_cache_mb)
    max_batch_size: int = 1
    batch_max_tokens: int = 4096
    prefix_cache_mb: int = 1024
    #: how prompts write a response_format schema (Generator's schema_hint_style)
    schema_hint: str = "full"
    #: the fields of the replicas' ServerConfig (model_name, max_queue, request_timeout, api_key, ...)
    app_options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def request_timeout(self) -> float | None:
        from constrained_spec.serving.limits import DEFAULT_REQUEST_TIMEOUT

        return self.app_options.get("request_timeout", DEFAULT_REQUEST_TIMEOUT)


@dataclasses.dataclass(frozen=True)
class RayServeOptions:
    """How the replicas are deployed: count or autoscaling bounds, resources, queue bounds."""

    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    num_cpus_per_replica: float = 1.0
    num_gpus_per_replica: float = 0.0
    #: requests Serve sends to one replica at once (the rest wait in Serve's queue)
    max_ongoing_requests: int = 4
    #: requests that may wait in Serve's queue for a replica; more are a 503 all_replicas_busy
    max_queued_requests: int = 32
    #: autoscaling aims at this many ongoing requests per replica
    target_ongoing_requests: float = 2.0
    #: distinct constraints one replica advertises to the router (LRU)
    max_constraints_per_replica: int = 64
    #: seconds a stopping replica waits for its in-flight requests
    graceful_shutdown_timeout_s: float = 60.0
    #: attempts after a replica died under a request (before any byte was sent)
    retries: int = 1
    app_name: str = "constrained-spec"
    route_prefix: str = "/"

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ConfigError(f"replicas must be >= 1, got {self.replicas}")
        if (self.min_replicas is None) != (self.max_replicas is None):
            raise ConfigError("give both min_replicas and max_replicas for autoscaling, or neither")
        if self.min_replicas is not None and self.max_replicas is not None and not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas == 0:
            raise ConfigError(f"need 0 <= min_replicas <= max_replicas and max_replicas >= 1, got {self.min_replicas} and {self.max_replicas}")
        if self.num_cpus_per_replica < 0 or self.num_gpus_per_replica < 0:
            raise ConfigError("CPUs and GPUs per replica must be >= 0")
        if self.max_ongoing_requests < 1 or self.max_queued_requests < 0 or self.retries < 0:
            raise ConfigError("max_ongoing_requests must be >= 1, max_queued_requests and retries >= 0")

    def replica_deployment_options(self) -> dict[str, Any]:
        """The ``serve.deployment`` options of the model replicas."""
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.num_cpus_per_replica, "num_gpus": self.num_gpus_per_replica},
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "graceful_shutdown_timeout_s": self.graceful_shutdown_timeout_s,
            "graceful_shutdown_wait_loop_s": 1.0,
            "health_check_period_s": 5.0,
            "health_check_timeout_s": 30.0,
        }
        if self.min_replicas is not None:
            options["autoscaling_config"] = {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                                             "initial_replicas": max(self.min_replicas, 1),
                                             "target_ongoing_requests": self.target_ongoing_requests}
        else:
            options["num_replicas"] = self.replicas
        return options


class _Stats:
    """One replica's counters (what ``GET /ray/replica`` and the headers report)."""

    def __init__(self, max_keys: int) -> None:
        self.requests = 0
        self.constraint_hits = 0
        self.constraint_misses = 0
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._max_keys = max_keys

    def seen(self, key: str) -> bool:
        """Count ``key``'s request; whether this replica served the same constraint before."""
        hit = key in self._keys
        if hit:
            self._keys.move_to_end(key)
            self.constraint_hits += 1
        else:
            self._keys[key] = None
            self.constraint_misses += 1
            while len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
        return hit


class ConstrainedSpecReplica:
    """A model replica: one Generator and the project's FastAPI app, driven in process over ASGI."""

    async def __init__(self, options: ReplicaOptions, max_constraints: int = 64) -> None:  # type: ignore[misc]  # Serve awaits it
        import ray
        from ray import serve

        from constrained_spec.serving.app import ServerConfig, create_app

        generator = await asyncio.get_running_loop().run_in_executor(None, _load_generator, options)
        self.app = create_app(generator, ServerConfig(**options.app_options))
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        self.actor_name = ray.get_runtime_context().get_actor_name() or ""
        self.stats = _Stats(max_constraints)
        self.started = time.time()
        log.info("replica %s ready (models loaded)", self.replica_id)

    async def _remember(self, key: str) -> str:
        """Serve's multiplex loader (decorated in :func:`replica_class`): once it ran for ``key``,
        Serve's router knows this replica holds that constraint."""
        return key

    def check_health(self) -> None:
        """Serve's periodic health check: the app is built and not shut down."""
        if getattr(self, "_lifespan", None) is None:
            raise RuntimeError("replica is shut down")

    async def __del__(self) -> None:
        """Graceful shutdown (Serve already waited for in-flight requests): stop the generation worker."""
        lifespan, self._lifespan = getattr(self, "_lifespan", None), None
        if lifespan is not None:
            await lifespan.__aexit__(None, None, None)

    def replica_stats(self) -> dict[str, Any]:
        """This replica's id, actor name and counters."""
        s = self.stats
        return {"replica_id": self.replica_id, "actor_name": self.actor_name, "requests": s.requests, "constraint_hits": s.constraint_hits,
                "constraint_misses": s.constraint_misses, "uptime_s": round(time.time() - self.started, 3)}

    async def forward(self, method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> AsyncIterator[Any]:
        """Run one HTTP request through the app: yields the response start (a dict with status and
        headers), then its body chunks (bytes)."""
        from ray import serve

        key = serve.get_multiplexed_model_id()
        extra = [(REPLICA_HEADER.encode(), self.replica_id.encode())]
        if key:
            await self._remember(key)
            extra.append((CACHE_HEADER.encode(), b"hit" if self.stats.seen(key) else b"miss"))
        self.stats.requests += 1
        async for message in drive_asgi(self.app, method, path, query, headers, body):
            if isinstance(message, dict):
                message = {**message, "headers": list(message["headers"]) + extra}
            yield message


def replica_class(max_constraints: int) -> type:
    """:class:`ConstrainedSpecReplica` whose ``_remember`` is Serve's multiplex loader, remembering
    ``max_constraints`` constraint keys (LRU); built here because ray is imported only when used."""
    _, serve = import_ray_serve()

    class ConstrainedSpecServeReplica(ConstrainedSpecReplica):
        @serve.multiplexed(max_num_models_per_replica=max_constraints)
        async def _remember(self, key: str) -> str:
            return key

    return ConstrainedSpecServeReplica


def _load_generator(options: ReplicaOptions) -> Any:
    from constrained_spec.api import Generator
    from constrained_spec.config import DecodeConfig, ModelConfig

    models = ModelConfig(model=options.model, draft=options.draft, dtype=options.dtype, draft_dtype=options.draft_dtype, cache_dir=options.cache_dir,
                         device=options.device)
    decode = DecodeConfig() if options.num_draft_tokens is None else DecodeConfig(num_draft_tokens=options.num_draft_tokens)
    return Generator.from_config(models, decode, max_new_tokens=options.max_new_tokens, compile_timeout=options.compile_timeout, progress=False,
                                 max_batch_size=options.max_batch_size, batch_max_tokens=options.batch_max_tokens,
                                 prefix_cache_mb=options.prefix_cache_mb, schema_hint_style=options.schema_hint)


async def drive_asgi(app: Any, method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> AsyncIterator[Any]:
    """One HTTP request through the ASGI ``app`` in process: yields ``{"status", "headers"}`` then
    body chunks. Closing the iterator early tells the app the client went away."""
    messages: asyncio.Queue[Any] = asyncio.Queue()
    finished = asyncio.Event()
    sent_body = False

    async def receive() -> dict:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        await messages.put(message)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query, "headers": headers,
             "client": ("ray-serve-gateway", 0), "server": ("ray-serve", 80)}

    async def run() -> None:
        try:
            await app(scope, receive, send)
        finally:
            await messages.put(None)

    task = asyncio.ensure_future(run())
    try:
        while True:
            message = await messages.get()
            if message is None:
                break
            if message["type"] == "http.response.start":
                yield {"status": message["status"], "headers": message.get("headers", [])}
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    break
    finally:
        finished.set()  # the app's disconnect watcher sees the client gone (a stream stops its generation)
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=5.0)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - the app answered or logged its own error
            task.cancel()
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


def _error(status: int, message: str, code: str) -> Any:
    from starlette.responses import Response

    error = APIError(status, message, type=SERVER, code=code)
    return Response(error.to_json(), status_code=status, media_type="application/json", headers={"Retry-After": "1"} if status == 503 else None)


class ConstrainedSpecGateway:
    """The HTTP ingress: forwards every request to a model replica, keyed by its constraint."""

    def __init__(self, replicas: Any, retries: int = 1, request_timeout: float | None = None,
                 max_body_bytes: int | None = MAX_BODY_BYTES) -> None:
        self.replicas = replicas
        self.retries = retries
        self.max_body_bytes = max_body_bytes
        self.timeout = None if request_timeout is None else request_timeout + GATEWAY_TIMEOUT_MARGIN

    def __serve_build_asgi_app__(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route

        async def replica(_: Any) -> Any:
            from starlette.responses import JSONResponse

            return JSONResponse(await self.replicas.replica_stats.remote())

        async def forward(request: Any) -> Any:
            return await self.forward(request)

        methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
        app = Starlette(routes=[Route("/ray/replica", replica, methods=["GET"]), Route("/{path:path}", forward, methods=methods)])
        # the body is buffered here to key the request: the server's own cap (413) applies before that,
        # so a huge body costs the gateway at most max_body_bytes (the replica checks the API key)
        return Guard(app, api_key=None, max_body_bytes=self.max_body_bytes)

    async def forward(self, request: Any) -> Any:
        """Send ``request`` to a replica (retried once if the replica dies before answering)."""
        from ray import exceptions as ray_errors
        from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
        from starlette.responses import StreamingResponse

        body = await request.body()
        path = _app_path(request.scope)
        key = constraint_key(body) if request.method == "POST" else ""
        headers = [(k, v) for k, v in request.headers.raw if k.lower() not in (b"host", b"content-length")]
        headers.append((b"content-length", str(len(body)).encode()))
        query = request.url.query.encode()
        for attempt in range(self.retries + 1):
            handle = self.replicas.options(stream=True, multiplexed_model_id=key)
            stream = handle.forward.remote(request.method, path, query, headers, body)
            try:
                start = await asyncio.wait_for(stream.__anext__(), timeout=self.timeout)
            except BackPressureError:
                return _error(503, "every replica is busy and the queue for them is full; retry later", "all_replicas_busy")
            except asyncio.TimeoutError:
                stream.cancel()
                return _error(504, f"no replica answered within {self.timeout:.0f} s", "timeout")
            except (ray_errors.RayActorError, ray_errors.ActorUnavailableError, DeploymentUnavailableError) as exc:
                logging.getLogger("ray.serve").warning("replica failed under a request (attempt %d of %d): %s", attempt + 1, self.retries + 1, type(exc).__name__)
                if attempt < self.retries:
                    continue
                return _error(503, "the replica serving this request failed; retry (Serve is replacing it)", "replica_failed")
            except StopAsyncIteration:
                return _error(502, "the replica closed the response without answering", "replica_failed")
            headers_out = _header_dict(start["headers"])
            headers_out[ATTEMPTS_HEADER] = str(attempt + 1)
            return StreamingResponse(_relay(stream), status_code=start["status"], headers=headers_out)
        raise AssertionError("unreachable")


def _app_path(scope: dict) -> str:
    """The request's path below the application's route prefix (ASGI's ``path`` includes ``root_path``)."""
    path, root = scope.get("path", "/"), scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path or "/"


def _header_dict(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k.lower() != b"content-length"}


async def _relay(stream: Any) -> AsyncIterator[bytes]:
    """The replica's body chunks; a replica that dies mid-body ends a stream with an error event."""
    from ray import exceptions as ray_errors

    try:
        async for chunk in stream:
            yield chunk
    except (ray_errors.RayActorError, ray_errors.ActorUnavailableError):
        error = APIError(503, "the replica serving this stream failed mid-response; retry", type=SERVER, code="replica_failed")
        yield b"data: " + error.to_json() + b"\n\n"
    finally:
        stream.cancel()


def build_app(replica: ReplicaOptions, deploy: RayServeOptions | None = None) -> Any:
    """The Serve application (``serve.run(build_app(...))``): the gateway bound to the model replicas."""
    _, serve = import_ray_serve()
    deploy = deploy or RayServeOptions()
    replicas = serve.deployment(replica_class(deploy.max_constraints_per_replica), name="ConstrainedSpecReplica", **deploy.replica_deployment_options())
    gateway = serve.deployment(serve.ingress()(ConstrainedSpecGateway), name="ConstrainedSpecGateway",
                               ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
    return gateway.bind(replicas.bind(replica, deploy.max_constraints_per_replica), deploy.retries, replica.request_timeout(),
                        replica.app_options.get("max_body_bytes", MAX_BODY_BYTES))


def app_builder(args: dict[str, Any]) -> Any:
    """The ``import_path`` of a ``serve deploy`` config (``constrained_spec.serving.ray_app:app_builder``):
    ``args`` holds ``replica`` (ReplicaOptions fields) and ``deploy`` (RayServeOptions fields)."""
    known = {"replica", "deploy"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ConfigError(f"unknown args {unknown}; expected 'replica' and 'deploy'")
    return build_app(ReplicaOptions(**args.get("replica", {})), RayServeOptions(**args.get("deploy", {})))

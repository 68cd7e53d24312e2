"""``GET /metrics``: the server's counters in Prometheus' text format (prometheus-client).

Each app has its own :class:`~prometheus_client.CollectorRegistry` (never the process-wide one),
so many apps can live in one process. What it exposes (all names prefixed ``constrained_spec_``):

* ``requests_running`` / ``requests_waiting`` (gauges), ``batch_slots`` (generations at once);
* ``requests_total{status}``: chat-completion requests by HTTP status (401, 408, 413, 429 and
  504 included; a client that left before any answer, mid-body included, is a 499); ``generations_total{outcome}``: generations by how they ended (``stop``, ``length``,
  ``cancelled``, ``timeout``, ``rejected``, ``error``);
* ``request_duration_seconds`` (histogram): a chat completion from its first byte in to its last
  byte out (a stream's whole length);
* ``generated_tokens_total`` (tokens committed, counted as they are), ``generation_tokens_per_second``
  (those of the last ``window`` seconds), ``drafted_tokens_total`` / ``accepted_tokens_total`` of
  finished generations and their ratio ``acceptance_rate``;
* ``compile_duration_seconds`` (histogram): each request's constraint compile, waiting in the
  compile queue and compile-cache hits included (:mod:`.compiles`);
* with continuous batching, read off the coordinator at scrape time: ``batch_rows_per_forward``
  (histogram), ``batch_active_rows``, ``batch_rounds_total``, ``batch_forward_seconds_total``,
  ``prefill_seconds_total``, ``prefill_tokens_total``, ``prefix_cache_reused_tokens_total``,
  ``prefix_cache_hits_total{model}`` / ``prefix_cache_misses_total{model}``,
  ``prefix_cache_bytes{model}`` and ``kv_cache_bytes`` (the preallocated rows).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Iterator

from constrained_spec.serving.scheduler import Scheduler

__all__ = ["CHAT_PATH", "MetricsMiddleware", "ServerMetrics", "install_metrics"]

log = logging.getLogger(__name__)

CHAT_PATH = "/v1/chat/completions"
PREFIX = "constrained_spec_"
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
COMPILE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def row_buckets(slots: int) -> list[int]:
    """Upper bounds of the rows-per-forward histogram: every count up to 16, then powers of two."""
    bounds = list(range(1, min(slots, 16) + 1))
    b = 32
    while bounds[-1] < slots:
        bounds.append(min(b, slots))
        b *= 2
    return bounds


class ServerMetrics:
    """The counters of one app, in their own registry; the scheduler's observer
    (:class:`~constrained_spec.serving.scheduler.GenerationObserver`)."""

    def __init__(self, scheduler: Scheduler, window: float = 10.0) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.scheduler = scheduler
        self.window = window
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter(PREFIX + "requests", "Chat-completion requests by HTTP status.", ["status"], registry=r)
        self.generations = Counter(PREFIX + "generations", "Generations by how they ended.", ["outcome"], registry=r)
        self.latency = Histogram(PREFIX + "request_duration_seconds", "Chat-completion latency, first byte in to last byte out.",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.compile_seconds = Histogram(PREFIX + "compile_duration_seconds", "Constraint compile time per request (compile-queue waits and cache hits included).",
                                         buckets=COMPILE_BUCKETS, registry=r)
        self.generated = Counter(PREFIX + "generated_tokens", "Tokens committed by generations, counted as they are.", registry=r)
        self.drafted = Counter(PREFIX + "drafted_tokens", "Draft tokens proposed by finished generations.", registry=r)
        self.accepted = Counter(PREFIX + "accepted_tokens", "Draft tokens accepted by finished generations.", registry=r)
        self._lock = threading.Lock()
        self._recent: deque[tuple[float, int]] = deque()  # (monotonic time, tokens) of the last window
        self._drafted = self._accepted = 0
        self._started = time.monotonic()
        r.register(_StateCollector(self))

    # -- the scheduler's observer -----------------------------------------------------------
    def compiled(self, seconds: float) -> None:
        self.compile_seconds.observe(seconds)

    def tokens(self, count: int) -> None:
        if count <= 0:
            return
        self.generated.inc(count)
        now = time.monotonic()
        with self._lock:
            self._recent.append((now, count))
            self._prune(now)

    def finished(self, outcome: str, result: Any) -> None:
        self.generations.labels(outcome=outcome).inc()
        stats = getattr(result, "stats", None)
        drafted, accepted = int(getattr(stats, "drafted_tokens", 0) or 0), int(getattr(stats, "accepted_tokens", 0) or 0)
        if drafted > 0:
            self.drafted.inc(drafted)
            self.accepted.inc(accepted)
            with self._lock:
                self._drafted += drafted
                self._accepted += accepted

    # -- read at scrape time ----------------------------------------------------------------
    def _prune(self, now: float) -> None:
        while self._recent and self._recent[0][0] < now - self.window:
            self._recent.popleft()

    def tokens_per_second(self) -> float:
        """Tokens committed over the last ``window`` seconds (or since start, if sooner), per second."""
        now = time.monotonic()
        with self._lock:
            self._prune(now)
            total = sum(n for _, n in self._recent)
        span = min(self.window, now - self._started)
        return total / span if span > 0 else 0.0

    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens over the finished generations (0 before any draft)."""
        with self._lock:
            return self._accepted / self._drafted if self._drafted else 0.0

    def request_done(self, status: int, seconds: float) -> None:
        self.requests.labels(status=str(status)).inc()
        self.latency.observe(seconds)

    def render(self) -> bytes:
        """The exposition text."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _StateCollector:
    """Gauges and the batch coordinator's counters, read when scraped."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        m, queue = self.metrics, self.metrics.scheduler.queue
        yield GaugeMetricFamily(PREFIX + "requests_running", "Generations running now.", value=queue.running)
        yield GaugeMetricFamily(PREFIX + "requests_waiting", "Requests admitted, waiting for a worker.", value=queue.waiting)
        yield GaugeMetricFamily(PREFIX + "batch_slots", "Generations that can run at once.", value=queue.workers)
        yield GaugeMetricFamily(PREFIX + "generation_tokens_per_second", f"Tokens committed per second over the last {m.window:g} s.",
                                value=m.tokens_per_second())
        yield GaugeMetricFamily(PREFIX + "acceptance_rate", "Accepted / drafted tokens of the finished generations.", value=m.acceptance_rate())
        batch = getattr(m.scheduler.generator, "batch", None)
        if batch is None:
            return
        stats = batch.metrics.snapshot()
        hist: dict[int, int] = stats["rows_per_forward"]
        buckets = [(floatToGoString(bound), sum(n for rows, n in hist.items() if rows <= bound)) for bound in row_buckets(batch.slots)]
        buckets.append(("+Inf", sum(hist.values())))
        yield HistogramMetricFamily(PREFIX + "batch_rows_per_forward", "Rows per batched model forward.", buckets=buckets,
                                    sum_value=sum(rows * n for rows, n in hist.items()))
        yield GaugeMetricFamily(PREFIX + "batch_active_rows", "Rows holding a batch slot now.", value=batch.active_rows)
        for name, doc, key in (("batch_rounds", "Batch rounds run.", "rounds"),
                               ("batch_forward_seconds", "Seconds in batched decode forwards.", "forward_seconds"),
                               ("prefill_seconds", "Seconds prefilling prompts (chunks and prefix-cache copies).", "prefill_seconds"),
                               ("prefill_tokens", "Prompt tokens computed by prefill.", "prefill_tokens"),
                               ("prefix_cache_reused_tokens", "Prompt tokens copied from the prefix cache instead of computed.", "reused_tokens")):
            yield CounterMetricFamily(PREFIX + name, doc, value=stats[key])
        hits = CounterMetricFamily(PREFIX + "prefix_cache_hits", "Prefix-cache lookups that found a prefix.", labels=["model"])
        misses = CounterMetricFamily(PREFIX + "prefix_cache_misses", "Prefix-cache lookups that found none.", labels=["model"])
        size = GaugeMetricFamily(PREFIX + "prefix_cache_bytes", "Bytes held by the prefix cache.", labels=["model"])
        for name, cache in batch.prefixes.items():
            hits.add_metric([name], cache.hits)
            misses.add_metric([name], cache.misses)
            size.add_metric([name], cache.bytes)
        yield from (hits, misses, size)
        yield GaugeMetricFamily(PREFIX + "kv_cache_bytes", "Bytes of the preallocated batch KV caches.",
                                value=sum(int(getattr(model, "cache_bytes", 0)) for model in batch.models.values()))


class MetricsMiddleware:
    """ASGI middleware: counts chat-completion requests by status and times them (a streamed
    reply until its last byte)."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != CHAT_PATH:
            await self.app(scope, receive, send)
            return
        start, status, left = time.perf_counter(), 0, False

        async def send_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        async def watch_receive() -> dict:
            nonlocal left
            message = await receive()
            if message["type"] == "http.disconnect":
                left = True
            return message

        try:
            await self.app(scope, watch_receive, send_status)
        finally:  # no answer sent: the client left first (499, nginx's "client closed request"), else a failure (500)
            self.metrics.request_done(status or (499 if left else 500), time.perf_counter() - start)


def install_metrics(app: Any, scheduler: Scheduler) -> ServerMetrics | None:
    """Add ``GET /metrics`` and the request counters to ``app``; the metrics become the scheduler's
    observer. None (and no route) where prometheus-client is not installed."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST
    except ImportError:  # pragma: no cover - it comes with the server extra
        log.warning("prometheus-client is not installed: no /metrics (pip install 'constrained-spec[server]')")
        return None
    from starlette.responses import Response

    metrics = ServerMetrics(scheduler)
    scheduler.observer = metrics
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.get("/metrics")
    async def prometheus_metrics() -> Any:
        """Prometheus text exposition of this server's counters (see :mod:`constrained_spec.serving.metrics`).

        Behind the API key like every route but ``/health``: give Prometheus the key
        (``authorization: {credentials: KEY}`` in the scrape config)."""
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    app.state.metrics = metrics
    return metrics

"""``ServerConfig``: how :func:`~constrained_spec.serving.create_app` serves a generator (its id,
admission bounds, limits, timeouts), one frozen dataclass shared by the CLI, Ray replicas, the
benchmarks and tests."""

from __future__ import annotations

from dataclasses import dataclass

from constrained_spec.serving.compiles import DEFAULT_COMPILE_BUDGET, DEFAULT_MAX_COMPILE_QUEUE, DEFAULT_MAX_COMPILES_PER_CLIENT
from constrained_spec.serving.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_MAX_BODY_READERS,
    DEFAULT_MAX_QUEUE,
    DEFAULT_REQUEST_TIMEOUT,
    MAX_BODY_BYTES,
    MAX_GRAMMAR_CHARS,
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_PROPERTIES,
)
from constrained_spec.serving.memory import DEFAULT_MMAP_THRESHOLD, DEFAULT_TRIM_INTERVAL

__all__ = ["DEFAULT_SHUTDOWN_TIMEOUT", "ServerConfig"]

#: seconds the requests in flight at shutdown may take to finish before they are cancelled (below
#: the 30 s that container runtimes give between SIGTERM and SIGKILL)
DEFAULT_SHUTDOWN_TIMEOUT = 20.0


@dataclass(frozen=True)
class ServerConfig:
    """How the app serves its generator (every field has the ``serve`` command's default).

    ``model_name``: the id ``/v1/models`` reports and requests must name (None: the target model's
    name, a local path by its last component).
    ``max_queue``: requests allowed to wait beyond the running ones (more get 429); as many run at
    once as ``generator.batch`` has slots (continuous batching), else one.
    ``request_timeout``: seconds a request may take, compiling and waiting included (504 after).
    ``max_tokens_limit``: the largest ``max_tokens`` accepted (default: no limit).
    ``max_particles``: the largest SMC ``particles`` accepted, 400 beyond (default: the library's
    own bound; a request's SMC work grows with particles times prompt length).
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
    ``mmap_threshold``: bytes from which a block gets its own mapping, pinned for the process when
    the app starts so the arenas do not fragment under load (:mod:`.memory`; None: glibc's moving
    default).
    ``shutdown_timeout``: seconds the requests in flight at SIGTERM (or Ctrl-C) may take to finish;
    those still running then are cancelled, stop at their next step and free their batch rows
    (None: wait for them however long they take).
    """

    model_name: str | None = None
    max_queue: int = DEFAULT_MAX_QUEUE
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT
    max_tokens_limit: int | None = None
    max_particles: int | None = None
    api_key: str | None = None
    max_body_bytes: int | None = MAX_BODY_BYTES
    max_schema_chars: int | None = MAX_SCHEMA_CHARS
    compile_threads: int = 2
    max_grammar_chars: int | None = MAX_GRAMMAR_CHARS
    max_compile_queue: int = DEFAULT_MAX_COMPILE_QUEUE
    max_compiles_per_client: int | None = DEFAULT_MAX_COMPILES_PER_CLIENT
    compile_budget: float | None = DEFAULT_COMPILE_BUDGET
    max_schema_properties: int | None = MAX_SCHEMA_PROPERTIES
    body_timeout: float | None = DEFAULT_BODY_TIMEOUT
    max_body_readers: int | None = DEFAULT_MAX_BODY_READERS
    trim_interval: float | None = DEFAULT_TRIM_INTERVAL
    mmap_threshold: int | None = DEFAULT_MMAP_THRESHOLD
    shutdown_timeout: float | None = DEFAULT_SHUTDOWN_TIMEOUT

"""Generations on a pool of workers: the bounded wait queue, compiles off the workers, timeouts
and cancellation (a timed-out request, or one whose client went away).

A Generator without a batch holds one KV cache, so its generations run one by one on a single
worker thread. With continuous batching (``generator.batch``, ``max_batch_size > 1``) there are as
many workers as batch slots: that many ``generator.run`` calls run at once and decode together as
rows of one batch. Requests beyond the running ones wait in a queue of ``max_queue``. Constraints
compile through their own bounded queue on their own threads (:mod:`.compiles`), so a slow compile
holds no other request, and a cached one never waits. A timed-out request that
has not started is dropped; one already decoding stops after its current decode step (the
``on_tokens`` hook raises :class:`Cancelled`), which frees its batch row.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Coroutine, Protocol

from constrained_spec.errors import TokenBudgetExceeded
from constrained_spec.serving.compiles import CompileAdmission, constraint_key
from constrained_spec.serving.refusals import Cancelled, QueueFull, QueueTimeout

__all__ = ["Cancelled", "GenerationObserver", "GenerationQueue", "QueueFull", "QueueTimeout", "Scheduler", "batch_slots", "outcome_of",
           "watch_disconnect"]


class GenerationQueue:
    """Runs up to ``workers`` jobs at once on worker threads, with a bounded wait queue and a timeout.

    ``max_queue`` requests may wait beyond the ``workers`` running ones; more are refused with
    :class:`QueueFull`. ``timeout`` (seconds, None for none) covers waiting plus running; a job
    that times out before it starts is skipped; for a running one ``cancel`` is set (a job
    that checks it, as the server's ``on_tokens`` hook does, stops early) and its result is
    discarded.
    """

    def __init__(self, max_queue: int = 16, timeout: float | None = 600.0, workers: int = 1) -> None:
        if max_queue < 0:
            raise ValueError("max_queue must be >= 0")
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.max_queue = max_queue
        self.timeout = timeout
        self.workers = workers
        self.pending = 0  # running + waiting (including timed-out jobs not yet dropped or still stopping)
        self.running = 0  # jobs on a worker now
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified as each job ends
        self._live: dict[object, threading.Event] = {}  # the cancel events of the jobs admitted and not ended
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="constrained-spec-gen")

    @property
    def waiting(self) -> int:
        """Jobs admitted that no worker has started yet."""
        with self._lock:
            return max(self.pending - self.running, 0)

    async def run(self, fn: Callable[[], Any], cancel: threading.Event | None = None, timeout: float | None = None) -> Any:
        """Run ``fn`` on a worker; ``timeout`` (default: the queue's) in seconds from now."""
        abandoned = cancel if cancel is not None else threading.Event()
        token = object()  # this job's key in _live
        with self._lock:
            if self.pending >= self.workers + self.max_queue:
                raise QueueFull(self.max_queue)
            self.pending += 1
            self._live[token] = abandoned

        def job() -> Any:
            with self._lock:
                self.running += 1
            try:
                if abandoned.is_set():
                    return None
                return fn()
            finally:
                with self._lock:
                    self.running -= 1
                    self.pending -= 1
                    self._live.pop(token, None)
                    self._idle.notify_all()

        def dropped(f: asyncio.Future) -> None:  # never started (the executor shut down): no job() to count it out
            if f.cancelled():
                with self._lock:
                    if self._live.pop(token, None) is not None:
                        self.pending -= 1
                        self._idle.notify_all()
            else:
                f.exception()  # a discarded job's error is not "never retrieved"

        future = asyncio.get_running_loop().run_in_executor(self._executor, job)
        future.add_done_callback(dropped)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout if timeout is None else timeout)
        except asyncio.TimeoutError as exc:
            abandoned.set()
            raise QueueTimeout() from exc
        except BaseException:
            abandoned.set()  # the request was cancelled (its client left, or the server is shutting down): the job stops at its next step
            raise

    def shutdown(self, drain: float = 10.0) -> bool:
        """Stop: jobs not started are dropped, running ones are cancelled (they stop at their next
        step, and free their batch rows); wait up to ``drain`` seconds for them to end. True when
        none runs any more."""
        with self._lock:
            for event in self._live.values():
                event.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._idle:
            return self._idle.wait_for(lambda: self.running == 0, drain)


def batch_slots(generator: Any) -> int:
    """Generations ``generator`` can run at once: its batch slots (continuous batching), else 1."""
    batch = getattr(generator, "batch", None)
    return max(int(getattr(batch, "slots", 1)), 1) if batch is not None else 1


class GenerationObserver(Protocol):
    """What the scheduler reports (the server's metrics): compile times, tokens as they are
    committed, and how each generation ended."""

    def compiled(self, seconds: float) -> None: ...

    def tokens(self, count: int) -> None: ...

    def finished(self, outcome: str, result: Any) -> None: ...


def outcome_of(exc: BaseException | None) -> str:
    """How a generation ended: ``stop`` (a result), ``length`` (its token budget ran out),
    ``cancelled``, ``timeout``, ``rejected`` (queue full) or ``error``."""
    if exc is None:
        return "stop"
    kinds: tuple[tuple[type[BaseException], str], ...] = (
        (TokenBudgetExceeded, "length"), (Cancelled, "cancelled"), (asyncio.CancelledError, "cancelled"), (QueueTimeout, "timeout"),
        (QueueFull, "rejected"))
    for kind, name in kinds:
        if isinstance(exc, kind):
            return name
    return "error"


class Scheduler:
    """The generator behind one :class:`GenerationQueue` (one worker per batch slot), with a pool
    of compile threads.

    ``request_timeout``: seconds a request may take, compiling and waiting included.
    ``observer``: told about compiles, tokens and finished generations (None: nobody).
    """

    def __init__(self, generator: Any, *, max_queue: int, request_timeout: float | None, compile_threads: int = 2,
                 observer: GenerationObserver | None = None, compiles: CompileAdmission | None = None) -> None:
        self.generator = generator
        self.request_timeout = request_timeout
        self.observer = observer
        self.queue = GenerationQueue(max_queue=max_queue, timeout=request_timeout, workers=batch_slots(generator))
        self.compiles = compiles if compiles is not None else CompileAdmission(threads=max(compile_threads, 1))
        self._tasks: set[asyncio.Future] = set()  # background generations (streams): kept referenced until done

    def deadline(self) -> float | None:
        """The monotonic time a request arriving now must finish by (None: no timeout)."""
        return None if self.request_timeout is None else time.monotonic() + self.request_timeout

    @staticmethod
    def remaining(deadline: float | None) -> float | None:
        """Seconds left until ``deadline`` (never negative; None: no timeout)."""
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    async def compile(self, output_type: Any, deadline: float | None, cancel: threading.Event | None = None,
                      client: str | None = None) -> Any:
        """``output_type`` compiled through the compile queue (:class:`CompileAdmission`: a cached
        constraint at once, else on a compile thread, off the workers): the compiled constraint
        (``generator.compile``'s :class:`~constrained_spec.api.CompiledConstraint`), which the request
        then hands to :meth:`generate` as its output type, so ``generator.run`` compiles nothing; the
        output type itself where the generator cannot compile ahead. :class:`QueueTimeout` past
        ``deadline``, :class:`Cancelled` once ``cancel`` is set (the compile stops if no other request
        waits for it); ``client`` (its address) is counted against the compiles one client may wait on."""
        compile_ = getattr(self.generator, "compile", None)
        if not callable(compile_):
            return output_type
        t0 = time.perf_counter()
        compiled = await self.compiles.compile(constraint_key(output_type), lambda: compile_(output_type), cancel, deadline, client)
        if self.observer is not None:
            self.observer.compiled(time.perf_counter() - t0)
        return compiled

    async def generate(self, prompt: Any, output_type: Any, options: dict[str, Any], cancel: threading.Event,
                       timeout: float | None, on_tokens: Callable[[list[int]], None] | None = None) -> Any:
        """``generator.run(prompt, output_type, **options)`` on a worker, once the queue reaches it
        (``output_type``: what :meth:`compile` returned, the compiled constraint where there is one).

        Each step's tokens go to ``on_tokens`` (on the worker thread); once ``cancel`` is set the
        generation stops at its next step (an SMC request at its particles' next round) and this
        raises :class:`Cancelled`.
        """
        observer = self.observer

        def check() -> None:
            if cancel.is_set():
                raise Cancelled()

        def hook(ids: list[int]) -> None:
            check()
            if observer is not None:
                observer.tokens(len(ids))
            if on_tokens is not None:
                on_tokens(ids)

        try:
            result = await self.queue.run(lambda: self.generator.run(prompt, output_type, on_tokens=hook, on_step=check, **options), cancel, timeout)
            if result is None and cancel.is_set():
                raise Cancelled()
        except BaseException as exc:
            if observer is not None:
                observer.finished(outcome_of(exc), None)
            raise
        if observer is not None:
            observer.finished("stop", result)
        return result

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background (a stream's generation), referenced until it ends."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def shutdown(self, drain: float = 10.0) -> bool:
        """Cancel what runs and wait up to ``drain`` seconds for it to end (:meth:`GenerationQueue.shutdown`);
        stop the compiles. True when no generation runs any more."""
        ended = self.queue.shutdown(drain)
        self.compiles.shutdown()
        return ended


async def watch_disconnect(request: Any, cancel: threading.Event, every: float = 0.05) -> None:
    """Set ``cancel`` once the client of ``request`` has gone away."""
    while not cancel.is_set():
        if await request.is_disconnected():
            cancel.set()
            return
        await asyncio.sleep(every)

"""Admitted compiles: a bounded compile queue, a compile budget, a cache in front, cancellation.

A request's constraint compiles on one of ``threads`` compile threads (off the generation
workers). What :class:`CompileAdmission` adds:

* a cache in front (:data:`CACHE_SIZE` entries, LRU) of the compiled constraints, keyed by the
  request's constraint as given: a constraint compiled before is answered at once, never waiting
  behind compiles;
* one compile per constraint in flight: requests for the same one wait on the same compile;
* a bounded queue: beyond the running compiles at most ``max_waiting`` wait, more are refused
  (:class:`~.refusals.CompileQueueFull`, 429 with ``Retry-After``);
* a bound per client: one client (by address) may have started ``per_client`` compiles that
  have not ended (:class:`~.refusals.ClientCompilesFull`, 429; joining a compile in flight does
  not count), so that one client cannot take the whole queue; with the budget, that bounds the
  compile time a client can cost at once;
* a budget: a compile that runs longer than ``budget`` seconds is stopped
  (:class:`CompileBudgetExceeded`, a :class:`~constrained_spec.errors.CompileLimitError`: 400
  ``compile_limit``);
* cancellation: a compile whose requests have all gone (client disconnected, request timed out)
  leaves the queue if it has not started, and is stopped if it has.

Stopping a running compile raises :class:`CompileInterrupted` in its thread (CPython's
``PyThreadState_SetAsyncExc``): it lands at the next Python bytecode, so the schema compiler (pure
Python, where the time goes) stops within moments; a call into native code (a DFA build, which
has its own ``compile_timeout``) finishes that call first. It is raised only while that compile's
code runs on the thread, never into the pool's own code. Where it lands in code that swallows it
(CPython ignores an exception raised in a weakref or ``__del__`` callback that garbage collection
runs on that thread, seen in the soak), it is raised again every ``REINTERRUPT_S`` while the
compile still runs, up to ``REINTERRUPT_TRIES`` times. The thread's slot is free again once the
compile has stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from constrained_spec.errors import CompileLimitError
from constrained_spec.serving.refusals import Cancelled, ClientCompilesFull, CompileQueueFull, QueueTimeout

__all__ = ["CACHE_SIZE", "DEFAULT_COMPILE_BUDGET", "DEFAULT_MAX_COMPILE_QUEUE", "DEFAULT_MAX_COMPILES_PER_CLIENT", "CompileAdmission", "CompileBudgetExceeded",
           "CompileInterrupted", "constraint_key"]

#: compiled constraints the server keeps in front of the compile queue
CACHE_SIZE = 64
#: seconds one compile may run before it is stopped (400 compile_limit)
DEFAULT_COMPILE_BUDGET = 30.0
#: compiles that may wait beyond the running ones (429 beyond)
DEFAULT_MAX_COMPILE_QUEUE = 8
#: requests of one client that may wait on compiles at once (429 beyond)
DEFAULT_MAX_COMPILES_PER_CLIENT = 4
#: how often a waiting request looks at its cancel flag and deadline
POLL_SECONDS = 0.05


#: seconds between raising :class:`CompileInterrupted` again into a compile that has not stopped
REINTERRUPT_S = 0.25
#: how many times it is raised again (a compile's own time budget bounds it after that)
REINTERRUPT_TRIES = 40


class CompileInterrupted(BaseException):
    """Raised inside a compile thread to stop it (a BaseException, so that no ``except Exception``
    in the compiler turns it into a grammar error)."""


class CompileBudgetExceeded(CompileLimitError):
    """A compile ran past the server's compile budget and was stopped."""

    def __init__(self, budget: float) -> None:
        super().__init__(f"compiling it took longer than this server's compile budget of {budget:g} s (compile_budget); "
                         "simplify the schema or grammar")
        self.budget = budget


def _raise_in_thread(thread_id: int, exc_type: type[BaseException] | None) -> None:
    """Schedule ``exc_type`` in thread ``thread_id`` (None: take back one scheduled there)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type else None)


def constraint_key(output_type: Any) -> str | None:
    """The cache key of a request's constraint (its type and JSON, key order kept: it orders the
    output), or None where it has none (then it is compiled every time)."""
    try:
        if isinstance(output_type, (dict, list, bool)):
            return "json:" + json.dumps(output_type, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        if hasattr(output_type, "__dataclass_fields__"):  # Regex, CFG: frozen dataclasses of strings
            return f"{type(output_type).__name__}:{output_type!r}"
    except (TypeError, ValueError):
        return None
    return None


@dataclass(eq=False)
class _Job:
    key: str | None
    fn: Callable[[], Any]
    future: asyncio.Future
    client: str | None = None  # who started it: counted against per_client until it ends
    waiters: int = 0
    state: str = "waiting"  # waiting -> running -> done (or dropped, never started)
    thread_id: int = 0
    interrupted: str | None = None  # "budget" or "abandoned", once it was stopped
    timer: asyncio.TimerHandle | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class CompileAdmission:
    """The compile queue of one app (see the module's docstring). Its methods run on the event loop."""

    def __init__(self, threads: int = 2, max_waiting: int = DEFAULT_MAX_COMPILE_QUEUE, budget: float | None = DEFAULT_COMPILE_BUDGET,
                 cache_size: int = CACHE_SIZE, per_client: int | None = DEFAULT_MAX_COMPILES_PER_CLIENT) -> None:
        if threads < 1 or max_waiting < 0:
            raise ValueError("threads must be >= 1 and max_waiting >= 0")
        self.threads = threads
        self.max_waiting = max_waiting
        self.budget = budget
        self.per_client = per_client
        self.by_client: dict[str, int] = {}  # compiles each client started that have not ended
        self.cache_size = cache_size
        self.cache: OrderedDict[str, Any] = OrderedDict()  # least recently used first; touched on the loop only
        self.running = 0  # compiles on a thread now (changed under _lock)
        self._lock = threading.Lock()
        self._waiting: deque[_Job] = deque()
        self._jobs: dict[str, _Job] = {}
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="constrained-spec-compile")

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def compile(self, key: str | None, fn: Callable[[], Any], cancel: threading.Event | None = None,
                      deadline: float | None = None, client: str | None = None) -> Any:
        """``fn()`` (a compile) run on a compile thread, or its cached result under ``key``.

        :class:`CompileQueueFull` when the queue is full, :class:`ClientCompilesFull` when
        ``client`` has started ``per_client`` compiles that have not ended, :class:`Cancelled` once ``cancel`` is
        set, :class:`QueueTimeout` past ``deadline`` (``time.monotonic``), what ``fn`` raised,
        or :class:`CompileBudgetExceeded`."""
        if key is not None and key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        job = self._jobs.get(key) if key is not None else None
        if job is None:  # a new compile (joining one in flight costs nothing more)
            if client is not None and self.per_client is not None and self.by_client.get(client, 0) >= self.per_client:
                raise ClientCompilesFull(self.per_client)
            if self.running >= self.threads and len(self._waiting) >= self.max_waiting:
                raise CompileQueueFull(self.max_waiting)
            job = _Job(key, fn, asyncio.get_running_loop().create_future(), client=client)
            if client is not None:
                self.by_client[client] = self.by_client.get(client, 0) + 1
            job.future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even when nobody waits
            if key is not None:
                self._jobs[key] = job
            self._waiting.append(job)
            self._pump()
        job.waiters += 1
        try:
            while not job.future.done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise QueueTimeout()
                if cancel is not None and cancel.is_set():
                    raise Cancelled()
                await asyncio.wait({job.future}, timeout=POLL_SECONDS if left is None else min(POLL_SECONDS, left))
            return job.future.result()
        finally:
            job.waiters -= 1
            if job.waiters == 0 and not job.future.done():
                self._abandon(job)

    # -- on the event loop ------------------------------------------------------------------
    def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            with self._lock:
                if self.running >= self.threads:
                    return
                self.running += 1
            job = self._waiting.popleft()
            job.state = "running"
            if self.budget is not None:
                job.timer = loop.call_later(self.budget, self._interrupt, job, "budget")
            self._pool.submit(self._work, job, loop)

    def _abandon(self, job: _Job) -> None:
        if job.state == "waiting":
            self._waiting.remove(job)
            job.state = "dropped"
            self._forget(job)
            self._release_client(job)
            job.future.cancel()
        else:
            self._forget(job)  # a later request for the same constraint starts a compile of its own
            self._interrupt(job, "abandoned")

    def _interrupt(self, job: _Job, why: str) -> None:
        with job.lock:
            if job.state != "running" or job.interrupted is not None:
                return
            job.interrupted = why
            if job.thread_id:  # on its thread: stop it there; else it sees the flag as it starts
                _raise_in_thread(job.thread_id, CompileInterrupted)
        self._interrupt_again_later(job, REINTERRUPT_TRIES)

    def _interrupt_again_later(self, job: _Job, tries: int) -> None:
        if tries <= 0:
            return
        with contextlib.suppress(RuntimeError):  # no running loop (shut down): nothing to repeat
            asyncio.get_running_loop().call_later(REINTERRUPT_S, self._interrupt_again, job, tries)

    def _interrupt_again(self, job: _Job, tries: int) -> None:
        """An interrupt a callback swallowed: raised again while the compile still runs."""
        with job.lock:
            if job.state != "running" or not job.thread_id:
                return
            _raise_in_thread(job.thread_id, CompileInterrupted)
        if tries > 1:
            self._interrupt_again_later(job, tries - 1)

    def _finish(self, job: _Job, result: Any, exc: BaseException | None) -> None:
        if job.timer is not None:
            job.timer.cancel()
        self._forget(job)
        self._release_client(job)
        if job.future.done():
            pass
        elif exc is not None and job.interrupted == "budget":
            job.future.set_exception(CompileBudgetExceeded(float(self.budget or 0)))
        elif exc is None:  # a compile that finished as it was stopped counts too
            if job.key is not None:
                self.cache[job.key] = result
                while len(self.cache) > self.cache_size:
                    self.cache.popitem(last=False)
            job.future.set_result(result)
        elif isinstance(exc, CompileInterrupted):
            job.future.set_exception(Cancelled())
        else:
            job.future.set_exception(exc)
        self._pump()

    def _forget(self, job: _Job) -> None:
        if job.key is not None and self._jobs.get(job.key) is job:
            del self._jobs[job.key]

    def _release_client(self, job: _Job) -> None:
        if job.client is not None:
            left = self.by_client.pop(job.client, 1) - 1
            if left > 0:
                self.by_client[job.client] = left

    # -- on a compile thread ----------------------------------------------------------------
    def _work(self, job: _Job, loop: asyncio.AbstractEventLoop) -> None:
        result: Any = None
        exc: BaseException | None = None
        try:
            try:
                with job.lock:
                    job.thread_id = threading.get_ident()
                    stopped = job.interrupted is not None
                if stopped:  # abandoned or out of budget before it started here
                    raise CompileInterrupted()
                result = job.fn()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting requests
                exc = e
            finally:
                with job.lock:
                    if job.interrupted is not None:
                        _raise_in_thread(job.thread_id, None)  # one not yet landed: taken back
                    job.state = "done"
        except CompileInterrupted as e:  # landed in the finally above, before its lock
            exc = e
            job.state = "done"
        with self._lock:
            self.running -= 1  # here, not on the loop: the slot comes back even if the loop has gone
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(self._finish, job, result, exc)

    def shutdown(self) -> None:
        for job in list(self._waiting):
            job.future.cancel()
        self._waiting.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

"""Memory given back while the server is idle.

A request's peak (a large compile, a long prompt's activations, a big body) is freed by Python,
but glibc's allocator keeps freed pages in its arenas (one per thread that allocated, up to
8 x cores): the resident set stays at the high-water mark although nothing holds it.
:class:`IdleTrimmer` calls ``malloc_trim(0)`` (glibc) from a background thread once the server
has been idle for ``interval`` seconds after serving something, and under steady load at least
every ``BUSY_TRIM_EVERY`` intervals, which returns those pages to the system. Where the C library
is not glibc it does nothing.

:func:`pin_mmap_threshold` fixes glibc's mmap threshold (``mallopt(M_MMAP_THRESHOLD, ...)``).
By default glibc raises that threshold to the size of each large block freed (up to 32 MiB), so
after the first large frees, blocks of a few MiB (logits, activations, compile buffers) come from
the arenas and fragment them: under steady mixed traffic the resident set kept growing (+12 % from
minute 5 to 30 of the soak). With the threshold pinned at 128 KiB they are mapped and unmapped
on their own and the resident set stays flat (+1.8 %, ``docs/serving-admission.md``).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import time
from typing import Callable

__all__ = ["DEFAULT_MMAP_THRESHOLD", "DEFAULT_TRIM_INTERVAL", "IdleTrimmer", "pin_mmap_threshold", "trim_memory"]

#: seconds of idleness (after some work) before freed memory is given back
DEFAULT_TRIM_INTERVAL = 10.0
#: under steady load (never idle), freed memory is given back at least this often, in trim intervals
BUSY_TRIM_EVERY = 6
#: blocks at least this large get their own mapping, given back to the system when freed (glibc's
#: initial threshold, kept from moving up)
DEFAULT_MMAP_THRESHOLD = 128 * 1024
#: mallopt's parameter number for the mmap threshold (glibc's malloc.h)
M_MMAP_THRESHOLD = -3


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


@functools.lru_cache(maxsize=1)
def _mallopt() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def pin_mmap_threshold(threshold: int = DEFAULT_MMAP_THRESHOLD) -> bool:
    """Fix the allocator's mmap threshold at ``threshold`` bytes for this process (glibc
    ``mallopt(M_MMAP_THRESHOLD)``, which also stops it from moving); False where there is no such
    call or glibc refused the value."""
    mallopt = _mallopt()
    if mallopt is None or _malloc_trim() is None:  # mallopt alone is not proof of glibc
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, int(threshold)))


def trim_memory() -> bool:
    """Give the allocator's free pages back to the system (glibc ``malloc_trim(0)``); False where
    there is no such call."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class IdleTrimmer:
    """Runs :func:`trim_memory` once the server has been idle ``interval`` seconds since it last
    did something (or ``BUSY_TRIM_EVERY`` intervals after the last trim, under steady load).
    ``busy()`` says whether work is under way (requests, compiles); ``touch()`` marks work done."""

    def __init__(self, busy: Callable[[], bool], interval: float = DEFAULT_TRIM_INTERVAL) -> None:
        self.busy = busy
        self.interval = interval
        self.trims = 0
        self._last_work = time.monotonic()
        self._dirty = False
        self._last_trim = time.monotonic()
        self._task: asyncio.Task | None = None

    def touch(self) -> None:
        self._last_work = time.monotonic()
        self._dirty = True

    def start(self) -> None:
        if self._task is None and _malloc_trim() is not None:
            self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        tick = min(self.interval, 1.0)
        while True:
            await asyncio.sleep(tick)
            if self.busy():
                self.touch()
            now = time.monotonic()
            idle = now - self._last_work >= self.interval
            if self._dirty and (idle or now - self._last_trim >= BUSY_TRIM_EVERY * self.interval):
                self._dirty = False
                await asyncio.get_running_loop().run_in_executor(None, trim_memory)
                self._last_trim = time.monotonic()
                self.trims += 1

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

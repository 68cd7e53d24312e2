"""The cyclic garbage collector paused while a schema compiles.

A schema compile allocates hundreds of thousands of small containers (parsed regex nodes, memo
entries) that live until it ends and are freed by reference counting. CPython's cycle collector
walks them again and again while they grow: on the slowest schemas of the development splits
that was about a fifth of the compile (measured 2026-12-06, ``benchmarks/keyword_refusals.py``).
Pausing it for the compile is the remedy Mercurial and others use for bulk builds; what the
compile leaves as cyclic garbage (a few closures) is collected once the collector runs again.

The collector is process-wide state: the pause is counted, so concurrent and nested compiles
resume it only when the last one ends, and it is resumed only where it was running when the
first one began (a caller that turned it off keeps it off). A caller that calls ``gc.disable()``
while a compile runs sees it enabled again when the compile ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_lock = threading.Lock()
_holders = 0
_paused_by_us = False


@contextlib.contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Pause the cycle collector for the block (counted across threads and nesting)."""
    global _holders, _paused_by_us
    with _lock:
        if _holders == 0 and gc.isenabled():
            gc.disable()
            _paused_by_us = True
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _paused_by_us:
                _paused_by_us = False
                gc.enable()

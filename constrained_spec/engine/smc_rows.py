"""SMC particles as rows of the continuous batch (:class:`~constrained_spec.engine.batching.BatchCoordinator`).

:class:`ParticleRows` holds one SMC request's slots: each live particle decodes on its own slot's
row views (:class:`~constrained_spec.engine.batching.RowModel`), so in a round the engine steps of
every running particle run at once, one thread each, and their draft forwards, target forwards and
verifies are gathered into shared batched forwards (with whatever other requests' rows decode at
the time). The SMC round stays a barrier: the rows are parked between rounds (they keep their
slots and cache rows, and no forward waits for them), woken together for one step each, and the
decoder resamples and forks only once every step of the round has ended.

A fork copies the source slot's cache rows into a free slot of the request
(:meth:`BatchCoordinator.copy_row`: a copy of the keys and values up to the row's length in the
ragged cache; shared cells in llama.cpp's unified cache, ``llama_memory_seq_cp``); the rest of the
fork is the decoder's (``engine.smc``). A finished, dead or dropped particle's slot goes back to
the request's free slots, for the forks of the next resampling; all go back to the batch at the end.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from types import TracebackType
from typing import Callable, Sequence, TypeVar

from constrained_spec.engine.batching import BatchCoordinator, RowModel
from constrained_spec.models.protocol import SequenceModel

__all__ = ["ParticleRows"]

P = TypeVar("P")


class ParticleRows:
    """``particles`` slots of ``batch`` for one SMC request (taken as they free up: see
    :meth:`BatchCoordinator.reserve`), with the draft's rows where ``draft``; a context manager that
    hands them back on exit."""

    def __init__(self, batch: BatchCoordinator, particles: int, draft: bool, timeout: float | None = None) -> None:
        self.batch, self.draft = batch, draft
        self.slots = batch.reserve(particles, timeout)
        self._free = sorted(self.slots)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=particles, thread_name_prefix="constrained-spec-particle")

    def __enter__(self) -> ParticleRows:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the particles' threads; every slot back to the batch."""
        self._pool.shutdown(wait=True)
        slots, self.slots = self.slots, []
        self.batch.unreserve(slots)

    def _take(self) -> int:
        with self._lock:
            if not self._free:
                raise RuntimeError("an SMC request used more rows than it reserved")
            slot = min(self._free)  # the lowest: the same slots whatever order the particles ended in
            self._free.remove(slot)
            return slot

    def _views(self, slot: int, target_length: int = 0, draft_length: int = 0) -> tuple[SequenceModel, SequenceModel | None]:
        target = self.batch.rows("target", slot, target_length)
        return target, self.batch.rows("draft", slot, draft_length) if self.draft else None

    def fresh(self) -> tuple[SequenceModel, SequenceModel | None]:
        """The target's (and draft's) row views of a free slot, empty: the first particle's."""
        return self._views(self._take())

    def fork(self, target: SequenceModel, draft: SequenceModel | None) -> tuple[SequenceModel, SequenceModel | None]:
        """Row views of a free slot holding a copy of the rows ``target`` and ``draft`` (views of
        one of this request's slots) hold."""
        assert isinstance(target, RowModel) and (draft is None or isinstance(draft, RowModel))
        slot = self._take()
        lengths = {"target": target.length}
        if draft is not None:
            lengths["draft"] = draft.length
        try:
            self.batch.copy_row(target.slot, slot, lengths)
        except BaseException:
            self.free(slot)
            raise
        return self._views(slot, target.length, draft.length if draft is not None else 0)

    def free(self, slot: int) -> None:
        """A particle's slot is free for a later fork (its rows are overwritten then)."""
        with self._lock:
            self._free.append(slot)

    def step(self, particles: Sequence[P], advance: Callable[[P], None]) -> None:
        """``advance`` each particle on a thread of its own, their rows woken together and each
        parked when its step ends (a round barrier); the first error is raised once all ended."""
        self.batch.wake(len(particles))

        def one(p: P) -> None:
            try:
                advance(p)
            finally:
                self.batch.park()

        futures = [self._pool.submit(one, p) for p in particles]
        wait(futures)
        for f in futures:
            f.result()

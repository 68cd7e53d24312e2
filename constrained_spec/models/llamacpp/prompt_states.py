"""Prefilled prompts of a llama.cpp model kept on disk, for the next process that starts the same way.

The CLI is one process per call, so its in-process prefix cache never sees a second call; calls
with the same schema hint placed first (``schema_hint_place="system"``) or the same system prompt
share their first tokens. After a prefill, the sequence's state (``llama_state_seq`` bytes) at its
last *ubatch boundary* is saved here, keyed by the model and the tokens; a later prefill restores the
longest saved prefix that ends on a boundary and computes only the rest.

Why boundaries: llama.cpp's fast prefill paths give a position rounding that depends on which
ubatch it was computed in. A prompt prefilled from scratch is computed in ubatches of ``boundary``
tokens from position 0; restoring a prefix that ends on a multiple of ``boundary`` leaves the rest to
be computed in exactly those ubatches, so the cache comes out bitwise the same as without the
store, and the output does not depend on whether the store was warm (a test holds this, with a
restore off the boundary as the control that differs).

Bounded: at most ``max_bytes`` on disk and ``max_entries`` files per model, least recently used out.
An entry that fails to load is deleted and the prefix computed again. Writes are atomic (a temporary
file renamed), so two processes at once leave whole entries only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["PromptStates", "SavedPrefix", "model_key"]

TOKENS_SUFFIX, STATE_SUFFIX = ".tokens", ".state"


@dataclass(frozen=True)
class SavedPrefix:
    """A stored state that covers the first ``length`` tokens of a prompt (the state may hold more:
    restore it, then drop the positions from ``length`` on)."""

    name: str
    state: bytes
    length: int


def model_key(**identity: object) -> str:
    """A folder name for one model's states: a hash of what makes a state valid for it (the file, its
    size and mtime, the runtime's build and context parameters)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class PromptStates:
    """One model's saved prompt states in ``folder``; restore points are multiples of ``boundary``."""

    def __init__(self, folder: str | os.PathLike[str], boundary: int, max_bytes: int, max_entries: int = 64) -> None:
        if boundary < 1 or max_bytes < 1 or max_entries < 1:
            raise ValueError("boundary, max_bytes and max_entries must be positive")
        self.folder = Path(folder)
        self.boundary, self.max_bytes, self.max_entries = boundary, max_bytes, max_entries
        self.hits = self.misses = 0

    def usable_length(self, n_tokens: int) -> int:
        """The longest prefix of an ``n_tokens`` prompt worth saving or restoring: the last boundary
        before its last token (the last token is always computed, for its logits)."""
        return ((n_tokens - 1) // self.boundary) * self.boundary if n_tokens > 1 else 0

    def _names(self) -> list[str]:
        try:
            return [p.name[: -len(TOKENS_SUFFIX)] for p in self.folder.iterdir() if p.name.endswith(TOKENS_SUFFIX)]
        except FileNotFoundError:
            return []

    def longest(self, tokens: Sequence[int]) -> SavedPrefix | None:
        """The saved state sharing the longest boundary-aligned prefix with ``tokens`` (None: none)."""
        limit = self.usable_length(len(tokens))
        if limit == 0:
            self.misses += 1
            return None
        wanted = np.asarray(tokens[:limit], dtype=np.int32)
        best, best_n = None, 0
        for name in self._names():
            try:
                stored = np.fromfile(self.folder / (name + TOKENS_SUFFIX), dtype="<i4")
            except (OSError, ValueError):
                continue
            n = (_common_prefix(stored, wanted) // self.boundary) * self.boundary
            if n > best_n:
                best, best_n = name, n
        if best is None:
            self.misses += 1
            return None
        try:
            state = (self.folder / (best + STATE_SUFFIX)).read_bytes()
            os.utime(self.folder / (best + TOKENS_SUFFIX))  # recently used: evicted last
        except OSError:
            self.misses += 1
            return None
        self.hits += 1
        return SavedPrefix(best, state, best_n)

    def save(self, tokens: Sequence[int], state: bytes) -> None:
        """Keep ``state``, the cache of exactly ``tokens`` (a multiple of the boundary long), then
        evict the least recently used entries past the bounds. Errors writing are ignored (a full
        disk costs the next call its prefill, nothing else)."""
        if not tokens or len(tokens) % self.boundary or len(state) > self.max_bytes:
            return
        array = np.asarray(tokens, dtype="<i4")
        name = hashlib.sha256(array.tobytes()).hexdigest()[:32]
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if (self.folder / (name + TOKENS_SUFFIX)).exists():
                return
            self._write(name + STATE_SUFFIX, state)
            self._write(name + TOKENS_SUFFIX, array.tobytes())  # last: an entry is listed only once its state is whole
            self._evict()
        except OSError:
            self.discard(name)

    def _write(self, filename: str, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.folder / filename)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def discard(self, name: str) -> None:
        """Delete one entry (a state llama.cpp refused, or a half-written one)."""
        for suffix in (TOKENS_SUFFIX, STATE_SUFFIX):
            (self.folder / (name + suffix)).unlink(missing_ok=True)

    def _evict(self) -> None:
        entries = []
        for name in self._names():
            try:
                used = (self.folder / (name + TOKENS_SUFFIX)).stat().st_mtime
                size = (self.folder / (name + STATE_SUFFIX)).stat().st_size
            except OSError:
                continue
            entries.append((used, name, size))
        entries.sort(reverse=True)  # most recently used first
        total = 0
        for i, (_, name, size) in enumerate(entries):
            total += size
            if total > self.max_bytes or i >= self.max_entries:
                self.discard(name)

    @property
    def bytes(self) -> int:
        """Bytes the saved states take on disk."""
        total = 0
        for name in self._names():
            try:
                total += (self.folder / (name + STATE_SUFFIX)).stat().st_size
            except OSError:
                pass
        return total

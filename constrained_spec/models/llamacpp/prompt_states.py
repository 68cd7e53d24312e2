"""Prefilled prompts of a llama.cpp model kept on disk, for the next process that starts the same way.

The CLI is one process per call, so its in-process prefix cache never sees a second call; calls
with the same schema hint placed first (``schema_hint_place="system"``) or the same system prompt
share their first tokens. After a prefill, the sequence's state (``llama_state_seq`` bytes) at its
last piece cut and at each message end (:class:`~constrained_spec.models.llamacpp.pieces.PieceRule`) is
saved here, keyed by the model and the tokens; a later prefill restores the longest saved prefix that
ends on a cut and computes only the rest.

Why cuts: llama.cpp's fast prefill paths give a position rounding that depends on which ubatch it
was computed in. A prompt prefilled from scratch is computed in the rule's pieces from position 0;
restoring a prefix that ends on a cut leaves the rest to be computed in exactly those pieces, so the
cache comes out bitwise the same as without the store, and the output does not depend on whether the
store was warm (a test holds this, with a restore off the cuts as the control that differs).

Bounded: at most ``max_bytes`` on disk and ``max_entries`` files per model, least recently used out.
An entry that fails to load is deleted and the prefix computed again. Writes are atomic (a temporary
file renamed), so two processes at once leave whole entries only.

The same store also lives in memory (``folder=None``), for a process that serves many prompts: the
prompts of one schema share their system message, whatever came between them (as llama-server's
prompt cache does, but restoring only at cuts, so exact).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from constrained_spec.models.llamacpp.pieces import PieceRule

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


class _DiskEntries:
    """Entries as file pairs in ``folder``: ``<name>.tokens`` (int32) and ``<name>.state``; used = the tokens file's mtime."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def names(self) -> list[str]:
        try:
            return [p.name[: -len(TOKENS_SUFFIX)] for p in self.folder.iterdir() if p.name.endswith(TOKENS_SUFFIX)]
        except FileNotFoundError:
            return []

    def tokens(self, name: str) -> np.ndarray | None:
        try:
            return np.fromfile(self.folder / (name + TOKENS_SUFFIX), dtype="<i4")
        except (OSError, ValueError):
            return None

    def state(self, name: str) -> bytes | None:
        try:
            data = (self.folder / (name + STATE_SUFFIX)).read_bytes()
            os.utime(self.folder / (name + TOKENS_SUFFIX))  # recently used: evicted last
            return data
        except OSError:
            return None

    def has(self, name: str) -> bool:
        return (self.folder / (name + TOKENS_SUFFIX)).exists()

    def put(self, name: str, tokens: bytes, state: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write(name + STATE_SUFFIX, state)
        self._write(name + TOKENS_SUFFIX, tokens)  # last: an entry is listed only once its state is whole

    def _write(self, filename: str, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.folder / filename)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def drop(self, name: str) -> None:
        for suffix in (TOKENS_SUFFIX, STATE_SUFFIX):
            (self.folder / (name + suffix)).unlink(missing_ok=True)

    def by_use(self) -> list[tuple[str, int]]:
        """(name, state bytes), most recently used first."""
        entries = []
        for name in self.names():
            try:
                used = (self.folder / (name + TOKENS_SUFFIX)).stat().st_mtime
                size = (self.folder / (name + STATE_SUFFIX)).stat().st_size
            except OSError:
                continue
            entries.append((used, name, size))
        entries.sort(reverse=True)
        return [(name, size) for _, name, size in entries]


class _MemoryEntries:
    """Entries in this process's memory, in order of use."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[np.ndarray, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def tokens(self, name: str) -> np.ndarray | None:
        entry = self._entries.get(name)
        return None if entry is None else entry[0]

    def state(self, name: str) -> bytes | None:
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                return None
            self._entries.move_to_end(name, last=False)
            return entry[1]

    def has(self, name: str) -> bool:
        return name in self._entries

    def put(self, name: str, tokens: bytes, state: bytes) -> None:
        with self._lock:
            self._entries[name] = (np.frombuffer(tokens, dtype="<i4"), state)
            self._entries.move_to_end(name, last=False)

    def drop(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)

    def by_use(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(name, len(state)) for name, (_, state) in self._entries.items()]


class PromptStates:
    """One model's saved prompt states in ``folder`` (None: in memory); restore points are the cuts of ``rule``."""

    def __init__(self, folder: str | os.PathLike[str] | None, rule: PieceRule, max_bytes: int, max_entries: int = 64) -> None:
        if rule.width < 1 or max_bytes < 1 or max_entries < 1:
            raise ValueError("the rule's width, max_bytes and max_entries must be positive")
        self.folder = None if folder is None else Path(folder)
        self._entries: _DiskEntries | _MemoryEntries = _MemoryEntries() if self.folder is None else _DiskEntries(self.folder)
        self.rule, self.max_bytes, self.max_entries = rule, max_bytes, max_entries
        self.hits = self.misses = 0

    def usable_length(self, tokens: Sequence[int]) -> int:
        """The longest prefix of a prompt worth saving or restoring: its last cut before its last token
        (the last token is always computed, for its logits)."""
        return self.rule.last_cut(tokens, self.rule.reuse_limit(tokens))

    def save_points(self, tokens: Sequence[int]) -> list[int]:
        """Where a prefill of ``tokens`` saves its state: after a head, each message end and the last cut, before the
        last token."""
        limit = self.usable_length(tokens)
        return sorted({c for c in self.rule.shared_ends(tokens) if c <= limit} | ({limit} if limit else set()))

    def _names(self) -> list[str]:
        return self._entries.names()

    def longest(self, tokens: Sequence[int]) -> SavedPrefix | None:
        """The saved state sharing the longest prefix that ends on a cut with ``tokens`` (None: none)."""
        limit = self.usable_length(tokens)
        if limit == 0:
            self.misses += 1
            return None
        wanted = np.asarray(tokens[:limit], dtype=np.int32)
        best, best_n = None, 0
        for name in self._entries.names():
            stored = self._entries.tokens(name)
            if stored is None:
                continue
            n = self.rule.last_cut(tokens, _common_prefix(stored, wanted))
            if n > best_n:
                best, best_n = name, n
        state = None if best is None else self._entries.state(best)
        if best is None or state is None:
            self.misses += 1
            return None
        self.hits += 1
        return SavedPrefix(best, state, best_n)

    def save(self, tokens: Sequence[int], state: bytes) -> None:
        """Keep ``state``, the cache of exactly ``tokens`` (ending on a cut), then evict the least recently
        used entries past the bounds. Errors writing are ignored (a full disk costs the next call its
        prefill, nothing else)."""
        if not self.rule.ends_on_cut(tokens) or len(state) > self.max_bytes:
            return
        array = np.asarray(tokens, dtype="<i4")
        name = hashlib.sha256(array.tobytes()).hexdigest()[:32]
        try:
            if self._entries.has(name):
                return
            self._entries.put(name, array.tobytes(), state)
            self._evict()
        except OSError:
            self.discard(name)

    def discard(self, name: str) -> None:
        """Delete one entry (a state llama.cpp refused, or a half-written one)."""
        self._entries.drop(name)

    def _evict(self) -> None:
        total = 0
        for i, (name, size) in enumerate(self._entries.by_use()):  # most recently used first
            total += size
            if total > self.max_bytes or i >= self.max_entries:
                self.discard(name)

    @property
    def bytes(self) -> int:
        """Bytes the saved states take."""
        return sum(size for _, size in self._entries.by_use())

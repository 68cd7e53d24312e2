"""Prompt prefixes already prefilled, kept for the next request that starts the same way.

A model's keys and values at position i depend only on tokens 0..i, so any common prefix of a
stored prompt and a new one can be copied instead of computed: the system prompt, the tool
definitions, the schema hint, the earlier turns of a conversation. Each entry holds one prompt's
keys and values (as the batched model's ``read_prefix`` gives them); a lookup takes the entry
sharing the longest prefix with the new prompt (vLLM's automatic prefix caching and SGLang's
RadixAttention find the same thing with block hashes and a radix tree; the entries here are few).
Memory is bounded by bytes, least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Sequence

from constrained_spec.models.protocol import RowBackend

__all__ = ["PrefixCache", "common_prefix"]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _nbytes(saved: Any) -> int:
    return sum(t.numel() * t.element_size() for pair in saved for t in pair)


class PrefixCache:
    """Prefilled prompts by their tokens, up to ``max_bytes``; prefixes shorter than ``min_prefix``
    are not worth a copy and are not reused."""

    def __init__(self, max_bytes: int, min_prefix: int = 16) -> None:
        self.max_bytes, self.min_prefix = max_bytes, min_prefix
        self._entries: OrderedDict[tuple[int, ...], tuple[Any, int]] = OrderedDict()  # tokens -> (saved, bytes)
        self.bytes = 0
        self.hits = self.misses = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, tokens: Sequence[int]) -> tuple[tuple[int, ...] | None, int]:
        """The stored prompt sharing the longest prefix with ``tokens``, and that length."""
        best, best_n = None, 0
        with self._lock:
            for key in self._entries:
                n = common_prefix(key, tokens)
                if n > best_n:
                    best, best_n = key, n
        return best, best_n

    def restore(self, model: RowBackend, slot: int, tokens: Sequence[int]) -> int:
        """Copy the longest stored prefix of ``tokens`` into ``slot``; how many tokens it covers (0: none)."""
        key, n = self.longest(tokens)
        n = model.reusable_prefix(tokens, key, n) if key is not None else 0
        if key is None or n < self.min_prefix:
            self.misses += 1
            return 0
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return 0
            self._entries.move_to_end(key)
        model.write_prefix(slot, entry[0], n)
        self.hits += 1
        return n

    def store(self, model: RowBackend, slot: int, tokens: Sequence[int]) -> None:
        """Keep what ``slot`` holds for ``tokens`` (just prefilled there), unless a stored prompt
        already covers all of it; evict the least recently used past ``max_bytes``."""
        if len(tokens) < self.min_prefix:
            return
        key, n = self.longest(tokens)
        if key is not None and n == len(tokens):
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
            return
        saved = model.read_prefix(slot, len(tokens))
        size = _nbytes(saved)
        if size > self.max_bytes:
            return
        with self._lock:
            self._entries[tuple(tokens)] = (saved, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, old) = self._entries.popitem(last=False)
                self.bytes -= old

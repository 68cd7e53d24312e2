"""A small thread-safe LRU mapping: the bound on every cache that requests feed."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most ``maxsize`` entries; the least recently used goes first."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The cached value, else ``make()`` cached (``make`` runs outside the lock)."""
        hit = self.get(key)
        if hit is None:
            hit = make()
            self.put(key, hit)
        return hit

    def values(self) -> list[V]:
        """The cached values, least recently used first."""
        with self._lock:
            return list(self._data.values())

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

"""Explicit, bounded caches of computed answers, in place of hand-rolled module-level dicts.

Two kinds, both thread-safe, bounded (the oldest entry leaves when one is full) and listed in :data:`CACHES` so
that a test or a long-lived caller can empty them all (:func:`clear_all`):

- :class:`ValueCache` — keyed by value: the facts an answer depends on, hashable (a config text, a stat stamp, the
  tuple of settings an answer reads).
- :class:`IdentityCache` — keyed by one immutable object (a spec's layers, a spec): hashing such an object by value
  costs as much as the answer, and the answer depends on nothing else. The entry holds the object itself, so its
  ``id`` cannot be reused by another object while the entry lives, and a hit is checked with ``is``.

Standard library only: every layer may use it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
Obj = TypeVar("Obj")
V = TypeVar("V")

#: every cache made here, by name (tests/test_memo.py checks the names are unique)
CACHES: dict[str, ValueCache[object, object] | IdentityCache[object, object]] = {}


class ValueCache(Generic[K, V]):
    """At most ``size`` answers keyed by value; the oldest goes first."""

    def __init__(self, name: str, size: int, *, listed: bool = True) -> None:
        if size < 1:
            raise ValueError(f"cache {name}: size must be at least 1")
        if name in CACHES:
            raise ValueError(f"two caches named {name!r}")
        self.name, self.size = name, size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        if listed:  # (an IdentityCache lists itself, not the store inside it)
            CACHES[name] = self  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self._entries)

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The answer stored for ``key``, else ``compute()`` stored and returned (computed outside the lock: two
        threads asking at once may both compute; the answers are equal)."""
        with self._lock:
            if key in self._entries:
                return self._entries[key]
        value = compute()
        self.put(key, value)
        return value

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


class IdentityCache(Generic[Obj, V]):
    """At most ``size`` answers about objects, keyed by identity; the oldest goes first."""

    def __init__(self, name: str, size: int) -> None:
        self._values: ValueCache[int, tuple[Obj, V]] = ValueCache(name, size, listed=False)
        CACHES[name] = self  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self._values)

    def get_or_compute(self, obj: Obj, compute: Callable[[], V]) -> V:
        """The answer stored for this very object, else ``compute()`` stored and returned."""
        entry = self._values.get(id(obj))
        if entry is not None and entry[0] is obj:
            return entry[1]
        value = compute()
        self._values.put(id(obj), (obj, value))
        return value

    def clear(self) -> None:
        self._values.clear()


def clear_all() -> None:
    """Empty every cache made here."""
    for cache in CACHES.values():
        cache.clear()

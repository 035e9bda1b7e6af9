"""This process's item caches: what one holds, and the registry that keeps them in budget.

There is one cache per (store root, session id), shared by every `JournalSession`
of this process on that session, so a new session object per request starts warm.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from journal import InvalidInputError

from .records import ALL, Key, Segment, older

CacheKey = tuple[str, str]
"""(store root, session id)."""


@dataclass
class Cache:
    """What this process knows of a session: the newest live items, encoded.

    It reflects the log up to event `latest` of the session (checked, and brought
    up to date, at the start of every call). `ident`: the session's incarnation
    (`Store.incarnation`) when it was built. `complete`: it holds every live item.
    `extendable`: older items are read from disk below `boundary` (cleared when the
    budget evicted items; older reads then scan the log instead). `tombs`: every
    tombstone seen, for the rare pending removals of cursors.
    """

    ident: tuple[int, int, int] | None
    latest: int
    chain: list[Segment]
    keys: list[Key] = field(default_factory=list)  # oldest first
    vals: list[bytes] = field(default_factory=list)  # msgpack of each item
    nbytes: int = 0
    complete: bool = False
    extendable: bool = True
    boundary: Key = (0, 0, ALL)
    tombs: list[tuple[int, int, Key]] = field(default_factory=list)

    def push(self, key: Key, val: bytes, limit: int) -> None:
        """Add the newest item; evict older ones past `limit` bytes."""
        self.keys.append(key)
        self.vals.append(val)
        self.nbytes += len(val)
        if self.nbytes > limit:
            self.evict(limit)

    def evict(self, limit: int) -> None:
        """Drop the oldest items down to 3/4 of `limit`; older reads then go to disk."""
        keep = limit * 3 // 4
        drop = 0
        while drop < len(self.vals) and self.nbytes > keep:
            self.nbytes -= len(self.vals[drop])
            drop += 1
        del self.keys[:drop], self.vals[:drop]
        self.complete = False
        self.extendable = False

    def pending_at(self, key: Key) -> set[Key]:
        """Removals a scan resuming below `key` must still apply: targets below `key` of
        tombstones above it (empty unless a pop raced with an add from another process)."""
        if not self.tombs:
            return set()
        return {
            t
            for d, s, t in self.tombs
            if (d < key[0] or (d == key[0] and s > key[1])) and older(t, key)
        }


class CacheRegistry:
    """The item caches of this process, least recently used first; whole caches are
    dropped to stay within `budget` bytes."""

    def __init__(self, budget: int):
        self.budget = budget
        self._guard = threading.Lock()
        self._caches: OrderedDict[CacheKey, Cache] = OrderedDict()
        self._sizes: dict[CacheKey, int] = {}
        self._total = 0

    def get(self, key: CacheKey) -> Cache | None:
        with self._guard:
            c = self._caches.get(key)
            if c is not None:
                self._caches.move_to_end(key)
            return c

    def put(self, key: CacheKey, c: Cache | None) -> None:
        with self._guard:
            self._total -= self._sizes.pop(key, 0)
            self._caches.pop(key, None)
            if c is not None:
                self._caches[key] = c
                self._sizes[key] = c.nbytes
                self._total += c.nbytes

    def account(self, key: CacheKey) -> None:
        """Record a cache's new size; drop least recently used caches over budget."""
        with self._guard:
            c = self._caches.get(key)
            if c is None:
                return
            self._total += c.nbytes - self._sizes.get(key, 0)
            self._sizes[key] = c.nbytes
            while self._total > self.budget and len(self._caches) > 1:
                old, _ = self._caches.popitem(last=False)
                self._total -= self._sizes.pop(old, 0)


CACHE_BUDGET = 128 << 20
"""Bytes of encoded items all `JournalSession` caches of this process may hold."""

_registry = CacheRegistry(CACHE_BUDGET)


def registry() -> CacheRegistry:
    """The registry in use (`drop_caches` replaces it)."""
    return _registry


def drop_caches() -> None:
    """Forget every cached item of this process (the next read of a session goes to
    its log, as in a new process)."""
    global _registry
    _registry = CacheRegistry(_registry.budget)


def set_cache_budget(nbytes: int) -> None:
    """Change the process-wide cache budget (0 keeps only the session in use)."""
    if not isinstance(nbytes, int) or nbytes < 0:
        raise InvalidInputError("the cache budget must be a non-negative integer")
    _registry.budget = nbytes

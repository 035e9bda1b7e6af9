"""A store-wide cache of verified records, for pages read again and again.

Why it is safe: a committed record never changes where it lies. The log is
append-only; sealed segments are never rewritten in place except by `compact`,
which keeps every position and which other processes only see through new
descriptors (and indexes rebuilt with the new sizes). A record is cached only
after its checksum has been verified, keyed by its log position inside a
*space*: a number given to one `Log` object and replaced (`Log.forget_cached`)
whenever the session sees its log stop being a pure extension of what it knew
(damage, a cut, rebuilt indexes). A hit is also checked against the size the
index entry asks for. A cached record is the same bytes a fresh read returns,
so a page served from the cache is the page a read from disk would give.

Why it has an admission rule: paging once through a long history must not fill
memory with records nobody reads again (peak memory while paging stays
proportional to the page). A record is admitted only on its second read within
a short window: the first read leaves just its key in a small bounded set of
"ghosts". A page an agent or UI polls (the newest events, the last turns) is
served from memory from its third read on, like SQLite's page cache serves it.

Eviction is CLOCK (second chance): hits only set a flag, so a read takes no
lock; inserts and evictions take one.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from typing import Any

# Items of an entry: the cached value, its charged size, and the "used since the
# hand passed" flag of CLOCK.
_VALUE, _SIZE, _USED = 0, 1, 2

_ENTRY_OVERHEAD = 200  # bytes charged per entry on top of the payload (objects, dict slot)
_GHOSTS = 1024  # keys of recently missed records remembered for admission


class ReadCache:
    """A bounded map from (space, position) to verified records, shared by threads."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        # OrderedDicts, not dicts: both drop their oldest key again and again, which
        # `next(iter(dict))` makes O(deleted slots) each time (a dict compacts only when
        # it grows); `popitem(last=False)` is O(1).
        self._entries: OrderedDict[int, list[Any]] = OrderedDict()
        self._ghosts: OrderedDict[int, None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._spaces = itertools.count(1)

    def new_space(self) -> int:
        """A fresh key space (never reused by this cache) for one log's positions."""
        with self._lock:
            return next(self._spaces)

    @staticmethod
    def key(space: int, pos: int) -> int:
        return (space << 48) | pos  # positions stay far below 2**48 (256 TiB)

    def get(self, key: int) -> Any:
        """The cached value, or None. Lock-free: a dict lookup and a flag."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        entry[_USED] = True
        return entry[_VALUE]

    def offer(self, key: int, value: Any, size: int) -> None:
        """A value just read from disk: cache it if this is its second read lately."""
        if self.capacity <= 0:
            return
        charged = size + _ENTRY_OVERHEAD
        if charged > self.capacity // 8:
            return  # one huge record would push out a whole page of small ones
        with self._lock:
            if key not in self._ghosts:
                self._ghosts[key] = None
                if len(self._ghosts) > _GHOSTS:
                    self._ghosts.popitem(last=False)
                return
            del self._ghosts[key]
            if key in self._entries:
                return
            self._entries[key] = [value, charged, False]
            self._bytes += charged
            if self._bytes > self.capacity:
                self._evict()

    def _evict(self) -> None:
        """CLOCK over insertion order: used entries go round once more (lock held)."""
        entries = self._entries
        while self._bytes > self.capacity and entries:
            key, entry = entries.popitem(last=False)
            if entry[_USED]:
                entry[_USED] = False
                entries[key] = entry  # to the back: a second chance
            else:
                self._bytes -= entry[_SIZE]

    def stats(self) -> tuple[int, int]:
        """(entries, charged bytes), for tests and `journal` diagnostics."""
        with self._lock:
            return len(self._entries), self._bytes

"""Keeping a session's item cache true to its log: catching up, rebuilding, reading ahead.

Every call of a `JournalSession` starts by bringing the cache up to date (one
`events_after` read when nothing changed), so the cache is never stale; a cache
whose session was deleted and created again is never reused, as the session's
incarnation (`Store.incarnation`) tells them apart.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from journal import Store

from .cache import Cache, registry
from .records import (
    ALL,
    CLEAR,
    ITEMS,
    POP,
    REPLACE,
    Key,
    Segment,
    chain_of,
    decode,
    encode,
    items_of,
    older,
    replaced_of,
    sort_key,
    target_of,
)
from .scan import ItemEvent, LogScanner

Ident = tuple[int, int, int]


class CacheSync:
    """One `JournalSession`'s hold on its session's cache in the process registry.

    `cache_bytes`: the most this object lets the cache hold (older items then
    stay on disk).
    """

    def __init__(self, store: Store, session_id: str, scanner: LogScanner, cache_bytes: int):
        self.store = store
        self.session_id = session_id
        self.scanner = scanner
        self.cache_bytes = cache_bytes
        self.key = (store.root, session_id)

    @property
    def current(self) -> Cache | None:
        """The session's cache, as it stands (None: nothing cached)."""
        return registry().get(self.key)

    @current.setter
    def current(self, c: Cache | None) -> None:
        registry().put(self.key, c)

    def account(self) -> None:
        """Tell the registry the cache's new size (it may drop other caches)."""
        registry().account(self.key)

    def identity(self) -> Ident | None:
        """The session's incarnation (None: no such session)."""
        return self.store.incarnation(self.session_id)

    def sync(self, want: int = 32) -> Cache:
        """The cache, brought up to date with the log (one `events_after` call when current).

        `want`: the items the caller is about to read, if the cache must be rebuilt.
        """
        return self.sync_as(self.identity(), want)

    def sync_as(self, ident: Ident | None, want: int) -> Cache:
        """`sync` given the session's identity, just read."""
        c = self.current
        if c is None or c.ident != ident:
            return self.rebuild(ident, want)
        if ident is None:
            return c
        while True:
            new = self.store.events_after(self.session_id, c.latest, 256)
            for jev in new:
                if not self.apply(c, jev.sequence, jev.event.msg):
                    return self.rebuild(ident, want)
            if len(new) < 256:
                return c

    def rebuild(self, ident: Ident | None, want: int = 32, read: list[Any] | None = None) -> Cache:
        """A new cache of the session, holding its newest items (at least `want`, or all).

        One read of the newest events gives both the items and the latest sequence
        they reflect (no separate read of the counter). `read`: gets the items read
        (newest first; see `fill`)."""
        c = Cache(ident, 0, [Segment(self.session_id)], complete=True)
        if ident is not None:
            cp = self.store.load(self.session_id)
            if cp is not None:
                c = Cache(ident, 0, chain_of(self.session_id, cp))
                self.fill(c, max(1, want), top=True, read=read)
        self.current = c
        return c

    def apply(self, c: Cache, seq: int, msg: dict[str, Any]) -> bool:
        """Apply one new event of this session to the cache; False: rebuild instead."""
        kind = msg.get("type")
        sid = self.session_id
        if kind == ITEMS:
            for index, item in enumerate(items_of(sid, seq, msg, sid)):
                c.push((0, seq, index), encode(item), self.cache_bytes)
        elif kind == POP:
            if not _remove(c, seq, target_of(sid, seq, msg, 0, sid)):
                return False
        elif kind == REPLACE:
            items, drops = replaced_of(sid, seq, msg, 0, sid)
            for key in drops:
                if not _remove(c, seq, key):
                    return False
            for index, item in enumerate(items):
                c.push((0, seq, index), encode(item), self.cache_bytes)
        elif kind == CLEAR:
            c.keys, c.vals, c.nbytes, c.complete = [], [], 0, True
        c.latest = seq
        return True

    def apply_own_pop(self, c: Cache, key: Key, msg: dict[str, Any], seq: int, seen: int) -> None:
        """Apply the tombstone this process just appended at `seq` (its cache saw `seen`)."""
        if self.current is not c:
            return
        keys = c.keys
        if keys and keys[-1] == key and seq == seen + 1:
            # What `apply` does with this tombstone, without checking our own
            # event: the item it names is still the cache's newest.
            c.tombs.append((0, seq, key))
            c.nbytes -= len(c.vals[-1])
            del keys[-1], c.vals[-1]
            c.latest = seq
        elif not self.apply(c, seq, msg):
            self.current = None

    def extend(self, c: Cache, need: int) -> None:
        """Read older items from disk into the cache until it holds `need` or all of them."""
        if c.complete or not c.extendable or len(c.keys) >= need:
            return
        self.fill(c, need, top=False)

    def fill(self, c: Cache, need: int, *, top: bool, read: list[Any] | None = None) -> None:
        """Read items older than the cache's boundary (`top`: the newest items of a new,
        empty cache, whose `latest` and boundary the first page sets) into the cache.

        `read`: gets the decoded items read, newest first, in the order of the keys
        added (even those the budget then evicts). They are the caller's: the log's
        events are decoded afresh by every read, and the cache keeps only bytes."""
        tombs: list[tuple[int, int, Key]] = []

        def at_latest(latest: int) -> None:
            c.latest = latest
            c.boundary = (0, latest, ALL)

        pending = set() if top else c.pending_at(c.boundary)
        room = need - len(c.keys)  # items still to read
        events = self.scanner.events(
            c.chain,
            None if top else c.boundary,
            pending,
            want=room,
            on_tomb=lambda d, s, t: tombs.append((d, s, t)),
            on_latest=at_latest if top else None,
        )
        got = _take(events, pending, room, read)
        c.tombs.extend(tombs)
        if got.last is not None:
            c.boundary = got.last
        got.keys.reverse()
        got.vals.reverse()
        c.keys[:0] = got.keys
        c.vals[:0] = got.vals
        c.nbytes += got.nbytes
        if got.exhausted:
            c.complete = True
        if c.nbytes > self.cache_bytes:
            c.evict(self.cache_bytes)

    def newest(self, c: Cache) -> tuple[Key, Any] | None:
        """The newest live item, or None."""
        if not c.keys and not c.complete:
            self.extend(c, 32)  # read ahead: pops in a row stay O(1) each
            if not c.keys and not c.complete:  # beyond the cache budget: ask the disk
                for key, item, _ in self.scanner.items(c.chain, None, set(), want=1):
                    return key, item
                return None
        if not c.keys:
            return None
        return c.keys[-1], decode(c.vals[-1])


def _remove(c: Cache, seq: int, key: Key) -> bool:
    """Apply the tombstone at `seq` naming `key` (a pop's, or a replacement's drop);
    False when the cache cannot tell what it removes (the caller rebuilds)."""
    c.tombs.append((0, seq, key))
    keys = c.keys
    # A pop names the newest item (checked first), else a search finds it.
    if keys and keys[-1] == key:
        pos = len(keys) - 1
    else:
        pos = bisect.bisect_left(keys, sort_key(key), key=sort_key)
    if pos < len(keys) and keys[pos] == key:
        c.nbytes -= len(c.vals[pos])
        del keys[pos], c.vals[pos]
    elif c.complete:
        return False  # names no item we hold: let a scan decide
    elif c.extendable:
        if not older(key, c.boundary):
            return False
    elif c.keys and not older(key, c.keys[0]):
        return False
    return True


@dataclass
class _Taken:
    """Items a fill read, newest first, encoded; `last`: the oldest of them."""

    keys: list[Key] = field(default_factory=list)
    vals: list[bytes] = field(default_factory=list)
    nbytes: int = 0
    last: Key | None = None
    exhausted: bool = True  # the scan ran out: nothing older is live


def _take(
    events: Iterator[ItemEvent], pending: set[Key], room: int, read: list[Any] | None
) -> _Taken:
    """The live items of `events` (less those in `pending`), until `room` of them."""
    got = _Taken()
    keys, vals = got.keys, got.vals
    nbytes = 0
    for depth, seq, items, hi in events:
        for index in range(hi, -1, -1):
            key = (depth, seq, index)
            if pending and key in pending:
                pending.discard(key)
                continue
            item = items[index]
            val = encode(item)
            if read is not None:
                read.append(item)
            keys.append(key)
            vals.append(val)
            nbytes += len(val)
            room -= 1
            if room <= 0:
                break
        if room <= 0:
            got.exhausted = False
            got.last = keys[-1]
            break
    else:
        if keys:
            got.last = keys[-1]
    got.nbytes = nbytes
    return got

"""OpenAI Agents SDK sessions stored in a `journal` store.

`JournalSession` implements the SDK's `Session` protocol (`get_items`,
`add_items`, `pop_item`, `clear_session`) on one journal session per SDK
session id, and adds what the SDK's `SQLiteSession` lacks: newest-first cursor
paging of items (`get_items_page`), branching a conversation at an item
(`branch`), and strict decoding (damage is reported as a `journal` error naming
the session and the position, never skipped).

Representation (see docs/openai-agents.md):

- `add_items(items)` appends ONE journal event `{"type": "agents.items",
  "items": [...]}` (one record that is its own commit: atomic, durable when the
  call returns). The event sequence plus the index inside the batch is the
  item's stable position.
- `pop_item()` appends a tombstone event `{"type": "agents.pop", "target":
  [depth, sequence, index]}` naming exactly the item it returned, as a
  compare-and-append: only if the session's latest event is still the one the
  pop's cache reflects (`append_event(..., expected_latest=N)`, checked under the
  session's write lock, across processes). Otherwise nothing is appended, the
  pop catches up with the log and tries again; so a tombstone always names the
  newest item, and two processes never pop the same one. Clears of one session
  are serialized across processes by an `flock` on the session directory.
- `clear_session()` saves a checkpoint with the event `{"type": "agents.clear"}`:
  items before it are no longer part of the conversation (the bytes are kept, and
  `journal ls` shows the clear; `delete()` erases the session and its branches).
- `branch()` is a journal `fork`: the child starts with no items of its own and
  reads its ancestors' items up to the branch point (recorded in the child's
  checkpoint metadata), so a branch costs the same at any history length.

Reading pages the event journal newest first (`event_page`), so reading the
newest items or a page deep in a long history costs what the answer costs, not
what the history costs. The process also keeps, per session, the newest live
items (encoded, up to `cache_bytes` per session and `CACHE_BUDGET` in all,
shared by every `JournalSession` object on that session) and brings them up to
date from the log at the start of every call (one `events_after` read when
nothing changed; a pop skips that read, its conditional append checks the
same), so the reads the Runner makes every turn do not go back to the log. The
SDK is needed only to run agents: this module imports without it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import math
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import msgspec

from journal.errors import (
    ContractViolationError,
    CorruptionError,
    InvalidInputError,
    LockTimeoutError,
    NotFoundError,
    StorageError,
)
from journal.session import IDENTITY_FILE
from journal.store import Store
from journal.types import Checkpoint, Event, EventPageRequest, TimestampedEvent
from journal.validate import validate_session_id

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import Session
    from agents.memory.session_settings import SessionSettings

__all__ = ["CLEAR", "ITEMS", "POP", "ItemPage", "JournalSession", "drop_caches", "set_cache_budget"]

ITEMS = "agents.items"
"""Event type of one `add_items` call: `{"type": ITEMS, "items": [...]}`."""
POP = "agents.pop"
"""Event type of one `pop_item`: `{"type": POP, "target": [depth, sequence, index]}`."""
CLEAR = "agents.clear"
"""Event type of one `clear_session`: `{"type": CLEAR}`."""

META_KEY = "journal.openai_agents"
"""Checkpoint metadata key: `{"v": 1, "chain": [[session_id, seq, index, events], ...]}`."""

try:
    import fcntl as _fcntl_module

    _fcntl: Any = _fcntl_module
except ImportError:  # pragma: no cover - Windows
    _fcntl = None

_T = TypeVar("_T")
# (depth in the chain, event sequence, index in the batch); newest first is
# depth ascending, then (sequence, index) descending.
Key = tuple[int, int, int]

_CURSOR_PREFIX = "jc1."
_cursor_encode = msgspec.msgpack.Encoder().encode
_cursor_decode = msgspec.msgpack.Decoder(list[Any]).decode
_URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64 -> urlsafe base64

# One lock per (store root, session id) in this process, shared by every
# JournalSession object (and every event loop) that works on that session.
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def _session_lock(root: str, session_id: str) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get((root, session_id))
        if lock is None:
            lock = _locks[(root, session_id)] = threading.Lock()
        return lock


class _CacheRegistry:
    """The item caches of this process, one per (store root, session id), least
    recently used first; whole caches are dropped to stay within `budget` bytes."""

    def __init__(self, budget: int):
        self.budget = budget
        self._guard = threading.Lock()
        self._caches: OrderedDict[tuple[str, str], _Cache] = OrderedDict()
        self._sizes: dict[tuple[str, str], int] = {}
        self._total = 0

    def get(self, key: tuple[str, str]) -> _Cache | None:
        with self._guard:
            c = self._caches.get(key)
            if c is not None:
                self._caches.move_to_end(key)
            return c

    def put(self, key: tuple[str, str], c: _Cache | None) -> None:
        with self._guard:
            self._total -= self._sizes.pop(key, 0)
            self._caches.pop(key, None)
            if c is not None:
                self._caches[key] = c
                self._sizes[key] = c.nbytes
                self._total += c.nbytes

    def account(self, key: tuple[str, str]) -> None:
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

_CACHES = _CacheRegistry(CACHE_BUDGET)


def drop_caches() -> None:
    """Forget every cached item of this process (the next read of a session goes to
    its log, as in a new process)."""
    global _CACHES
    _CACHES = _CacheRegistry(_CACHES.budget)


def set_cache_budget(nbytes: int) -> None:
    """Change the process-wide cache budget (0 keeps only the session in use)."""
    if not isinstance(nbytes, int) or nbytes < 0:
        raise InvalidInputError("the cache budget must be a non-negative integer")
    _CACHES.budget = nbytes


@dataclass(frozen=True)
class _Segment:
    """One session of a branch chain: its items up to (seq, index), its events up to `events`."""

    session_id: str
    item_seq: int | None = None  # None: no bound (the session itself)
    item_index: int = 0
    events: int | None = None


_ALL = 1 << 62  # "every item of this event" as an index bound

_PAGE_EVENTS = 128
"""Most events a scan asks the store for at once. A decoded event is about ten
objects the garbage collector tracks; a page of 1,024 kept ~10k alive across
collections, which promoted them to the oldest generation and set off full
collections (of everything the process holds: the SDK alone is ~150k objects).
Reading a 2,000-item session with nothing cached, pages of 128 instead of 1,024
cut the time spent collecting from ~48 ms to ~15 ms per read (mean of 40 reads)."""


@dataclass
class _Cache:
    """What one `JournalSession` knows of its session: the newest live items, encoded.

    It reflects the log up to event `latest` of the session (checked, and brought
    up to date, at the start of every call). `complete`: it holds every live item.
    `extendable`: older items are read from disk below `boundary` (cleared when the
    budget evicted items; older reads then scan the log instead). `tombs`: every
    tombstone seen, for the rare pending removals of cursors.
    """

    ident: tuple[int, int, int] | None
    latest: int
    chain: list[_Segment]
    keys: list[Key] = field(default_factory=list)  # oldest first
    vals: list[bytes] = field(default_factory=list)  # msgpack of each item
    nbytes: int = 0
    complete: bool = False
    extendable: bool = True
    boundary: Key = (0, 0, _ALL)
    tombs: list[tuple[int, int, Key]] = field(default_factory=list)


class _DirLock:
    """An exclusive `flock` on a session directory, held across one clear.

    Enters with False when the session does not exist. The directory is checked
    again after locking, so a session deleted and created anew is never locked
    through its old directory. Without `fcntl` (Windows) only this process's lock
    applies.
    """

    def __init__(self, path: str, timeout: float):
        self.path = path
        self.timeout = timeout
        self.fd: int | None = None

    def __enter__(self) -> bool:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise StorageError(f"cannot open session directory {self.path}: {exc}") from exc
            try:
                if _fcntl is not None:
                    while True:
                        try:
                            _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                            break
                        except BlockingIOError:
                            if time.monotonic() > deadline:
                                raise LockTimeoutError(
                                    f"clear lock of {self.path} not free after {self.timeout} s"
                                ) from None
                            time.sleep(0.001)
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self.fd = fd
                return True
            os.close(fd)  # replaced meanwhile: lock the new one

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the flock
            self.fd = None


@dataclass
class ItemPage:
    """Items newest first, each with its cursor; `next_before` continues with older items.

    A cursor names one item: pass it as `before=` to page below it, or as `at=` /
    `before=` to `branch`. `next_before` is None when there is nothing older.
    """

    items: list[TResponseInputItem] = field(default_factory=list)
    cursors: list[str] = field(default_factory=list)
    next_before: str | None = None

    def into_chronological(self) -> list[TResponseInputItem]:
        """The items oldest first (a new list)."""
        return self.items[::-1]


class JournalSession:
    """An OpenAI Agents SDK session kept in a `journal` store (one journal session per id).

    `store` is an open `journal.Store` (shared: the caller closes it) or a
    directory (this object opens a store there with `store_options` and closes it
    in `close()`). The session id is the journal session id, unchanged: any
    non-blank string of at most 4 KiB (the store maps it to a safe directory
    name). Methods are coroutines; the disk work runs in worker threads, and
    operations on one session are serialized across every `JournalSession` of
    this process (across processes, pops are compare-and-append and clears take
    a lock).
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store | str | os.PathLike[str],
        *,
        session_settings: SessionSettings | None = None,
        owner_id: str = "local",
        cache_bytes: int = 16 << 20,
        **store_options: Any,
    ):
        validate_session_id(session_id)  # any non-blank string of at most 4 KiB
        self.session_id = session_id
        if session_settings is None:
            session_settings = _default_settings()
        self.session_settings = session_settings
        if isinstance(store, Store):
            if store_options:
                raise InvalidInputError("store options need a path, not an open store")
            self.store = store
            self._owns_store = False
        else:
            self.store = Store(store, **store_options)
            self._owns_store = True
        self.owner_id = owner_id
        self._lock = _session_lock(self.store.root, session_id)
        self._closed = False
        self._items_per_event = 1.0  # running estimate, sizes event pages
        if not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise InvalidInputError("cache_bytes must be a non-negative integer")
        self.cache_bytes = cache_bytes
        self._key = (self.store.root, session_id)
        self._dir = self.store.session_dir(session_id)
        self._identity_file = os.path.join(self._dir, IDENTITY_FILE)
        self._tag = zlib.crc32(session_id.encode("utf-8", "surrogatepass"))  # in cursors

    # ------------------------------------------------------------ SDK protocol
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` items oldest first (None: `session_settings.limit`, else all).

        A limit of 0 or below returns no items.
        """
        resolved = limit
        if resolved is None and self.session_settings is not None:
            resolved = self.session_settings.limit
        if resolved is not None and resolved <= 0:
            self._check_open()
            return []
        return await self._run(lambda: self._latest(resolved))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items as one atomic commit; durable when this returns (store durability)."""
        self._check_open()
        batch = list(items)
        if not batch:
            return
        for i, item in enumerate(batch):
            if not isinstance(item, dict):
                raise InvalidInputError(
                    f"session {self.session_id!r}: item {i} is a {type(item).__name__},"
                    " not a JSON object"
                )
        await self._run(lambda: self._add(batch))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the most recent item (None when there is none)."""
        return await self._run(self._pop)

    async def clear_session(self) -> None:
        """Remove every item from the conversation (see `delete` to erase the bytes)."""
        await self._run(self._clear)

    # ------------------------------------------------------------------ extras
    async def get_items_page(self, limit: int, before: str | None = None) -> ItemPage:
        """At most `limit` items newest first, older than the item named by `before`."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidInputError(f"page limit must be a positive integer, not {limit!r}")
        return await self._run(lambda: self._page(limit, before))

    async def branch(
        self,
        new_session_id: str,
        *,
        at: str | None = None,
        before: str | None = None,
    ) -> JournalSession:
        """A new session sharing this conversation up to an item.

        `at=cursor` keeps that item and everything older; `before=cursor` keeps
        only what is older than it (e.g. to retry from a user message); neither
        keeps every current item. The new session is a journal fork of the
        session holding the item: `journal tree` shows the lineage, and deleting
        that session deletes the branch too. Nothing is copied.
        """
        if at is not None and before is not None:
            raise InvalidInputError("give at= or before=, not both")
        child = await self._run(lambda: self._branch(new_session_id, at, before))
        return child

    async def delete(self) -> bool:
        """Erase this session, its branches and their bytes (journal `delete_sessions`)."""

        def run() -> bool:
            if self.store.load(self.session_id) is None:
                return False
            return self.store.delete_sessions([self.session_id])

        return await self._run(run)

    def close(self) -> None:
        """Close the store if this object opened it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            self.store.close()

    async def __aenter__(self) -> JournalSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- internals
    # The cache of a session is shared by every JournalSession of this process on
    # it (a new object per request starts warm), under one process-wide budget.
    @property
    def _c(self) -> _Cache | None:
        return _CACHES.get(self._key)

    @_c.setter
    def _c(self, c: _Cache | None) -> None:
        _CACHES.put(self._key, c)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInputError(f"JournalSession {self.session_id!r} is closed")

    async def _run(self, fn: Callable[[], _T]) -> _T:
        self._check_open()

        def locked() -> _T:
            with self._lock:
                try:
                    return fn()
                finally:
                    _CACHES.account(self._key)

        # The worker thread finishes a started commit even if the caller is cancelled.
        return await asyncio.to_thread(locked)

    def _chain(self, cp: Checkpoint | None) -> list[_Segment]:
        chain = [_Segment(self.session_id)]
        if cp is None:
            return chain
        meta = cp.metadata.get(META_KEY)
        if meta is None:
            return chain
        try:
            entries = meta["chain"]
            for sid, seq, index, events in entries:
                if not (isinstance(sid, str) and all(_is_count(v) for v in (seq, index, events))):
                    raise TypeError
                chain.append(_Segment(sid, seq, index, events))
        except (TypeError, KeyError, ValueError):
            raise CorruptionError(
                f"session {self.session_id!r}: checkpoint {cp.sequence} has malformed"
                f" {META_KEY!r} metadata: {meta!r}"
            ) from None
        return chain

    # ------------------------------------------------------------ the cache
    def _identity(self) -> tuple[int, int, int] | None:
        """The session's identity (None: no such session); changes when it is deleted
        and created again, so a cache of the old one is never reused. One `stat` of
        the identity file the store writes once per session: its device, inode and
        change time, what the store itself tells incarnations apart by."""
        try:
            f = os.stat(self._identity_file)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot stat session directory {self._dir}: {exc}") from exc
        return (f.st_dev, f.st_ino, f.st_ctime_ns)

    def _sync(self, want: int = 32) -> _Cache:
        """The cache, brought up to date with the log (one `events_after` call when current).

        `want`: the items the caller is about to read, if the cache must be rebuilt.
        """
        return self._sync_as(self._identity(), want)

    def _sync_as(self, ident: tuple[int, int, int] | None, want: int) -> _Cache:
        """`_sync` given the session's identity, just read."""
        c = self._c
        if c is None or c.ident != ident:
            return self._rebuild(ident, want)
        if ident is None:
            return c
        while True:
            new = self.store.events_after(self.session_id, c.latest, 256)
            for jev in new:
                if not self._apply(c, jev.sequence, jev.event.msg):
                    return self._rebuild(ident, want)
            if len(new) < 256:
                return c

    def _rebuild(
        self, ident: tuple[int, int, int] | None, want: int = 32, read: list[Any] | None = None
    ) -> _Cache:
        """A new cache of the session, holding its newest items (at least `want`, or all).

        One read of the newest events gives both the items and the latest sequence
        they reflect (no separate read of the counter). `read`: gets the items read
        (newest first; see `_fill`)."""
        c = _Cache(ident, 0, [_Segment(self.session_id)], complete=True)
        if ident is not None:
            cp = self.store.load(self.session_id)
            if cp is not None:
                c = _Cache(ident, 0, self._chain(cp))
                self._fill(c, max(1, want), top=True, read=read)
        self._c = c
        return c

    def _apply(self, c: _Cache, seq: int, msg: dict[str, Any]) -> bool:
        """Apply one new event of this session to the cache; False: rebuild instead."""
        kind = msg.get("type")
        if kind == ITEMS:
            for index, item in enumerate(self._items_of(self.session_id, seq, msg)):
                self._push(c, (0, seq, index), _encode(item))
        elif kind == POP:
            key = self._target_of(self.session_id, seq, msg, 0)
            c.tombs.append((0, seq, key))
            keys = c.keys
            # A pop names the newest item (checked first), else a search finds it.
            if keys and keys[-1] == key:
                pos = len(keys) - 1
            else:
                pos = bisect.bisect_left(keys, _sk(key), key=_sk)
            if pos < len(keys) and keys[pos] == key:
                c.nbytes -= len(c.vals[pos])
                del keys[pos], c.vals[pos]
            elif c.complete:
                return False  # names no item we hold: let a scan decide
            elif c.extendable:
                if not _older(key, c.boundary):
                    return False
            elif c.keys and not _older(key, c.keys[0]):
                return False
        elif kind == CLEAR:
            c.keys, c.vals, c.nbytes, c.complete = [], [], 0, True
        c.latest = seq
        return True

    def _push(self, c: _Cache, key: Key, val: bytes) -> None:
        c.keys.append(key)
        c.vals.append(val)
        c.nbytes += len(val)
        if c.nbytes > self.cache_bytes:
            self._evict(c)

    def _evict(self, c: _Cache) -> None:
        """Drop the oldest items down to 3/4 of the budget; older reads then go to disk."""
        keep = self.cache_bytes * 3 // 4
        drop = 0
        while drop < len(c.vals) and c.nbytes > keep:
            c.nbytes -= len(c.vals[drop])
            drop += 1
        del c.keys[:drop], c.vals[:drop]
        c.complete = False
        c.extendable = False

    def _extend(self, c: _Cache, need: int) -> None:
        """Read older items from disk into the cache until it holds `need` or all of them."""
        if c.complete or not c.extendable or len(c.keys) >= need:
            return
        self._fill(c, need, top=False)

    def _fill(self, c: _Cache, need: int, *, top: bool, read: list[Any] | None = None) -> None:
        """Read items older than the cache's boundary (`top`: the newest items of a new,
        empty cache, whose `latest` and boundary the first page sets) into the cache.

        `read`: gets the decoded items read, newest first, in the order of the keys
        added (even those the budget then evicts). They are the caller's: the log's
        events are decoded afresh by every read, and the cache keeps only bytes."""
        got_keys: list[Key] = []
        got_vals: list[bytes] = []
        last: Key | None = None
        exhausted = True
        tombs: list[tuple[int, int, Key]] = []

        def at_latest(latest: int) -> None:
            c.latest = latest
            c.boundary = (0, latest, _ALL)

        pending = set() if top else self._pending_at(c, c.boundary)
        room = need - len(c.keys)  # items still to read
        nbytes = 0
        encode = _msgpack_encode
        for depth, seq, items, hi in self._scan_events(
            c.chain,
            None if top else c.boundary,
            pending,
            want=room,
            on_tomb=lambda d, s, t: tombs.append((d, s, t)),
            on_latest=at_latest if top else None,
        ):
            for index in range(hi, -1, -1):
                key = (depth, seq, index)
                if pending and key in pending:
                    pending.discard(key)
                    continue
                item = items[index]
                val = encode(item)
                if read is not None:
                    read.append(item)
                got_keys.append(key)
                got_vals.append(val)
                nbytes += len(val)
                room -= 1
                if room <= 0:
                    break
            if room <= 0:
                exhausted = False
                last = got_keys[-1]
                break
        else:
            if got_keys:
                last = got_keys[-1]
        c.tombs.extend(tombs)
        if last is not None:
            c.boundary = last
        got_keys.reverse()
        got_vals.reverse()
        c.keys[:0] = got_keys
        c.vals[:0] = got_vals
        c.nbytes += nbytes
        if exhausted:
            c.complete = True
        if c.nbytes > self.cache_bytes:
            self._evict(c)

    def _pending_at(self, c: _Cache, key: Key) -> set[Key]:
        """Removals a scan resuming below `key` must still apply: targets below `key` of
        tombstones above it (empty unless a pop raced with an add from another process)."""
        if not c.tombs:
            return set()
        return {
            t
            for d, s, t in c.tombs
            if (d < key[0] or (d == key[0] and s > key[1])) and _older(t, key)
        }

    def _newest(self, c: _Cache) -> tuple[Key, Any] | None:
        """The newest live item, or None."""
        if not c.keys and not c.complete:
            self._extend(c, 32)  # read ahead: pops in a row stay O(1) each
            if not c.keys and not c.complete:  # beyond the cache budget: ask the disk
                for key, item, _ in self._scan(c.chain, None, set(), want=1):
                    return key, item
                return None
        if not c.keys:
            return None
        return c.keys[-1], _decode(c.vals[-1])

    # ------------------------------------------------------------- operations
    def _add(self, batch: list[Any]) -> None:
        event = Event(msg={"type": ITEMS, "items": batch})
        now = _now_ms()
        c = self._c
        try:
            jev = self.store.append_event(self.session_id, now, event)
        except NotFoundError:
            self._create(event, now, batch)
            return
        if c is not None and c.ident is not None and jev.sequence == c.latest + 1:
            for index, item in enumerate(batch):
                self._push(c, (0, jev.sequence, index), _encode(item))
            c.latest = jev.sequence

    def _create(self, event: Event, now: int, batch: list[Any]) -> None:
        """First items of a new session: create it with a checkpoint (sequence 0)."""
        self._c = None
        cp = Checkpoint.empty(self.session_id, owner_id=self.owner_id)
        cp.first_user_message = _first_user_text(batch)
        ev = TimestampedEvent(recorded_at_ms=now, event=event)
        try:
            self.store.save_with_events(cp, (), None, [ev])
        except ContractViolationError:
            # Another process created it meanwhile: append to what is there.
            if self.store.load(self.session_id) is None:
                raise
            self.store.append_event(self.session_id, now, event)

    def _exclusive(self) -> _DirLock:
        return _DirLock(self._dir, self.store.options.lock_timeout)

    def _pop(self) -> Any:
        # No read of the log first: the tombstone is appended only if the session's
        # latest event is still the one the cache reflects (`expected_latest`, checked
        # under the session's write lock, across processes). Then the cache's newest
        # item is the session's newest; if anything was written meanwhile (by another
        # process, or by an add whose result did not follow our cache), nothing is
        # appended, and the pop catches up with the log and tries again.
        ident = self._identity()
        c = self._c
        fresh = c is None or c.ident != ident  # `c` known to be current
        if c is None or c.ident != ident:
            c = self._rebuild(ident)
        while True:
            if c.ident is None:
                return None  # no such session
            newest = self._newest(c)
            if newest is None:
                if fresh:
                    return None
                c, fresh = self._sync(), True  # empty as we saw it: check the log
                continue
            key, item = newest
            msg = {"type": POP, "target": list(key)}
            seen = c.latest
            try:
                jev = self.store.append_event(
                    self.session_id, _now_ms(), Event(msg=msg), expected_latest=seen
                )
            except NotFoundError:  # deleted meanwhile
                self._c = None
                return None
            except ContractViolationError:
                # Someone wrote since: catch up (their events, possibly a rebuild) and retry.
                c, fresh = self._sync(), True
                if c.latest == seen and c.ident == ident:
                    # Nothing new visible, yet the latest sequence differs (events the
                    # log no longer shows): take the counter from a rebuild.
                    c = self._rebuild(ident)
                    if c.latest == seen:
                        raise  # not a stale view: a real contract error
                ident = c.ident
                continue
            if self._c is c:
                keys = c.keys
                if keys and keys[-1] == key and jev.sequence == seen + 1:
                    # What `_apply` does with this tombstone, without checking our own
                    # event: the item it names is still the cache's newest.
                    c.tombs.append((0, jev.sequence, key))
                    c.nbytes -= len(c.vals[-1])
                    del keys[-1], c.vals[-1]
                    c.latest = jev.sequence
                elif not self._apply(c, jev.sequence, msg):
                    self._c = None
            return item

    def _clear(self) -> None:
        # A checkpoint save (not a bare event), so the catalog (`journal ls`) shows
        # when the conversation was cleared.
        with self._exclusive() as exists:
            if not exists:
                return
            cp = self.store.load(self.session_id)
            c = self._sync()
            if cp is None or self._newest(c) is None:
                return
            msg: dict[str, Any] = {"type": CLEAR}
            ev = TimestampedEvent(recorded_at_ms=_now_ms(), event=Event(msg=msg))
            nxt = msgspec.structs.replace(cp, sequence=cp.sequence + 1)
            [jev] = self.store.save_with_events(nxt, (), None, [ev])
            if self._c is c and jev.sequence == c.latest + 1:
                self._apply(c, jev.sequence, msg)

    def _latest(self, limit: int | None) -> list[Any]:
        need = (1 << 62) if limit is None else limit
        ident = self._identity()
        c = self._c
        if ident is not None and (c is None or c.ident != ident):
            # Nothing cached: the rebuild reads the newest items from the log; return
            # them as read instead of decoding the cache's copies again.
            read: list[Any] = []
            c = self._rebuild(ident, need, read)
            if c.complete or len(read) >= need:
                read.reverse()
                return read
        else:
            c = self._sync_as(ident, need)
        self._extend(c, need)
        if len(c.keys) >= need or c.complete:
            return _decode_all(c.vals[-need:] if len(c.vals) > need else c.vals)
        # Beyond the cache budget: read the disk directly.
        out: list[Any] = []
        for _key, item, _ in self._scan(c.chain, None, set(), want=need):
            out.append(item)
            if len(out) == need:
                break
        out.reverse()
        return out

    def _page(self, limit: int, before: str | None) -> ItemPage:
        ident = self._identity()
        if before is not None and ident is not None:
            cold = self._c
            if cold is None or cold.ident != ident:
                # Nothing cached: a page below a cursor is read from the log; reading
                # the newest items into a new cache first would be wasted work.
                cp = self.store.load(self.session_id)
                if cp is not None:
                    chain = self._chain(cp)
                    cur = self._decode_cursor(before, len(chain))
                    return self._disk_page(chain, cur[0], limit, cur)
        c = self._sync_as(ident, limit + 1 if before is None else 1)
        cursor = self._decode_cursor(before, len(c.chain)) if before is not None else None
        key = cursor[1] if cursor is not None else None

        def position() -> int:
            if key is None:
                return len(c.keys)
            return bisect.bisect_left(c.keys, _sk(key), key=_sk)

        # The cache answers when the page lies in (or right below) what it holds;
        # a cursor deeper than that is resumed on the log directly (O(page)),
        # without loading everything above it.
        if (
            c.complete
            or key is None
            or (c.extendable and not _older(key, c.boundary))
            or (c.keys and not _older(key, c.keys[0]))
        ):
            p = position()
            while p < limit + 1 and not c.complete and c.extendable:
                self._extend(c, len(c.keys) + limit + 1 - p)
                p = position()
            if p >= limit + 1 or c.complete:
                lo = max(0, p - limit)
                keys = c.keys[lo:p][::-1]
                page = ItemPage(items=_decode_all(c.vals[lo:p])[::-1])
                encode, latest = self._encode_cursor, c.latest
                if c.tombs:
                    page.cursors = [encode(latest, k, sorted(self._pending_at(c, k))) for k in keys]
                else:  # no removal can be pending below any of them
                    page.cursors = [encode(latest, k, ()) for k in keys]
                if lo > 0:
                    page.next_before = page.cursors[-1]
                return page
        return self._disk_page(c.chain, c.latest, limit, cursor)

    def _disk_page(
        self,
        chain: list[_Segment],
        latest: int,
        limit: int,
        cursor: tuple[int, Key, list[Key]] | None,
    ) -> ItemPage:
        """A page read from the log (history beyond the cache budget, or nothing cached).

        `chain`, `latest`: the session's branch chain and the log position to read
        at when there is no cursor (a cursor brings its own)."""
        start: Key | None = None
        pending: set[Key] = set()
        if cursor is not None:
            latest, start, pend_list = cursor
            pending = set(pend_list)
            # Pops and clears since the cursor was issued (exact, without a rescan).
            while True:
                new = self.store.events_after(self.session_id, latest, 1024)
                for jev in new:
                    latest = jev.sequence
                    kind = jev.event.msg.get("type")
                    if kind == POP:
                        t = self._target_of(self.session_id, latest, jev.event.msg, 0)
                        if _older(t, start):
                            pending.add(t)
                    elif kind == CLEAR:
                        return ItemPage()
                if len(new) < 1024:
                    break
        chain = [_Segment(self.session_id, events=latest), *chain[1:]]
        page = ItemPage()
        for key, item, pend in self._scan(chain, start, pending, want=limit + 1):
            if len(page.items) == limit:
                page.next_before = page.cursors[-1]
                break
            page.items.append(item)
            page.cursors.append(self._encode_cursor(latest, key, pend))
        return page

    def _branch(self, new_id: str, at: str | None, before: str | None) -> JournalSession:
        validate_session_id(new_id)
        cp = self.store.load(self.session_id)
        if cp is None:
            raise NotFoundError(f"session {self.session_id!r} does not exist")
        latest = self.store.event_page(self.session_id, EventPageRequest(limit=1)).latest_sequence
        chain = self._chain(cp)
        chain[0] = _Segment(self.session_id, events=latest)
        cursor = at if at is not None else before
        target: Key | None = None
        if cursor is not None:
            _, key, _ = self._decode_cursor(cursor, len(chain))
            # Find the item (it must still be in the conversation) and, for before=,
            # the next older one.
            found = False
            for k, _item, _ in self._scan(chain, None, set(), want=64):
                if found:
                    target = k
                    break
                if k == key:
                    found = True
                    if at is not None:
                        target = k
                        break
                elif _older(k, key):
                    break  # passed the cursor's position without meeting the item
            if not found:
                raise NotFoundError(
                    f"session {self.session_id!r}: the item named by the cursor is no longer"
                    " in the conversation (popped or cleared)"
                )
        else:
            for k, _item, _ in self._scan(chain, None, set(), want=1):
                target = k
                break
        if target is None:
            # Nothing to share: a fresh session that records its origin in the lineage.
            parent = self.session_id
            new_chain: list[list[Any]] = []
        else:
            depth, seq, index = target
            seg = chain[depth]
            parent = seg.session_id
            assert seg.events is not None
            new_chain = [[parent, seq, index, seg.events]]
            new_chain += [
                [s.session_id, s.item_seq, s.item_index, s.events] for s in chain[depth + 1 :]
            ]
        parent_cp = cp if parent == self.session_id else self.store.load(parent)
        if parent_cp is None:
            raise NotFoundError(f"session {parent!r} does not exist")
        child = Checkpoint.empty(new_id, owner_id=parent_cp.session_context.owner_id)
        child.first_user_message = parent_cp.first_user_message
        child.metadata = {META_KEY: {"v": 1, "chain": new_chain}} if new_chain else {}
        self.store.fork(parent, parent_cp.sequence, child)
        return JournalSession(
            new_id,
            self.store,
            session_settings=self.session_settings,
            owner_id=self.owner_id,
            cache_bytes=self.cache_bytes,
        )

    def _scan(
        self,
        chain: list[_Segment],
        start: Key | None,
        pending: set[Key],
        *,
        want: int,
        on_tomb: Callable[[int, int, Key], object] | None = None,
        on_latest: Callable[[int], object] | None = None,
    ) -> Iterator[tuple[Key, Any, tuple[Key, ...]]]:
        """Yield (key, item, pending removals below it) for live items, newest first.

        `start`: begin below this item (`pending`: the removals still to apply
        below it); the rest as for `_scan_events`.
        """
        for depth, seq, items, top in self._scan_events(
            chain, start, pending, want=want, on_tomb=on_tomb, on_latest=on_latest
        ):
            for index in range(top, -1, -1):
                key = (depth, seq, index)
                if pending and key in pending:
                    pending.discard(key)
                    continue
                yield key, items[index], tuple(sorted(pending)) if pending else ()

    def _scan_events(
        self,
        chain: list[_Segment],
        start: Key | None,
        pending: set[Key],
        *,
        want: int,
        on_tomb: Callable[[int, int, Key], object] | None = None,
        on_latest: Callable[[int], object] | None = None,
    ) -> Iterator[tuple[int, int, list[Any], int]]:
        """Yield (depth, sequence, items, top) for item events, newest first: the
        candidates are `items[top]` down to `items[0]`, less the keys in `pending`
        (which this adds each tombstone's target to, before the events below it).

        `want` sizes the first event page (from the running items-per-event
        estimate; the next ones double, up to `_PAGE_EVENTS`). `on_latest`:
        called with the session's latest event sequence as of the first page
        (`start` None). Strict: a record of ours that does not decode raises
        `CorruptionError` naming the session and event.
        """
        first_depth = start[0] if start is not None else 0
        batch = max(2, min(_PAGE_EVENTS, math.ceil(want / self._items_per_event) + 1))
        seen_items = seen_events = 0
        for depth in range(first_depth, len(chain)):
            seg = chain[depth]
            sid = seg.session_id
            edge, edge_top = -1, 0  # the event of `start`'s item in this segment, its top
            if start is not None and depth == start[0]:
                before: int | None = start[1] + 1
                edge, edge_top = start[1], start[2] - 1
            else:
                before = seg.events + 1 if seg.events is not None else None
            bound = seg.item_seq
            while True:
                page = self.store.event_page(
                    sid, EventPageRequest(limit=batch, before_sequence=before)
                )
                if on_latest is not None:
                    on_latest(page.latest_sequence)
                    on_latest = None
                for jev in page.events:
                    seq = jev.sequence
                    msg = jev.event.msg
                    kind = msg.get("type")
                    if kind == ITEMS:
                        items = msg.get("items")
                        if type(items) is not list or not items or not _all_dicts(items):
                            items = self._items_of(sid, seq, msg)  # raises the precise error
                        seen_events += 1
                        seen_items += len(items)
                        top = len(items) - 1
                        if seq == edge:
                            top = min(top, edge_top)
                        if bound is not None:
                            if seq > bound:
                                continue
                            if seq == bound:
                                top = min(top, seg.item_index)
                        yield depth, seq, items, top
                    elif kind == POP:
                        target = self._target_of(sid, seq, msg, depth)
                        pending.add(target)
                        if on_tomb is not None:
                            on_tomb(depth, seq, target)
                    elif kind == CLEAR:
                        return
                if seen_events:
                    self._items_per_event = max(1.0, seen_items / seen_events)
                before = page.next_before_sequence
                if before is None:
                    break
                batch = min(_PAGE_EVENTS, batch * 2)

    def _items_of(self, session_id: str, seq: int, msg: dict[str, Any]) -> list[Any]:
        items = msg.get("items")
        if not isinstance(items, list) or not items:
            raise self._damaged(session_id, seq, "no item list")
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise self._damaged(session_id, seq, f"item {index} is not a JSON object")
        return items

    def _target_of(self, session_id: str, seq: int, msg: dict[str, Any], depth: int) -> Key:
        t = msg.get("target")
        if not (isinstance(t, list) and len(t) == 3 and all(_is_count(v) for v in t)):
            raise self._damaged(session_id, seq, f"bad pop target {t!r}")
        return (depth + t[0], t[1], t[2])

    def _damaged(self, session_id: str, seq: int, what: str) -> CorruptionError:
        return CorruptionError(
            f"session {session_id!r}, event {seq}: undecodable agents record ({what})"
            + ("" if session_id == self.session_id else f" (read for {self.session_id!r})")
        )

    def _encode_cursor(self, latest: int, key: Key, pending: Sequence[Key]) -> str:
        raw = _cursor_encode((self._tag, latest, *key, pending))
        b64 = binascii.b2a_base64(raw, newline=False).translate(_URLSAFE)
        return _CURSOR_PREFIX + b64.decode("ascii").rstrip("=")

    def _decode_cursor(self, cursor: str, depths: int) -> tuple[int, Key, list[Key]]:
        """(latest event when issued, item key, removals pending below the item)."""

        def bad() -> InvalidInputError:
            return InvalidInputError(f"not a cursor of session {self.session_id!r}: {cursor!r}")

        if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX):
            raise bad()
        body = cursor[len(_CURSOR_PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            tag, latest, depth, seq, index, pend = _cursor_decode(raw)
            pending = [(int(a), int(b), int(c)) for a, b, c in pend]
        except (ValueError, TypeError, msgspec.DecodeError):
            raise bad() from None
        if tag != self._tag:
            raise bad()
        if (
            not (_is_count(latest) and _is_count(depth) and _is_count(seq) and _is_count(index))
            or depth >= depths
        ):
            raise bad()
        return latest, (depth, seq, index), pending


def _default_settings() -> SessionSettings | None:
    """The SDK's default settings object (None without the SDK: this module reads and
    writes sessions without it, e.g. to page a conversation in a web server)."""
    try:
        from agents.memory.session_settings import SessionSettings
    except ImportError:  # pragma: no cover - the tests run with the SDK
        return None
    return SessionSettings()


def _sk(key: Key) -> tuple[int, int, int]:
    """Sort key of an item position, ascending = oldest first (deeper ancestors first)."""
    return (-key[0], key[1], key[2])


def _older(a: Key, b: Key) -> bool:
    """Whether item position `a` is older than `b`."""
    return _sk(a) < _sk(b)


_msgpack_encode = msgspec.msgpack.Encoder().encode
_msgpack_decode = msgspec.msgpack.Decoder().decode


def _encode(item: Any) -> bytes:
    return _msgpack_encode(item)


def _decode(raw: bytes) -> Any:
    return _msgpack_decode(raw)


def _decode_all(vals: list[bytes]) -> list[Any]:
    """Decode many encoded items with one call (a msgpack array of them)."""
    n = len(vals)
    if n < 16:
        head = bytes([0x90 | n])
    elif n < 1 << 16:
        head = b"\xdc" + n.to_bytes(2, "big")
    else:
        head = b"\xdd" + n.to_bytes(4, "big")
    out: list[Any] = _msgpack_decode(head + b"".join(vals))
    return out


def _all_dicts(items: list[Any]) -> bool:
    """Whether every item is a plain dict (the common single item checked first)."""
    if len(items) == 1:
        return type(items[0]) is dict
    return all(type(item) is dict for item in items)


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _first_user_text(items: list[Any]) -> str | None:
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content[:200]
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        return cast(str, part["text"])[:200]
    return None


if TYPE_CHECKING:
    # mypy checks that JournalSession satisfies the SDK's Session protocol.
    def _protocol_check(s: JournalSession) -> Session:
        return s

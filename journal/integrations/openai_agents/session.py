"""`JournalSession`: the SDK's `Session` protocol on one journal session per SDK session id.

Operations on one session are serialized across every `JournalSession` of this
process by a per-session lock; across processes, a pop is a compare-and-append
(the tombstone is appended only if the session's latest event is still the one
the pop's cache reflects) and a clear takes an `flock` on the session directory.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from journal import (
    Checkpoint,
    ContractViolationError,
    Event,
    InvalidInputError,
    JournalError,
    NotFoundError,
    Store,
    TimestampedEvent,
    validate_session_id,
)
from journal.compact import compact_store_session
from journal.erase import ERASE_KEY, erase_declaration

from ..dirlock import DirLock
from .branch import fork_branch
from .cache import Cache
from .compaction import SuffixReplacer
from .locks import session_lock
from .paging import ItemPage, Pager, session_tag
from .records import (
    CLEAR,
    ITEMS,
    POP,
    REPLACE,
    chain_of,
    decode_all,
    encode,
    first_user_text,
    now_ms,
)
from .scan import LogScanner
from .sync import CacheSync, Ident

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import Session, _CompactionSnapshot
    from agents.memory.session_settings import SessionSettings

_T = TypeVar("_T")


class SessionClosedError(JournalError, RuntimeError):
    """A call on a closed `JournalSession` (a `RuntimeError`, as `SQLiteSession` raises)."""


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
        session_settings: SessionSettings | dict[str, Any] | None = None,
        owner_id: str = "local",
        cache_bytes: int = 16 << 20,
        **store_options: Any,
    ):
        validate_session_id(session_id)  # any non-blank string of at most 4 KiB
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        if isinstance(store, Store):
            if store_options:
                raise InvalidInputError("store options need a path, not an open store")
            self.store = store
            self._owns_store = False
        else:
            self.store = Store(store, **store_options)
            self._owns_store = True
        self.owner_id = owner_id
        self._lock = session_lock(self.store.root, session_id)
        self._closed = False
        if not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise InvalidInputError("cache_bytes must be a non-negative integer")
        self._scanner = LogScanner(self.store, session_id)
        # The cache of a session is shared by every JournalSession of this process on
        # it (a new object per request starts warm), under one process-wide budget.
        self._cache = CacheSync(self.store, session_id, self._scanner, cache_bytes)
        self._tag = session_tag(session_id)  # in cursors
        self._pager = Pager(self._cache, self._tag)
        self._dir = self.store.session_dir(session_id)
        self._replacer = SuffixReplacer(self.store, session_id, self._cache, self._scanner)

    @property
    def cache_bytes(self) -> int:
        """The most this object lets its session's cache hold (older items stay on disk)."""
        return self._cache.cache_bytes

    @cache_bytes.setter
    def cache_bytes(self, nbytes: int) -> None:
        self._cache.cache_bytes = nbytes

    # ------------------------------------------------------------ SDK protocol
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` items oldest first (None: `session_settings.limit`, else all).

        A limit of 0 or below returns no items.
        """
        resolved = limit
        settings = self.session_settings
        if resolved is None and settings is not None:
            if isinstance(settings, dict):  # set to a dict after construction
                settings = _settings(settings)
            resolved = settings.limit if settings is not None else None
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

    async def pop_item(self, *, free: bool = False) -> TResponseInputItem | None:
        """Remove and return the most recent item (None when there is none).

        The pop that removes the last item of an `add_items` batch declares the batch
        erasable (`journal.erase`); `free` compacts the session now to give its bytes
        back (otherwise the retention job or `journal compact` does)."""
        return await self._run(lambda: self._pop(free))

    async def clear_session(self, *, free: bool = False) -> None:
        """Remove every item from the conversation. The clear declares the records it
        hides erasable (`journal.erase`; not those a branch still reads); `free`
        compacts the session now to give their bytes back (`delete` erases all)."""
        await self._run(lambda: self._clear(free))

    # ------------------------------------------------- SDK compaction hooks
    # `OpenAIResponsesCompactionSession` looks these up on the session it wraps.
    # Like the SDK's own stores, a subclass gets the SDK's non-atomic fallbacks
    # unless it supplies its own (it may transform items on their way in or out).
    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[TResponseInputItem], bool] | None = None,
    ) -> _CompactionSnapshot | None:
        """The newest `limit` items and a `replace_suffix(start, output)` that replaces
        the items from `start` on with `output` as ONE conditional commit (False, with
        nothing written, when the newest items changed since this snapshot)."""
        if type(self) is not JournalSession:
            return None
        from agents.memory.session import _CompactionSnapshot

        win = await self._run(lambda: self._replacer.window(limit))

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            return await self._run(
                lambda: self._replacer.replace_suffix(win, start, output, prune_prefix)
            )

        return _CompactionSnapshot(list(win.items), win.complete, replace_suffix)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """Replace every item with `items` as ONE commit (a clear and an add in one
        checkpoint save): after a crash the session holds the old items or the new."""
        if type(self) is not JournalSession:
            return False
        self._check_open()
        batch = list(items)
        for i, item in enumerate(batch):
            if not isinstance(item, dict):
                raise InvalidInputError(
                    f"session {self.session_id!r}: item {i} is a {type(item).__name__},"
                    " not a JSON object"
                )
        await self._run(lambda: self._replace_all(batch))
        return True

    # ------------------------------------------------------------------ extras
    async def get_items_page(self, limit: int, before: str | None = None) -> ItemPage:
        """At most `limit` items newest first, older than the item named by `before`."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidInputError(f"page limit must be a positive integer, not {limit!r}")
        return await self._run(lambda: self._pager.page(limit, before))

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
    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"JournalSession {self.session_id!r} is closed")

    async def _run(self, fn: Callable[[], _T]) -> _T:
        self._check_open()

        def locked() -> _T:
            with self._lock:
                try:
                    return fn()
                finally:
                    self._cache.account()

        # The worker thread finishes a started commit even if the caller is cancelled.
        return await asyncio.to_thread(locked)

    def _add(self, batch: list[Any]) -> None:
        event = Event(msg={"type": ITEMS, "items": batch})
        now = now_ms()
        c = self._cache.current
        try:
            jev = self.store.append_event(self.session_id, now, event)
        except NotFoundError:
            self._create(event, now, batch)
            return
        if c is not None and c.ident is not None and jev.sequence == c.latest + 1:
            for index, item in enumerate(batch):
                c.push((0, jev.sequence, index), encode(item), self._cache.cache_bytes)
            c.latest = jev.sequence

    def _create(self, event: Event, now: int, batch: list[Any]) -> None:
        """First items of a new session: create it with a checkpoint (sequence 0)."""
        self._cache.current = None
        cp = Checkpoint.empty(self.session_id, owner_id=self.owner_id)
        cp.first_user_message = first_user_text(batch)
        ev = TimestampedEvent(recorded_at_ms=now, event=event)
        try:
            self.store.save_with_events(cp, (), None, [ev])
        except ContractViolationError:
            # Another process created it meanwhile: append to what is there.
            if self.store.load(self.session_id) is None:
                raise
            self.store.append_event(self.session_id, now, event)

    def _pop(self, free: bool = False) -> Any:
        # No read of the log first: the tombstone is appended only if the session's
        # latest event is still the one the cache reflects (`expected_latest`, checked
        # under the session's write lock, across processes). Then the cache's newest
        # item is the session's newest; if anything was written meanwhile (by another
        # process, or by an add whose result did not follow our cache), nothing is
        # appended, and the pop catches up with the log and tries again.
        cs = self._cache
        ident = cs.identity()
        c = cs.current
        fresh = c is None or c.ident != ident  # `c` known to be current
        if c is None or c.ident != ident:
            c = cs.rebuild(ident)
        while True:
            if c.ident is None:
                return None  # no such session
            newest = cs.newest(c)
            if newest is None:
                if fresh:
                    return None
                c, fresh = cs.sync(), True  # empty as we saw it: check the log
                continue
            key, item = newest
            msg: dict[str, Any] = {"type": POP, "target": list(key)}
            if key[0] == 0 and key[2] == 0 and _branch_bound(self.store, self.session_id) < key[1]:
                # the batch's last live item: the batch is erasable (not a REPLACE: its
                # drops would come back)
                msg[ERASE_KEY] = erase_declaration(events=[key[1]], types=[ITEMS])
            seen = c.latest
            try:
                jev = self.store.append_event(
                    self.session_id, now_ms(), Event(msg=msg), expected_latest=seen
                )
            except NotFoundError:  # deleted meanwhile
                cs.current = None
                return None
            except ContractViolationError:
                caught = self._catch_up(ident, seen)
                if caught is None:
                    raise  # not a stale view: a real contract error
                c, fresh, ident = caught, True, caught.ident
                continue
            cs.apply_own_pop(c, key, msg, jev.sequence, seen)
            if free and ERASE_KEY in msg:
                compact_store_session(self.store, self.session_id)
            return item

    def _catch_up(self, ident: Ident | None, seen: int) -> Cache | None:
        """The cache after a refused conditional append, with what others wrote since
        (their events, possibly a rebuild); None when nothing was: the refusal is real."""
        c = self._cache.sync()
        if c.latest == seen and c.ident == ident:
            # Nothing new visible, yet the latest sequence differs (events the
            # log no longer shows): take the counter from a rebuild.
            c = self._cache.rebuild(ident)
            if c.latest == seen:
                return None
        return c

    def _clear(self, free: bool = False) -> None:
        # A checkpoint save (not a bare event), so the catalog (`journal ls`) shows
        # when the conversation was cleared.
        with DirLock(self._dir, self.store.options.lock_timeout, "clear lock") as exists:
            if not exists:
                return
            cp = self.store.load(self.session_id)
            c = self._cache.sync()
            if cp is None or self._cache.newest(c) is None:
                return
            msg: dict[str, Any] = {"type": CLEAR}
            # What the clear hides is erasable, but for what a branch still reads.
            kept = _branch_bound(self.store, self.session_id)
            ours = [ITEMS, POP, REPLACE, CLEAR]
            msg[ERASE_KEY] = erase_declaration(ranges=[(kept + 1, c.latest)], types=ours)
            ev = TimestampedEvent(recorded_at_ms=now_ms(), event=Event(msg=msg))
            nxt = msgspec.structs.replace(cp, sequence=cp.sequence + 1)
            [jev] = self.store.save_with_events(nxt, (), None, [ev])
            if self._cache.current is c and jev.sequence == c.latest + 1:
                self._cache.apply(c, jev.sequence, msg)
        if free:
            compact_store_session(self.store, self.session_id)

    def _replace_all(self, batch: list[Any]) -> None:
        # One checkpoint save with two events: the clear, then the new items.
        with DirLock(self._dir, self.store.options.lock_timeout, "clear lock") as exists:
            cp = self.store.load(self.session_id) if exists else None
            if cp is not None:
                now = now_ms()
                msgs: list[dict[str, Any]] = [{"type": CLEAR}]
                if batch:
                    msgs.append({"type": ITEMS, "items": batch})
                evs = [TimestampedEvent(recorded_at_ms=now, event=Event(msg=m)) for m in msgs]
                c = self._cache.sync()
                nxt = msgspec.structs.replace(cp, sequence=cp.sequence + 1)
                jevs = self.store.save_with_events(nxt, (), None, evs)
                if self._cache.current is c and jevs[0].sequence == c.latest + 1:
                    for jev, msg in zip(jevs, msgs, strict=True):
                        self._cache.apply(c, jev.sequence, msg)
                return
        if batch:  # no session yet: the items are its first
            self._add(batch)

    def _latest(self, limit: int | None) -> list[Any]:
        need = (1 << 62) if limit is None else limit
        cs = self._cache
        ident = cs.identity()
        c = cs.current
        if ident is not None and (c is None or c.ident != ident):
            # Nothing cached: the rebuild reads the newest items from the log; return
            # them as read instead of decoding the cache's copies again.
            read: list[Any] = []
            c = cs.rebuild(ident, need, read)
            if c.complete or len(read) >= need:
                read.reverse()
                return read
        else:
            c = cs.sync_as(ident, need)
        cs.extend(c, need)
        if len(c.keys) >= need or c.complete:
            return decode_all(c.vals[-need:] if len(c.vals) > need else c.vals)
        # Beyond the cache budget: read the disk directly.
        out: list[Any] = []
        for _key, item, _ in self._scanner.items(c.chain, None, set(), want=need):
            out.append(item)
            if len(out) == need:
                break
        out.reverse()
        return out

    def _branch(self, new_id: str, at: str | None, before: str | None) -> JournalSession:
        fork_branch(self.store, self._scanner, self._tag, new_id, at, before)
        return JournalSession(
            new_id,
            self.store,
            session_settings=self.session_settings,
            owner_id=self.owner_id,
            cache_bytes=self.cache_bytes,
        )


def _settings(given: SessionSettings | dict[str, Any] | None) -> SessionSettings | None:
    """`session_settings` as `SQLiteSession` takes it: None gives the SDK's defaults, a
    dict becomes a `SessionSettings` (an unknown key raises the SDK's `TypeError`, a
    bad value its `ValueError`). Without the SDK (this module reads and writes sessions
    without it, e.g. to page a conversation in a web server) None stays None and a
    dict is refused."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:  # pragma: no cover - the tests run with the SDK
        if isinstance(given, dict):
            raise InvalidInputError(
                "session_settings as a dict needs the OpenAI Agents SDK"
                " (pip install 'journal[openai-agents]')"
            ) from None
        return given
    if given is None:
        return SessionSettings()
    return coerce_session_settings(given)


if TYPE_CHECKING:
    # mypy checks that JournalSession satisfies the SDK's Session protocol.
    def _protocol_check(s: JournalSession) -> Session:
        return s


def _branch_bound(store: Store, session_id: str) -> int:
    """The newest event of `session_id` that a branch of it (at any depth) reads (0:
    none): a branch reads its ancestors' events up to the bound its chain records."""
    bound, todo, seen = 0, [session_id], {session_id}
    while todo:
        for child in store.child_sessions(todo.pop()):
            cid = child.session_id
            if cid in seen:
                continue
            seen.add(cid)
            todo.append(cid)
            for seg in chain_of(cid, store.load(cid))[1:]:
                if seg.session_id == session_id and seg.events is not None:
                    bound = max(bound, seg.events)
    return bound

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
- `pop_item()` appends a tombstone `{"type": "agents.pop", "target": [depth,
  sequence, index]}` naming exactly the item it returned, in a checkpoint save
  whose sequence is the session's mutation counter (so two concurrent pops, even
  from two processes, cannot both take the same item: the second save fails the
  store's sequence rule and is retried against the new state).
- `clear_session()` appends `{"type": "agents.clear"}` the same way: items
  before it are no longer part of the conversation (bytes are kept; `delete()`
  erases the session and its branches).
- `branch()` is a journal `fork`: the child starts with no items of its own and
  reads its ancestors' items up to the branch point (recorded in the child's
  checkpoint metadata), so a branch costs the same at any history length.

Reading pages the event journal newest first (`event_page`), so the cost of
`get_items(limit)` and of a page deep in a long history is what the answer
costs, not what the history costs.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import msgspec

from journal.errors import (
    ContractViolationError,
    CorruptionError,
    InvalidInputError,
    JournalError,
    NotFoundError,
)
from journal.store import Store
from journal.types import Checkpoint, Event, EventPageRequest, TimestampedEvent
from journal.validate import validate_session_id

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "journal.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'journal[openai-agents]'"
    ) from exc

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session import Session

__all__ = ["ITEMS", "POP", "CLEAR", "ItemPage", "JournalSession"]

ITEMS = "agents.items"
"""Event type of one `add_items` call: `{"type": ITEMS, "items": [...]}`."""
POP = "agents.pop"
"""Event type of one `pop_item`: `{"type": POP, "target": [depth, sequence, index]}`."""
CLEAR = "agents.clear"
"""Event type of one `clear_session`: `{"type": CLEAR}`."""

META_KEY = "journal.openai_agents"
"""Checkpoint metadata key: `{"v": 1, "chain": [[session_id, seq, index, events], ...]}`."""

_T = TypeVar("_T")
# (depth in the chain, event sequence, index in the batch); newest first is
# depth ascending, then (sequence, index) descending.
Key = tuple[int, int, int]

_CURSOR_PREFIX = "jc1."
_cursor_encode = msgspec.msgpack.Encoder().encode
_cursor_decode = msgspec.msgpack.Decoder(list[Any]).decode

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


@dataclass(frozen=True)
class _Segment:
    """One session of a branch chain: its items up to (seq, index), its events up to `events`."""

    session_id: str
    item_seq: int | None = None  # None: no bound (the session itself)
    item_index: int = 0
    events: int | None = None


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
    in `close()`). Any string is a valid session id. Methods are coroutines; the
    disk work runs in worker threads, and operations on one session are
    serialized across every `JournalSession` of this process.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store | str | os.PathLike[str],
        *,
        session_settings: SessionSettings | None = None,
        owner_id: str = "local",
        **store_options: Any,
    ):
        validate_session_id(session_id)  # any non-blank string of at most 4 KiB
        self.session_id = session_id
        self.session_settings = (
            session_settings if session_settings is not None else SessionSettings()
        )
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
        self._items_per_event = 2.0  # running estimate, sizes event pages

    # ------------------------------------------------------------ SDK protocol
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` items oldest first (None: `session_settings.limit`, else all).

        A limit of 0 or below returns no items.
        """
        resolved = resolve_session_limit(limit, self.session_settings)
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
    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInputError(f"JournalSession {self.session_id!r} is closed")

    async def _run(self, fn: Callable[[], _T]) -> _T:
        self._check_open()

        def locked() -> _T:
            with self._lock:
                return fn()

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

    def _add(self, batch: list[Any]) -> None:
        event = Event(msg={"type": ITEMS, "items": batch})
        now = _now_ms()
        try:
            self.store.append_event(self.session_id, now, event)
            return
        except NotFoundError:
            pass
        # First items of a new session: create it with a checkpoint (sequence 0).
        cp = Checkpoint.empty(self.session_id, owner_id=self.owner_id)
        cp.first_user_message = _first_user_text(batch)
        try:
            self.store.save_with_events(
                cp, (), None, [TimestampedEvent(recorded_at_ms=now, event=event)]
            )
        except ContractViolationError:
            # Another process created it meanwhile: append to what is there.
            if self.store.load(self.session_id) is None:
                raise
            self.store.append_event(self.session_id, now, event)

    def _mutate(self, choose: Callable[[Checkpoint], dict[str, Any] | None]) -> None:
        """Commit one tombstone event with the checkpoint sequence as compare-and-set.

        `choose` sees the current checkpoint and returns the event message (None:
        nothing to do). If another writer committed a mutation meanwhile, the
        store rejects the sequence and this retries against the new state.
        """
        for _attempt in range(100):
            cp = self.store.load(self.session_id)
            if cp is None:
                return
            msg = choose(cp)
            if msg is None:
                return
            nxt = msgspec.structs.replace(cp, sequence=cp.sequence + 1)
            ev = TimestampedEvent(recorded_at_ms=_now_ms(), event=Event(msg=msg))
            try:
                self.store.save_with_events(nxt, (), None, [ev])
                return
            except ContractViolationError:
                again = self.store.load(self.session_id)
                if again is None or again.sequence == cp.sequence:
                    raise
        raise JournalError(  # pragma: no cover - needs 100 lost races in a row
            f"session {self.session_id!r}: gave up after 100 conflicting concurrent writes"
        )

    def _pop(self) -> Any:
        popped: list[Any] = []

        def choose(cp: Checkpoint) -> dict[str, Any] | None:
            popped.clear()
            for key, item, _ in self._scan(self._chain(cp), None, set(), want=1):
                popped.append(item)
                return {"type": POP, "target": list(key)}
            return None

        self._mutate(choose)
        return popped[0] if popped else None

    def _clear(self) -> None:
        def choose(cp: Checkpoint) -> dict[str, Any] | None:
            for _ in self._scan(self._chain(cp), None, set(), want=1):
                return {"type": CLEAR}
            return None  # already empty: nothing to write

        self._mutate(choose)

    def _latest(self, limit: int | None) -> list[Any]:
        cp = self.store.load(self.session_id)
        if cp is None:
            return []
        out: list[Any] = []
        want = limit if limit is not None else 1 << 30
        for _key, item, _ in self._scan(self._chain(cp), None, set(), want=want):
            out.append(item)
            if len(out) == want:
                break
        out.reverse()
        return out

    def _page(self, limit: int, before: str | None) -> ItemPage:
        cp = self.store.load(self.session_id)
        if cp is None:
            if before is not None:
                raise NotFoundError(f"session {self.session_id!r} does not exist")
            return ItemPage()
        generation = cp.sequence
        chain = self._chain(cp)
        start: Key | None = None
        older_than: Key | None = None
        pending: set[Key] = set()
        if before is not None:
            gen, key, pend = self._decode_cursor(before)
            if key[0] >= len(chain):
                raise InvalidInputError(f"cursor {before!r} does not belong to this session")
            if gen == generation:
                start, pending = key, set(pend)
            else:
                # A pop or clear since the cursor was issued: rescan from the newest
                # item so the removals above the cursor are applied.
                older_than = key
        page = ItemPage()
        for key, item, pend_now in self._scan(
            chain, start, pending, want=limit + 1, older_than=older_than
        ):
            if len(page.items) == limit:
                page.next_before = page.cursors[-1]
                break
            page.items.append(item)
            page.cursors.append(self._encode_cursor(generation, key, pend_now))
        return page

    def _branch(self, new_id: str, at: str | None, before: str | None) -> JournalSession:
        validate_session_id(new_id)
        cp = self.store.load(self.session_id)
        if cp is None:
            raise NotFoundError(f"session {self.session_id!r} does not exist")
        chain = self._chain(cp)
        cursor = at if at is not None else before
        target: Key | None = None
        if cursor is not None:
            _, key, _ = self._decode_cursor(cursor)
            if key[0] >= len(chain):
                raise InvalidInputError(f"cursor {cursor!r} does not belong to this session")
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
                elif not _newer_or_equal(k, key):
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
            if depth == 0:
                latest = self.store.event_page(parent, EventPageRequest(limit=1)).latest_sequence
                events = latest
            else:
                assert seg.events is not None
                events = seg.events
            new_chain = [[parent, seq, index, events]]
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
        )

    def _scan(
        self,
        chain: list[_Segment],
        start: Key | None,
        pending: set[Key],
        *,
        want: int,
        older_than: Key | None = None,
    ) -> Iterator[tuple[Key, Any, tuple[Key, ...]]]:
        """Yield (key, item, pending removals below it) for live items, newest first.

        `start`: begin below this item (its pending removals in `pending`).
        `older_than`: scan from the newest, yielding only items below this key.
        """
        first_depth = start[0] if start is not None else 0
        batch = max(2, min(1024, math.ceil(want / self._items_per_event) + 1))
        seen_items = seen_events = 0
        for depth in range(first_depth, len(chain)):
            seg = chain[depth]
            if start is not None and depth == start[0]:
                before: int | None = start[1] + 1
            else:
                before = seg.events + 1 if seg.events is not None else None
            while True:
                page = self.store.event_page(
                    seg.session_id, EventPageRequest(limit=batch, before_sequence=before)
                )
                for jev in page.events:
                    seq = jev.sequence
                    msg = jev.event.msg
                    kind = msg.get("type")
                    if kind == ITEMS:
                        items = msg.get("items")
                        if not isinstance(items, list) or not items:
                            raise self._damaged(seg.session_id, seq, "no item list")
                        seen_events += 1
                        seen_items += len(items)
                        top = len(items) - 1
                        if start is not None and depth == start[0] and seq == start[1]:
                            top = start[2] - 1
                        if seg.item_seq is not None:
                            if seq > seg.item_seq:
                                continue
                            if seq == seg.item_seq:
                                top = min(top, seg.item_index)
                        for index in range(top, -1, -1):
                            key = (depth, seq, index)
                            if pending and key in pending:
                                pending.discard(key)
                                continue
                            if older_than is not None and _newer_or_equal(key, older_than):
                                continue
                            item = items[index]
                            if not isinstance(item, dict):
                                raise self._damaged(
                                    seg.session_id, seq, f"item {index} is not a JSON object"
                                )
                            yield key, item, tuple(sorted(pending)) if pending else ()
                    elif kind == POP:
                        t = msg.get("target")
                        if not (
                            isinstance(t, list) and len(t) == 3 and all(_is_count(v) for v in t)
                        ):
                            raise self._damaged(seg.session_id, seq, f"bad pop target {t!r}")
                        pending.add((depth + t[0], t[1], t[2]))
                    elif kind == CLEAR:
                        return
                if seen_events:
                    self._items_per_event = max(1.0, seen_items / seen_events)
                before = page.next_before_sequence
                if before is None:
                    break
                batch = min(1024, batch * 2)

    def _damaged(self, session_id: str, seq: int, what: str) -> CorruptionError:
        return CorruptionError(
            f"session {session_id!r}, event {seq}: undecodable agents record ({what})"
            + ("" if session_id == self.session_id else f" (read for {self.session_id!r})")
        )

    def _encode_cursor(self, generation: int, key: Key, pending: Sequence[Key]) -> str:
        tag = zlib.crc32(self.session_id.encode("utf-8", "surrogatepass"))
        raw = _cursor_encode([tag, generation, *key, [list(p) for p in pending]])
        return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def _decode_cursor(self, cursor: str) -> tuple[int, Key, list[Key]]:
        bad = InvalidInputError(f"not a cursor of session {self.session_id!r}: {cursor!r}")
        if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX):
            raise bad
        body = cursor[len(_CURSOR_PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            tag, gen, depth, seq, index, pend = _cursor_decode(raw)
            pending = [(int(a), int(b), int(c)) for a, b, c in pend]
        except (ValueError, TypeError, msgspec.DecodeError):
            raise bad from None
        if tag != zlib.crc32(self.session_id.encode("utf-8", "surrogatepass")):
            raise bad
        if not all(_is_count(v) for v in (gen, depth, seq, index)):
            raise bad
        return gen, (depth, seq, index), pending


def _newer_or_equal(a: Key, b: Key) -> bool:
    """Whether item `a` is `b` or newer than it (newest first: depth asc, then seq/index desc)."""
    if a[0] != b[0]:
        return a[0] < b[0]
    return (a[1], a[2]) >= (b[1], b[2])


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

"""Reading conversations from a journal store: records, entries and histories.

A history is read by following parent locations from its head (records.py): one
newest-first `event_page` per run of entries in one session, through a
`SessionReader` per session, so a history of n entries costs about n / page
events read and decoded, and a `limit`ed one reads only its tail. Messages are
decoded with one pydantic validation per history.

`EntryIndex` remembers where this process has seen entries (LRU): a record's
head and branch tips when it is read, each entry when it is decoded. An entry
id it does not know (an id from another process given straight to
`read_entry`) is looked for in every conversation's log (`find`), slowly.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from pydantic_ai.conversation_store import ConversationEntry
from pydantic_ai.exceptions import UserError

from journal import (
    Checkpoint,
    EventPageRequest,
    NotFoundError,
    SessionPageRequest,
    SessionReader,
    Store,
)

from .records import (
    ENTRY,
    ORIGIN_LABEL,
    Location,
    RawEntry,
    Stored,
    decode_meta,
    is_conversation,
    raw_entry,
)
from .records import load_entries as decode_entries

_FIRST_PAGE = 64
_MAX_PAGE = 2048


class EntryIndex:
    """entry id -> location, for the entries this process saw most recently."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._map: OrderedDict[str, Location] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, entry_id: str, at: Location) -> None:
        with self._lock:
            self._map[entry_id] = at
            self._map.move_to_end(entry_id)
            while len(self._map) > self.capacity:
                self._map.popitem(last=False)

    def get(self, entry_id: str) -> Location | None:
        with self._lock:
            at = self._map.get(entry_id)
            if at is not None:
                self._map.move_to_end(entry_id)
            return at


class Reads:
    """The reads of a `JournalConversationStore` (blocking; run in worker threads)."""

    def __init__(self, store: Store, index: EntryIndex):
        self.store = store
        self.index = index

    # ------------------------------------------------------------------ records
    def stored(self, session_id: str) -> tuple[Checkpoint | None, Stored | None]:
        """A session's checkpoint and conversation state (None, None: no session)."""
        cp = self.store.load(session_id)
        if cp is None:
            return None, None
        if not is_conversation(cp):
            raise UserError(
                f"journal session {session_id!r} in {self.store.root}"
                " is not a pydantic-ai conversation"
            )
        stored = decode_meta(cp)
        if stored.head_at is not None and stored.record is not None and stored.record.head_id:
            self.index.note(stored.record.head_id, stored.head_at)
        for tip, at in stored.branches_at.items():
            self.index.note(tip, at)
        return cp, stored

    def sessions(self, owner_id: str | None) -> Iterator[str]:
        """The ids of this integration's sessions (deleted conversations' included)."""
        request = SessionPageRequest(limit=500, owner_id=owner_id)
        while True:
            page = self.store.list_sessions_page(request)
            for summary in page.sessions:
                if summary.session_context.origin_label == ORIGIN_LABEL:
                    yield summary.session_id
            if page.next_cursor is None:
                return
            request = SessionPageRequest(limit=500, owner_id=owner_id, cursor=page.next_cursor)

    # ---------------------------------------------------------------- histories
    def walk(self, at: Location | None, entry_id: str | None, limit: int | None) -> list[RawEntry]:
        """The entries from `entry_id` (stored at `at`) back along its parents, newest
        first, at most `limit`. NotFoundError (a LookupError) if one is not where its
        child says (its session deleted, or deleted and created again)."""
        out: list[RawEntry] = []
        seen: dict[str, dict[int, Any]] = {}
        readers: dict[str, SessionReader] = {}
        size = _FIRST_PAGE if limit is None else max(1, min(limit, _MAX_PAGE))
        try:
            while at is not None and entry_id is not None and (limit is None or len(out) < limit):
                sid, seq = at
                events = seen.setdefault(sid, {})
                msg = events.get(seq)
                if msg is None:
                    reader = readers.get(sid)
                    if reader is None:
                        reader = readers[sid] = self.store.reader(sid)
                    want = size if limit is None else max(1, min(limit - len(out), _MAX_PAGE))
                    page = reader.event_page(EventPageRequest(before_sequence=seq + 1, limit=want))
                    for ev in page.events:
                        events[ev.sequence] = ev.event.msg
                    size = min(size * 2, _MAX_PAGE)
                    msg = events.get(seq)
                if msg is None:
                    raise NotFoundError(f"entry {entry_id!r}: session {sid!r} has no event {seq}")
                raw = raw_entry(msg, at)
                if raw.id != entry_id:
                    raise NotFoundError(
                        f"entry {entry_id!r}: event {seq} of session {sid!r} holds {raw.id!r}"
                    )
                out.append(raw)
                entry_id, at = raw.parent_id, raw.parent_at
        finally:
            for reader in readers.values():
                reader.close()
        for raw in reversed(out):  # oldest first: the head is the last one evicted
            self.index.note(raw.id, raw.at)
        return out

    def locate(self, entry_id: str) -> Location | None:
        """Where an entry is: from the index, else by looking through every log."""
        at = self.index.get(entry_id)
        return at if at is not None else self.find(entry_id)

    def find(self, entry_id: str) -> Location | None:
        """An entry's location found by reading every conversation's log (slow path)."""
        for sid in list(self.sessions(None)):
            after = 0
            while True:
                try:
                    events = self.store.events_after(sid, after, 1024)
                except NotFoundError:
                    break
                for ev in events:
                    msg = ev.event.msg
                    if msg.get("type") == ENTRY and msg.get("id") == entry_id:
                        at = (sid, ev.sequence)
                        self.index.note(entry_id, at)
                        return at
                if len(events) < 1024:
                    break
                after = events[-1].sequence
        return None

    def history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        """pydantic-ai's `read_history`: the entries up to `head_id`, oldest first."""
        if head_id is None or limit == 0:
            return []
        at = self.locate(head_id)
        if at is None:
            raise KeyError(head_id)  # as the in-memory store: a LookupError
        raws = self.walk(at, head_id, limit)
        raws.reverse()
        return decode_entries(raws)

    def entry(self, entry_id: str) -> ConversationEntry:
        return self.history(entry_id, 1)[0]

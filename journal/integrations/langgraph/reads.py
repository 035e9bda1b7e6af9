"""The saver's reads of the store: through one `Store.reader` per block of reads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from journal import (
    Checkpoint,
    EventPage,
    EventPageRequest,
    JournalEvent,
    NotFoundError,
    SessionReader,
    Store,
)


class SessionReads:
    """Reads of sessions, each one from the store or from the reader of a `reading`
    block. Call with the session's lock held: only its holder reads it here."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # Sessions whose reads go through one `Store.reader` (`reading`): its
        # reader, made at the block's first read (None: not made yet).
        self._readers: dict[str, SessionReader | None] = {}

    @contextlib.contextmanager
    def reading(self, sid: str) -> Iterator[None]:
        """The store reads of `sid` in this block share one `Store.reader`, which
        checks the session once instead of at every read (a cold `list` makes
        about ten).

        The reader is made at the block's first read, not here: the index reads
        the session's incarnation before its first read, and a reader made
        before that could hold an older incarnation than the one the index is
        then labelled with (`renew` drops it when the index starts over).
        Reads through it see at least what was committed when it was made, and
        perhaps later commits (what the saver's reads already allow: each one
        caught up with what came before; `Store.reader`).
        """
        if sid in self._readers:  # nested: the outer block's reader
            yield
            return
        self._readers[sid] = None
        try:
            yield
        finally:
            reader = self._readers.pop(sid, None)
            if reader is not None:
                reader.close()

    def reader(self, sid: str) -> SessionReader | None:
        """The reader of a `reading` block for `sid` (None outside one: read the
        store). Raises `NotFoundError` if the session does not exist."""
        if sid not in self._readers:
            return None
        reader = self._readers[sid]
        if reader is None:
            reader = self._readers[sid] = self.store.reader(sid)
        return reader

    def renew(self, sid: str) -> None:
        """Drop the block's reader: the next read makes a new one (see `reading`)."""
        reader = self._readers.get(sid)
        if reader is not None:
            self._readers[sid] = None
            reader.close()

    def event_page(self, sid: str, request: EventPageRequest) -> EventPage:
        reader = self.reader(sid)
        if reader is None:
            return self.store.event_page(sid, request)
        return reader.event_page(request)

    def events_after(self, sid: str, after: int, limit: int) -> list[JournalEvent]:
        try:
            reader = self.reader(sid)
        except NotFoundError:
            return []  # what `Store.events_after` answers for a missing session
        if reader is None:
            return self.store.events_after(sid, after, limit)
        return reader.events_after(after, limit)

    def load(self, sid: str) -> Checkpoint | None:
        try:
            reader = self.reader(sid)
        except NotFoundError:
            return None
        return self.store.load(sid) if reader is None else reader.load()

    def checkpoint_at(self, sid: str, seq: int) -> Checkpoint | None:
        try:
            reader = self.reader(sid)
        except NotFoundError:
            return None
        return self.store.checkpoint_at(sid, seq) if reader is None else reader.checkpoint_at(seq)

    def load_prefix(self, sid: str, items: int) -> Checkpoint | None:
        """The head with only its first `items` context items decoded, through the
        block's reader (`SessionReader.load_prefix`). None outside a block, or if
        the session is gone."""
        try:
            reader = self.reader(sid)
        except NotFoundError:
            return None
        if reader is None:
            return None
        return reader.load_prefix(items)

"""Reads of a session: the store's (`read_session`), and `SessionReader`'s, checked
once when it is made (`Store.reader`).

Both run under `read_of_this_incarnation`: a read that opened a file of the
session after the session was deleted and created again must not answer with the
new one's bytes.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from . import validate
from .calls import Release, guarded, page_request
from .errors import InvalidInputError, JournalError, NotFoundError, StorageError
from .opened import OpenSessions
from .session import Session
from .sessionstate import SessionGone
from .types import Checkpoint, EventPage, EventPageRequest, JournalEvent

T = TypeVar("T")


def read_of_this_incarnation(sess: Session, fn: Callable[[Session], T]) -> T:
    """`fn(sess)`, or `SessionGone` if it may have read another incarnation's file.

    A session's files are opened by path when a read first needs them. One the
    read opened after the session was deleted and created again (by another
    process, after this process's checks) is the new session's: its bytes must
    not be answered as this session's. Reads that open no file, nearly all of
    them, cost one comparison more.
    """
    log = sess.log
    opened = log.opened
    result = fn(sess)
    if log.opened != opened and not sess.still_published():
        log.forget_opened_since(opened)  # nor may the next read use them
        raise SessionGone(f"session {sess.id!r} was deleted during the read")
    return result


def read_session(
    sessions: OpenSessions, session_id: str, fn: Callable[[Session], T], absent: Callable[[], T]
) -> T:
    """Run a read on a session's current state; `absent()` answers for a missing session
    (the store's reads).

    A read can race with a delete in another process, which moves the session
    directory away while this process opens or reads it. Such a failure is
    not damage: the session is gone, and the read answers as if it had come
    just after the delete (a valid order for two concurrent calls).
    """
    for _ in range(2):
        try:
            # This process wrote last and nobody locked since: no checks, no probes.
            sess = sessions.cached(session_id)
            if sess is not None and sess.quiet_for_reads():
                return read_of_this_incarnation(sess, fn)
            sess = sessions.get(session_id)
            if sess is not None:
                sess.refresh()
                return read_of_this_incarnation(sess, fn)
        except SessionGone:
            continue  # deleted (and maybe created again) under the read: look again
        except (JournalError, OSError):
            if not sessions.vanished(session_id):
                raise
        return absent()
    if sessions.vanished(session_id):
        return absent()
    raise StorageError(
        f"session {session_id!r} was deleted and created again during each of two reads"
    )


def open_reader(sessions: OpenSessions, session_id: str) -> SessionReader:
    """A `SessionReader` of a session checked now (`Store.reader`), or `NotFoundError`."""
    try:
        sess = sessions.cached(session_id)
        if sess is None or not sess.quiet_for_reads():
            sess = sessions.get(session_id)
            if sess is not None:
                sess.refresh()
    except (JournalError, OSError):
        if not sessions.vanished(session_id):
            raise
        sess = None
    if sess is None or not sess.exists:
        raise NotFoundError(f"session does not exist: {session_id!r}")
    sessions.hold(sess)  # the reader's own pin (the call's goes when it returns)
    return SessionReader(
        session_id,
        sess,
        release=sessions.release,
        closed=lambda: sessions.closed,
        vanished=sessions.vanished,
    )


class SessionReader:
    """Reads of one session, checked once when made (`Store.reader`).

    Usable from any thread; `close()` (or leaving a `with` block) releases the
    session once the reads in progress are done; reading after that raises
    `InvalidInputError`. A reader dropped unclosed releases it when collected.
    """

    def __init__(
        self,
        session_id: str,
        sess: Session,
        *,
        release: Release,
        closed: Callable[[], bool],
        vanished: Callable[[str], bool],
    ):
        """`sess` pinned for the reader, `release` unpins it; `closed()` says whether
        the store is closed, `vanished(session_id)` whether the session is deleted
        or being deleted (`Store.reader` passes its own)."""
        self.session_id = session_id
        self._sess: Session | None = sess
        self._closed = closed
        self._vanished = vanished
        self._mutex = threading.Lock()
        self._reading = 0  # reads in progress: `close` leaves the session to the last
        # The pin goes with the reader, closed or not (it kept the session's files open
        # past `Store.close` otherwise). No reference to self, or it is never collected.
        self._release = weakref.finalize(self, release, [sess])

    def _read(self, fn: Callable[[Session], T], absent: Callable[[], T]) -> T:
        """The store's read without its checks: `absent()` answers if the session
        vanished and the read failed (a delete in another process moved its files
        away), or if it had to open a file of the session after the session was
        deleted."""
        with self._mutex:
            sess = self._sess
            if sess is None:
                raise InvalidInputError(f"reader of session {self.session_id!r} is closed")
            self._reading += 1
        try:
            if self._closed():
                raise JournalError("store is closed")
            try:
                return read_of_this_incarnation(sess, fn)
            except SessionGone:
                pass
            except (JournalError, OSError):
                if not self._vanished(self.session_id):
                    raise
            return absent()
        finally:
            with self._mutex:
                self._reading -= 1
                last = self._reading == 0 and self._sess is None
            if last:
                self._release()  # closed meanwhile: this was the last read

    def _missing(self) -> Any:
        raise NotFoundError(f"event journal session does not exist: {self.session_id!r}")

    @guarded
    def event_page(self, request: EventPageRequest) -> EventPage:
        """`Store.event_page` of this session."""
        req = page_request(self.session_id, request, EventPageRequest, "event journal page")

        def page(sess: Session) -> EventPage:
            latest, events, nxt = sess.event_page(req.before_sequence, req.limit)
            return EventPage(latest_sequence=latest, events=events, next_before_sequence=nxt)

        result: EventPage = self._read(page, self._missing)
        return result

    @guarded
    def events_after(self, after_sequence: int, limit: int) -> list[JournalEvent]:
        """`Store.events_after` of this session."""
        validate.validate_sequence(after_sequence, "after_sequence")
        validate.validate_limit(limit, "event journal catch-up")
        return self._read(lambda sess: sess.events_after(after_sequence, limit), list)

    @guarded
    def load(self) -> Checkpoint | None:
        """`Store.load` of this session."""
        return self._read(lambda sess: sess.load(), lambda: None)

    @guarded
    def checkpoint_at(self, sequence: int) -> Checkpoint | None:
        """`Store.checkpoint_at` of this session."""
        validate.validate_sequence(sequence, "checkpoint sequence")
        return self._read(lambda sess: sess.checkpoint_at(sequence), lambda: None)

    @guarded
    def load_prefix(self, items: int) -> Checkpoint | None:
        """`load` with only the first `items` items of the context (all if it has
        fewer; 0: none). Within a context epoch every older checkpoint's context
        is a prefix of the newest one's: this reads such a prefix without
        decoding the rest of a long context. Not a checkpoint to save again."""
        validate.validate_sequence(items, "context prefix length")
        return self._read(lambda sess: sess.load_prefix(items), lambda: None)

    def close(self) -> None:
        """Release the session (idempotent); reads in progress finish first."""
        with self._mutex:
            self._sess = None
            idle = self._reading == 0
        if idle:
            self._release()  # at most once, however many calls

    def __enter__(self) -> SessionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

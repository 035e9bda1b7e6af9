"""`Store`: the synchronous, thread-safe CheckpointStore over a directory tree.

    ROOT/JOURNAL            store manifest (format version)
    ROOT/sessions/<name>/   one self-contained directory per session (session.py)
    ROOT/state/<scope>/     middleware state, one file per key (state.py)
    ROOT/tmp/               directories being built before they are published by rename

Every public method validates its input before touching anything, maps the
session id to its directory, and translates failures into `JournalError`s.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, cast

import msgspec

from . import validate
from .errors import (
    CorruptionError,
    FormatVersionError,
    InvalidInputError,
    JournalError,
    NotFoundError,
    StorageError,
)
from .metafile import KIND_MANIFEST, read_meta, write_meta
from .naming import dir_name
from .session import Session, SessionIdentity, SessionOptions
from .state import StateStore
from .types import (
    Checkpoint,
    Event,
    EventPage,
    EventPageRequest,
    ExecutionPage,
    ExecutionPageRequest,
    ExecutionRecord,
    JournalEvent,
    TimestampedEvent,
    TranscriptPage,
    TranscriptPageRequest,
)

MANIFEST_FILE = "JOURNAL"
SESSIONS_DIR = "sessions"
TMP_DIR = "tmp"
STORE_FORMAT = 1

Durability = Literal["fsync", "os"]

F = TypeVar("F", bound=Callable[..., Any])


class Manifest(msgspec.Struct):
    format: int = STORE_FORMAT
    created_at: int = 0


def _guard(fn: F) -> F:
    """Translate any stray dependency or OS exception into a JournalError."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except JournalError:
            raise
        except (msgspec.ValidationError, msgspec.EncodeError, TypeError) as exc:
            raise InvalidInputError(f"{fn.__name__}: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise CorruptionError(f"{fn.__name__}: stored data does not decode: {exc}") from exc
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise StorageError(f"{fn.__name__}: {exc.strerror or exc}{where}") from exc

    return cast(F, wrapper)


def _coerce(value: Any, typ: type[Any], what: str) -> Any:
    if isinstance(value, typ):
        return value
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError as exc:
        raise InvalidInputError(f"{what} is not a valid {typ.__name__}: {exc}") from exc


class Store:
    """A journal store rooted at one directory. Use `journal.open(root)`."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durability: Durability = "fsync",
        segment_bytes: int = 64 << 20,
        lock_timeout: float = 10.0,
        max_record_bytes: int = 64 << 20,
        create: bool = True,
    ):
        if durability not in ("fsync", "os"):
            raise InvalidInputError(f"durability must be 'fsync' or 'os', not {durability!r}")
        if segment_bytes < 4096:
            raise InvalidInputError("segment_bytes must be at least 4096")
        self.root = os.path.abspath(os.fspath(root))
        self.durability: Durability = durability
        self.options = SessionOptions(
            durable=durability == "fsync",
            segment_bytes=segment_bytes,
            lock_timeout=lock_timeout,
            max_record_bytes=max_record_bytes,
        )
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._open_root(create)
        self.state = StateStore(self.root, durable=self.options.durable)

    # ----------------------------------------------------------------- layout
    def _open_root(self, create: bool) -> None:
        manifest = os.path.join(self.root, MANIFEST_FILE)
        try:
            raw = read_meta(manifest, KIND_MANIFEST)
        except FileNotFoundError:
            if not create:
                raise NotFoundError(f"no journal store at {self.root}") from None
            if os.path.isdir(self.root) and os.listdir(self.root):
                raise InvalidInputError(
                    f"{self.root} is not empty and is not a journal store (no {MANIFEST_FILE})"
                ) from None
            self._create_root(manifest)
            return
        info = msgspec.msgpack.decode(raw, type=Manifest)
        if info.format != STORE_FORMAT:
            raise FormatVersionError(
                f"store {self.root} has format {info.format}; this version reads {STORE_FORMAT}"
            )
        for sub in (SESSIONS_DIR, TMP_DIR):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)

    def _create_root(self, manifest: str) -> None:
        from . import fsio

        try:
            os.makedirs(self.root, exist_ok=True)
            for sub in (SESSIONS_DIR, TMP_DIR, "state"):
                os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create store at {self.root}: {exc.strerror}") from exc
        fsio.sync_dir(self.root)
        payload = msgspec.msgpack.encode(Manifest(STORE_FORMAT, int(time.time())))
        write_meta(manifest, KIND_MANIFEST, payload, durable=True)
        parent = os.path.dirname(self.root)
        if parent:
            fsio.sync_dir(parent)

    def session_dir(self, session_id: str) -> str:
        return os.path.join(self.root, SESSIONS_DIR, dir_name(session_id))

    def _session(self, session_id: str, *, create: bool = False) -> Session | None:
        """The open Session for an id (None if it has no directory and not `create`)."""
        if self._closed:
            raise JournalError("store is closed")
        path = self.session_dir(session_id)
        with self._lock:
            sess = self._sessions.get(session_id)
        if sess is not None:
            if os.path.exists(os.path.join(path, "SESSION")):
                return sess
            with self._lock:
                self._sessions.pop(session_id, None)
            sess.close()
        if not os.path.isdir(path):
            if not create:
                return None
            self._publish_new(session_id, path)
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is None:
                sess = Session(path, session_id, self.options)
                self._sessions[session_id] = sess
            return sess

    def _publish_new(
        self, session_id: str, path: str, identity: SessionIdentity | None = None
    ) -> None:
        """Create a session directory in tmp/ and rename it into place (atomic)."""
        from . import fsio

        tmp = os.path.join(self.root, TMP_DIR, f"new-{uuid.uuid4().hex}")
        ident = identity or SessionIdentity(session_id, created_at=int(time.time()))
        Session.build(tmp, ident)
        fsio.sync_dir(os.path.join(self.root, TMP_DIR))
        try:
            fsio.rename(tmp, path)
        except StorageError:
            if os.path.isdir(path):  # another thread or process created it first
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
                return
            raise
        fsio.sync_dir(os.path.dirname(path))

    def _existing(self, session_id: str) -> Session:
        sess = self._session(session_id)
        if sess is None:
            raise NotFoundError(f"session {session_id!r} does not exist")
        sess.refresh()
        return sess

    # -------------------------------------------------------------- checkpoint
    @_guard
    def load(self, session_id: str) -> Checkpoint | None:
        """The latest checkpoint of a session, or None if the session does not exist."""
        validate.validate_session_id(session_id)
        sess = self._session(session_id)
        if sess is None:
            return None
        sess.refresh()
        return sess.load()

    @_guard
    def checkpoint_at(self, session_id: str, sequence: int) -> Checkpoint | None:
        """The checkpoint exactly as it was saved at `sequence` (None if none was)."""
        validate.validate_session_id(session_id)
        validate.validate_sequence(sequence, "checkpoint sequence")
        sess = self._session(session_id)
        if sess is None:
            return None
        sess.refresh()
        return sess.checkpoint_at(sequence)

    @_guard
    def save(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = (),
        execution: ExecutionRecord | None = None,
    ) -> None:
        """Atomically replace the checkpoint, append transcript items, record a finished turn."""
        self.save_with_events(checkpoint, transcript_delta, execution, ())

    @_guard
    def save_with_events(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = (),
        execution: ExecutionRecord | None = None,
        events: Sequence[TimestampedEvent] = (),
    ) -> list[JournalEvent]:
        """One commit: checkpoint + transcript delta + execution record + receipts + events.

        Returns the events with their store-assigned sequences, only after the
        commit is durable (in "fsync" mode).
        """
        cp: Checkpoint = _coerce(checkpoint, Checkpoint, "checkpoint")
        validate.validate_session_id(cp.session_id)
        sess_hint = self._session(cp.session_id)
        start = 0
        if sess_hint is not None and sess_hint.head.epoch == cp.context_epoch:
            start = min(len(sess_hint.head.context), len(cp.context))
        validate.validate_checkpoint(cp, context_start=start)
        items = list(transcript_delta)
        validate.check_json_value(items, "transcript_delta")
        rec: ExecutionRecord | None = None
        if execution is not None:
            rec = _coerce(execution, ExecutionRecord, "execution")
            validate.validate_execution(rec, cp)
        evs = [_coerce(e, TimestampedEvent, "event") for e in events]
        for e in evs:
            validate.validate_timestamp(e.recorded_at_ms)
            validate.validate_event(e.event)
        sess = self._session(cp.session_id, create=True)
        assert sess is not None
        return sess.save(cp, items, rec, evs, now=int(time.time()))

    @_guard
    def message_accepted(self, session_id: str, submission_id: str) -> bool:
        """Whether this session durably admitted a message with this submission id."""
        validate.validate_session_id(session_id)
        if not isinstance(submission_id, str):
            raise InvalidInputError("submission id must be a string")
        sess = self._session(session_id)
        if sess is None:
            return False
        sess.refresh()
        return sess.receipt(submission_id)

    # ------------------------------------------------------------------ events
    @_guard
    def append_event(self, session_id: str, recorded_at_ms: int, event: Event) -> JournalEvent:
        """Assign the next event sequence and append one event as its own commit."""
        validate.validate_session_id(session_id)
        validate.validate_timestamp(recorded_at_ms)
        ev: Event = _coerce(event, Event, "event")
        validate.validate_event(ev)
        sess = self._session(session_id)
        if sess is None:
            raise NotFoundError(f"event journal session does not exist: {session_id!r}")
        return sess.append_event(recorded_at_ms, ev)

    @_guard
    def event_page(self, session_id: str, request: EventPageRequest) -> EventPage:
        """One newest-first page of retained events, `sequence < before_sequence`."""
        validate.validate_session_id(session_id)
        req: EventPageRequest = _coerce(request, EventPageRequest, "request")
        validate.validate_limit(req.limit, "event journal page")
        if req.before_sequence is not None:
            validate.validate_sequence(req.before_sequence, "before_sequence")
        sess = self._session(session_id)
        if sess is not None:
            sess.refresh()
        if sess is None or not sess.exists:
            raise NotFoundError(f"event journal session does not exist: {session_id!r}")
        latest, events, nxt = sess.event_page(req.before_sequence, req.limit)
        return EventPage(latest_sequence=latest, events=events, next_before_sequence=nxt)

    @_guard
    def events_after(self, session_id: str, after_sequence: int, limit: int) -> list[JournalEvent]:
        """Retained events with `sequence > after_sequence`, oldest first (catch-up)."""
        validate.validate_session_id(session_id)
        validate.validate_sequence(after_sequence, "after_sequence")
        validate.validate_limit(limit, "event journal catch-up")
        sess = self._session(session_id)
        if sess is None:
            return []
        sess.refresh()
        return sess.events_after(after_sequence, limit)

    # ---------------------------------------------------------------- journals
    @_guard
    def transcript_page(self, session_id: str, request: TranscriptPageRequest) -> TranscriptPage:
        """One newest-first page of transcript batches (keyed by checkpoint sequence)."""
        validate.validate_session_id(session_id)
        req: TranscriptPageRequest = _coerce(request, TranscriptPageRequest, "request")
        validate.validate_limit(req.max_batches, "transcript page")
        if req.before_sequence is not None:
            validate.validate_sequence(req.before_sequence, "before_sequence")
        sess = self._session(session_id)
        if sess is None:
            return TranscriptPage(batches=[], next_before_sequence=None)
        sess.refresh()
        batches, nxt = sess.transcript_page(req.before_sequence, req.max_batches)
        return TranscriptPage(batches=batches, next_before_sequence=nxt)

    @_guard
    def execution_page(self, session_id: str, request: ExecutionPageRequest) -> ExecutionPage:
        """One newest-first page of finished user turns (keyed by checkpoint sequence)."""
        validate.validate_session_id(session_id)
        req: ExecutionPageRequest = _coerce(request, ExecutionPageRequest, "request")
        validate.validate_limit(req.limit, "execution page")
        if req.before_sequence is not None:
            validate.validate_sequence(req.before_sequence, "before_sequence")
        sess = self._session(session_id)
        if sess is None:
            return ExecutionPage(executions=[], next_before_sequence=None)
        sess.refresh()
        records, nxt = sess.execution_page(req.before_sequence, req.limit)
        return ExecutionPage(executions=records, next_before_sequence=nxt)

    # ------------------------------------------------------------------- state
    @_guard
    def load_state(self, scope: str, key: str) -> Any:
        """The latest value saved under (scope, key), or None."""
        validate.validate_session_id(scope, "state scope")
        validate.validate_session_id(key, "state key")
        return self.state.load(scope, key)

    @_guard
    def save_state(self, scope: str, key: str, value: Any) -> None:
        """Durably replace the value under (scope, key); last writer wins."""
        validate.validate_session_id(scope, "state scope")
        validate.validate_session_id(key, "state key")
        validate.check_json_value(value, "state value")
        self.state.save(scope, key, value)

    # --------------------------------------------------------------- lifecycle
    def flush(self) -> None:
        """Write every open session's caches (indexes, snapshot). Never needed for safety."""
        with self._lock:
            sessions = list(self._sessions.values())
        for sess in sessions:
            try:
                with sess.writing():
                    sess.flush_caches()
            except JournalError:
                continue  # a cache we cannot write now is rebuilt later

    def close(self) -> None:
        """Flush caches and release files. The store object is unusable afterwards."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            self._closed = True
        for sess in sessions:
            sess.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(root: str | os.PathLike[str], **options: Any) -> Store:
    return Store(root, **options)

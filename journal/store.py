"""`Store`: the synchronous, thread-safe CheckpointStore over a directory tree.

    ROOT/JOURNAL            store manifest (format version)
    ROOT/sessions/<name>/   one self-contained directory per session (session.py)
    ROOT/state/<scope>/     middleware state, one file per key (state.py)
    ROOT/tmp/               directories being built before they are published by rename

Every public method validates its input before touching anything, maps the
session id to its directory, and translates failures into `JournalError`s.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Literal, TypeVar, cast

import msgspec

from . import dictionary, fsio, sessiondir, storecreate, validate
from .cache import ReadCache
from .catalog import (
    OP_DELETE,
    OP_EXECUTION,
    OP_RESET,
    OP_UPSERT,
    Catalog,
    CatalogRecord,
    ProcessRegistry,
    check_boot,
    record_boot,
    sort_key,
)
from .errors import (
    ContractViolationError,
    CorruptionError,
    FormatVersionError,
    InvalidInputError,
    JournalError,
    LockTimeoutError,
    NotFoundError,
    StorageError,
    UnfinishedSessionError,
)
from .index import KIND_EXECUTIONS
from .layout import LOCK_FILE, MANIFEST_FILE, SESSIONS_DIR, TMP_DIR, dir_name
from .locks import FileLock
from .log import SEGMENT_HEADER_SIZE
from .metafile import KIND_MANIFEST, read_meta
from .rootcheck import RootGuard
from .session import Session, SessionGone, SessionOptions
from .sessiondir import SessionIdentity
from .spares import Spare, SparePool, at_low_priority
from .state import StateStore
from .tree import DeleteIntent, Tree
from .types import (
    Checkpoint,
    Event,
    EventPage,
    EventPageRequest,
    ExecutionPage,
    ExecutionPageRequest,
    ExecutionRecord,
    ExecutionStats,
    JournalEvent,
    SessionContext,
    SessionCursor,
    SessionPage,
    SessionPageRequest,
    SessionSummary,
    TimestampedEvent,
    TranscriptPage,
    TranscriptPageRequest,
)

STORE_FORMAT = 1

Durability = Literal["fsync", "os"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Manifest(msgspec.Struct):
    format: int = STORE_FORMAT
    created_at: int = 0


class _CallState(threading.local):
    """Per thread: how deep in public calls, and the sessions the outermost pinned."""

    def __init__(self) -> None:
        self.depth = 0
        self.pinned: list[Session] = []


_calls = _CallState()


def _guard(fn: F) -> F:
    """Translate any stray dependency or OS exception into a JournalError.

    Also pins every session the call opens, so the open-session cache never
    closes one that a call is still using; the outermost call unpins them.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls = _calls
        depth = calls.depth
        calls.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        except JournalError:
            raise
        except (msgspec.ValidationError, msgspec.EncodeError, TypeError, UnicodeError) as exc:
            # UnicodeError: a str with a lone surrogate, which UTF-8 cannot hold.
            raise InvalidInputError(f"{fn.__name__}: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise CorruptionError(f"{fn.__name__}: stored data does not decode: {exc}") from exc
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise StorageError(f"{fn.__name__}: {exc.strerror or exc}{where}") from exc
        finally:
            calls.depth = depth
            if depth == 0 and calls.pinned:
                pinned, calls.pinned = calls.pinned, []
                if isinstance(args[0], Store):
                    args[0]._unpin(pinned)

    return cast(F, wrapper)


_encode_execution = msgspec.msgpack.Encoder().encode
_execution_decoder = msgspec.msgpack.Decoder(ExecutionRecord)


def _decode_execution(body: bytes) -> ExecutionRecord | None:
    """A catalog copy of an execution record (None if it does not decode: use the log)."""
    try:
        return _execution_decoder.decode(body)
    except msgspec.DecodeError:
        return None


def _coerce(value: Any, typ: type[Any], what: str) -> Any:
    if isinstance(value, typ):
        return value
    try:
        return msgspec.convert(value, typ)
    except (msgspec.ValidationError, UnicodeError) as exc:
        raise InvalidInputError(f"{what} is not a valid {typ.__name__}: {exc!r}") from exc


PageRequest = TypeVar("PageRequest", EventPageRequest, TranscriptPageRequest, ExecutionPageRequest)


def _page_request(session_id: str, request: Any, typ: type[PageRequest], what: str) -> PageRequest:
    """Check a newest-first page request: the session id, the page size, the cursor."""
    validate.validate_session_id(session_id)
    req: PageRequest = _coerce(request, typ, "request")
    size = req.max_batches if isinstance(req, TranscriptPageRequest) else req.limit
    validate.validate_limit(size, what)
    if req.before_sequence is not None:
        validate.validate_sequence(req.before_sequence, "before_sequence")
    return req


def _sequence(value: Any, what: str) -> list[Any]:
    """A list or tuple argument as a list (a str, bytes or dict is not a sequence of items)."""
    if not isinstance(value, (list, tuple)):
        raise InvalidInputError(f"{what} must be a list, not {type(value).__name__}")
    return list(value)


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
        max_open_sessions: int = 256,
        read_cache_bytes: int = 8 << 20,
        create: bool = True,
        read_only: bool = False,
        dictionary: bool = True,
    ):
        if durability not in ("fsync", "os"):
            raise InvalidInputError(f"durability must be 'fsync' or 'os', not {durability!r}")
        if segment_bytes < 4096:
            raise InvalidInputError("segment_bytes must be at least 4096")
        if max_open_sessions < 1:
            raise InvalidInputError("max_open_sessions must be at least 1")
        if read_cache_bytes < 0:
            raise InvalidInputError("read_cache_bytes must be 0 (no cache) or more")
        self.root = os.path.abspath(os.fspath(root))
        # Read-only: takes no lock, writes nothing (no cache flush, no recovery, no
        # catalog append); for inspecting a store another process is writing.
        self.read_only = read_only
        if read_only:
            create = False
        self.durability: Durability = durability
        self.options = SessionOptions(
            durable=durability == "fsync",
            segment_bytes=segment_bytes,
            lock_timeout=lock_timeout,
            max_record_bytes=max_record_bytes,
            read_cache=ReadCache(read_cache_bytes) if read_cache_bytes else None,
            dictionary=dictionary and not read_only,
        )
        # Open sessions, least recently used first; each holds a few file descriptors.
        self._sessions: dict[str, Session] = {}
        self.max_open_sessions = max_open_sessions
        self._lock = threading.Lock()
        self._closed = False
        self._open_root(create)
        self.state = StateStore(self.root, durable=self.options.durable, guard=self.guard)
        self.tree = Tree(self.root, lock_timeout)
        self.registry = ProcessRegistry(self.root)
        self.spares = SparePool(os.path.join(self.root, TMP_DIR), guard=self.guard)
        self.catalog = self._open_catalog()
        self._last_reconcile = 0.0
        # Directory names of sessions whose commit is durable but whose catalog
        # append failed (`_catalog_publish`), each with a count of such failures:
        # re-derived before the next listing, or left to the next open (`close`),
        # so the catalog never stays behind for good.
        self._unannounced: dict[str, int] = {}
        self._announce_retry_at = 0.0  # 0 when a new failure came: try at once
        self._startup_recovery()

    # ----------------------------------------------------------------- layout
    def _open_root(self, create: bool) -> None:
        manifest = os.path.join(self.root, MANIFEST_FILE)
        try:
            raw = read_meta(manifest, KIND_MANIFEST)
        except FileNotFoundError:
            if not create:
                raise NotFoundError(f"no journal store at {self.root}") from None
            payload = msgspec.msgpack.encode(Manifest(STORE_FORMAT, int(time.time())))
            storecreate.create_or_finish(self.root, MANIFEST_FILE, payload)
            self.guard = RootGuard(self.root)
            return
        info = msgspec.msgpack.decode(raw, type=Manifest)
        if info.format != STORE_FORMAT:
            raise FormatVersionError(
                f"store {self.root} has format {info.format}; this version reads {STORE_FORMAT}"
            )
        self.guard = RootGuard(self.root)
        storecreate.ensure_dirs(self.root)

    def session_dir(self, session_id: str) -> str:
        return os.path.join(self.root, SESSIONS_DIR, dir_name(session_id))

    def _session(self, session_id: str) -> Session | None:
        """The open Session for an id (None if it has no directory).

        A new session's directory is only ever published with its first commit
        (`_first_save`, `fork`), so this never creates one.
        """
        if self._closed:
            raise JournalError("store is closed")
        name = dir_name(session_id)
        if name in self.tree.pending_session_dirs():
            # Best effort: a delete that cannot be finished now (the disk failing)
            # is finished by a later call; its sessions are gone for readers either way.
            with contextlib.suppress(JournalError, OSError):
                self._finish_orphaned_deletes()
            if name in self.tree.pending_session_dirs():
                return None  # being deleted by a live process: already gone for readers
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is not None:
                self._pin(session_id, sess)
        if sess is not None and sess.still_published():
            return sess
        path = self.session_dir(session_id)
        if sess is not None:
            with self._lock:
                if self._sessions.get(session_id) is sess:
                    del self._sessions[session_id]
            self._retire([sess])
        for _ in range(8):
            if not os.path.isdir(path):
                return None
            with self._lock:
                sess = self._sessions.get(session_id)
                if self._closed:
                    raise JournalError("store is closed")
                if sess is None:
                    try:
                        sess = Session(path, session_id, self.options)
                        sess.doomed = functools.partial(self._doomed, name)
                        sess.on_samples = functools.partial(self._want_dictionary, session_id)
                    except UnfinishedSessionError as exc:
                        unfinished = exc
                    except (CorruptionError, StorageError):
                        if os.path.isdir(path):
                            raise
                        return None  # deleted while we opened it: files "missing"
                    else:
                        self._sessions[session_id] = sess
                if sess is not None:
                    self._pin(session_id, sess)
                    return sess
            if not self._settle_unfinished(path, unfinished.key):
                return None
        raise JournalError(f"session {session_id!r}: its directory keeps changing ({path})")

    def _doomed(self, name: str) -> bool:
        """Does a pending delete name this session directory? (one stat when unchanged)"""
        return name in self.tree.pending_session_dirs()

    def _cached_session(self, session_id: str) -> Session | None:
        """The open Session for an id if one is cached, unchecked (pinned like
        `_session`'s). For writers: their checks under the session's lock find a
        deleted or doomed session (`SessionGone`, and the caller asks `_session`)."""
        if self._closed:
            raise JournalError("store is closed")
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is not None:
                self._pin(session_id, sess)
        return sess

    def _settle_unfinished(self, path: str, key: tuple[int, int, int] | None) -> bool:
        """A session directory without a complete commit: absent (False) or worth
        opening again (True: it changed meanwhile). Raises `CorruptionError` if
        its log is damaged rather than unfinished.

        Decided under the directory's write lock, on the same incarnation
        (`key`), by a scan as recovery does it: a torn or empty first commit is a
        creation that never finished (FORMAT.md section 9), and a writable store
        moves the directory to the trash; whoever else moves it (another process
        doing the same, a delete) holds that lock too. A read-only store only
        tries the lock: if it is busy, the session is absent for now.
        """
        guard = FileLock(os.path.join(path, LOCK_FILE), f"session directory {path}")
        discarded = False
        try:
            try:
                if self.read_only:
                    if not guard.try_acquire():
                        return False
                else:
                    guard.acquire(self.options.lock_timeout)
            except StorageError:
                if not os.path.isdir(path):
                    return False  # moved away meanwhile (its lock file with it)
                raise
            if sessiondir.identity_key(path) != key:
                return True  # not the directory found unfinished
            if sessiondir.has_commit(path):
                return True
            if not self.read_only:
                fsio.rename(path, os.path.join(self.tree.trash, f"unfinished-{uuid.uuid4().hex}"))
                discarded = True
        finally:
            guard.close()
        if discarded:
            fsio.sync_dir(os.path.dirname(path))
            self.tree.empty_trash_soon()
        return False

    def _pin(self, session_id: str, sess: Session) -> None:
        """Mark a session in use by this thread's call and most recently used (lock held)."""
        self._sessions[session_id] = self._sessions.pop(session_id, sess)
        calls = _calls
        if calls.depth > 0:
            sess.users += 1
            calls.pinned.append(sess)

    def _unpin(self, pinned: list[Session]) -> None:
        """Release a finished call's sessions; close the least recently used idle ones."""
        closing: list[Session] = []
        with self._lock:
            for sess in pinned:
                sess.users -= 1
                if sess.users == 0 and sess.retired:
                    closing.append(sess)
            excess = len(self._sessions) - self.max_open_sessions
            if excess > 0:
                for sid, sess in list(self._sessions.items()):
                    if excess <= 0:
                        break
                    if sess.users == 0:
                        del self._sessions[sid]
                        closing.append(sess)
                        excess -= 1
        if closing:
            _close_quietly(closing)

    def _retire(self, dropped: Sequence[Session | None]) -> None:
        """Close sessions just dropped from the cache, unless a call is using one:
        then the last such call closes it (`_unpin`). Closing a session under a
        running call let a reused file descriptor number take its place: a lock
        "acquired" on another file, its holder line written over a segment header
        (found by a stress test in review)."""
        closing: list[Session] = []
        with self._lock:
            for sess in dropped:
                if sess is None:
                    continue
                if sess.users > 0:
                    sess.retired = True
                else:
                    closing.append(sess)
        _close_quietly(closing)

    def _read(self, session_id: str, fn: Callable[[Session], T], absent: Callable[[], T]) -> T:
        """Run a read on a session's current state; `absent()` answers for a missing session.

        A read can race with a delete in another process, which moves the session
        directory away while this process opens or reads it. Such a failure is
        not damage: the session is gone, and the read answers as if it had come
        just after the delete (a valid order for two concurrent calls).
        """
        for _ in range(2):
            try:
                # This process wrote last and nobody locked since: no checks, no probes.
                sess = self._cached_session(session_id)
                if sess is not None and sess.quiet_for_reads():
                    return _read_of_this_incarnation(sess, fn)
                sess = self._session(session_id)
                if sess is not None:
                    sess.refresh()
                    return _read_of_this_incarnation(sess, fn)
            except SessionGone:
                continue  # deleted (and maybe created again) under the read: look again
            except (JournalError, OSError):
                if not self._vanished(session_id):
                    raise
            return absent()
        if self._vanished(session_id):
            return absent()
        raise StorageError(
            f"session {session_id!r} was deleted and created again during each of two reads"
        )

    def _vanished(self, session_id: str) -> bool:
        """Whether a session is deleted or being deleted (its directory is gone or doomed)."""
        path = self.session_dir(session_id)
        if os.path.basename(path) in self.tree.pending_session_dirs():
            return True
        # A delete moves the whole directory away; a directory that is still there
        # but lacks a file is damage, which the failed read reports.
        return not os.path.isdir(path)

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
        return self._read(session_id, lambda sess: sess.load(), lambda: None)

    @_guard
    def checkpoint_at(self, session_id: str, sequence: int) -> Checkpoint | None:
        """The checkpoint exactly as it was saved at `sequence` (None if none was)."""
        validate.validate_session_id(session_id)
        validate.validate_sequence(sequence, "checkpoint sequence")
        return self._read(session_id, lambda sess: sess.checkpoint_at(sequence), lambda: None)

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
        commit is durable (in "fsync" mode). A save to an id with no session
        creates one, as in mobius; that includes a session deleted while this
        call waited for its lock (the save then comes after the delete).
        """
        self._writable("save_with_events")
        cp: Checkpoint = _coerce(checkpoint, Checkpoint, "checkpoint")
        validate.validate_session_id(cp.session_id)
        sess_hint = self._session(cp.session_id)
        start = 0
        if sess_hint is not None and sess_hint.head.epoch == cp.context_epoch:
            start = min(len(sess_hint.head.context), len(cp.context))
        validate.validate_checkpoint(cp, context_start=start)
        items = _sequence(transcript_delta, "transcript_delta")
        # The delta is usually the new context tail itself (the same objects), which
        # was just checked: check it again only if it holds anything else.
        checked = {id(item) for item in cp.context[start:]}
        if any(id(item) not in checked for item in items):
            validate.check_json_value(items, "transcript_delta")
        rec: ExecutionRecord | None = None
        if execution is not None:
            rec = _coerce(execution, ExecutionRecord, "execution")
            validate.validate_execution(rec, cp)
        evs = [_coerce(e, TimestampedEvent, "event") for e in _sequence(events, "events")]
        for e in evs:
            validate.validate_timestamp(e.recorded_at_ms)
            validate.validate_event(e.event)
        self.registry.note(dir_name(cp.session_id))
        now = int(time.time())
        sess = sess_hint  # looked up (and checked) above: not again
        for _ in range(8):
            if sess is not None:
                try:
                    return self._save_existing(sess, cp, items, rec, evs, now, start)
                except SessionGone:
                    # Deleted (or deleted and created again) since it was looked up,
                    # found under its lock before anything was written: look again,
                    # and create it if it is gone.
                    sess = self._session(cp.session_id)
                    continue
            if self._wait_for_delete(cp.session_id):
                sess = self._session(cp.session_id)
                continue
            if start:
                # The prefix taken for stored was checked against a session that is
                # gone now: this one starts empty, so all of it is new (found by review).
                validate.validate_checkpoint(cp)
                start = 0
            journal = self._first_save(cp, items, rec, evs, now)
            if journal is None:  # another thread or process created the session first
                sess = self._session(cp.session_id)
                continue
            return journal
        raise JournalError(f"session {cp.session_id!r}: its directory keeps changing")

    def _save_existing(
        self,
        sess: Session,
        cp: Checkpoint,
        items: list[Any],
        rec: ExecutionRecord | None,
        evs: list[TimestampedEvent],
        now: int,
        checked_from: int,
    ) -> list[JournalEvent]:
        # The catalog upsert runs under the session's write lock, right after the
        # commit: a delete takes that lock before its intent and appends its catalog
        # delete record after, so an upsert can never land after the delete record
        # and list a deleted session forever (found by review).
        return sess.save(
            cp,
            items,
            rec,
            evs,
            now=now,
            on_commit=lambda: self._catalog_upsert(sess, cp.sequence, rec),
            checked_from=checked_from,
        )

    def _wait_for_delete(self, session_id: str) -> bool:
        """If a delete is still taking this id's directory away, wait until it is done
        and say so. Creating the id meanwhile published a new session that the
        delete's catalog records then unlisted, or that its roll-forward after a
        crash moved to the trash, acknowledged save and all (found by review)."""
        if dir_name(session_id) not in self.tree.pending_session_dirs():
            return False
        with self.tree.locked():  # a live deleter holds it until its delete is done
            self._finish_orphaned_deletes()  # a dead one's is finished here
        return True

    def _first_save(
        self,
        cp: Checkpoint,
        items: list[Any],
        rec: ExecutionRecord | None,
        evs: list[TimestampedEvent],
        now: int,
    ) -> list[JournalEvent] | None:
        """Create a session with its first commit: built in tmp/, published by one rename.

        A session directory is therefore never seen without its first commit
        (not after a kill, a power loss or a rejected first save; a power loss cut
        short the creations of earlier versions, see `_settle_unfinished`).
        Returns None, having changed nothing, when the
        session appeared meanwhile (the caller then saves into it, which enforces
        the sequence rule against what is there).
        """

        identity = SessionIdentity(cp.session_id, created_at=now)

        def write(first: Session) -> tuple[list[JournalEvent], SessionSummary | None, int]:
            journal = first.save(cp, items, rec, evs, now=now)
            return (journal, *self._summary_of(first))

        def announce(built: tuple[list[JournalEvent], SessionSummary | None, int]) -> None:
            _, summary, covered = built
            self._catalog_publish(cp.session_id, summary, covered, cp.sequence, rec)

        built = self._create(identity, write, announce)
        if built is None:
            return None
        self.spares.run_soon(functools.partial(self._warm, cp.session_id))
        return built[0]

    @_guard
    def _warm(self, session_id: str) -> None:
        """Open a session just created here, and take and release its write lock, in
        the background (`SparePool.run_soon`): its first commit was written through a
        private object, and the next call on it (an append, typically) found nothing
        open and paid the open, the lock's full checks, the writer's open and, without a
        spare, the first preallocation step (1.5-2.5 ms here), where a warm session
        costs tens of microseconds. Pinned, like
        any call, so a concurrent `close` leaves it to finish."""
        if self._closed or self.read_only:
            return
        sess = self._session(session_id)
        if sess is not None and sess.exists:
            with sess.writing():
                sess.log.preallocate_ahead()

    def _want_dictionary(self, session_id: str) -> None:
        """A writer of the session sampled enough payloads to train its dictionary."""
        self.spares.run_soon(functools.partial(self._train_dictionary, session_id))

    @_guard
    def _train_dictionary(self, session_id: str) -> None:
        """Train the session's zstd dictionary on what its writer sampled, and commit
        it (FORMAT.md section 3), in the background (`SparePool.run_soon`): training
        takes 15-30 ms, which no caller's save should wait for. Later records of
        the session are compressed with it."""
        if self._closed or self.read_only:
            return
        sess = self._session(session_id)
        if sess is None:
            return
        samples = sess.take_samples()
        if samples is None:
            return
        try:
            trained = at_low_priority(
                functools.partial(dictionary.train, samples), lambda: self._closed
            )
            if self._closed:  # (at_low_priority gave up, or finished as it closed)
                sess.training_failed()
                return
            if trained is None:  # no dictionary pays for itself on these samples
                sess.no_dictionary()
                return
            with sess.writing():
                sess.write_dictionary(trained)
        except BaseException:
            sess.training_failed()  # say, the lock was busy: the next ask tries again
            raise

    def _create(
        self,
        identity: SessionIdentity,
        write: Callable[[Session], T],
        announce: Callable[[T], None],
    ) -> T | None:
        """Build a new session in private, let `write` make its first commit, then
        publish it and `announce` what `write` returned (its catalog entry). Returns
        what `write` returned, or None, having published nothing, when a directory
        of that name exists already.
        """
        staged = self._stage(identity, write)
        with staged:
            if not staged.publish(announce):
                return None
            return staged.result

    def _stage(self, identity: SessionIdentity, write: Callable[[Session], T]) -> _Staged[T]:
        """A new session built in private with its first commit written by `write`,
        its syncs running (see `_Staged`); nothing is visible yet."""
        tmp, identity_sync, spare = self._new_session_dir(identity)
        syncs = [] if identity_sync is None else [identity_sync]
        sealing: list[fsio.Syncing] = []

        def seal() -> None:  # as soon as the first commit is written: it then runs
            # while the rest of the call does (the new session's head and summary,
            # for a fork the tree lock and the checks of its parent)
            sealing.append(sessiondir.start_seal(tmp, spare=identity_sync is not None))
            syncs.extend(sealing)

        try:
            first = Session(tmp, identity.session_id, self.options, private=identity)
            first.on_written = seal
            try:
                result = write(first)
            finally:
                first.close()  # syncs nothing: `seal` started them
            if not sealing:
                raise JournalError("a new session's first commit was not written")
            # No cache files: the first open rebuilds them from one commit, for less
            # than writing them here costs.
        except BaseException:
            self._discard_staged(tmp, syncs, spare)
            raise
        return _Staged(self, tmp, self.session_dir(identity.session_id), result, syncs, spare)

    def _discard_staged(
        self, tmp: str, syncs: list[fsio.Syncing], spare: Spare | None
    ) -> None:
        """Remove a new session's private directory that will not be published, once
        the syncs started on it are done (their descriptors may be the spare's)."""
        for syncing in syncs:
            syncing.wait_quietly()
        if spare is not None:
            spare.close()
        shutil.rmtree(tmp, ignore_errors=True)
        self.spares.refill_soon()

    def _new_session_dir(
        self, identity: SessionIdentity
    ) -> tuple[str, fsio.Syncing | None, Spare | None]:
        """A private directory for a new session, for the caller to write its first
        commit into and publish (`_stage`): a spare if one is ready, with the sync of its
        identity file under way (and the spare, whose descriptors the caller closes once
        that sync is done), else one built now (and None, None)."""
        spare = self.spares.take()
        if spare is not None:
            try:
                spare.fill(identity)
                syncing = fsio.start_sync(  # its size does not change: fdatasync
                    [], [], [], open_data_files=[(spare.identity_fd, spare.identity_path)]
                )
                return spare.path, syncing, spare
            except (OSError, JournalError):
                spare.discard()  # not usable: build one
        return self._build_session_dir(identity), None, None

    def _build_session_dir(self, identity: SessionIdentity) -> str:
        """A new session's private directory built on the spot (no spare), unsynced."""
        tmp = os.path.join(self.root, TMP_DIR, f"new-{uuid.uuid4().hex}")
        # Built by path (its parents too): only in the root this store opened.
        self.guard.check(f"session {identity.session_id!r}")
        try:
            sessiondir.build(tmp, identity)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def _stage_fork(
        self, identity: SessionIdentity, encode: Callable[[], tuple[bytes, bytes]]
    ) -> _Staged[tuple[int, bytes]]:
        """`_stage` for a fork's child, whose first commit (`encode()`: the framed
        commit and its checkpoint header, see `Session.fork_commit`) is the whole of
        its log: written straight into the segment, with no Session object. Its
        result: the commit's length (the child's log end) and the header.

        In a spare, the identity and the commit are written, and fdatasynced, through
        the spare's open descriptors: the identity first, its sync handed to a pool
        thread at once, which then wakes while the commit is encoded; the commit's
        sync as soon as it is written (FORMAT.md section 9)."""
        spare = self.spares.take()
        if spare is not None:
            try:
                spare.fill(identity)
            except (OSError, JournalError):
                spare.discard()  # not usable: build one
                spare = None
        syncs: list[fsio.Syncing] = []
        tmp = spare.path if spare is not None else self._build_session_dir(identity)
        try:
            if spare is not None:
                # fdatasync: the file keeps its size (`build_spare`)
                syncs.append(
                    fsio.start_sync(
                        [], [], [], open_data_files=[(spare.identity_fd, spare.identity_path)]
                    )
                )
            commit, header = encode()
            if spare is not None:
                fsio.pwrite(spare.segment_fd, commit, SEGMENT_HEADER_SIZE, spare.segment_path)
                syncs.append(
                    fsio.start_sync(
                        [],
                        [],
                        [],
                        open_data_files=[(spare.segment_fd, spare.segment_path)],
                        begun=True,
                    )
                )
            else:
                segment = sessiondir.segment_files(tmp)[0]
                fd = os.open(segment, os.O_WRONLY)
                try:
                    fsio.pwrite(fd, commit, SEGMENT_HEADER_SIZE, segment)
                finally:
                    os.close(fd)
                syncs.append(sessiondir.start_seal(tmp, spare=False))
        except BaseException:
            self._discard_staged(tmp, syncs, spare)
            raise
        built = (len(commit), header)
        return _Staged(self, tmp, self.session_dir(identity.session_id), built, syncs, spare)

    @_guard
    def message_accepted(self, session_id: str, submission_id: str) -> bool:
        """Whether this session durably admitted a message with this submission id."""
        validate.validate_session_id(session_id)
        if not isinstance(submission_id, str):
            raise InvalidInputError("submission id must be a string")
        return self._read(session_id, lambda sess: sess.receipt(submission_id), lambda: False)

    # ------------------------------------------------------------------ events
    @_guard
    def append_event(
        self,
        session_id: str,
        recorded_at_ms: int,
        event: Event,
        *,
        expected_latest: int | None = None,
    ) -> JournalEvent:
        """Assign the next event sequence and append one event as its own commit.

        Beyond mobius: with `expected_latest`, append only if the session's latest
        event sequence is exactly that (compare-and-append, checked under the
        session's write lock); otherwise raise `ContractViolationError` and append
        nothing. Lets a caller act on what it last read without reading again.
        """
        if self.read_only:
            self._writable("append_event")
        validate.validate_session_id(session_id)
        validate.validate_timestamp(recorded_at_ms)
        if expected_latest is not None:
            validate.validate_sequence(expected_latest, "expected_latest")
        ev: Event = event if type(event) is Event else _coerce(event, Event, "event")
        validate.validate_event(ev)
        # The cached session unchecked: the checks a deleted session fails run under
        # its lock anyway (two stats fewer per append); if it is gone, open afresh.
        sess = self._cached_session(session_id)
        for _ in range(8):
            if sess is None:
                sess = self._session(session_id)
                if sess is None:
                    raise NotFoundError(f"event journal session does not exist: {session_id!r}")
            self.registry.note(sess.dir_name)
            try:
                return sess.append_event(recorded_at_ms, ev, expected_latest)
            except SessionGone:
                sess = None  # nothing was written; `_session` sees it deleted or re-created
        raise JournalError(f"session {session_id!r}: its directory keeps changing")

    @_guard
    def event_page(self, session_id: str, request: EventPageRequest) -> EventPage:
        """One newest-first page of retained events, `sequence < before_sequence`."""
        req = _page_request(session_id, request, EventPageRequest, "event journal page")

        def missing() -> EventPage:
            raise NotFoundError(f"event journal session does not exist: {session_id!r}")

        def page(sess: Session) -> EventPage:
            if not sess.exists:
                missing()
            latest, events, nxt = sess.event_page(req.before_sequence, req.limit)
            return EventPage(latest_sequence=latest, events=events, next_before_sequence=nxt)

        return self._read(session_id, page, missing)

    @_guard
    def events_after(self, session_id: str, after_sequence: int, limit: int) -> list[JournalEvent]:
        """Retained events with `sequence > after_sequence`, oldest first (catch-up)."""
        validate.validate_session_id(session_id)
        validate.validate_sequence(after_sequence, "after_sequence")
        validate.validate_limit(limit, "event journal catch-up")
        return self._read(session_id, lambda sess: sess.events_after(after_sequence, limit), list)

    # ---------------------------------------------------------------- journals
    @_guard
    def transcript_page(self, session_id: str, request: TranscriptPageRequest) -> TranscriptPage:
        """One newest-first page of transcript batches (keyed by checkpoint sequence)."""
        req = _page_request(session_id, request, TranscriptPageRequest, "transcript page")

        def page(sess: Session) -> TranscriptPage:
            batches, nxt = sess.transcript_page(req.before_sequence, req.max_batches)
            return TranscriptPage(batches=batches, next_before_sequence=nxt)

        return self._read(session_id, page, TranscriptPage)

    @_guard
    def execution_page(self, session_id: str, request: ExecutionPageRequest) -> ExecutionPage:
        """One newest-first page of finished user turns (keyed by checkpoint sequence)."""
        req = _page_request(session_id, request, ExecutionPageRequest, "execution page")

        def page(sess: Session) -> ExecutionPage:
            records, nxt = sess.execution_page(req.before_sequence, req.limit)
            return ExecutionPage(executions=records, next_before_sequence=nxt)

        return self._read(session_id, page, ExecutionPage)

    # ------------------------------------------------------------------- state
    @_guard
    def load_state(self, scope: str, key: str) -> Any:
        """The latest value saved under (scope, key), or None."""
        validate.validate_session_id(scope, "state scope")
        validate.validate_session_id(key, "state key")
        if self._state_doomed(scope, finish=False):
            return None  # its delete is committed: gone for readers
        return self.state.load(scope, key)

    def _state_doomed(self, scope: str, *, finish: bool) -> bool:
        """Whether a pending delete (committed, not finished) names this scope's state.

        A dead process's delete is finished here first (best effort for a reader;
        `finish`: a writer, whose value the delete would take away, needs it done
        and fails if it cannot be)."""
        name = dir_name(scope)
        if name not in self.tree.pending_state_dirs():
            return False
        if finish:
            with self.tree.locked():  # a live deleter holds it until it is done
                self._finish_orphaned_deletes()
        else:
            with contextlib.suppress(JournalError, OSError):
                self._finish_orphaned_deletes()
        return name in self.tree.pending_state_dirs()

    @_guard
    def save_state(self, scope: str, key: str, value: Any) -> None:
        """Durably replace the value under (scope, key); last writer wins."""
        self._writable("save_state")
        validate.validate_session_id(scope, "state scope")
        validate.validate_session_id(key, "state key")
        validate.check_json_value(value, "state value")
        if self._state_doomed(scope, finish=True):
            raise StorageError(
                f"save_state: scope {scope!r} is being deleted and its delete cannot be"
                " finished now; nothing was written"
            )
        self.state.save(scope, key, value)

    # ----------------------------------------------------------------- catalog
    def _open_catalog(self) -> Catalog:
        try:
            catalog = Catalog(
                self.root,
                segment_bytes=16 << 20,
                lock_timeout=self.options.lock_timeout,
                read_only=self.read_only,
                read_cache=self.options.read_cache,
            )
            catalog.refresh()
            catalog.snapshot_if_behind()
            return catalog
        except CorruptionError:
            # Derived data: set the damaged catalog aside and rebuild it from the sessions.
            broken = os.path.join(self.root, f"catalog.broken.{uuid.uuid4().hex[:8]}")
            fsio.rename(os.path.join(self.root, "catalog"), broken)
            catalog = Catalog(
                self.root,
                segment_bytes=16 << 20,
                lock_timeout=self.options.lock_timeout,
                read_only=self.read_only,
                read_cache=self.options.read_cache,
            )
            catalog.refresh()
            return catalog

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise InvalidInputError(f"{what}: this store was opened read-only")

    def _startup_recovery(self) -> None:
        if not self.read_only:
            self._finish_orphaned_deletes()
            self._clean_tmp()
            if os.listdir(self.tree.trash):
                self.tree.empty_trash_soon()  # left by a process that exited meanwhile
        changed, boot_line = check_boot(self.catalog.dir, self.root)
        settled = True
        if changed or self.catalog.fresh:
            # Every directory, and every session the catalog names (it may have none).
            names = os.listdir(os.path.join(self.root, SESSIONS_DIR))
            names.extend(dir_name(sid) for sid in list(self.catalog.summaries))
            try:
                unsettled = self._reconcile(names) if names else set()
            except (OSError, JournalError):  # the catalog busy or failing: next open
                unsettled = set(names)
            self._keep_for_later(unsettled)
            settled = not unsettled
        if settled and boot_line is not None and not self.read_only:
            # Only now: a re-check that was cut short (a kill, a busy lock) is done
            # again by the next open instead of being taken for done.
            record_boot(self.catalog.dir, boot_line)
        self._reconcile_dead(force=True)

    def _clean_tmp(self) -> None:
        """Remove half-built directories that a dead process left in tmp/ (older than 10 min)."""
        tmp = os.path.join(self.root, TMP_DIR)
        cutoff = time.time() - 600
        for name in os.listdir(tmp):
            path = os.path.join(tmp, name)
            try:
                if os.stat(path).st_mtime < cutoff:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                continue

    def _reconcile_dead(self, *, force: bool = False) -> None:
        """Correct the catalog for sessions that a dead process wrote (throttled to 1/s),
        and for those whose catalog append failed here. Best effort: what cannot be
        settled now (the catalog busy or failing) is kept for a later call, and the
        listing goes on with the catalog as it is."""
        self._announce_again()
        now = time.monotonic()
        if not force and now - self._last_reconcile < 1.0:
            return
        self._last_reconcile = now
        for path, names in self.registry.dead_registrations():
            try:
                unsettled = self._reconcile(names)
            except (OSError, JournalError):
                continue  # its file stays: tried again later
            if not self.read_only and not unsettled:
                self.registry.forget(path)

    def _announce_again(self) -> None:
        """Re-derive the entries whose catalog append failed (`_unannounced`).

        A name leaves the set only once settled, and only if no new failure for
        it came meanwhile (its generation is unchanged): a caller racing another
        one re-derives it too instead of listing without it. Names an attempt
        could not settle are tried again at most once a second (a new failure is
        tried at once), as dead processes' registrations are.
        """
        with self._lock:
            pending = dict(self._unannounced)
            if not pending or time.monotonic() < self._announce_retry_at:
                return
        try:
            unsettled = self._reconcile(sorted(pending))
        except (OSError, JournalError):
            unsettled = set(pending)  # all kept for the next call, or the next open
        with self._lock:
            for name, generation in pending.items():
                if name not in unsettled and self._unannounced.get(name) == generation:
                    del self._unannounced[name]
            # Left only with names this attempt could not settle: wait a second.
            # A failure that came meanwhile (another generation) is tried at once.
            fresh = any(pending.get(n) != g for n, g in self._unannounced.items())
            idle = not self._unannounced or fresh
            self._announce_retry_at = 0.0 if idle else time.monotonic() + 1.0

    def _reconcile(self, names: list[str]) -> set[str]:
        """Re-derive the catalog entries of these session directories from their logs.

        Returns the names it could not settle for a reason other than damage (an
        I/O error, a busy lock): a caller that must not lose them tries again.
        Damage is reported by reads and `verify`, not by listing.
        """
        unsettled: set[str] = set()

        def failed(name: str, exc: BaseException) -> None:
            # Only what passes by itself (a busy lock, a full descriptor table, an
            # interrupted call) is worth trying again. Damage, a format from
            # elsewhere, a vanished directory, and lasting I/O errors (EIO, EACCES)
            # are final answers: retrying them kept BOOT unrecorded and a procs/
            # file more at every open (found by review).
            if _transient(exc):
                unsettled.add(name)

        self.catalog.refresh()
        by_name = {dir_name(sid): sid for sid in self.catalog.summaries}
        pending = self.tree.pending_session_dirs()
        records: list[CatalogRecord] = []
        for name in dict.fromkeys(names):
            if name in pending:
                unsettled.add(name)  # its delete is not finished: look again after it
                continue
            path = os.path.join(self.root, SESSIONS_DIR, name)
            sid = by_name.get(name)
            if not os.path.isdir(path):
                if sid is not None:
                    records.append(CatalogRecord(OP_DELETE, sid, -1))
                continue
            try:
                ident = sessiondir.read_identity(path)
            except (OSError, JournalError) as exc:
                failed(name, exc)
                continue
            try:
                sess = self._session(ident.session_id)
                if sess is None:  # discarded as unfinished, or being deleted
                    if ident.session_id in self.catalog.summaries:
                        records.append(CatalogRecord(OP_DELETE, ident.session_id, -1))
                    continue
                sess.refresh()
                summary, covered = self._summary_of(sess)
            except (OSError, JournalError) as exc:
                failed(name, exc)
                continue
            position = self.catalog.positions.get(ident.session_id)
            if (summary is None and ident.session_id in self.catalog.summaries) or (
                position is not None and position > covered
            ):
                # The catalog is ahead of the log (a commit it shows is not there).
                try:
                    if self.read_only:
                        self._reset_in_memory(sess)
                    else:
                        self._reset_entry(sess)
                except (OSError, JournalError) as exc:
                    failed(name, exc)
                continue
            if summary is None:
                continue
            known = self.catalog.summaries.get(ident.session_id)
            execs = self.catalog.execs.get(ident.session_id, [])
            if (
                known == summary
                and self.catalog.positions.get(ident.session_id) == covered
                and len(execs) == sess.head.executions
            ):
                continue
            try:
                executions = self._all_executions(sess)
            except (OSError, JournalError) as exc:
                failed(name, exc)
                continue
            records.append(
                CatalogRecord(OP_UPSERT, ident.session_id, covered, summary, executions=executions)
            )
        self.catalog.append(records)
        return unsettled

    def _add_unlisted_children(self, children: dict[str, list[str]]) -> None:
        """Add the parent links of session directories the catalog does not list.

        The catalog leaves out a session it cannot read (damage is reported by
        reads and `verify`, not by listing), so it knows nothing of that child's
        parent; a delete of the parent must take it all the same. Its identity
        file still names the parent. Costs one listing of `sessions/` and a set
        difference with the directory names the catalog keeps (an identity read
        only for the rare unlisted directory). A directory whose identity is
        unreadable, or is not that session's directory (a stray copy under another
        name), is not placed in the tree and stays.
        """
        sessions = os.path.join(self.root, SESSIONS_DIR)
        unlisted = self.catalog.unlisted(os.listdir(sessions)) - self.tree.pending_session_dirs()
        for name in sorted(unlisted):
            try:
                ident = sessiondir.read_identity(os.path.join(sessions, name))
            except (OSError, JournalError):
                continue
            if dir_name(ident.session_id) != name:
                continue  # not that session's directory (a stray copy): not its child
            parent = ident.parent_session_id
            if parent is not None and ident.session_id not in children.get(parent, ()):
                children.setdefault(parent, []).append(ident.session_id)

    def _reset_entry(self, sess: Session) -> None:
        """Replace a session's catalog entry with what its log says, under its writer lock.

        The lock keeps a live writer from committing between the derivation and
        the catalog append: any upsert it appends later covers more of the log.
        """
        with sess.writing():
            summary, covered = self._summary_of(sess)
            if summary is None:
                record = CatalogRecord(OP_DELETE, sess.id, -1)
            else:
                record = CatalogRecord(
                    OP_RESET, sess.id, covered, summary, executions=self._all_executions(sess)
                )
            self.catalog.append([record])

    def _reset_in_memory(self, sess: Session) -> None:
        summary, covered = self._summary_of(sess)
        if summary is None:
            self.catalog.append([CatalogRecord(OP_DELETE, sess.id, -1)])
        else:
            execs = self._all_executions(sess)
            self.catalog.append(
                [CatalogRecord(OP_RESET, sess.id, covered, summary, executions=execs)]
            )

    def _all_executions(self, sess: Session) -> list[tuple[int, int]]:
        """(sequence, started_at_ms) of every execution record of a session (rebuilds only)."""
        out: list[tuple[int, int]] = []
        before: int | None = None
        while True:
            page, before = sess.sparse_page(KIND_EXECUTIONS, before, 1000)
            out.extend((p.sequence, p.record.started_at_ms) for p in page)
            if before is None:
                return out

    def _summary_of(self, sess: Session) -> tuple[SessionSummary | None, int]:
        with sess._state_lock:
            head = sess.head
            if head.header is None:
                return None, head.covered
            header = msgspec.msgpack.decode(bytes(head.header), type=_SummaryFields)
            summary = SessionSummary(
                session_id=sess.id,
                session_context=header.session_context,
                parent_session_id=sess.identity.parent_session_id,
                parent_sequence=sess.identity.parent_sequence,
                sequence=head.sequence,
                catalog_visible=header.catalog_visible,
                first_user_message=head.first_user_message,
                execution_stats=header.execution_stats,
                created_at=head.created_at,
                updated_at=head.updated_at,
            )
            return summary, head.covered

    def _catalog_upsert(self, sess: Session, sequence: int, rec: ExecutionRecord | None) -> None:
        """Publish a commit's summary (and a copy of its execution record) to the catalog."""
        self._catalog_publish(sess.id, *self._summary_of(sess), sequence, rec)

    def _catalog_publish(
        self,
        session_id: str,
        summary: SessionSummary | None,
        covered: int,
        sequence: int,
        rec: ExecutionRecord | None,
    ) -> None:
        if summary is None:
            return
        records = [CatalogRecord(OP_UPSERT, session_id, covered, summary)]
        if rec is not None:
            key = (sequence, rec.started_at_ms)
            records = [
                CatalogRecord(OP_UPSERT, session_id, covered, summary, key),
                CatalogRecord(
                    OP_EXECUTION, session_id, covered, None, key, record=_encode_execution(rec)
                ),
            ]
        try:
            self.catalog.append(records)
        except (JournalError, OSError):
            # The catalog is a cache of the logs: the commit is made, and one that
            # cannot be listed yet is never the caller's error (a retry would be
            # refused by the sequence rule). The entry is re-derived from the log
            # before the next listing, or by the next open.
            self._keep_for_later([dir_name(session_id)])

    def _catalog_forget(self, session_ids: Sequence[str]) -> None:
        """A delete's catalog records: appended once the directories are in the trash
        and before the intent is retired, so that no reader finds the sessions
        gone (no intent, no directory) while the catalog still lists them. The
        delete is done either way: a failure leaves it to be re-derived."""
        try:
            self.catalog.append([CatalogRecord(OP_DELETE, sid, -1) for sid in session_ids])
        except JournalError:
            self._keep_for_later(dir_name(sid) for sid in session_ids)

    def _keep_for_later(self, names: Iterable[str]) -> None:
        """Session directories whose catalog entries must be re-derived later: by this
        process before its next listing, or, should it close or die first, by the
        next open, which reconciles every name in this process's registration."""
        names = list(names)
        with self._lock:
            for name in names:
                self._unannounced[name] = self._unannounced.get(name, 0) + 1
            self._announce_retry_at = 0.0
        if not self.read_only:
            for name in names:
                with contextlib.suppress(OSError, JournalError):
                    self.registry.note(name)

    @_guard
    def list_sessions_page(self, request: SessionPageRequest) -> SessionPage:
        """Sessions by (updated_at, sequence, session_id) descending; exclusive cursor."""
        req: SessionPageRequest = _coerce(request, SessionPageRequest, "request")
        validate.validate_limit(req.limit, "session page")
        if req.owner_id is not None:
            validate.validate_owner_id(req.owner_id, "owner filter")
        cursor = None
        if req.cursor is not None:
            c = req.cursor
            cursor = (c.updated_at, c.sequence, c.session_id)
        self._reconcile_dead()
        self.catalog.refresh()
        pending = self.tree.pending_session_dirs()
        out: list[SessionSummary] = []
        nxt = cursor
        while True:
            page, nxt = self.catalog.page(req.owner_id, nxt, req.limit - len(out))
            for summary in page:
                if pending and dir_name(summary.session_id) in pending:
                    continue
                validate.validate_owner_id(
                    summary.session_context.owner_id, "stored session owner ID"
                )
                out.append(summary)
            if nxt is None or len(out) >= req.limit:
                break
        next_cursor = None
        if nxt is not None and out:
            last = out[-1]
            next_cursor = SessionCursor(
                updated_at=last.updated_at, sequence=last.sequence, session_id=last.session_id
            )
        return SessionPage(sessions=out, next_cursor=next_cursor)

    @_guard
    def child_sessions(self, session_id: str) -> list[SessionSummary]:
        """Beyond mobius: the listed sessions forked directly from this one, in catalog
        order ((`updated_at`, `sequence`, `session_id`) descending). Costs what the
        answer costs (the catalog keeps each parent's children), not a walk of every
        session; empty when the session has no children or does not exist."""
        validate.validate_session_id(session_id)
        self._reconcile_dead()
        self.catalog.refresh()
        pending = self.tree.pending_session_dirs()
        kids = [
            s
            for s in self.catalog.child_summaries(session_id)
            if not pending or dir_name(s.session_id) not in pending
        ]
        kids.sort(key=sort_key, reverse=True)
        return kids

    @_guard
    def session_summary(self, session_id: str) -> SessionSummary | None:
        """Catalog metadata of one session, derived without reading its context."""
        validate.validate_session_id(session_id)
        return self._read(session_id, lambda sess: self._summary_of(sess)[0], lambda: None)

    @_guard
    def session_metadata(self, session_id: str) -> dict[str, Any] | None:
        """The latest checkpoint's metadata, without decoding the rest of it."""
        validate.validate_session_id(session_id)

        def metadata(sess: Session) -> dict[str, Any] | None:
            header = sess.head.header
            if header is None:
                return None
            return msgspec.msgpack.decode(bytes(header), type=_MetadataOnly).metadata

        return self._read(session_id, metadata, lambda: None)

    @_guard
    def recent_executions(self, limit: int) -> list[ExecutionRecord]:
        """Finished turns across all sessions by (started_at_ms, session_id, sequence) desc.

        A damaged session's turns are answered from the catalog's copies; those it
        holds no copy of (they would be read from the damaged log) are left out."""
        validate.validate_limit(limit, "recent executions")
        self._reconcile_dead()
        self.catalog.refresh()
        out: list[ExecutionRecord] = []

        def record_at(seq: int) -> Callable[[Session], ExecutionRecord | None]:
            def read(sess: Session) -> ExecutionRecord | None:
                # The key, not just "the newest before it": a session object opened
                # earlier must not answer with an older record.
                found, _ = sess.sparse_page(KIND_EXECUTIONS, seq + 1, 1)
                if not found or found[0].sequence != seq:
                    return None
                record: ExecutionRecord = found[0].record
                return record

            return read

        # Most records are read from their copies in the catalog log (one file, a few
        # reads); the rest from their sessions. Sessions under a delete intent are
        # already gone for readers (as in list_sessions_page), and keys of sessions
        # deleted since the catalog was read are skipped: fetch more. (Another
        # thread refreshing the catalog meanwhile can shift the list: `seen`.)
        seen: set[tuple[int, str, int]] = set()
        want = limit
        while True:
            listed = self.catalog.recent_execution_keys(want)
            pending = self.tree.pending_session_dirs()
            if pending:
                listed = [(k, span) for k, span in listed if dir_name(k[1]) not in pending]
            fresh = [(key, span) for key, span in listed if key not in seen]
            seen.update(key for key, _ in fresh)
            with_copy = [(key, span) for key, span in fresh if span is not None]
            copies = dict(
                zip(
                    [key for key, _ in with_copy],
                    self.catalog.execution_copies(with_copy),
                    strict=True,
                )
            )
            for key, _ in fresh:
                body = copies.get(key)
                rec = _decode_execution(body) if body is not None else None
                if rec is None:
                    try:
                        rec = self._read(key[1], record_at(key[2]), lambda: None)
                    except CorruptionError:
                        # One damaged session hides no other session's turns: its
                        # records that the catalog holds no copy of are left out
                        # (reads of it, and `journal verify`, report the damage).
                        rec = None
                if rec is not None:
                    out.append(rec)
                    if len(out) == limit:
                        return out
            if len(self.catalog.exec_keys) < want:
                return out
            want *= 2

    # -------------------------------------------------------------------- tree
    @_guard
    def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: Checkpoint
    ) -> SessionSummary:
        """Create a clean child session at an exact durable parent sequence."""
        self._writable("fork")

        validate.validate_session_id(parent_session_id, "fork parent session id")
        validate.validate_sequence(parent_sequence, "fork parent sequence")
        cp: Checkpoint = _coerce(checkpoint, Checkpoint, "checkpoint")
        validate.validate_session_id(cp.session_id)
        validate.validate_fork_child(parent_session_id, cp)
        # The rest of the child's validation (validate_checkpoint: its version, its
        # types and integer ranges, the JSON walk of its metadata and context) runs
        # below, while the child's syncs do: nothing is visible before it passes, and
        # a child that fails it is removed unpublished.
        now = int(time.time())
        ident = SessionIdentity(cp.session_id, parent_session_id, parent_sequence, now)

        # The child's whole log, built from the arguments alone: no Session object is
        # opened for it (its first open reads this one commit, as after any fork).
        def encode() -> tuple[bytes, bytes]:
            try:
                return Session.fork_commit(cp, now, self.options.max_record_bytes)
            except Exception:
                validate.validate_checkpoint(cp)  # a value the encoder refuses: say which
                raise

        # The child is written, and its syncs started, before the tree lock is taken:
        # it depends on nothing but the arguments, and its syncs then run while the
        # parent is checked. It stays private (in tmp/) until published below, and is
        # removed, having changed nothing, when a check fails.
        with self._stage_fork(ident, encode) as staged:
            end, header = staged.result
            # While the syncs run: the child's validation, and its catalog entry.
            validate.validate_checkpoint(cp)
            summary = _fork_summary(ident, header, cp.first_user_message)

            def announce(_: tuple[int, bytes]) -> None:
                self._catalog_publish(cp.session_id, summary, end, cp.sequence, None)

            with self.tree.locked():
                parent = self._session(parent_session_id)
                if parent is not None:
                    parent.refresh()
                if parent is None or not parent.exists:
                    raise NotFoundError(f"fork parent does not exist: {parent_session_id!r}")
                if parent_sequence > parent.head.sequence:
                    raise ContractViolationError(
                        f"fork point is newer than the parent checkpoint ({parent_sequence} >"
                        f" {parent.head.sequence}, parent {parent_session_id!r})"
                    )
                if self._session(cp.session_id) is not None:
                    raise ContractViolationError(f"session {cp.session_id!r} already exists")
                # The child must not outlive its fork point: make the parent's commits
                # written so far durable (a save on it may still be syncing them, here
                # or in another process; its older segments were synced when sealed)
                # before the child is published. The parent's directory entry becomes
                # durable with the child's: both are in sessions/, synced last. Skipped
                # when this process synced them already (its own durable saves, or the
                # sync of an earlier fork at the same parent position).
                parent_covered = parent.head.covered
                parent_sync: fsio.Syncing | None = None
                if parent.log.durable_to < parent_covered:
                    parent_sync = fsio.start_sync([parent.log.segments[-1].path], [], [])
                self.registry.note(os.path.basename(staged.path))
                if not staged.publish(announce, wait_for=parent_sync):
                    # another process created it since the check above
                    raise ContractViolationError(f"session {cp.session_id!r} already exists")
                if parent_sync is not None:
                    parent.log.note_durable(parent_covered)
                self.spares.run_soon(functools.partial(self._warm, cp.session_id))
                return summary

    @_guard
    def fork_at(
        self,
        parent_session_id: str,
        parent_sequence: int,
        child_session_id: str,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> SessionSummary:
        """Fork a child whose context is the parent's context exactly as saved at `parent_sequence`.

        Builds the child checkpoint from `checkpoint_at(parent, parent_sequence)`
        (context, first user message, model route, session context without its
        origin label, metadata unless given) so the caller need not reassemble it.
        """
        validate.validate_session_id(child_session_id)
        source = self.checkpoint_at(parent_session_id, parent_sequence)
        if source is None:
            raise NotFoundError(
                f"session {parent_session_id!r} has no checkpoint at sequence {parent_sequence}"
            )
        child = Checkpoint.empty(child_session_id, owner_id=source.session_context.owner_id)
        child.session_context = msgspec.structs.replace(source.session_context, origin_label=None)
        child.context = source.context
        child.first_user_message = source.first_user_message
        child.model_route = source.model_route
        child.context_model_route = source.context_model_route
        child.metadata = dict(source.metadata if metadata is None else metadata)
        return self.fork(parent_session_id, parent_sequence, child)

    @_guard
    def delete_sessions(self, session_ids: Sequence[str]) -> bool:
        """Atomically delete sessions, all their descendants and their session-scoped state.

        Returns False, deleting nothing, when any selected session is absent.
        """
        self._writable("delete_sessions")
        ids = list(session_ids)
        for sid in ids:
            validate.validate_session_id(sid)
        if not ids:
            return True
        with self.tree.locked():
            # Best effort: a delete left unfinished by a failure is finished here when
            # it can be; its sessions count as absent either way.
            with contextlib.suppress(JournalError, OSError):
                self._finish_orphaned_deletes()
            self._reconcile_dead(force=True)
            self.catalog.refresh()
            for sid in ids:
                try:
                    sess = self._session(sid)
                    if sess is not None:
                        sess.refresh()
                    present = sess is not None and sess.exists
                except CorruptionError:
                    # Damaged, but there: deleting is how to get rid of it.
                    present = os.path.isdir(self.session_dir(sid))
                if not present:
                    return False
            children = self.catalog.children_of()
            self._add_unlisted_children(children)
            closure: list[str] = []
            queue = list(dict.fromkeys(ids))
            seen = set(queue)
            while queue:
                sid = queue.pop(0)
                closure.append(sid)
                for child in children.get(sid, []):
                    if child not in seen:
                        seen.add(child)
                        queue.append(child)
            # Lock every session of the subtree, in directory order. One open here is
            # locked through its Session (its thread lock, then its file lock); the
            # others only through their lock files: opening each descendant (indexes,
            # snapshot, a scan) just to delete it cost most of a delete.
            dirs = sorted(
                (self.session_dir(sid), sid)
                for sid in closure
                if os.path.isdir(self.session_dir(sid))
            )
            held: list[Session | FileLock] = []
            try:
                for path, sid in dirs:
                    with self._lock:
                        sess = self._sessions.get(sid)
                        if sess is not None:
                            self._pin(sid, sess)  # nobody closes it under us
                    if sess is not None and sess.still_published():
                        sess._write_lock.acquire()
                        try:
                            sess.flock.acquire(self.options.lock_timeout)
                        except BaseException:
                            sess._write_lock.release()
                            raise
                        held.append(sess)
                    else:
                        lock = FileLock(os.path.join(path, LOCK_FILE), f"session {sid!r}")
                        try:
                            lock.acquire(self.options.lock_timeout)
                        except BaseException:
                            lock.close()
                            raise
                        held.append(lock)
                for sid in closure:
                    self.registry.note(dir_name(sid))
                intent = DeleteIntent(
                    closure,
                    [os.path.basename(path) for path, _ in dirs],
                    self.state.scopes_present(closure),
                )
                # The commit point: once the intent is durable the sessions are gone
                # for every reader, and the delete is reported done. A failure after it
                # (moving the directories to the trash, a sync, retiring the intent)
                # leaves the intent, which any later call of any process finishes
                # (its owner lock is free once `owner` is closed). See
                # docs/durability.md, "What an error means".
                intent_path, owner = self.tree.write_intent(intent)
                try:
                    self.tree.carry_out(
                        intent_path, intent, before_retiring=lambda: self._catalog_forget(closure)
                    )
                except (JournalError, OSError):
                    pass  # finished later (see above); the delete is made
                finally:
                    owner.close()
                self.state.forget_scopes(intent.state_dirs)
            finally:
                for item in held:
                    if isinstance(item, Session):
                        item.flock.release()
                        item._write_lock.release()
                    else:
                        item.release()
                        item.close()
            with self._lock:
                gone = [self._sessions.pop(sid, None) for sid in closure]
            for sess in gone:
                if sess is not None:
                    sess.deleted = True
            self._retire(gone)
            self.tree.empty_trash_soon()
            return True

    def _finish_orphaned_deletes(self) -> None:
        """Roll forward deletes whose process died after its intent became durable
        (a read-only store only treats their sessions as absent)."""
        if self.read_only:
            return
        orphans = self.tree.orphaned_intents()
        if not orphans:
            return
        with self.tree.locked():
            # Checked again under the lock: the first look can take a live delete's
            # intent, not yet locked by its owner, for an orphan.
            finished = False
            for path, intent in self.tree.orphaned_intents():
                for sid in intent.session_ids:  # re-checked by the next open if we die
                    self.registry.note(dir_name(sid))
                forget = functools.partial(self._catalog_forget, intent.session_ids)
                self.tree.carry_out(path, intent, before_retiring=forget)
                self.state.forget_scopes(intent.state_dirs)
                with self._lock:
                    gone = [self._sessions.pop(sid, None) for sid in intent.session_ids]
                self._retire(gone)
                finished = True
        if finished:
            # In the background, as after any delete: emptying the trash here, under
            # the tree lock, held up every fork and delete for as long as it took
            # (about a second in the tree stress test).
            self.tree.empty_trash_soon()

    # ------------------------------------------------------------------ reader
    @_guard
    def reader(self, session_id: str) -> SessionReader:
        """A view of one session for a series of reads that checks the session once.

        Each read of the store checks the session (still there, not being deleted)
        and looks for commits other processes made since (a few `stat`s and a
        `pread`). A reader does that once, when it is made, and its reads
        (`event_page`, `events_after`, `load`, `checkpoint_at`, same arguments
        and answers as the store's, without the session id) then answer from
        the session as this process knows it: at least everything committed
        when the reader was made, and this process's later commits; commits
        other processes make later are not looked for, though a read may see
        them once another call of this process on the session has picked them
        up. It is not a snapshot: two reads may differ by such commits. If the
        session is deleted meanwhile, a read answers from what is already
        open, or as for a missing session where it would have to open one of
        the session's files again (it might be the next incarnation's). Raises
        `NotFoundError` if the session does not exist. Close it (or use
        `with`): it keeps the session's files open.
        """
        validate.validate_session_id(session_id)
        try:
            sess = self._cached_session(session_id)
            if sess is None or not sess.quiet_for_reads():
                sess = self._session(session_id)
                if sess is not None:
                    sess.refresh()
        except (JournalError, OSError):
            if not self._vanished(session_id):
                raise
            sess = None
        if sess is None or not sess.exists:
            raise NotFoundError(f"session does not exist: {session_id!r}")
        with self._lock:
            sess.users += 1  # the reader's own pin (the call's goes when it returns)
        return SessionReader(self, session_id, sess)

    # --------------------------------------------------------------- lifecycle
    def incarnation(self, session_id: str) -> tuple[int, int, int] | None:
        """What identifies this incarnation of a session (None: no such session).

        One `stat` of the identity file the store writes once per session (its
        device, inode and change time): the value changes when the session is
        deleted and created again, so a cache keyed by it is never reused for the
        next incarnation.
        """
        validate.validate_session_id(session_id)
        return sessiondir.identity_key(self.session_dir(session_id))

    @_guard
    def flush(self) -> None:
        """Write every open session's caches (indexes, snapshot). Never needed for safety."""
        if self.read_only or not self.guard.is_same():
            return  # caches are written by path: never into another directory's tree
        with self._lock:
            sessions = list(self._sessions.items())
            for sid, sess in sessions:
                self._pin(sid, sess)  # nobody closes them under us
        for _, sess in sessions:
            if sess.caches_current():
                continue  # nothing to write: no lock, no recovery scan
            try:
                with sess.writing():
                    sess.flush_caches()
            except (JournalError, OSError):
                continue  # a cache we cannot write now is rebuilt later

    def close(self) -> None:
        """Flush caches and release files. The store object is unusable afterwards."""
        if self._closed:
            return
        self.flush()
        self._announce_again()  # what still fails is left to the next open (below)
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            self._closed = True
            behind = bool(self._unannounced)
        self._retire(sessions)  # those a call still uses are closed when it ends
        self.spares.close()
        self.catalog.close()
        self.tree.close()
        # Catalog entries still missing: leave this process's registration behind,
        # which the next open takes for a dead process's and reconciles.
        self.registry.close(keep=behind)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SummaryFields(msgspec.Struct):
    """The catalog's fields of a checkpoint header (decoding skips everything else)."""

    session_context: SessionContext
    catalog_visible: bool = True
    execution_stats: ExecutionStats = msgspec.field(default_factory=ExecutionStats)


_decode_summary_fields = msgspec.msgpack.Decoder(_SummaryFields).decode


def _fork_summary(
    identity: SessionIdentity, header: bytes, first_user_message: str | None
) -> SessionSummary:
    """A fork child's catalog entry, from its first commit as `Session.fork_commit`
    built it (what `Store._summary_of` reads from the child's head once it is open).
    Its parts are decoded from the header, not taken from the caller's checkpoint,
    which the caller may change later."""
    fields = _decode_summary_fields(header)
    return SessionSummary(
        session_id=identity.session_id,
        session_context=fields.session_context,
        parent_session_id=identity.parent_session_id,
        parent_sequence=identity.parent_sequence,
        sequence=0,
        catalog_visible=fields.catalog_visible,
        first_user_message=first_user_message,
        execution_stats=fields.execution_stats,
        created_at=identity.created_at,
        updated_at=identity.created_at,
    )


class _MetadataOnly(msgspec.Struct):
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class _Staged(Generic[T]):
    """A new session built in private (`Store._stage`): its first commit is written and
    the syncs that make the directory durable are running (its identity file and
    segment; for a directory built on the spot, also its entries). `publish` waits
    for them, gives the directory its name and makes that durable (FORMAT.md
    section 9). Used as a context manager: leaving it without a publish removes the
    directory, having changed nothing anyone can see.
    """

    def __init__(
        self,
        store: Store,
        tmp: str,
        path: str,
        result: T,
        syncs: list[fsio.Syncing],
        spare: Spare | None = None,
    ) -> None:
        self.store = store
        self.tmp = tmp
        self.path = path
        self.result = result
        self._syncs = syncs
        self._spare = spare  # whose descriptors the syncs use: closed on leaving
        self._published = False

    def publish(self, announce: Callable[[T], None], wait_for: fsio.Syncing | None = None) -> bool:
        """Publish the session once its syncs and `wait_for` are done, `announce` it,
        and return once its name is durable. False, publishing nothing, when a
        directory of that name exists already.

        `announce` (the catalog entry) runs after the rename, while `sessions/` is
        synced, and under the new session's lock: a delete takes that lock before
        it writes its own catalog record, so the entry can never land after that
        record and list a deleted session (see `Store._save_existing`).
        """
        parent = os.path.dirname(self.path)
        # The new session's write lock is held until its name is durable: no other
        # writer commits into a session that a power loss could still take away.
        guard = (  # a spare's is open already
            self._spare.lock
            if self._spare is not None
            else FileLock(os.path.join(self.tmp, LOCK_FILE), "a session being published")
        )
        try:
            # Always free (nobody else knows tmp/); acquire() also writes the holder
            # line, which names us to a writer that waits for it meanwhile.
            guard.acquire(0)
            # Everything in the directory is durable before its name can be: a power
            # loss never publishes a session without its identity, its log or its
            # first commit.
            for syncing in self._syncs:
                syncing.wait()
            if wait_for is not None:
                wait_for.wait()
            if not _rename_unless_taken(self.tmp, self.path):
                return False
            self._published = True
            # If the sync fails, the call fails but the session stays published: like
            # a commit whose sync failed, it may or may not survive a power loss.
            # The catalog entry is made in a pool thread meanwhile (see
            # `fsio.sync_dir_while`; the session's lock is held all the same).
            fsio.sync_dir_while(parent, lambda: announce(self.result))
            return True
        finally:
            guard.close()

    def __enter__(self) -> _Staged[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._published:
            for syncing in self._syncs:
                syncing.wait_quietly()
        if self._spare is not None:
            self._spare.close()  # its syncs are done (waited for, by publish or above)
        if not self._published:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.store.spares.refill_soon()


def _close_quietly(sessions: Sequence[Session]) -> None:
    """Close sessions the cache dropped, each on its own: a failure here (the last
    sync of an "os"-mode writer: every "fsync"-mode commit was synced already) must
    not fail the unrelated call that happened to drop them, nor keep the others open."""
    for sess in sessions:
        with contextlib.suppress(JournalError, OSError):
            sess.close()


_TRANSIENT_ERRNOS = frozenset(
    {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.EMFILE, errno.ENFILE, errno.ENOMEM}
)


def _transient(exc: BaseException) -> bool:
    """Whether a failure may pass by itself: a lock timeout, or an OS error (or a
    StorageError raised from one) whose errno says so."""
    if isinstance(exc, LockTimeoutError):
        return True
    for err in (exc, exc.__cause__):
        if isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNOS:
            return True
    return False


def _rename_unless_taken(src: str, dst: str) -> bool:
    """Rename a new session directory into place; False if `dst` exists already."""
    try:
        fsio.rename(src, dst)
    except StorageError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno in (errno.ENOTEMPTY, errno.EEXIST):
            # Taken when we renamed, maybe deleted again by now (found by the tree
            # stress test under load: asking `isdir` afterwards said no, and the save
            # failed): the caller looks the id up again.
            return False
        if os.path.isdir(dst):
            return False
        raise
    return True


def open_store(root: str | os.PathLike[str], **options: Any) -> Store:
    return Store(root, **options)


def _read_of_this_incarnation(sess: Session, fn: Callable[[Session], T]) -> T:
    """`fn(sess)`, or `SessionGone` if it may have read another incarnation's file.

    A session's files are opened by path when a read first needs them. One the
    read opened after the session was deleted and created again (by another
    process, after this process's checks) is the new session's: its bytes must
    not be answered as this session's (found by review). Reads that open no
    file, nearly all of them, cost one comparison more.
    """
    log = sess.log
    opened = log.opened
    result = fn(sess)
    if log.opened != opened and not sess.still_published():
        log.forget_opened_since(opened)  # nor may the next read use them
        raise SessionGone(f"session {sess.id!r} was deleted during the read")
    return result


class SessionReader:
    """Reads of one session, checked once when made (`Store.reader`).

    Usable from any thread; `close()` (or leaving a `with` block) releases the
    session once the reads in progress are done; reading after that raises
    `InvalidInputError`. A reader dropped unclosed releases it when collected.
    """

    def __init__(self, store: Store, session_id: str, sess: Session):
        self.store = store
        self.session_id = session_id
        self._sess: Session | None = sess
        self._mutex = threading.Lock()
        self._reading = 0  # reads in progress: `close` leaves the session to the last
        # The pin goes with the reader, closed or not (it kept the session's files open
        # past `Store.close` otherwise). No reference to self, or it is never collected.
        self._release = weakref.finalize(self, store._unpin, [sess])

    def _read(self, fn: Callable[[Session], T], absent: Callable[[], T]) -> T:
        """`Store._read` without its checks: `absent()` answers if the session vanished
        and the read failed (a delete in another process moved its files away), or if
        it had to open a file of the session after the session was deleted."""
        with self._mutex:
            sess = self._sess
            if sess is None:
                raise InvalidInputError(f"reader of session {self.session_id!r} is closed")
            self._reading += 1
        try:
            if self.store._closed:
                raise JournalError("store is closed")
            try:
                return _read_of_this_incarnation(sess, fn)
            except SessionGone:
                pass
            except (JournalError, OSError):
                if not self.store._vanished(self.session_id):
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

    @_guard
    def event_page(self, request: EventPageRequest) -> EventPage:
        """`Store.event_page` of this session."""
        req = _page_request(self.session_id, request, EventPageRequest, "event journal page")

        def page(sess: Session) -> EventPage:
            latest, events, nxt = sess.event_page(req.before_sequence, req.limit)
            return EventPage(latest_sequence=latest, events=events, next_before_sequence=nxt)

        result: EventPage = self._read(page, self._missing)
        return result

    @_guard
    def events_after(self, after_sequence: int, limit: int) -> list[JournalEvent]:
        """`Store.events_after` of this session."""
        validate.validate_sequence(after_sequence, "after_sequence")
        validate.validate_limit(limit, "event journal catch-up")
        return self._read(lambda sess: sess.events_after(after_sequence, limit), list)

    @_guard
    def load(self) -> Checkpoint | None:
        """`Store.load` of this session."""
        return self._read(lambda sess: sess.load(), lambda: None)

    @_guard
    def checkpoint_at(self, sequence: int) -> Checkpoint | None:
        """`Store.checkpoint_at` of this session."""
        validate.validate_sequence(sequence, "checkpoint sequence")
        return self._read(lambda sess: sess.checkpoint_at(sequence), lambda: None)

    @_guard
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

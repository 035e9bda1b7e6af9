"""`Store`: the synchronous, thread-safe CheckpointStore over a directory tree.

    ROOT/JOURNAL            store manifest (format version)
    ROOT/sessions/<name>/   one self-contained directory per session (session.py)
    ROOT/state/<scope>/     middleware state, one file per key (state.py)
    ROOT/tmp/               directories being built before they are published by rename

Every public method validates its input before touching anything, maps the
session id to its directory, and translates failures into `JournalError`s
(`calls.guarded`). The store is a facade over the parts that do the work:

    opened.OpenSessions   the open-session cache and its pinning
    publish.Publisher     building and publishing new session directories
    upkeep.Upkeep         keeping the catalog true (recovery, reconciliation)
    jobs.JobRunner        background work (warming, dictionaries, spares)
    catalog.Catalog       the session listing (opened on first use); tree.Tree: fork
                          and delete locking
    treeops.TreeOps       fork and delete, which hold several of those parts together
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from . import listing, manifest, upkeep, validate
from .cache import ReadCache
from .calls import coerce, guarded, page_request, save_parts
from .catalog import Catalog
from .errors import (
    CorruptionError,
    InvalidInputError,
    JournalError,
    NotFoundError,
    StorageError,
)
from .index import KIND_EXECUTIONS
from .jobs import JobRunner
from .layout import TMP_DIR, dir_name, session_path
from .opened import OpenSessions
from .publish import Publisher
from .reader import SessionReader, open_reader, read_session
from .registry import ProcessRegistry
from .retention import PruneReport, RetentionPolicy, check_policy
from .retention import apply as apply_retention
from .retentionjob import RetentionJob
from .rootcheck import RootGuard
from .session import Session
from .sessiondir import SessionIdentity, identity_key
from .sessionjobs import SessionJobs
from .sessionstate import SessionGone, SessionOptions
from .spares import SparePool
from .state import StateStore
from .tree import Tree
from .treeops import TreeOps
from .types import (
    Checkpoint,
    Event,
    EventPage,
    EventPageRequest,
    ExecutionPage,
    ExecutionPageRequest,
    ExecutionRecord,
    JournalEvent,
    SessionPage,
    SessionPageRequest,
    SessionSummary,
    TimestampedEvent,
    TranscriptPage,
    TranscriptPageRequest,
)

if TYPE_CHECKING:
    from .compact import CompactReport
    from .replica.replicator import Replicator

Durability = Literal["fsync", "os"]

T = TypeVar("T")


class _MetadataOnly(msgspec.Struct):
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class Store:
    """A journal store rooted at one directory. Use `journal.open(root)`.

    Besides the CheckpointStore methods, a few public attributes serve offline
    tools (`journal.inspect`): `root`, `options`, `catalog`, `state`, `tree`,
    `registry`, `open_sessions`, `upkeep`, `jobs` and `spares`.
    """

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
        retention: RetentionPolicy | None = None,
        replica: str | None = None,
        replica_mode: Literal["sync", "async"] = "async",
        replica_lag: float = 1.0,
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
        self.max_open_sessions = max_open_sessions
        info = manifest.open_manifest(self.root, create=create)
        if retention is not None:
            check_policy(retention)
            if read_only:
                raise InvalidInputError("retention: a read-only store records no policy")
            info = manifest.record_retention(self.root, retention if retention.active else None)
        # The policy recorded in the manifest (None: none), which the background
        # job of a writable store applies (`RetentionJob`).
        self.retention: RetentionPolicy | None = info.retention
        self.guard = RootGuard(self.root)
        self.state = StateStore(self.root, durable=self.options.durable, guard=self.guard)
        self.tree = Tree(self.root, lock_timeout)
        self.registry = ProcessRegistry(self.root)
        self.jobs = JobRunner()
        self.spares = SparePool(os.path.join(self.root, TMP_DIR), self.jobs, guard=self.guard)
        self.session_jobs = SessionJobs(self.jobs, read_only=read_only)
        self.open_sessions = OpenSessions(
            self.root,
            self.options,
            self.tree,
            max_open=max_open_sessions,
            read_only=read_only,
            finish_deletes=lambda: self.upkeep.finish_orphaned_deletes(),
            on_samples=self.session_jobs.want_dictionary,
        )
        self.session_jobs.serve(self.open_sessions)
        self.upkeep = upkeep.Upkeep(
            self.root,
            open_catalog=lambda: upkeep.open_catalog(
                self.root, self.options, read_only=read_only, background=self.jobs.request
            ),
            tree=self.tree,
            registry=self.registry,
            state=self.state,
            sessions=self.open_sessions,
            read_only=read_only,
        )
        self.publisher = Publisher(self.root, self.options, self.spares, self.guard)
        self.trees = TreeOps(self)
        self.upkeep.recover_at_open()
        self.retention_job: RetentionJob | None = None
        if self.retention is not None and not read_only:
            self.retention_job = RetentionJob(self, self.retention)
        # Replication to an object store (journal[s3], journal/replica/): None without.
        self.replica: Replicator | None = None
        if replica is not None:
            self.replica = self._open_replica(replica, replica_mode, replica_lag)

    def _open_replica(self, replica: str, mode: Literal["sync", "async"], lag: float) -> Replicator:
        if self.read_only:
            raise InvalidInputError("replica: a read-only store ships nothing")
        from .replica.replicator import Replicator

        try:
            return Replicator(
                self.root, replica, mode=mode, lag=lag, summary_of=self.session_summary
            )
        except BaseException:
            self.close()
            raise

    @property
    def catalog(self) -> Catalog:
        """The session catalog, opened and re-checked on first use (`Upkeep.settled`):
        opening a store reads none of it, so a cold open costs the same at any size."""
        return self.upkeep.settled()

    def session_dir(self, session_id: str) -> str:
        """The directory a session has (or would have) in this store."""
        return session_path(self.root, session_id)

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise InvalidInputError(f"{what}: this store was opened read-only")

    def _read(self, session_id: str, fn: Callable[[Session], T], absent: Callable[[], T]) -> T:
        """`fn` of a session's current state; `absent()` answers for a missing one
        (with a replica: once the bucket is asked for it, `_fetch_missing`)."""
        if self.replica is None:
            return read_session(self.open_sessions, session_id, fn, absent)

        def fetched() -> T:
            if self._fetch_missing(session_id):
                return read_session(self.open_sessions, session_id, fn, absent)
            return absent()

        return read_session(self.open_sessions, session_id, fn, fetched)

    def _fetch_missing(self, session_id: str) -> bool:
        """Install a session this store does not have from its replica, if the bucket
        holds it (a store opened with `replica=` on an empty root fetches each session
        on first access). Whether it was installed."""
        if self.replica is None or self.read_only:
            return False
        from .replica.install import fetch_session

        return fetch_session(self, self.replica, session_id)

    # -------------------------------------------------------------- checkpoint
    @guarded
    def load(self, session_id: str) -> Checkpoint | None:
        """The latest checkpoint of a session, or None if the session does not exist."""
        validate.validate_session_id(session_id)
        return self._read(session_id, lambda sess: sess.load(), lambda: None)

    @guarded
    def checkpoint_at(self, session_id: str, sequence: int) -> Checkpoint | None:
        """The checkpoint exactly as it was saved at `sequence` (None if none was)."""
        validate.validate_session_id(session_id)
        validate.validate_sequence(sequence, "checkpoint sequence")
        return self._read(session_id, lambda sess: sess.checkpoint_at(sequence), lambda: None)

    @guarded
    def save(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = (),
        execution: ExecutionRecord | None = None,
    ) -> None:
        """Atomically replace the checkpoint, append transcript items, record a finished turn."""
        self.save_with_events(checkpoint, transcript_delta, execution, ())

    @guarded
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
        cp: Checkpoint = coerce(checkpoint, Checkpoint, "checkpoint")
        validate.validate_session_id(cp.session_id)
        sess = self.open_sessions.get(cp.session_id)
        start = 0
        if sess is not None and sess.head.epoch == cp.context_epoch:
            start = min(len(sess.head.context), len(cp.context))
        validate.validate_checkpoint(cp, context_start=start)
        items, rec, evs = save_parts(cp, start, transcript_delta, execution, events)
        if self.replica is None:
            return self._save(sess, cp, items, rec, evs, start)
        self.replica.before_write(cp.session_id)
        journal = self._save(sess, cp, items, rec, evs, start)
        self.replica.committed(cp.session_id)
        return journal

    def _save(
        self,
        sess: Session | None,
        cp: Checkpoint,
        items: list[Any],
        rec: ExecutionRecord | None,
        evs: list[TimestampedEvent],
        start: int,
    ) -> list[JournalEvent]:
        self.registry.note(dir_name(cp.session_id))
        now = int(time.time())
        for _ in range(8):
            if sess is not None:  # looked up (and checked) above: not again
                try:
                    return self._save_existing(sess, cp, items, rec, evs, now, start)
                except SessionGone:
                    # Deleted (or deleted and created again) since it was looked up,
                    # found under its lock before anything was written: look again,
                    # and create it if it is gone.
                    sess = self.open_sessions.get(cp.session_id)
                    continue
            if self._wait_for_delete(cp.session_id):
                sess = self.open_sessions.get(cp.session_id)
                continue
            if start:
                # The prefix taken for stored was checked against a session that is
                # gone now: this one starts empty, so all of it is new.
                validate.validate_checkpoint(cp)
                start = 0
            journal = self._first_save(cp, items, rec, evs, now)
            if journal is None:  # another thread or process created the session first
                sess = self.open_sessions.get(cp.session_id)
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
        # and list a deleted session forever.
        return sess.save(
            cp,
            items,
            rec,
            evs,
            now=now,
            on_commit=lambda: self.upkeep.catalog_upsert(sess, cp.sequence, rec),
            checked_from=checked_from,
        )

    def _wait_for_delete(self, session_id: str) -> bool:
        """If a delete is still taking this id's directory away, wait until it is done
        and say so. Creating the id meanwhile would publish a new session that the
        delete's catalog records then unlist, or that its roll-forward after a crash
        moves to the trash, acknowledged save and all."""
        if dir_name(session_id) not in self.tree.pending_session_dirs():
            return False
        with self.tree.locked():  # a live deleter holds it until its delete is done
            self.upkeep.finish_orphaned_deletes()  # a dead one's is finished here
        return True

    def _first_save(
        self,
        cp: Checkpoint,
        items: list[Any],
        rec: ExecutionRecord | None,
        evs: list[TimestampedEvent],
        now: int,
    ) -> list[JournalEvent] | None:
        """Create a session with its first commit (`Publisher.create`).

        Returns None, having changed nothing, when the session appeared meanwhile
        (the caller then saves into it, which enforces the sequence rule against
        what is there).
        """
        identity = SessionIdentity(cp.session_id, created_at=now)

        def write(first: Session) -> tuple[list[JournalEvent], SessionSummary | None, int]:
            journal = first.save(cp, items, rec, evs, now=now)
            return (journal, *upkeep.summary_of(first))

        def announce(built: tuple[list[JournalEvent], SessionSummary | None, int]) -> None:
            _, summary, covered = built
            self.upkeep.catalog_publish(cp.session_id, summary, covered, cp.sequence, rec)

        built = self.publisher.create(identity, write, announce)
        if built is None:
            return None
        self.session_jobs.warm_soon(cp.session_id)
        return built[0]

    @guarded
    @guarded
    def message_accepted(self, session_id: str, submission_id: str) -> bool:
        """Whether this session durably admitted a message with this submission id."""
        validate.validate_session_id(session_id)
        if not isinstance(submission_id, str):
            raise InvalidInputError("submission id must be a string")
        return self._read(session_id, lambda sess: sess.receipt(submission_id), lambda: False)

    # ------------------------------------------------------------------ events
    @guarded
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
        ev: Event = event if type(event) is Event else coerce(event, Event, "event")
        validate.validate_event(ev)
        if self.replica is None:
            return self._append(session_id, recorded_at_ms, ev, expected_latest)
        self.replica.before_write(session_id)
        if not self.open_sessions.cached(session_id):
            self._fetch_missing(session_id)
        appended = self._append(session_id, recorded_at_ms, ev, expected_latest)
        self.replica.committed(session_id)
        return appended

    def _append(
        self, session_id: str, recorded_at_ms: int, ev: Event, expected_latest: int | None
    ) -> JournalEvent:
        # The cached session unchecked: the checks a deleted session fails run under
        # its lock anyway (two stats fewer per append); if it is gone, open afresh.
        sess = self.open_sessions.cached(session_id)
        for _ in range(8):
            if sess is None:
                sess = self.open_sessions.get(session_id)
                if sess is None:
                    raise NotFoundError(f"event journal session does not exist: {session_id!r}")
            self.registry.note(sess.dir_name)
            try:
                return sess.append_event(recorded_at_ms, ev, expected_latest)
            except SessionGone:
                sess = None  # nothing was written; `get` sees it deleted or re-created
        raise JournalError(f"session {session_id!r}: its directory keeps changing")

    @guarded
    def event_page(self, session_id: str, request: EventPageRequest) -> EventPage:
        """One newest-first page of retained events, `sequence < before_sequence`."""
        req = page_request(session_id, request, EventPageRequest, "event journal page")

        def missing() -> EventPage:
            raise NotFoundError(f"event journal session does not exist: {session_id!r}")

        def page(sess: Session) -> EventPage:
            if not sess.exists:
                missing()
            latest, events, nxt = sess.event_page(req.before_sequence, req.limit)
            return EventPage(latest_sequence=latest, events=events, next_before_sequence=nxt)

        return self._read(session_id, page, missing)

    @guarded
    def events_after(self, session_id: str, after_sequence: int, limit: int) -> list[JournalEvent]:
        """Retained events with `sequence > after_sequence`, oldest first (catch-up)."""
        validate.validate_session_id(session_id)
        validate.validate_sequence(after_sequence, "after_sequence")
        validate.validate_limit(limit, "event journal catch-up")
        return self._read(session_id, lambda sess: sess.events_after(after_sequence, limit), list)

    # ---------------------------------------------------------------- journals
    @guarded
    def transcript_page(self, session_id: str, request: TranscriptPageRequest) -> TranscriptPage:
        """One newest-first page of transcript batches (keyed by checkpoint sequence)."""
        req = page_request(session_id, request, TranscriptPageRequest, "transcript page")

        def page(sess: Session) -> TranscriptPage:
            batches, nxt = sess.transcript_page(req.before_sequence, req.max_batches)
            return TranscriptPage(batches=batches, next_before_sequence=nxt)

        return self._read(session_id, page, TranscriptPage)

    @guarded
    def execution_page(self, session_id: str, request: ExecutionPageRequest) -> ExecutionPage:
        """One newest-first page of finished user turns (keyed by checkpoint sequence)."""
        req = page_request(session_id, request, ExecutionPageRequest, "execution page")

        def page(sess: Session) -> ExecutionPage:
            records, nxt = sess.execution_page(req.before_sequence, req.limit)
            return ExecutionPage(executions=records, next_before_sequence=nxt)

        return self._read(session_id, page, ExecutionPage)

    # ------------------------------------------------------------------- state
    @guarded
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
                self.upkeep.finish_orphaned_deletes()
        else:
            with contextlib.suppress(JournalError, OSError):
                self.upkeep.finish_orphaned_deletes()
        return name in self.tree.pending_state_dirs()

    @guarded
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
        if self.replica is not None:
            self.replica.state_saved(scope, key)

    # ----------------------------------------------------------------- catalog
    @guarded
    def list_sessions_page(self, request: SessionPageRequest) -> SessionPage:
        """Sessions by (updated_at, sequence, session_id) descending; exclusive cursor."""
        req: SessionPageRequest = coerce(request, SessionPageRequest, "request")
        validate.validate_limit(req.limit, "session page")
        if req.owner_id is not None:
            validate.validate_owner_id(req.owner_id, "owner filter")
        self.upkeep.reconcile_dead()
        return listing.sessions_page(self.catalog, self.tree, req)

    @guarded
    def child_sessions(self, session_id: str) -> list[SessionSummary]:
        """Beyond mobius: the listed sessions forked directly from this one, in catalog
        order ((`updated_at`, `sequence`, `session_id`) descending). Costs what the
        answer costs (the catalog keeps each parent's children), not a walk of every
        session; empty when the session has no children or does not exist."""
        validate.validate_session_id(session_id)
        self.upkeep.reconcile_dead()
        return listing.child_sessions(self.catalog, self.tree, session_id)

    @guarded
    def session_summary(self, session_id: str) -> SessionSummary | None:
        """Catalog metadata of one session, derived without reading its context."""
        validate.validate_session_id(session_id)
        return self._read(session_id, lambda sess: upkeep.summary_of(sess)[0], lambda: None)

    @guarded
    def session_metadata(self, session_id: str) -> dict[str, Any] | None:
        """The latest checkpoint's metadata, without decoding the rest of it."""
        validate.validate_session_id(session_id)

        def metadata(sess: Session) -> dict[str, Any] | None:
            header = sess.head.header
            if header is None:
                return None
            return msgspec.msgpack.decode(bytes(header), type=_MetadataOnly).metadata

        return self._read(session_id, metadata, lambda: None)

    @guarded
    def recent_executions(self, limit: int) -> list[ExecutionRecord]:
        """Finished turns across all sessions by (started_at_ms, session_id, sequence) desc.

        A damaged session's turns are answered from the catalog's copies; those it
        holds no copy of (they would be read from the damaged log) are left out."""
        validate.validate_limit(limit, "recent executions")
        self.upkeep.reconcile_dead()
        return listing.recent_executions(self.catalog, self.tree, limit, self._execution_from_log)

    def _execution_from_log(self, session_id: str, sequence: int) -> ExecutionRecord | None:
        """A session's execution record at exactly `sequence`, read from its log (None:
        gone, or the session is damaged)."""

        def read(sess: Session) -> ExecutionRecord | None:
            # The key, not just "the newest before it": a session object opened
            # earlier must not answer with an older record.
            found, _ = sess.sparse_page(KIND_EXECUTIONS, sequence + 1, 1)
            if not found or found[0].sequence != sequence:
                return None
            record: ExecutionRecord = found[0].record
            return record

        try:
            return self._read(session_id, read, lambda: None)
        except CorruptionError:
            # One damaged session hides no other session's turns: its records that
            # the catalog holds no copy of are left out (reads of it, and `journal
            # verify`, report the damage).
            return None

    # -------------------------------------------------------------------- tree
    @guarded
    def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: Checkpoint
    ) -> SessionSummary:
        """Create a clean child session at an exact durable parent sequence."""
        self._writable("fork")
        if self.replica is None:
            return self.trees.fork(parent_session_id, parent_sequence, checkpoint)
        child = coerce(checkpoint, Checkpoint, "checkpoint").session_id
        validate.validate_session_id(child)
        self.replica.before_write(child)
        self._fetch_missing(parent_session_id)
        summary = self.trees.fork(parent_session_id, parent_sequence, checkpoint)
        self.replica.committed(child)
        return summary

    @guarded
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
        self._writable("fork")
        if self.replica is None:
            return self.trees.fork_at(
                parent_session_id, parent_sequence, child_session_id, metadata=metadata
            )
        validate.validate_session_id(child_session_id)
        self.replica.before_write(child_session_id)
        self._fetch_missing(parent_session_id)
        summary = self.trees.fork_at(
            parent_session_id, parent_sequence, child_session_id, metadata=metadata
        )
        self.replica.committed(child_session_id)
        return summary

    @guarded
    def delete_sessions(self, session_ids: Sequence[str]) -> bool:
        """Atomically delete sessions, all their descendants and their session-scoped state.

        Returns False, deleting nothing, when any selected session is absent.
        """
        self._writable("delete_sessions")
        if self.replica is not None:
            for sid in session_ids:
                if isinstance(sid, str):
                    self.replica.before_write(sid)
        return self.trees.delete_sessions(session_ids)

    @guarded
    def prune(
        self,
        *,
        older_than: float | datetime.timedelta | None = None,
        keep_last: int | None = None,
        owner_id: str | None = None,
        dry_run: bool = True,
    ) -> PruneReport:
        """Delete whole sessions by last update (`dry_run`, the default: only report).

        Lets go of the sessions last updated more than `older_than` (seconds or a
        `timedelta`) ago that are not among the `keep_last` most recently updated,
        counting only `owner_id`'s sessions when given; at least one of the two is
        required. Fork-aware: a session is deleted only with its whole subtree, so
        one with a descendant that is kept is kept too (the report's
        `kept_for_descendants`). Each tree is one atomic, crash-safe
        `delete_sessions` commit, made only if the tree is still as planned (a
        session updated or forked from meanwhile is left: `changed`).
        """
        if not dry_run:
            self._writable("prune")
        seconds = (
            older_than.total_seconds() if isinstance(older_than, datetime.timedelta) else older_than
        )
        policy = check_policy(
            RetentionPolicy(older_than=seconds, keep_last=keep_last, owner_id=owner_id)
        )
        return apply_retention(self, policy, dry_run=dry_run)

    @guarded
    def compact(
        self,
        session_id: str,
        *,
        keep: int | None = None,
        erase: bool = True,
        dry_run: bool = False,
    ) -> CompactReport:
        """Give back the disk space of what a session no longer needs.

        `erase`: the records its erase declarations name (what an integration hid:
        a pruned LangGraph checkpoint, a cleared conversation; FORMAT.md section
        11); `keep`: also the headers of all but the newest `keep` checkpoints.
        Records keep their positions and events their sequences (an erased event
        reads as a `journal_erased` stub). Crash-safe: each segment is rewritten
        beside the old one and renamed over it. Waits for the session's writers.
        """
        validate.validate_session_id(session_id)
        if not dry_run:
            self._writable("compact")
        if self.session_summary(session_id) is None:
            raise NotFoundError(f"session {session_id!r} does not exist")
        if self.replica is not None and not dry_run:
            self.replica.flush()  # shipped up to a commit end that compaction keeps
        from .compact import compact_store_session

        return compact_store_session(self, session_id, keep=keep, erase=erase, dry_run=dry_run)

    # ------------------------------------------------------------------ reader
    @guarded
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
        return open_reader(self.open_sessions, session_id)

    # --------------------------------------------------------------- lifecycle
    def incarnation(self, session_id: str) -> tuple[int, int, int] | None:
        """What identifies this incarnation of a session (None: no such session).

        One `stat` of the identity file the store writes once per session (its
        device, inode and change time): the value changes when the session is
        deleted and created again, so a cache keyed by it is never reused for the
        next incarnation.
        """
        validate.validate_session_id(session_id)
        return identity_key(self.session_dir(session_id))

    @guarded
    def take_over(self, session_id: str) -> SessionSummary | None:
        """Make this store the session's only writer across hosts sharing its replica.

        Raises the session's lease epoch, fences the previous writer (its every write
        from then on fails with `FencedError`, and none of them reaches the bucket,
        a restore or this store), fetches what the bucket holds and makes this
        store's copy equal to it; this store's writes then continue its sequences.
        The session's summary, or None when the bucket holds no live session of
        that id (this store may create it). Needs `replica=`.
        """
        self._writable("take_over")
        validate.validate_session_id(session_id)
        if self.replica is None:
            raise InvalidInputError("take_over: this store was opened without replica=")
        from .replica.install import take_over

        return take_over(self, self.replica, session_id)

    @guarded
    def flush(self) -> None:
        """Write every open session's caches (indexes, snapshot), and with a replica,
        wait until every commit made before the call is in the bucket (raising what
        kept one out). The caches are never needed for safety."""
        if self.replica is not None:
            self.replica.flush()
        if self.read_only or not self.guard.is_same():
            return  # caches are written by path: never into another directory's tree
        for sess in self.open_sessions.pin_all():  # pinned: nobody closes them under us
            if sess.caches_current():
                continue  # nothing to write: no lock, no recovery scan
            try:
                with sess.writing():
                    sess.flush_caches()
            except (JournalError, OSError):
                continue  # a cache we cannot write now is rebuilt later

    def close(self) -> None:
        """Flush caches and release files. The store object is unusable afterwards."""
        if self.open_sessions.closed:
            return
        if self.replica is not None:
            replica, self.replica = self.replica, None
            replica.close()
        self.flush()
        self.upkeep.announce_again()  # what still fails is left to the next open (below)
        self.open_sessions.close()  # those a call still uses are closed when it ends
        behind = bool(self.upkeep.unannounced())
        if self.retention_job is not None:
            self.retention_job.close()
        self.spares.close()
        self.jobs.close()  # after the pool's: a refill running now removes what it built
        self.upkeep.close_catalog()
        self.tree.close()
        # Catalog entries still missing: leave this process's registration behind,
        # which the next open takes for a dead process's and reconciles.
        self.registry.close(keep=behind)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""SQLite baseline: mobius's `SqliteCheckpoint` (schema 13, mobius 0.16.27) on stdlib `sqlite3`.

Same schema, pragmas, SQL statements and transaction boundaries as the Rust implementation
(`src/backend/checkpoint/sqlite.rs`, `sqlite_context.rs`, `sqlite_event.rs`), so that timing it
against `journal` compares storage designs, not amounts of work. Every logical write is one
`BEGIN IMMEDIATE` transaction; multi-table reads run in one deferred read transaction. Payloads
are plain JSON data (see `payloads.py`), encoded and decoded with `msgspec.json`.

Each thread gets its own connection (as mobius opens extra connections for concurrent calls), so
multi-threaded workloads contend on SQLite's write lock with `busy_timeout`, as in mobius.

Not reproduced: storing large (> 4 KiB) tool outputs once as a reference into the transcript,
and the error types (store-level failures raise `SqliteMobiusError` with mobius's message; raw
SQLite failures propagate as `sqlite3.Error`).

Run this file to execute the smoke check: `python benchmarks/sqlite_mobius.py`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NamedTuple

import msgspec

__all__ = [
    "CHECKPOINT_VERSION",
    "SCHEMA",
    "SCHEMA_VERSION",
    "EventPage",
    "ExecutionPage",
    "SessionCursor",
    "SessionPage",
    "SqliteMobiusError",
    "SqliteMobiusStore",
    "TranscriptPage",
    "validate_checkpoint",
    "validate_execution",
    "validate_execution_record",
    "validate_identifier",
]

Json = Any
Synchronous = Literal["FULL", "NORMAL"]

SCHEMA_VERSION = 13
CHECKPOINT_VERSION = 20
BUSY_TIMEOUT_MS = 5_000
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
MAX_QUEUED_MESSAGES = 1024
MAX_IDENTIFIER_BYTES = 4096
I64_MAX = 2**63 - 1
CONTEXT_CACHE_SESSIONS = 1024
"""Context-prefix hints kept per connection (mobius holds Weak refs; we hold the items)."""

# Verbatim from mobius 0.16.27 `sqlite.rs`. auto_vacuum must precede WAL on a new database.
SCHEMA = """
PRAGMA auto_vacuum = INCREMENTAL;
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS middleware_state (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    value_json TEXT NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    parent_session_id TEXT REFERENCES sessions(session_id),
    parent_sequence INTEGER CHECK (parent_sequence IS NULL OR parent_sequence >= 0),
    latest_sequence INTEGER NOT NULL CHECK (latest_sequence >= 0),
    latest_event_sequence INTEGER NOT NULL DEFAULT 0 CHECK (latest_event_sequence >= 0),
    latest_checkpoint_json TEXT NOT NULL,
    context_epoch INTEGER NOT NULL CHECK (context_epoch >= 0),
    context_count INTEGER NOT NULL CHECK (context_count >= 0),
    session_context_json TEXT NOT NULL,
    execution_stats_json TEXT NOT NULL,
    catalog_visible INTEGER NOT NULL CHECK (catalog_visible IN (0, 1)),
    first_user_message TEXT,
    created_at INTEGER NOT NULL DEFAULT (unixepoch()),
    updated_at INTEGER NOT NULL DEFAULT (unixepoch()),
    CHECK ((parent_session_id IS NULL) = (parent_sequence IS NULL))
);
CREATE TABLE IF NOT EXISTS context_items (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    epoch INTEGER NOT NULL CHECK (epoch >= 0),
    item_index INTEGER NOT NULL CHECK (item_index >= 0),
    item_json TEXT NOT NULL,
    PRIMARY KEY (session_id, epoch, item_index)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS transcript_delta (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL CHECK (sequence >= 0),
    items_json TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (unixepoch()),
    PRIMARY KEY (session_id, sequence)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS message_receipts (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    submission_id TEXT NOT NULL,
    PRIMARY KEY (session_id, submission_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS execution_journal (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL CHECK (sequence >= 0),
    record_json TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL CHECK (started_at_ms >= 0),
    PRIMARY KEY (session_id, sequence)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS event_journal (
    session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL CHECK (sequence > 0),
    recorded_at_ms INTEGER NOT NULL CHECK (recorded_at_ms >= 0),
    event_kind TEXT NOT NULL,
    model_step_id TEXT,
    stream_phase TEXT,
    delta_bytes INTEGER CHECK (delta_bytes IS NULL OR delta_bytes >= 0),
    event_json TEXT NOT NULL,
    stream_metrics_json TEXT NOT NULL,
    PRIMARY KEY (session_id, sequence)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_recent_idx
    ON sessions(updated_at DESC, latest_sequence DESC, session_id DESC);
CREATE INDEX IF NOT EXISTS execution_journal_recent_idx
    ON execution_journal(started_at_ms DESC, session_id DESC, sequence DESC);
CREATE INDEX IF NOT EXISTS event_journal_step_idx
    ON event_journal(session_id, model_step_id, event_kind);
PRAGMA user_version = 13;
COMMIT;
"""

_UPSERT_SESSION = """
INSERT INTO sessions (
    session_id, latest_sequence, latest_checkpoint_json, session_context_json,
    execution_stats_json, catalog_visible, first_user_message, context_epoch, context_count
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT(session_id) DO UPDATE SET
    latest_sequence = excluded.latest_sequence,
    latest_checkpoint_json = excluded.latest_checkpoint_json,
    context_epoch = excluded.context_epoch,
    context_count = excluded.context_count,
    session_context_json = excluded.session_context_json,
    execution_stats_json = excluded.execution_stats_json,
    catalog_visible = excluded.catalog_visible,
    first_user_message = COALESCE(sessions.first_user_message, excluded.first_user_message),
    updated_at = unixepoch()
WHERE excluded.latest_sequence > sessions.latest_sequence
"""
_CONTEXT_PREFIX = """
SELECT item_index, item_json FROM context_items
WHERE session_id = ?1 AND epoch = ?2 AND item_index < ?3 ORDER BY item_index
"""
_INSERT_CONTEXT = (
    "INSERT INTO context_items (session_id, epoch, item_index, item_json) VALUES (?1, ?2, ?3, ?4)"
)
_INSERT_TRANSCRIPT = (
    "INSERT INTO transcript_delta (session_id, sequence, items_json) VALUES (?1, ?2, ?3)"
)
_INSERT_EVENT = """
INSERT INTO event_journal (
    session_id, sequence, recorded_at_ms, event_kind, model_step_id,
    stream_phase, delta_bytes, event_json, stream_metrics_json
) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
"""
_SESSION_COLUMNS = """
sessions.session_id, sessions.parent_session_id, sessions.parent_sequence,
sessions.latest_sequence, sessions.catalog_visible, sessions.first_user_message,
sessions.session_context_json, sessions.execution_stats_json,
sessions.created_at, sessions.updated_at
"""
_LIST_SESSIONS = f"""
SELECT {_SESSION_COLUMNS}
FROM sessions
WHERE (?5 IS NULL OR json_extract(sessions.session_context_json, '$.owner_id') = ?5)
  AND (?1 IS NULL
   OR (sessions.updated_at, sessions.latest_sequence, sessions.session_id) < (?1, ?2, ?3))
ORDER BY sessions.updated_at DESC, sessions.latest_sequence DESC, sessions.session_id DESC
LIMIT ?4
"""
_STEP_KINDS = frozenset(
    {
        "assistant_message",
        "assistant_content_delta",
        "model_step_started",
        "model_step_completed",
        "web_search_begin",
        "web_search_end",
    }
)
_TRANSIENT_KINDS = frozenset({"session_history", "session_resume_requested"})
_TRANSIENT_FRONTEND = frozenset({"picker", "preview", "widget", "remove_widget"})
_STREAM_PHASES = ("reasoning", "commentary", "final_answer")

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def _dumps(value: Json) -> str:
    return _encode(value).decode()


class SqliteMobiusError(Exception):
    """A store-level failure (mobius `Error::Checkpoint`); nothing was changed."""


class EventPage(NamedTuple):
    """Newest first. Events are mobius `JournalEvent` dicts:
    `{"sequence", "recorded_at_ms", "event", "stream_metrics"}`."""

    latest_sequence: int
    events: list[dict[str, Json]]
    next_before_sequence: int | None


class TranscriptPage(NamedTuple):
    """Newest first. Batches are `{"sequence", "created_at", "items"}` dicts."""

    batches: list[dict[str, Json]]
    next_before_sequence: int | None


class ExecutionPage(NamedTuple):
    """Newest first. Executions are `ExecutionRecord` dicts."""

    executions: list[dict[str, Json]]
    next_before_sequence: int | None


class SessionCursor(NamedTuple):
    updated_at: int
    sequence: int
    session_id: str


class SessionPage(NamedTuple):
    """Sessions are `SessionSummary` dicts; pass `next_cursor` back as `cursor`."""

    sessions: list[dict[str, Json]]
    next_cursor: SessionCursor | None


@dataclass(slots=True)
class _ContextHint:
    """What one connection last wrote or read for a session (mobius `ContextCache`)."""

    sequence: int
    epoch: int
    data_version: int
    items: list[Json]


@dataclass(slots=True)
class _Connection:
    db: sqlite3.Connection
    hints: OrderedDict[str, _ContextHint] = field(default_factory=OrderedDict)


class _Immediate:
    """`BEGIN IMMEDIATE` ... `COMMIT`, or `ROLLBACK` on any exception."""

    __slots__ = ("db",)

    def __init__(self, db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> None:
        self.db = db
        db.execute(begin)

    def __enter__(self) -> sqlite3.Connection:
        return self.db

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self.db.execute("COMMIT")
        elif self.db.in_transaction:
            self.db.execute("ROLLBACK")


def _read(db: sqlite3.Connection) -> _Immediate:
    """A deferred read transaction: every statement sees one snapshot."""
    return _Immediate(db, "BEGIN")


class SqliteMobiusStore:
    """mobius's SQLite checkpoint store, method for method. Thread-safe; one connection per thread.

    `path` is the database file (parent directories are created, mode 0600). `synchronous` is
    "FULL" (mobius's setting: fsync on every commit) or "NORMAL" (WAL fsyncs only at
    checkpoints; survives a process crash, not a power loss).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        synchronous: Synchronous = "FULL",
        *,
        checkpoint_version: int = CHECKPOINT_VERSION,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = Path(path)
        self.synchronous: Synchronous = synchronous
        self.checkpoint_version = checkpoint_version
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self._create()

    # --------------------------------------------------------------------------- connections

    def _create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(self.path, 0o600)
        db = self._connect()
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if (
                version == 0
                and db.execute("SELECT EXISTS (SELECT 1 FROM sqlite_schema)").fetchone()[0]
            ):
                raise SqliteMobiusError(
                    "unversioned SQLite database is not empty; expected schema version "
                    f"{SCHEMA_VERSION} (start with a fresh database)"
                )
            if version not in (0, SCHEMA_VERSION):
                raise SqliteMobiusError(
                    f"unsupported SQLite schema version {version}; expected {SCHEMA_VERSION} "
                    "(start with a fresh database)"
                )
            if version == 0:
                db.executescript(SCHEMA)
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise SqliteMobiusError(f"SQLite could not enable WAL mode: {mode}")
        except BaseException:
            db.close()
            raise
        self._adopt(db)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,  # autocommit: we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # only so close() may close every thread's connection
        )
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute(f"PRAGMA synchronous = {self.synchronous}")
        db.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        return db

    def _adopt(self, db: sqlite3.Connection) -> _Connection:
        connection = _Connection(db)
        with self._lock:
            if self._closed:
                db.close()
                raise SqliteMobiusError("store is closed")
            self._connections.append(db)
        self._local.connection = connection
        return connection

    def _conn(self) -> _Connection:
        connection: _Connection | None = getattr(self._local, "connection", None)
        if connection is None or self._closed:
            if self._closed:
                raise SqliteMobiusError("store is closed")
            connection = self._adopt(self._connect())
        return connection

    def close(self) -> None:
        """Close every thread's connection. Call when no operation is running."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for db in connections:
            db.close()

    def __enter__(self) -> SqliteMobiusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def disk_bytes(self, *, checkpoint: bool = True) -> int:
        """Bytes of the database and its WAL; first folds the WAL into the database if asked."""
        if checkpoint:
            self._conn().db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return sum(
            os.path.getsize(path)
            for path in (self.path, Path(f"{self.path}-wal"))
            if os.path.exists(path)
        )

    # --------------------------------------------------------------------------------- writes

    def save(
        self,
        checkpoint: dict[str, Json],
        transcript_delta: Sequence[Json] = (),
        execution: dict[str, Json] | None = None,
    ) -> None:
        self.save_with_events(checkpoint, transcript_delta, execution, ())

    def save_with_events(
        self,
        checkpoint: dict[str, Json],
        transcript_delta: Sequence[Json],
        execution: dict[str, Json] | None,
        events: Sequence[tuple[int, dict[str, Json]]],
    ) -> list[int]:
        """One commit: checkpoint header + context tail + receipts + transcript batch +
        execution record + events. Returns the event sequences assigned."""
        validate_checkpoint(checkpoint, self.checkpoint_version)
        if execution is not None:
            validate_execution(checkpoint, execution)
        session_id: str = checkpoint["session_id"]
        sequence = _integer(checkpoint["sequence"], "checkpoint sequence")
        header = _dumps({key: value for key, value in checkpoint.items() if key != "context"})
        session_context = _dumps(checkpoint["session_context"])
        stats = _dumps(checkpoint["execution_stats"])
        transcript = _dumps(transcript_delta) if transcript_delta else None
        record = _dumps(execution) if execution is not None else None
        connection = self._conn()
        with _Immediate(connection.db) as db:
            data_version = db.execute("PRAGMA data_version").fetchone()[0]
            hint = connection.hints.get(session_id)
            start, rewritten = _prepare_append(db, checkpoint, hint, data_version)
            changed = db.execute(
                _UPSERT_SESSION,
                (
                    session_id,
                    sequence,
                    header,
                    session_context,
                    stats,
                    checkpoint["catalog_visible"],
                    checkpoint.get("first_user_message"),
                    checkpoint["context_epoch"],
                    len(checkpoint["context"]),
                ),
            ).rowcount
            if changed == 0:
                raise SqliteMobiusError("checkpoint sequence did not advance")
            for message in checkpoint.get("pending_messages") or ():
                db.execute(
                    "INSERT OR IGNORE INTO message_receipts (session_id, submission_id) "
                    "VALUES (?1, ?2)",
                    (session_id, message["id"]),
                )
            if transcript is not None:
                db.execute(_INSERT_TRANSCRIPT, (session_id, sequence, transcript))
            if record is not None:
                assert execution is not None
                db.execute(
                    "INSERT INTO execution_journal (session_id, sequence, record_json, "
                    "started_at_ms) VALUES (?1, ?2, ?3, ?4)",
                    (session_id, sequence, record, execution["started_at_ms"]),
                )
            _append_context(db, checkpoint, start)
            sequences = [_store_event(db, session_id, at, event) for at, event in events]
            if rewritten:
                _reclaim_pages(db)
        _remember(connection, checkpoint, data_version)
        return sequences

    def append_event(self, session_id: str, recorded_at_ms: int, event: dict[str, Json]) -> int:
        """Assign the next event sequence of the session and append the event (one commit)."""
        with _Immediate(self._conn().db) as db:
            return _store_event(db, session_id, recorded_at_ms, event)

    def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: dict[str, Json]
    ) -> dict[str, Json]:
        """Create a clean child at a durable parent sequence; returns its `SessionSummary`."""
        session_id: str = checkpoint["session_id"]
        clean = (
            checkpoint["sequence"] == 0
            and checkpoint.get("active_execution") is None
            and checkpoint.get("pending_approval") is None
            and not checkpoint.get("pending_messages")
        )
        if parent_session_id == session_id:
            raise SqliteMobiusError("a session cannot fork itself")
        if not clean:
            raise SqliteMobiusError("a fork must begin at a clean sequence-zero checkpoint")
        parent_sequence = _integer(parent_sequence, "parent sequence")
        validate_checkpoint(checkpoint, self.checkpoint_version)
        header = _dumps({key: value for key, value in checkpoint.items() if key != "context"})
        context = checkpoint["context"]
        context_json = _dumps(context) if context else None
        connection = self._conn()
        with _Immediate(connection.db) as db:
            data_version = db.execute("PRAGMA data_version").fetchone()[0]
            row = db.execute(
                "SELECT latest_sequence FROM sessions WHERE session_id = ?1", (parent_session_id,)
            ).fetchone()
            if row is None:
                raise SqliteMobiusError("fork parent does not exist")
            if parent_sequence > row[0]:
                raise SqliteMobiusError("fork point is newer than the parent checkpoint")
            db.execute(
                """INSERT INTO sessions (
                       session_id, parent_session_id, parent_sequence, latest_sequence,
                       latest_checkpoint_json, session_context_json, catalog_visible,
                       first_user_message, execution_stats_json, context_epoch, context_count
                   ) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)""",
                (
                    session_id,
                    parent_session_id,
                    parent_sequence,
                    0,
                    header,
                    _dumps(checkpoint["session_context"]),
                    checkpoint["catalog_visible"],
                    checkpoint.get("first_user_message"),
                    _dumps(checkpoint["execution_stats"]),
                    checkpoint["context_epoch"],
                    len(context),
                ),
            )
            _append_context(db, checkpoint, 0)
            if context_json is not None:
                db.execute(_INSERT_TRANSCRIPT, (session_id, 0, context_json))
            summary = _summary(
                db.execute(
                    f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE sessions.session_id = ?1",
                    (session_id,),
                ).fetchone()
            )
        _remember(connection, checkpoint, data_version)
        return summary

    def delete_sessions(self, session_ids: Sequence[str]) -> bool:
        """Delete the sessions, their descendants and their session-scoped state, or nothing.

        Returns False (and deletes nothing) when any selected session is absent.
        """
        roots = list(session_ids)
        if not roots:
            return True
        placeholders = ", ".join("?" * len(roots))
        tree = f"""WITH RECURSIVE session_tree(session_id) AS (
                       SELECT session_id FROM sessions WHERE session_id IN ({placeholders})
                       UNION
                       SELECT child.session_id
                       FROM sessions AS child
                       JOIN session_tree AS parent ON child.parent_session_id = parent.session_id
                   )"""
        connection = self._conn()
        with _Immediate(connection.db) as db:
            found = [
                row[0] for row in db.execute(f"{tree} SELECT session_id FROM session_tree", roots)
            ]
            if not set(roots) <= set(found):
                return False
            for session_id in found:
                db.execute("DELETE FROM middleware_state WHERE scope = ?1", (session_id,))
            db.execute(
                f"{tree} DELETE FROM sessions "
                "WHERE session_id IN (SELECT session_id FROM session_tree)",
                roots,
            )
            # Cursor.rowcount is -1 for a statement starting with WITH; changes() counts the
            # rows the statement deleted itself (cascades excluded), like rusqlite's count.
            deleted = db.execute("SELECT changes()").fetchone()[0]
            if deleted != len(found):
                raise SqliteMobiusError("session tree changed during deletion")
            _reclaim_pages(db)
        for session_id in found:  # our own writes do not change our data_version
            connection.hints.pop(session_id, None)
        return True

    def save_state(self, scope: str, key: str, value: Json) -> None:
        """Last-writer-wins opaque state by (scope, key); one autocommit statement."""
        self._conn().db.execute(
            """INSERT INTO middleware_state (scope, key, value_json) VALUES (?1, ?2, ?3)
               ON CONFLICT(scope, key) DO UPDATE SET value_json = excluded.value_json""",
            (scope, key, _dumps(value)),
        )

    # ---------------------------------------------------------------------------------- reads

    def load(self, session_id: str) -> dict[str, Json] | None:
        """The latest checkpoint (header + context rows, one snapshot), or None."""
        connection = self._conn()
        with _read(connection.db) as db:
            data_version = db.execute("PRAGMA data_version").fetchone()[0]
            row = db.execute(
                "SELECT latest_sequence, latest_checkpoint_json, context_epoch, context_count "
                "FROM sessions WHERE session_id = ?1",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            sequence, header_json, epoch, count = row
            checkpoint = _decode(header_json)
            if not isinstance(checkpoint, dict):
                raise SqliteMobiusError("checkpoint header is not an object")
            if "context" in checkpoint:
                raise SqliteMobiusError("checkpoint header contains an inline context")
            validate_checkpoint(checkpoint, self.checkpoint_version)
            if checkpoint["session_id"] != session_id or checkpoint["sequence"] != sequence:
                raise SqliteMobiusError("checkpoint row does not match its index")
            if checkpoint["context_epoch"] != epoch:
                raise SqliteMobiusError("checkpoint context epoch does not match its index")
            items: list[Json] = []
            for row_epoch, index, item_json in db.execute(
                "SELECT epoch, item_index, item_json FROM context_items WHERE session_id = ?1 "
                "ORDER BY epoch, item_index",
                (session_id,),
            ):
                if row_epoch != epoch or index != len(items) or len(items) >= count:
                    raise SqliteMobiusError("stored context rows do not match their header")
                items.append(_decode(item_json))
            if len(items) != count:
                raise SqliteMobiusError("stored context length does not match its header")
        checkpoint["context"] = items
        _remember(connection, checkpoint, data_version)
        return checkpoint

    def message_accepted(self, session_id: str, submission_id: str) -> bool:
        row = (
            self._conn()
            .db.execute(
                "SELECT EXISTS(SELECT 1 FROM message_receipts "
                "WHERE session_id = ?1 AND submission_id = ?2)",
                (session_id, submission_id),
            )
            .fetchone()
        )
        return bool(row[0])

    def event_page(self, session_id: str, before_sequence: int | None, limit: int) -> EventPage:
        """Retained events with sequence < `before_sequence` (None: newest), newest first."""
        if limit <= 0:
            raise SqliteMobiusError("event journal page limit must be positive")
        with _read(self._conn().db) as db:
            row = db.execute(
                "SELECT latest_event_sequence FROM sessions WHERE session_id = ?1", (session_id,)
            ).fetchone()
            if row is None:
                raise SqliteMobiusError("event journal session does not exist")
            rows = db.execute(
                """SELECT sequence, recorded_at_ms, event_json, stream_metrics_json
                   FROM event_journal
                   WHERE session_id = ?1 AND (?2 IS NULL OR sequence < ?2)
                   ORDER BY sequence DESC
                   LIMIT ?3""",
                (session_id, before_sequence, limit + 1),
            ).fetchall()
        has_more = len(rows) > limit
        events = [_journal_event(row) for row in rows[:limit]]
        next_before = events[-1]["sequence"] if has_more else None
        return EventPage(row[0], events, next_before)

    def events_after(
        self, session_id: str, after_sequence: int, limit: int
    ) -> list[dict[str, Json]]:
        """Retained events with sequence > `after_sequence`, oldest first."""
        if limit <= 0:
            raise SqliteMobiusError("event catch-up limit must be positive")
        with _read(self._conn().db) as db:
            rows = db.execute(
                """SELECT sequence, recorded_at_ms, event_json, stream_metrics_json
                   FROM event_journal WHERE session_id = ?1 AND sequence > ?2
                   ORDER BY sequence ASC LIMIT ?3""",
                (session_id, after_sequence, limit),
            ).fetchall()
        return [_journal_event(row) for row in rows]

    def transcript_page(
        self, session_id: str, before_sequence: int | None, max_batches: int
    ) -> TranscriptPage:
        if max_batches <= 0:
            raise SqliteMobiusError("transcript page limit must be positive")
        rows = (
            self._conn()
            .db.execute(
                """SELECT sequence, created_at, items_json FROM transcript_delta
                   WHERE session_id = ?1 AND (?2 IS NULL OR sequence < ?2)
                   ORDER BY sequence DESC
                   LIMIT ?3""",
                (session_id, before_sequence, max_batches + 1),
            )
            .fetchall()
        )
        has_more = len(rows) > max_batches
        batches = [
            {"sequence": sequence, "created_at": created_at, "items": _decode(items)}
            for sequence, created_at, items in rows[:max_batches]
        ]
        return TranscriptPage(batches, batches[-1]["sequence"] if has_more else None)

    def execution_page(
        self, session_id: str, before_sequence: int | None, limit: int
    ) -> ExecutionPage:
        if limit <= 0:
            raise SqliteMobiusError("execution page limit must be positive")
        rows = (
            self._conn()
            .db.execute(
                """SELECT sequence, record_json FROM execution_journal
                   WHERE session_id = ?1 AND (?2 IS NULL OR sequence < ?2)
                   ORDER BY sequence DESC
                   LIMIT ?3""",
                (session_id, before_sequence, limit + 1),
            )
            .fetchall()
        )
        has_more = len(rows) > limit
        rows = rows[:limit]
        executions = [_decode_execution(record) for _, record in rows]
        return ExecutionPage(executions, rows[-1][0] if has_more else None)

    def recent_executions(self, limit: int) -> list[dict[str, Json]]:
        """Newest executions across all sessions (started_at_ms, session_id, sequence DESC)."""
        if limit <= 0:
            raise SqliteMobiusError("recent execution limit must be positive")
        rows = self._conn().db.execute(
            """SELECT record_json FROM execution_journal
               ORDER BY started_at_ms DESC, session_id DESC, sequence DESC
               LIMIT ?1""",
            (limit,),
        )
        return [_decode_execution(record) for (record,) in rows]

    def session_summary(self, session_id: str) -> dict[str, Json] | None:
        row = (
            self._conn()
            .db.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?1", (session_id,)
            )
            .fetchone()
        )
        return None if row is None else _summary(row)

    def session_metadata(self, session_id: str) -> dict[str, Json] | None:
        """`$.metadata` of the stored header, without decoding the rest or the context."""
        row = (
            self._conn()
            .db.execute(
                "SELECT json_extract(latest_checkpoint_json, '$.metadata') FROM sessions "
                "WHERE session_id = ?1",
                (session_id,),
            )
            .fetchone()
        )
        return None if row is None else _decode(row[0])

    def list_sessions_page(
        self, owner_id: str | None, cursor: SessionCursor | None, limit: int
    ) -> SessionPage:
        """Most recently updated first: (updated_at, sequence, session_id) DESC, exclusive
        cursor; the owner filter applies before paging."""
        if limit <= 0:
            raise SqliteMobiusError("session page limit must be positive")
        if owner_id is not None:
            validate_identifier("session owner filter", owner_id)
        updated_at, sequence, cursor_id = cursor if cursor is not None else (None, None, None)
        rows = (
            self._conn()
            .db.execute(_LIST_SESSIONS, (updated_at, sequence, cursor_id, limit + 1, owner_id))
            .fetchall()
        )
        has_more = len(rows) > limit
        sessions = [_summary(row) for row in rows[:limit]]
        next_cursor = None
        if has_more:
            last = sessions[-1]
            next_cursor = SessionCursor(last["updated_at"], last["sequence"], last["session_id"])
        return SessionPage(sessions, next_cursor)

    def load_state(self, scope: str, key: str) -> Json | None:
        row = (
            self._conn()
            .db.execute(
                "SELECT value_json FROM middleware_state WHERE scope = ?1 AND key = ?2",
                (scope, key),
            )
            .fetchone()
        )
        return None if row is None else _decode(row[0])


# ------------------------------------------------------------------------------ context prefix


def _prepare_append(
    db: sqlite3.Connection,
    checkpoint: dict[str, Json],
    hint: _ContextHint | None,
    data_version: int,
) -> tuple[int, bool]:
    """Check the context-prefix rule; return (first index to insert, epoch rewritten).

    Same epoch: the stored items must be an identical prefix. A warm hint (same sequence,
    epoch, item count and data_version, i.e. no other connection wrote) compares identities
    without reading rows; otherwise one ordered query compares values. A higher epoch deletes
    the stored items.
    """
    session_id = checkpoint["session_id"]
    row = db.execute(
        "SELECT latest_sequence, context_epoch, context_count FROM sessions WHERE session_id = ?1",
        (session_id,),
    ).fetchone()
    if row is None:
        return 0, False
    sequence, epoch, count = row
    next_epoch = _integer(checkpoint["context_epoch"], "context epoch")
    if _integer(checkpoint["sequence"], "checkpoint sequence") <= sequence:
        raise SqliteMobiusError("checkpoint sequence did not advance")
    if next_epoch < epoch:
        raise SqliteMobiusError("context epoch cannot move backwards")
    if next_epoch != epoch:
        db.execute("DELETE FROM context_items WHERE session_id = ?1", (session_id,))
        return 0, True
    context = checkpoint["context"]
    if len(context) < count:
        raise SqliteMobiusError("context prefix was truncated without advancing its epoch")
    if hint is not None and not (
        hint.sequence == sequence
        and hint.epoch == epoch
        and hint.data_version == data_version
        and len(hint.items) == count
    ):
        hint = None
    if count == 0 or (hint is not None and all(map(_same, hint.items, context))):
        return count, False
    rows = db.execute(_CONTEXT_PREFIX, (session_id, epoch, count))
    for index in range(count):
        stored = rows.fetchone()
        if stored is None or stored[0] != index:
            raise SqliteMobiusError("stored context item is missing")
        item = context[index]
        if hint is not None and hint.items[index] is item:
            continue
        if _decode(stored[1]) != item:
            raise SqliteMobiusError("context prefix changed without advancing its epoch")
    return count, False


def _same(old: object, new: object) -> bool:
    return old is new


def _append_context(db: sqlite3.Connection, checkpoint: dict[str, Json], start: int) -> None:
    session_id = checkpoint["session_id"]
    epoch = checkpoint["context_epoch"]
    context = checkpoint["context"]
    if start < len(context):
        db.executemany(
            _INSERT_CONTEXT,
            (
                (session_id, epoch, index, _dumps(context[index]))
                for index in range(start, len(context))
            ),
        )


def _remember(connection: _Connection, checkpoint: dict[str, Json], data_version: int) -> None:
    """Record the context just written or read as this connection's hint for the session."""
    hints = connection.hints
    session_id = checkpoint["session_id"]
    context = checkpoint["context"]
    if not context:
        hints.pop(session_id, None)
        return
    hints[session_id] = _ContextHint(
        checkpoint["sequence"], checkpoint["context_epoch"], data_version, list(context)
    )
    hints.move_to_end(session_id)
    while len(hints) > CONTEXT_CACHE_SESSIONS:
        hints.popitem(last=False)


def _reclaim_pages(db: sqlite3.Connection) -> None:
    """Give free pages back to the file system (mobius drains `PRAGMA incremental_vacuum`).

    Each step of the pragma frees one page, and Python's sqlite3 steps a statement without
    result columns only once per `execute`, so step it once per free page.
    """
    for _ in range(db.execute("PRAGMA freelist_count").fetchone()[0]):
        db.execute("PRAGMA incremental_vacuum")


# ------------------------------------------------------------------------------- event journal


def _store_event(
    db: sqlite3.Connection, session_id: str, recorded_at_ms: int, event: dict[str, Json]
) -> int:
    """Append one event inside the caller's transaction; apply the journal side effects.

    Transient events consume a sequence and are deleted at once; a `message` removes its
    submission's `message_delta` rows; an `assistant_message` with content removes its step's
    `assistant_content_delta` rows; a `token_count` removes older ones; `model_step_completed`
    stores stream metrics computed from its step's deltas.
    """
    if recorded_at_ms < 0:
        raise SqliteMobiusError("event journal timestamp cannot be negative")
    msg = event["msg"]
    kind: str = msg["type"]
    model_step_id = msg.get("model_step_id") if kind in _STEP_KINDS else None
    stream_phase = None
    delta_bytes = None
    if kind == "assistant_content_delta":
        stream_phase = msg["phase"]
        delta_bytes = len(msg["delta"].encode())
    event_json = _dumps({"storage": "inline", "event": event})
    row = db.execute(
        "SELECT latest_event_sequence FROM sessions WHERE session_id = ?1", (session_id,)
    ).fetchone()
    if row is None:
        raise SqliteMobiusError("event journal session does not exist")
    sequence: int = row[0] + 1
    metrics: list[dict[str, Json]] = []
    if kind == "model_step_completed" and model_step_id is not None:
        metrics = _stream_metrics(db, session_id, model_step_id)
    db.execute(
        _INSERT_EVENT,
        (
            session_id,
            sequence,
            recorded_at_ms,
            kind,
            model_step_id,
            stream_phase,
            delta_bytes,
            event_json,
            _dumps(metrics),
        ),
    )
    db.execute(
        "UPDATE sessions SET latest_event_sequence = ?2 WHERE session_id = ?1",
        (session_id, sequence),
    )
    if kind == "message":
        db.execute(
            "DELETE FROM event_journal WHERE session_id = ?1 AND event_kind = 'message_delta' "
            "AND json_extract(event_json, '$.event.submission_id') = ?2",
            (session_id, event.get("submission_id")),
        )
    elif kind == "assistant_message" and msg.get("content") and model_step_id is not None:
        db.execute(
            "DELETE FROM event_journal WHERE session_id = ?1 AND model_step_id = ?2 "
            "AND event_kind IN ('assistant_content_delta')",
            (session_id, model_step_id),
        )
    elif kind == "token_count":
        db.execute(
            "DELETE FROM event_journal "
            "WHERE session_id = ?1 AND event_kind = 'token_count' AND sequence < ?2",
            (session_id, sequence),
        )
    if kind in _TRANSIENT_KINDS or (
        kind == "frontend" and msg.get("frontend_type") in _TRANSIENT_FRONTEND
    ):
        db.execute(
            "DELETE FROM event_journal WHERE session_id = ?1 AND sequence = ?2",
            (session_id, sequence),
        )
    return sequence


def _stream_metrics(
    db: sqlite3.Connection, session_id: str, model_step_id: str
) -> list[dict[str, Json]]:
    """Per-phase StreamMetrics of a step's deltas (a clock going backwards is clamped)."""
    acc: dict[str, dict[str, int]] = {}
    for phase, recorded_at_ms, nbytes in db.execute(
        """SELECT stream_phase, recorded_at_ms, delta_bytes FROM event_journal
           WHERE session_id = ?1 AND model_step_id = ?2 AND stream_phase IS NOT NULL
           ORDER BY sequence""",
        (session_id, model_step_id),
    ):
        if phase not in _STREAM_PHASES:
            raise SqliteMobiusError("event journal contains an unknown stream phase")
        metric = acc.get(phase)
        if metric is None:
            acc[phase] = {
                "first_delta_at_ms": recorded_at_ms,
                "last_delta_at_ms": recorded_at_ms,
                "chunk_count": 1,
                "utf8_bytes": nbytes,
                "longest_gap_ms": 0,
            }
            continue
        at = max(recorded_at_ms, metric["last_delta_at_ms"])
        metric["longest_gap_ms"] = max(metric["longest_gap_ms"], at - metric["last_delta_at_ms"])
        metric["last_delta_at_ms"] = at
        metric["chunk_count"] += 1
        metric["utf8_bytes"] += nbytes
    return [{"phase": phase, **acc[phase]} for phase in _STREAM_PHASES if phase in acc]


def _journal_event(row: tuple[int, int, str, str]) -> dict[str, Json]:
    sequence, recorded_at_ms, event_json, metrics_json = row
    stored = _decode(event_json)
    if stored.get("storage") != "inline":
        raise SqliteMobiusError("unsupported stored event format")
    return {
        "sequence": sequence,
        "recorded_at_ms": recorded_at_ms,
        "event": stored["event"],
        "stream_metrics": _decode(metrics_json),
    }


# ---------------------------------------------------------------------------------- validation


def _integer(value: int, name: str) -> int:
    if not 0 <= value <= I64_MAX:
        raise SqliteMobiusError(f"{name} exceeds SQLite INTEGER")
    return value


def _blank(value: object) -> bool:
    return not isinstance(value, str) or not value.strip()


def validate_identifier(name: str, value: str) -> None:
    if _blank(value):
        raise SqliteMobiusError(f"{name} cannot be empty")
    if len(value.encode()) > MAX_IDENTIFIER_BYTES:
        raise SqliteMobiusError(f"{name} exceeds {MAX_IDENTIFIER_BYTES} bytes")


def validate_checkpoint(checkpoint: dict[str, Json], version: int) -> None:
    """mobius `validate_checkpoint`: version, execution/pending-work coherence, owner, queue."""
    if checkpoint.get("version") != version:
        raise SqliteMobiusError(f"unsupported checkpoint version {checkpoint.get('version')}")
    active = checkpoint.get("active_execution")
    step = checkpoint.get("active_model_step")
    pending_work = bool(
        step is not None or checkpoint.get("pending_tools") or checkpoint.get("pending_approval")
    )
    if active is not None:
        if _blank(active.get("submission_id")) or _blank(active.get("turn_id")):
            raise SqliteMobiusError("active execution identifiers cannot be empty")
        if active.get("started_at_ms", 0) < 0:
            raise SqliteMobiusError("active execution start time cannot be negative")
        if active.get("failed_tool_calls", 0) > active.get("tool_calls", 0):
            raise SqliteMobiusError("active execution failed-tool count exceeds tool count")
        phase = active.get("phase")
        completing = phase == "completion" or (
            isinstance(phase, dict) and phase.get("type") == "completion"
        )
        if completing and pending_work:
            raise SqliteMobiusError("turn completion conflicts with pending model or tool work")
    elif pending_work:
        raise SqliteMobiusError("pending model or tool work has no active execution")
    validate_identifier("session owner ID", checkpoint["session_context"].get("owner_id"))
    if step is not None and active is not None:  # a step without an execution failed above
        if _blank(step.get("model_step_id")):
            raise SqliteMobiusError("active model-step identifier cannot be empty")
        if step.get("started_at_ms", 0) < active.get("started_at_ms", 0):
            raise SqliteMobiusError("active model step predates its execution")
    pending = checkpoint.get("pending_messages") or ()
    if len(pending) > MAX_QUEUED_MESSAGES:
        raise SqliteMobiusError("queued messages exceed the durable item limit")
    seen: set[tuple[str, str]] = set()
    for message in pending:
        key = (message["owner"], message["id"])
        if key in seen:
            raise SqliteMobiusError(f"duplicate queued message `{key[0]}/{key[1]}`")
        seen.add(key)


def validate_execution(checkpoint: dict[str, Json], execution: dict[str, Json]) -> None:
    if checkpoint.get("active_execution") is not None:
        raise SqliteMobiusError("a terminal execution requires an idle checkpoint")
    if execution["session_id"] != checkpoint["session_id"]:
        raise SqliteMobiusError("execution record does not match its checkpoint")
    validate_execution_record(execution)


def validate_execution_record(execution: dict[str, Json]) -> None:
    if any(_blank(execution[key]) for key in ("session_id", "submission_id", "turn_id")):
        raise SqliteMobiusError("execution record identifiers cannot be empty")
    started, finished = execution["started_at_ms"], execution["finished_at_ms"]
    if started < 0 or finished < started:
        raise SqliteMobiusError("execution record has invalid timestamps")
    if execution["elapsed_ms"] != finished - started:
        raise SqliteMobiusError("execution elapsed time does not match its timestamps")
    if execution["failed_tool_calls"] > execution["tool_calls"]:
        raise SqliteMobiusError("execution failed-tool count exceeds tool count")


def _decode_execution(record_json: str) -> dict[str, Json]:
    execution: dict[str, Json] = _decode(record_json)
    validate_execution_record(execution)
    return execution


def _summary(row: tuple[Any, ...]) -> dict[str, Json]:
    (
        session_id,
        parent_session_id,
        parent_sequence,
        sequence,
        catalog_visible,
        first_user_message,
        session_context_json,
        stats_json,
        created_at,
        updated_at,
    ) = row
    session_context = _decode(session_context_json)
    validate_identifier("session owner ID", session_context.get("owner_id"))
    return {
        "session_id": session_id,
        "session_context": session_context,
        "parent_session_id": parent_session_id,
        "parent_sequence": parent_sequence,
        "sequence": sequence,
        "catalog_visible": bool(catalog_visible),
        "first_user_message": first_user_message,
        "execution_stats": _decode(stats_json),
        "created_at": created_at,
        "updated_at": updated_at,
    }


# ------------------------------------------------------------------------------------- smoke


def _smoke() -> None:
    """Exercise every method once and check the results against mobius's semantics."""
    import shutil
    import sys
    import tempfile
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import payloads

    def expect_error(message: str, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except SqliteMobiusError as error:
            assert message in str(error), (message, str(error))
        else:
            raise AssertionError(f"expected {message!r}")

    root = Path(tempfile.mkdtemp(prefix="sqlite-mobius-"))
    store = SqliteMobiusStore(root / "nested" / "mobius.sqlite")
    gen = payloads.PayloadGenerator(seed=7)
    db = store._conn().db
    pragmas = {
        name: db.execute(f"PRAGMA {name}").fetchone()[0]
        for name in (
            "journal_mode",
            "synchronous",
            "foreign_keys",
            "busy_timeout",
            "journal_size_limit",
            "auto_vacuum",
            "user_version",
        )
    }
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 2,
        "foreign_keys": 1,
        "busy_timeout": 5000,
        "journal_size_limit": 64 * 1024 * 1024,
        "auto_vacuum": 2,
        "user_version": 13,
    }, pragmas
    assert (store.path.stat().st_mode & 0o777) == 0o600
    print(f"pragmas ok: {pragmas}")

    # save_with_events: first save at 0 with events, then saves that grow the context.
    sim = payloads.SessionSim(gen, "sess-a", owner_id="owner-a")
    first = sim.next_save(events=3)
    assert store.save_with_events(*first) == [1, 2, 3]
    assert store.load("sess-a") == first.checkpoint
    last = first
    executions: list[dict[str, Json]] = []
    statements: list[str] = []
    for n in range(1, 4):
        if n == 2:  # the hint now holds the caller's own items: warm saves read no context rows
            db.set_trace_callback(statements.append)
        last = sim.next_save(events=2, execution=True, pending_message=n == 2)
        assert store.save_with_events(*last) == [2 * n + 2, 2 * n + 3]
        assert last.execution is not None
        executions.append(last.execution)
    db.set_trace_callback(None)
    assert statements and not [sql for sql in statements if "item_index <" in sql]
    assert store.load("sess-a") == last.checkpoint
    count = db.execute("SELECT count(*) FROM context_items WHERE session_id = 'sess-a'")
    assert count.fetchone()[0] == len(last.checkpoint["context"]) == 40 + 3 * 2
    header = db.execute("SELECT latest_checkpoint_json FROM sessions").fetchone()[0]
    assert "context" not in _decode(header)
    receipt = db.execute("SELECT submission_id FROM message_receipts").fetchone()[0]
    assert store.message_accepted("sess-a", receipt)
    assert not store.message_accepted("sess-other", receipt)
    print("save_with_events/load/receipts ok: sequences 1..9, context 46 items, warm saves")

    # Rejections leave the stored state unchanged.
    stale = dict(last.checkpoint)
    expect_error("did not advance", store.save_with_events, stale, [], None, [])
    edited = dict(last.checkpoint, sequence=10, context=[{"edited": True}, *stale["context"][1:]])
    expect_error("prefix changed", store.save_with_events, edited, [], None, [])
    truncated = dict(last.checkpoint, sequence=10, context=stale["context"][:-1])
    expect_error("truncated", store.save_with_events, truncated, [], None, [])
    bad_event = sim.next_save(events=1)
    bad_event.events.append((-1, gen.event("sess-a")))
    expect_error("cannot be negative", store.save_with_events, *bad_event)
    assert store.load("sess-a") == last.checkpoint
    assert store.event_page("sess-a", None, 1).latest_sequence == 9
    sim.sequence -= 1  # the failed save never happened
    # A fresh connection (cold prefix check: one ordered query, by value) accepts the tail.
    cold = SqliteMobiusStore(store.path)
    cold_save = sim.next_save(events=0)
    cold_save.checkpoint["context"] = _decode(_encode(cold_save.checkpoint["context"]))
    cold.save_with_events(*cold_save)
    cold.close()
    print("rejections ok: stale sequence, changed/truncated prefix, bad event; cold check ok")

    # Epoch bump: rows replaced, free pages reclaimed.
    sim.compact(keep=3)
    compacted = sim.next_save(events=0)
    store.save_with_events(*compacted)
    assert store.load("sess-a") == compacted.checkpoint
    assert len(compacted.checkpoint["context"]) == 4 + 2
    assert db.execute("PRAGMA freelist_count").fetchone()[0] == 0
    backwards = dict(compacted.checkpoint, sequence=99, context_epoch=0)
    expect_error("cannot move backwards", store.save_with_events, backwards, [], None, [])
    print("context epoch rewrite ok: 6 items at epoch 1, freelist_count 0, no way back")

    # append_event and event_page (newest first, exclusive cursor, limit+1).
    for _ in range(11):
        store.append_event("sess-a", gen.tick(), gen.event("sess-a"))
    page = store.event_page("sess-a", None, 5)
    assert page.latest_sequence == 20
    assert [e["sequence"] for e in page.events] == [20, 19, 18, 17, 16]
    assert page.next_before_sequence == 16
    seen = []
    cursor = None
    while True:
        page = store.event_page("sess-a", cursor, 7)
        seen += [e["sequence"] for e in page.events]
        cursor = page.next_before_sequence
        if cursor is None:
            break
    assert seen == list(range(20, 0, -1)), seen
    assert [e["sequence"] for e in store.events_after("sess-a", 17, 10)] == [18, 19, 20]
    expect_error("must be positive", store.event_page, "sess-a", None, 0)
    expect_error("does not exist", store.event_page, "nope", None, 1)
    expect_error("does not exist", store.append_event, "nope", 1, gen.event("nope"))
    print("append_event/event_page ok: 20 events paged by 7 as 20..1, cursor exclusive")

    # Journal side effects.
    turn = gen.turn_events("sess-a", deltas=4)
    first_seq = store.append_event("sess-a", *turn[0])
    for at, event in turn[1:]:
        store.append_event("sess-a", at, event)
    kinds = [e["event"]["msg"]["type"] for e in store.events_after("sess-a", first_seq - 1, 100)]
    assert "assistant_content_delta" not in kinds, kinds
    assert kinds.count("token_count") == 1
    completed = next(
        e
        for e in store.events_after("sess-a", first_seq - 1, 100)
        if e["event"]["msg"]["type"] == "model_step_completed"
    )
    assert [m["chunk_count"] for m in completed["stream_metrics"]] != []
    assert sum(m["chunk_count"] for m in completed["stream_metrics"]) == 4
    history = store.append_event("sess-a", gen.tick(), gen.event("sess-a", "session_history"))
    page = store.event_page("sess-a", None, 1)
    assert page.latest_sequence == history and page.events[0]["sequence"] == history - 1
    print(f"side effects ok: turn kept {kinds}, transient consumed seq {history}")

    # transcript_page / execution_page / recent_executions.
    page_t = store.transcript_page("sess-a", None, 2)
    assert [b["sequence"] for b in page_t.batches] == [5, 4] and page_t.next_before_sequence == 4
    rest = store.transcript_page("sess-a", 4, 100)
    assert [b["sequence"] for b in rest.batches] == [
        3,
        2,
        1,
        0,
    ] and rest.next_before_sequence is None
    assert rest.batches[-1]["items"] == first.transcript_delta and rest.batches[0]["created_at"] > 0
    page_e = store.execution_page("sess-a", None, 2)
    assert page_e == ExecutionPage(executions[:0:-1], 2)
    assert store.execution_page("sess-a", 2, 5) == ExecutionPage(executions[:1], None)
    assert store.recent_executions(2) == page_e.executions
    summary = store.session_summary("sess-a")
    assert summary is not None and summary["execution_stats"]["run_count"] == 3
    assert store.session_metadata("sess-a") == sim.metadata
    print("transcript/execution paging ok: [5,4]->[3,2,1,0], [3,2]->[1], run_count 3")

    # list_sessions_page: owner filter before paging, row-value cursor.
    for name in ("a", "b", "c"):
        store.save(gen.checkpoint(f"list-{name}", owner_id="owner-list"))
    page_s = store.list_sessions_page("owner-list", None, 2)
    assert [s["session_id"] for s in page_s.sessions] == ["list-c", "list-b"], page_s
    assert page_s.next_cursor is not None and page_s.next_cursor.session_id == "list-b"
    page_s = store.list_sessions_page("owner-list", page_s.next_cursor, 2)
    assert [s["session_id"] for s in page_s.sessions] == ["list-a"] and page_s.next_cursor is None
    everything = store.list_sessions_page(None, None, 100).sessions
    assert len(everything) == 4
    plan = " ".join(
        str(row[-1])
        for row in db.execute(f"EXPLAIN QUERY PLAN {_LIST_SESSIONS}", (1, 2, "x", 3, None))
    )
    assert "sessions_recent_idx" in plan, plan
    expect_error("cannot be empty", store.list_sessions_page, " ", None, 1)
    print(f"list_sessions_page ok: [c,b]->[a]; plan: {plan}")

    # fork: historical point, whole context as batch 0, no parent events.
    child = sim.fork_checkpoint("child-1", items=10)
    summary = store.fork("sess-a", 1, child)
    assert (summary["parent_session_id"], summary["parent_sequence"], summary["sequence"]) == (
        "sess-a",
        1,
        0,
    )
    assert summary["first_user_message"] == child["first_user_message"]
    assert store.load("child-1") == child
    batches = store.transcript_page("child-1", None, 10).batches
    assert [b["sequence"] for b in batches] == [0] and batches[0]["items"] == child["context"]
    assert store.event_page("child-1", None, 10) == EventPage(0, [], None)
    expect_error("newer than the parent", store.fork, "sess-a", 99, sim.fork_checkpoint("x"))
    expect_error("does not exist", store.fork, "missing", 0, sim.fork_checkpoint("x"))
    expect_error("cannot fork itself", store.fork, "x", 0, sim.fork_checkpoint("x"))
    dirty = dict(sim.fork_checkpoint("x"), sequence=1)
    expect_error("clean sequence-zero", store.fork, "sess-a", 0, dirty)
    store.save(dict(child, sequence=1))  # a child grows like any session
    store.fork("child-1", 1, sim.fork_checkpoint("grandchild-1", items=2))
    print("fork ok: child at parent seq 1, batch [0] == context, grandchild forked from child")

    # delete_sessions: whole trees, all or nothing, session-scoped state only.
    for scope in ("sess-a", "child-1", "grandchild-1", "global"):
        store.save_state(scope, "tasks.v1", {"scope": scope})
    assert store.load_state("sess-a", "tasks.v1") == {"scope": "sess-a"}
    assert store.delete_sessions([]) is True
    assert store.delete_sessions(["child-1", "missing", "list-a"]) is False
    assert store.load("child-1") is not None and store.load("list-a") is not None
    assert store.delete_sessions(["sess-a"]) is True
    for gone in ("sess-a", "child-1", "grandchild-1"):
        assert store.load(gone) is None and store.load_state(gone, "tasks.v1") is None
    assert store.load_state("global", "tasks.v1") == {"scope": "global"}
    for table in ("context_items", "transcript_delta", "event_journal", "execution_journal"):
        left = db.execute(
            f"SELECT count(*) FROM {table} WHERE session_id LIKE '%-1' OR session_id = 'sess-a'"
        ).fetchone()[0]
        assert left == 0, table
    assert not store.message_accepted("sess-a", receipt)
    assert store.delete_sessions(["sess-a"]) is False
    assert db.execute("PRAGMA freelist_count").fetchone()[0] == 0
    print("delete_sessions ok: tree of 3 removed with state and cascades, global kept")

    # Threads: one connection each; gapless unique event sequences on one shared session,
    # and concurrent saves of each thread's own session.
    events = gen.timestamped_events("list-a", 50)
    sims = [payloads.SessionSim(gen, f"thread-{i}") for i in range(4)]
    saves = [[sim.next_save(events=2) for _ in range(5)] for sim in sims]
    results: list[int] = []
    lock = threading.Lock()

    def writer(own_saves: list[payloads.SaveArgs]) -> None:
        mine = []
        for index, (at, event) in enumerate(events):
            mine.append(store.append_event("list-a", at, event))
            if index % 10 == 0:
                store.save_with_events(*own_saves[index // 10])
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=writer, args=(own,)) for own in saves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(1, 201)), "sequences not gapless and unique"
    for sim, own in zip(sims, saves, strict=True):
        assert store.load(sim.session_id) == own[-1].checkpoint
        assert store.event_page(sim.session_id, None, 1).latest_sequence == 10
    assert len(store._connections) >= 5
    print(
        f"threads ok: 4 writers x 50 events -> 1..200 plus 5 saves each, "
        f"{len(store._connections)} connections"
    )
    store.close()
    expect_error("closed", store.load, "list-a")

    # Timing, for orientation only (the real harness is benchmarks/run.py).
    modes: tuple[Synchronous, ...] = ("FULL", "NORMAL")
    for mode in modes:
        path = root / f"timing-{mode}.sqlite"
        with SqliteMobiusStore(path, mode) as timed:
            sim = payloads.SessionSim(payloads.PayloadGenerator(1), "t", events=0)
            timed_saves = [sim.next_save(events=4) for _ in range(101)]
            appends = payloads.PayloadGenerator(2).timestamped_events("t", 300)
            timed.save_with_events(*timed_saves[0])
            started = time.perf_counter()
            for args in timed_saves[1:]:
                timed.save_with_events(*args)
            save_s = (time.perf_counter() - started) / 100
            started = time.perf_counter()
            for at, event in appends:
                timed.append_event("t", at, event)
            append_s = (time.perf_counter() - started) / 300
            started = time.perf_counter()
            for _ in range(200):
                timed.event_page("t", None, 100)
            page_time = (time.perf_counter() - started) / 200
            print(
                f"timing {mode:6}: save_with_events {save_s * 1e6:6.0f} us, "
                f"append_event {append_s * 1e6:5.0f} us, "
                f"event_page(100) {page_time * 1e6:5.0f} us, "
                f"{timed.disk_bytes() / 1024:.0f} KiB on disk"
            )
    shutil.rmtree(root)  # kept for inspection if anything above failed
    print("smoke ok")


if __name__ == "__main__":
    _smoke()

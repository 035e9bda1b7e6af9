"""SQLite baseline, tuned: the same logical store as `sqlite_mobius.py`, written for speed.

`SqliteMobiusStore` reproduces mobius's schema and statements; this one is what a
performance-minded engineer would write on stdlib `sqlite3` for the same API and semantics:

- WAL, `synchronous=FULL` (against journal's durable mode) or `NORMAL` (against "os"),
  `cache_size` 64 MiB, `mmap_size` 256 MiB, `temp_store=MEMORY`, no foreign keys (deletes
  remove what they own explicitly, by key range), `auto_vacuum=NONE` (freed pages are reused).
- One connection per thread (`threading.local`), a large statement cache (every statement is
  prepared once per connection and reused), `BEGIN IMMEDIATE` around each write, `executemany`
  for the rows of a batch.
- Integer session keys: `sessions.sk INTEGER PRIMARY KEY` with a unique text id. Events,
  transcript batches, execution records and context chunks live in rowid tables keyed by
  `sk << 32 | sequence`: the rowid *is* the (session, sequence) index, so a page is one range
  scan of the table's own b-tree (no second index, no overflow pages for 1 KiB rows).
- Bodies are msgpack (msgspec) BLOBs, stored as the API serves them (an event as its
  `JournalEvent`, a batch with its sequence, a session's `SessionSummary`), so a page is the
  rows' blobs joined and decoded in one call. The context is stored as chunks (one row per
  save: the concatenated encodings of the items it appended), so a save writes only its tail
  and a load decodes the whole context in one call.
- Covering indexes for `list_sessions_page` ((updated_at, sequence, id, summary), and the
  same per owner: a page reads the index only), for
  `recent_executions` ((started_at_ms, session id, key)), for children (`parent_id`), and a
  partial index for the event side effects (the deltas of a model step or a submission).

Semantics checked as journal and mobius check them: the checkpoint sequence must advance; within
an epoch the stored context must be a prefix of the new one (bytes of the encoded prefix compared
with the stored chunks, then by value; a warm per-connection hint holds the stored bytes, valid
while `PRAGMA data_version` is unchanged); a higher epoch replaces the context; mobius's checkpoint
and execution-record validation (`sqlite_mobius.validate_*`); event sequences assigned without
gaps, transient events consume a sequence and are not kept, a `message` removes its submission's
`message_delta`s, an `assistant_message` with content its step's deltas, a `token_count` the
previous one, `model_step_completed` gets per-phase stream metrics; pages newest first with an
exclusive cursor; fork checks its parent and fork point and stores the child's context as its
transcript batch 0; delete removes whole subtrees with their session-scoped state, or nothing.

Differences (also in README.md): values are not walked for strict JSON (the msgpack encoder
rejects what it cannot encode, but accepts bytes, tuples, non-string keys and NaN, which journal
rejects); sequences must be below 2**32 (the key layout); the large-tool-output reference of
mobius is not reproduced (nor is it in `sqlite_mobius.py`).

Run this file to execute the smoke check: `python benchmarks/sqlite_tuned.py`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import msgspec
from sqlite_mobius import (
    CHECKPOINT_VERSION,
    EventPage,
    ExecutionPage,
    SessionCursor,
    SessionPage,
    SqliteMobiusError,
    Synchronous,
    TranscriptPage,
    validate_checkpoint,
    validate_execution,
    validate_identifier,
)

__all__ = ["SCHEMA", "SCHEMA_VERSION", "SqliteTunedError", "SqliteTunedStore"]

Json = Any
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 5_000
CACHE_KIB = 64 * 1024
MMAP_BYTES = 256 * 1024 * 1024
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
STATEMENT_CACHE = 256
HINT_SESSIONS = 1024
"""Context hints kept per connection."""
SHIFT = 32
LOW = (1 << SHIFT) - 1
MAX_SEQUENCE = LOW
MAX_IDENTIFIER_BYTES = 4096

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    sk INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    parent_id TEXT,
    parent_sequence INTEGER,
    owner TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    event_seq INTEGER NOT NULL DEFAULT 0,
    token_seq INTEGER NOT NULL DEFAULT 0,
    epoch INTEGER NOT NULL,
    ctx_count INTEGER NOT NULL,
    ctx_next INTEGER NOT NULL,
    catalog_visible INTEGER NOT NULL,
    first_user_message TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    summary BLOB NOT NULL,
    header BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_recent
    ON sessions(updated_at DESC, sequence DESC, id DESC, summary);
CREATE INDEX IF NOT EXISTS sessions_owner
    ON sessions(owner, updated_at DESC, sequence DESC, id DESC, summary);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id) WHERE parent_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS context (k INTEGER PRIMARY KEY, items BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS transcript (
    k INTEGER PRIMARY KEY, created_at INTEGER NOT NULL, items BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    k INTEGER PRIMARY KEY, sid TEXT NOT NULL, started_at_ms INTEGER NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS executions_recent
    ON executions(started_at_ms DESC, sid DESC, k DESC);
CREATE TABLE IF NOT EXISTS events (
    k INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    grp TEXT,
    phase TEXT,
    nbytes INTEGER,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_grp ON events(grp, k) WHERE grp IS NOT NULL;
CREATE TABLE IF NOT EXISTS receipts (
    sk INTEGER NOT NULL, submission_id TEXT NOT NULL, PRIMARY KEY (sk, submission_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state (
    rowid INTEGER PRIMARY KEY, scope TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
    UNIQUE (scope, key)
);
PRAGMA user_version = 1;
"""

_SUMMARY_COLUMNS = "summary"
_ORDER = "ORDER BY updated_at DESC, sequence DESC, id DESC LIMIT ?"
_LIST = {
    (False, False): f"SELECT {_SUMMARY_COLUMNS} FROM sessions {_ORDER}",
    (False, True): f"SELECT {_SUMMARY_COLUMNS} FROM sessions "
    f"WHERE (updated_at, sequence, id) < (?, ?, ?) {_ORDER}",
    (True, False): f"SELECT {_SUMMARY_COLUMNS} FROM sessions WHERE owner = ? {_ORDER}",
    (True, True): f"SELECT {_SUMMARY_COLUMNS} FROM sessions "
    f"WHERE owner = ? AND (updated_at, sequence, id) < (?, ?, ?) {_ORDER}",
}
_SESSION_ROW = (
    "SELECT sk, sequence, epoch, ctx_count, ctx_next, event_seq, token_seq, parent_id, "
    "parent_sequence, first_user_message, created_at FROM sessions WHERE id = ?"
)
_INSERT_SESSION = """
INSERT INTO sessions (id, parent_id, parent_sequence, owner, sequence, epoch, ctx_count,
    ctx_next, catalog_visible, first_user_message, created_at, updated_at, header, summary)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_UPDATE_SESSION = """
UPDATE sessions SET owner = ?, sequence = ?, epoch = ?, ctx_count = ?, ctx_next = ?,
    catalog_visible = ?, first_user_message = ?, updated_at = ?, header = ?, summary = ?
WHERE sk = ?
"""
_INSERT_EVENT = "INSERT INTO events (k, at, grp, phase, nbytes, body) VALUES (?, ?, ?, ?, ?, ?)"
_EVENT_PAGE = "SELECT body FROM events WHERE k >= ? AND k < ? ORDER BY k DESC LIMIT ?"
_TRANSIENT_KINDS = frozenset({"session_history", "session_resume_requested"})
_TRANSIENT_FRONTEND = frozenset({"picker", "preview", "widget", "remove_widget"})

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


class SqliteTunedError(SqliteMobiusError):
    """A store-level failure; nothing was changed. (The shared checkpoint validators raise
    its base class, `SqliteMobiusError`.)"""


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _join_items(items: Sequence[Json]) -> bytes:
    """The concatenated msgpack encodings of `items` (an array without its header)."""
    encoded = _encode(list(items))
    return encoded[len(_array_header(len(items))) :]


def _decode_items(joined: bytes, count: int) -> list[Json]:
    items: list[Json] = _decode(_array_header(count) + joined)
    return items


def _decode_rows(blobs: Sequence[bytes]) -> list[Json]:
    """Decode one page of msgpack bodies in one call (as one array)."""
    return _decode_items(b"".join(blobs), len(blobs))


def _summary_blob(
    session_id: str,
    checkpoint: dict[str, Json],
    parent: tuple[str | None, int | None],
    first_user_message: str | None,
    created_at: int,
    updated_at: int,
) -> bytes:
    """The session's `SessionSummary`, encoded once per write and served as stored."""
    return _encode(
        {
            "session_id": session_id,
            "session_context": checkpoint["session_context"],
            "parent_session_id": parent[0],
            "parent_sequence": parent[1],
            "sequence": checkpoint["sequence"],
            "catalog_visible": bool(checkpoint["catalog_visible"]),
            "first_user_message": first_user_message,
            "execution_stats": checkpoint["execution_stats"],
            "created_at": created_at,
            "updated_at": updated_at,
        }
    )


def _batch_blob(sequence: int, created_at: int, joined: bytes, count: int) -> bytes:
    """A transcript batch `{"sequence", "created_at", "items"}` from already encoded items."""
    return (
        b"\x83"
        + _encode("sequence")
        + _encode(sequence)
        + _encode("created_at")
        + _encode(created_at)
        + _encode("items")
        + _array_header(count)
        + joined
    )


def _sequence(value: object, name: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_SEQUENCE:
        raise SqliteTunedError(f"{name} must be an integer in 0..{MAX_SEQUENCE}: {value!r}")
    return value


def _is_transient(msg: dict[str, Json]) -> bool:
    kind = msg.get("type")
    if kind in _TRANSIENT_KINDS:
        return True
    if kind != "frontend":
        return False
    inner = msg.get("event", msg)
    frontend = inner.get("frontend_type") if isinstance(inner, dict) else None
    return (frontend if frontend is not None else msg.get("frontend_type")) in _TRANSIENT_FRONTEND


class _Prepared(NamedTuple):
    checkpoint: dict[str, Json]
    transcript_delta: Sequence[Json]
    execution: dict[str, Json] | None
    events: Sequence[tuple[int, dict[str, Json]]]
    session_id: str
    sequence: int
    epoch: int
    context: list[Json]
    header: bytes
    owner: str
    now: int


@dataclass(slots=True)
class _Hint:
    """The stored context bytes of one session, as this connection last wrote or read them."""

    sequence: int
    epoch: int
    data_version: int
    count: int
    joined: bytes


@dataclass(slots=True)
class _Connection:
    db: sqlite3.Connection
    hints: OrderedDict[int, _Hint] = field(default_factory=OrderedDict)


class _Transaction:
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


class SqliteTunedStore:
    """The tuned SQLite store. Thread-safe; one connection per thread.

    `path` is the database file (parent directories are created). `synchronous` is "FULL"
    (an fsync of the WAL on every commit) or "NORMAL" (WAL synced at checkpoints only).
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = self._connect()
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                if db.execute("SELECT EXISTS (SELECT 1 FROM sqlite_schema)").fetchone()[0]:
                    raise SqliteTunedError(f"{self.path}: not empty and not a tuned store")
                db.executescript("BEGIN IMMEDIATE;" + SCHEMA + "COMMIT;")
            elif version != SCHEMA_VERSION:
                raise SqliteTunedError(f"{self.path}: schema {version}, expected {SCHEMA_VERSION}")
        except BaseException:
            db.close()
            raise
        self._adopt(db)

    # --------------------------------------------------------------------------- connections

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=STATEMENT_CACHE,
        )
        for pragma in (
            "journal_mode = WAL",
            f"synchronous = {self.synchronous}",
            f"cache_size = -{CACHE_KIB}",
            f"mmap_size = {MMAP_BYTES}",
            "temp_store = MEMORY",
            f"journal_size_limit = {JOURNAL_SIZE_LIMIT}",
            f"busy_timeout = {BUSY_TIMEOUT_MS}",
        ):
            db.execute(f"PRAGMA {pragma}").fetchall()
        return db

    def _adopt(self, db: sqlite3.Connection) -> _Connection:
        connection = _Connection(db)
        with self._lock:
            if self._closed:
                db.close()
                raise SqliteTunedError("store is closed")
            self._connections.append(db)
        self._local.connection = connection
        return connection

    def _conn(self) -> _Connection:
        connection: _Connection | None = getattr(self._local, "connection", None)
        if connection is None or self._closed:
            if self._closed:
                raise SqliteTunedError("store is closed")
            connection = self._adopt(self._connect())
        return connection

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for db in connections:
            db.close()

    def __enter__(self) -> SqliteTunedStore:
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
        """One commit: header + context tail + receipts + transcript batch + execution record
        + events. Returns the event sequences assigned."""
        prepared = self._prepare(checkpoint, transcript_delta, execution, events)
        connection = self._conn()
        with _Transaction(connection.db) as db:
            data_version = db.execute("PRAGMA data_version").fetchone()[0]
            return self._write(connection, db, data_version, prepared)

    def save_many(
        self,
        saves: Sequence[
            tuple[
                dict[str, Json],
                Sequence[Json],
                dict[str, Json] | None,
                Sequence[tuple[int, dict[str, Json]]],
            ]
        ],
    ) -> list[list[int]]:
        """Several saves in one transaction (one commit, one sync): SQLite's bulk path,
        for creating many sessions. All or nothing."""
        prepared = [self._prepare(*args) for args in saves]
        connection = self._conn()
        with _Transaction(connection.db) as db:
            data_version = db.execute("PRAGMA data_version").fetchone()[0]
            return [self._write(connection, db, data_version, p) for p in prepared]

    def _prepare(
        self,
        checkpoint: dict[str, Json],
        transcript_delta: Sequence[Json],
        execution: dict[str, Json] | None,
        events: Sequence[tuple[int, dict[str, Json]]],
    ) -> _Prepared:
        """Validate and encode one save, before its transaction."""
        validate_checkpoint(checkpoint, self.checkpoint_version)
        if execution is not None:
            validate_execution(checkpoint, execution)
        session_id: str = checkpoint["session_id"]
        validate_identifier("session ID", session_id)
        sequence = _sequence(checkpoint["sequence"], "checkpoint sequence")
        epoch = _sequence(checkpoint["context_epoch"], "context epoch")
        for at, _ in events:
            if type(at) is not int or at < 0:
                raise SqliteTunedError("event journal timestamp cannot be negative")
        context: list[Json] = checkpoint["context"]
        header = _encode({key: value for key, value in checkpoint.items() if key != "context"})
        owner = checkpoint["session_context"]["owner_id"]
        now = int(time.time())
        return _Prepared(
            checkpoint,
            transcript_delta,
            execution,
            events,
            session_id,
            sequence,
            epoch,
            context,
            header,
            owner,
            now,
        )

    def _write(
        self, connection: _Connection, db: sqlite3.Connection, data_version: int, p: _Prepared
    ) -> list[int]:
        """The statements of one save, inside the caller's write transaction."""
        (
            checkpoint,
            transcript_delta,
            execution,
            events,
            session_id,
            sequence,
            epoch,
            context,
            header,
            owner,
            now,
        ) = p
        row = db.execute(_SESSION_ROW, (session_id,)).fetchone()
        first_message = checkpoint.get("first_user_message")
        if row is None:
            joined = _join_items(context)
            summary = _summary_blob(session_id, checkpoint, (None, None), first_message, now, now)
            cur = db.execute(
                _INSERT_SESSION,
                (
                    session_id,
                    None,
                    None,
                    owner,
                    sequence,
                    epoch,
                    len(context),
                    1 if context else 0,
                    checkpoint["catalog_visible"],
                    checkpoint.get("first_user_message"),
                    now,
                    now,
                    header,
                    summary,
                ),
            )
            sk: int = cur.lastrowid  # type: ignore[assignment]
            if context:
                db.execute("INSERT INTO context (k, items) VALUES (?, ?)", (sk << SHIFT, joined))
            event_seq = token_seq = 0
        else:
            sk, stored_seq, stored_epoch, count, chunk, event_seq, token_seq = row[:7]
            parent_id, parent_sequence, stored_message, created_at = row[7:]
            if stored_message is not None:
                first_message = stored_message
            if sequence <= stored_seq:
                raise SqliteTunedError(
                    f"checkpoint sequence did not advance (stored {stored_seq}, got {sequence})"
                )
            hint = connection.hints.get(sk)
            if hint is not None and not (
                hint.sequence == stored_seq
                and hint.epoch == stored_epoch
                and hint.data_version == data_version
                and hint.count == count
            ):
                hint = None
            joined, tail, chunk = self._plan_context(
                db, sk, hint, stored_epoch, count, chunk, context, epoch
            )
            summary = _summary_blob(
                session_id,
                checkpoint,
                (parent_id, parent_sequence),
                first_message,
                created_at,
                now,
            )
            db.execute(
                _UPDATE_SESSION,
                (
                    owner,
                    sequence,
                    epoch,
                    len(context),
                    chunk + (1 if tail else 0),
                    checkpoint["catalog_visible"],
                    first_message,
                    now,
                    header,
                    summary,
                    sk,
                ),
            )
            if tail:
                db.execute(
                    "INSERT INTO context (k, items) VALUES (?, ?)",
                    ((sk << SHIFT) | chunk, tail),
                )
        pending = checkpoint.get("pending_messages")
        if pending:
            db.executemany(
                "INSERT OR IGNORE INTO receipts (sk, submission_id) VALUES (?, ?)",
                [(sk, message["id"]) for message in pending],
            )
        if transcript_delta:
            db.execute(
                "INSERT INTO transcript (k, created_at, items) VALUES (?, ?, ?)",
                (
                    (sk << SHIFT) | sequence,
                    now,
                    _encode({"sequence": sequence, "created_at": now, "items": transcript_delta}),
                ),
            )
        if execution is not None:
            db.execute(
                "INSERT INTO executions (k, sid, started_at_ms, record) VALUES (?, ?, ?, ?)",
                (
                    (sk << SHIFT) | sequence,
                    session_id,
                    execution["started_at_ms"],
                    _encode(execution),
                ),
            )
        sequences = (
            self._store_events(db, sk, event_seq, token_seq, events, update=True) if events else []
        )
        self._remember(connection, sk, sequence, epoch, data_version, len(context), joined)
        return sequences

    def _plan_context(
        self,
        db: sqlite3.Connection,
        sk: int,
        hint: _Hint | None,
        stored_epoch: int,
        count: int,
        chunk: int,
        context: list[Json],
        epoch: int,
    ) -> tuple[bytes, bytes, int]:
        """The context rule; returns (all stored bytes after this save, tail bytes to insert,
        index of the chunk the tail goes in)."""
        if epoch < stored_epoch:
            raise SqliteTunedError("context epoch cannot move backwards")
        if epoch > stored_epoch:
            db.execute(
                "DELETE FROM context WHERE k >= ? AND k <= ?", (sk << SHIFT, (sk << SHIFT) | LOW)
            )
            joined = _join_items(context)
            return joined, joined, 0
        if len(context) < count:
            raise SqliteTunedError("context prefix was truncated without advancing its epoch")
        if hint is not None:
            stored = hint.joined
        else:
            stored = b"".join(
                blob
                for (blob,) in db.execute(
                    "SELECT items FROM context WHERE k >= ? AND k <= ? ORDER BY k",
                    (sk << SHIFT, (sk << SHIFT) | LOW),
                )
            )
        prefix = _join_items(context[:count])
        if prefix != stored:
            old = _decode_items(stored, count)
            for index in range(count):
                if old[index] != context[index]:
                    raise SqliteTunedError("context prefix changed without advancing its epoch")
        tail = _join_items(context[count:]) if len(context) > count else b""
        return stored + tail, tail, chunk

    def _remember(
        self,
        connection: _Connection,
        sk: int,
        sequence: int,
        epoch: int,
        data_version: int,
        count: int,
        joined: bytes,
    ) -> None:
        hints = connection.hints
        hints[sk] = _Hint(sequence, epoch, data_version, count, joined)
        hints.move_to_end(sk)
        while len(hints) > HINT_SESSIONS:
            hints.popitem(last=False)

    def _store_events(
        self,
        db: sqlite3.Connection,
        sk: int,
        event_seq: int,
        token_seq: int,
        events: Sequence[tuple[int, dict[str, Json]]],
        *,
        update: bool,
    ) -> list[int]:
        """Insert events after `event_seq` with their side effects; update the session's
        counters (the caller holds the write transaction)."""
        base = sk << SHIFT
        rows: list[tuple[Any, ...]] = []
        sequences: list[int] = []
        token_before = token_seq
        for at, event in events:
            event_seq += 1
            if event_seq > MAX_SEQUENCE:
                raise SqliteTunedError("event sequence exceeds the key layout")
            sequences.append(event_seq)
            msg = event["msg"]
            kind = msg.get("type")
            if _is_transient(msg):
                continue
            grp = phase = nbytes = None
            metrics: list[Json] = []
            if kind == "assistant_content_delta":
                step = msg.get("model_step_id")
                if isinstance(step, str):
                    grp = "s\0" + step
                    phase = str(msg.get("phase", ""))
                    text = msg.get("delta")
                    nbytes = len(text.encode("utf-8", "surrogatepass")) if type(text) is str else 0
            elif kind == "message_delta":
                submission = event.get("submission_id")
                if submission is not None:
                    grp = "m\0" + submission
            elif kind in ("message", "assistant_message", "token_count", "model_step_completed"):
                if rows:  # the effect sees every earlier event of the batch
                    db.executemany(_INSERT_EVENT, rows)
                    rows = []
                metrics, token_seq = self._side_effect(db, sk, kind, event, event_seq, token_seq)
            body = _encode(
                {
                    "sequence": event_seq,
                    "recorded_at_ms": at,
                    "event": event,
                    "stream_metrics": metrics,
                }
            )
            rows.append((base | event_seq, at, grp, phase, nbytes, body))
        if rows:
            db.executemany(_INSERT_EVENT, rows)
        if update:
            if token_seq != token_before:
                db.execute(
                    "UPDATE sessions SET event_seq = ?, token_seq = ? WHERE sk = ?",
                    (event_seq, token_seq, sk),
                )
            else:
                db.execute("UPDATE sessions SET event_seq = ? WHERE sk = ?", (event_seq, sk))
        return sequences

    def _side_effect(
        self,
        db: sqlite3.Connection,
        sk: int,
        kind: str,
        event: dict[str, Json],
        sequence: int,
        token_seq: int,
    ) -> tuple[list[Json], int]:
        """Apply one compaction rule; returns (stream metrics, token_count sequence)."""
        base = sk << SHIFT
        msg = event["msg"]
        bounds = (base, base | LOW)
        if kind == "message":
            submission = event.get("submission_id")
            if submission is not None:
                db.execute(
                    "DELETE FROM events WHERE grp = ? AND k >= ? AND k <= ?",
                    ("m\0" + submission, *bounds),
                )
        elif kind == "assistant_message":
            step = msg.get("model_step_id")
            if isinstance(step, str) and msg.get("content"):
                db.execute(
                    "DELETE FROM events WHERE grp = ? AND k >= ? AND k <= ?",
                    ("s\0" + step, *bounds),
                )
        elif kind == "token_count":
            if token_seq:
                db.execute("DELETE FROM events WHERE k = ?", (base | token_seq,))
            token_seq = sequence
        else:  # model_step_completed
            step = msg.get("model_step_id")
            if isinstance(step, str):
                metrics = self._stream_metrics(db, "s\0" + step, bounds)
                outcome = msg.get("outcome")
                if isinstance(outcome, dict):
                    outcome = outcome.get("type", next(iter(outcome), ""))
                if outcome not in ("completed", "retrying"):  # failed steps keep their deltas
                    db.execute(
                        "UPDATE events SET grp = NULL WHERE grp = ? AND k >= ? AND k <= ?",
                        ("s\0" + step, *bounds),
                    )
                return metrics, token_seq
        return [], token_seq

    def _stream_metrics(
        self, db: sqlite3.Connection, grp: str, bounds: tuple[int, int]
    ) -> list[dict[str, Json]]:
        out: dict[str, dict[str, Json]] = {}
        for at, phase, nbytes in db.execute(
            "SELECT at, phase, nbytes FROM events WHERE grp = ? AND k >= ? AND k <= ? ORDER BY k",
            (grp, *bounds),
        ):
            metric = out.get(phase)
            if metric is None:
                out[phase] = {
                    "phase": phase,
                    "first_delta_at_ms": at,
                    "last_delta_at_ms": at,
                    "chunk_count": 1,
                    "utf8_bytes": nbytes,
                    "longest_gap_ms": 0,
                }
                continue
            at = max(at, metric["last_delta_at_ms"])
            metric["longest_gap_ms"] = max(
                metric["longest_gap_ms"], at - metric["last_delta_at_ms"]
            )
            metric["last_delta_at_ms"] = at
            metric["chunk_count"] += 1
            metric["utf8_bytes"] += nbytes
        return list(out.values())

    def append_event(self, session_id: str, recorded_at_ms: int, event: dict[str, Json]) -> int:
        """Assign the next event sequence of the session and append the event (one commit)."""
        if type(recorded_at_ms) is not int or recorded_at_ms < 0:
            raise SqliteTunedError("event journal timestamp cannot be negative")
        with _Transaction(self._conn().db) as db:
            row = db.execute(
                "SELECT sk, event_seq, token_seq FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SqliteTunedError("event journal session does not exist")
            sk, event_seq, token_seq = row
            return self._store_events(
                db, sk, event_seq, token_seq, ((recorded_at_ms, event),), update=True
            )[0]

    def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: dict[str, Json]
    ) -> dict[str, Json]:
        """Create a clean child at a parent sequence; returns its `SessionSummary`."""
        session_id: str = checkpoint["session_id"]
        if parent_session_id == session_id:
            raise SqliteTunedError("a session cannot fork itself")
        if not (
            checkpoint["sequence"] == 0
            and checkpoint.get("active_execution") is None
            and checkpoint.get("pending_approval") is None
            and not checkpoint.get("pending_messages")
        ):
            raise SqliteTunedError("a fork must begin at a clean sequence-zero checkpoint")
        parent_sequence = _sequence(parent_sequence, "parent sequence")
        validate_checkpoint(checkpoint, self.checkpoint_version)
        validate_identifier("session ID", session_id)
        epoch = _sequence(checkpoint["context_epoch"], "context epoch")
        context: list[Json] = checkpoint["context"]
        header = _encode({key: value for key, value in checkpoint.items() if key != "context"})
        joined = _join_items(context)
        now = int(time.time())
        first_message = checkpoint.get("first_user_message")
        parent = (parent_session_id, parent_sequence)
        summary = _summary_blob(session_id, checkpoint, parent, first_message, now, now)
        connection = self._conn()
        with _Transaction(connection.db) as db:
            data_version = db.execute("PRAGMA data_version").fetchone()[0]
            row = db.execute(
                "SELECT sequence FROM sessions WHERE id = ?", (parent_session_id,)
            ).fetchone()
            if row is None:
                raise SqliteTunedError("fork parent does not exist")
            if parent_sequence > row[0]:
                raise SqliteTunedError("fork point is newer than the parent checkpoint")
            try:
                cur = db.execute(
                    _INSERT_SESSION,
                    (
                        session_id,
                        parent_session_id,
                        parent_sequence,
                        checkpoint["session_context"]["owner_id"],
                        0,
                        epoch,
                        len(context),
                        1 if context else 0,
                        checkpoint["catalog_visible"],
                        checkpoint.get("first_user_message"),
                        now,
                        now,
                        header,
                        summary,
                    ),
                )
            except sqlite3.IntegrityError:
                raise SqliteTunedError(f"session {session_id!r} already exists") from None
            sk: int = cur.lastrowid  # type: ignore[assignment]
            if context:
                db.execute("INSERT INTO context (k, items) VALUES (?, ?)", (sk << SHIFT, joined))
                db.execute(
                    "INSERT INTO transcript (k, created_at, items) VALUES (?, ?, ?)",
                    (sk << SHIFT, now, _batch_blob(0, now, joined, len(context))),
                )
        self._remember(connection, sk, 0, epoch, data_version, len(context), joined)
        result: dict[str, Json] = _decode(summary)
        return result

    def delete_sessions(self, session_ids: Sequence[str]) -> bool:
        """Delete the sessions, their descendants and their session-scoped state, or nothing.

        Returns False (and deletes nothing) when any selected session is absent.
        """
        roots = list(dict.fromkeys(session_ids))
        if not roots:
            return True
        placeholders = ", ".join("?" * len(roots))
        connection = self._conn()
        with _Transaction(connection.db) as db:
            found = db.execute(
                f"""WITH RECURSIVE tree(sk, id) AS (
                        SELECT sk, id FROM sessions WHERE id IN ({placeholders})
                        UNION
                        SELECT child.sk, child.id FROM sessions AS child
                        JOIN tree ON child.parent_id = tree.id
                    ) SELECT sk, id FROM tree""",
                roots,
            ).fetchall()
            if not set(roots) <= {session_id for _, session_id in found}:
                return False
            ranges = [(sk << SHIFT, (sk << SHIFT) | LOW) for sk, _ in found]
            for table in ("events", "transcript", "executions", "context"):
                db.executemany(f"DELETE FROM {table} WHERE k >= ? AND k <= ?", ranges)
            db.executemany("DELETE FROM receipts WHERE sk = ?", [(sk,) for sk, _ in found])
            db.executemany("DELETE FROM state WHERE scope = ?", [(sid,) for _, sid in found])
            db.executemany("DELETE FROM sessions WHERE sk = ?", [(sk,) for sk, _ in found])
        for sk, _ in found:
            connection.hints.pop(sk, None)
        return True

    def save_state(self, scope: str, key: str, value: Json) -> None:
        """Last-writer-wins opaque state by (scope, key); one autocommit statement (durable
        with FULL)."""
        validate_identifier("state scope", scope)
        validate_identifier("state key", key)
        self._conn().db.execute(
            "INSERT INTO state (scope, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value",
            (scope, key, _encode(value)),
        )

    # ---------------------------------------------------------------------------------- reads

    def load(self, session_id: str) -> dict[str, Json] | None:
        """The latest checkpoint (header + context chunks, one snapshot), or None."""
        connection = self._conn()
        with _Transaction(connection.db, "BEGIN") as db:
            row = db.execute(
                "SELECT sk, sequence, epoch, ctx_count, header FROM sessions WHERE id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                return None
            sk, sequence, epoch, count, header = row
            joined = b"".join(
                blob
                for (blob,) in db.execute(
                    "SELECT items FROM context WHERE k >= ? AND k <= ? ORDER BY k",
                    (sk << SHIFT, (sk << SHIFT) | LOW),
                )
            )
        checkpoint: dict[str, Json] = _decode(header)
        checkpoint["context"] = _decode_items(joined, count)
        if checkpoint["sequence"] != sequence or checkpoint["context_epoch"] != epoch:
            raise SqliteTunedError("checkpoint header does not match its row")
        validate_checkpoint(checkpoint, self.checkpoint_version)
        return checkpoint

    def message_accepted(self, session_id: str, submission_id: str) -> bool:
        row = (
            self._conn()
            .db.execute(
                "SELECT EXISTS (SELECT 1 FROM receipts WHERE submission_id = ? "
                "AND sk = (SELECT sk FROM sessions WHERE id = ?))",
                (submission_id, session_id),
            )
            .fetchone()
        )
        return bool(row[0])

    def event_page(self, session_id: str, before_sequence: int | None, limit: int) -> EventPage:
        """Retained events with sequence < `before_sequence` (None: newest), newest first.
        The page's bodies (stored as served) are decoded in one call."""
        if limit <= 0:
            raise SqliteTunedError("event journal page limit must be positive")
        with _Transaction(self._conn().db, "BEGIN") as db:
            row = db.execute(
                "SELECT sk, event_seq FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if row is None:
                raise SqliteTunedError("event journal session does not exist")
            base = row[0] << SHIFT
            end = base + (LOW + 1 if before_sequence is None else min(before_sequence, LOW + 1))
            rows = db.execute(_EVENT_PAGE, (base, end, limit + 1)).fetchall()
        has_more = len(rows) > limit
        events = _decode_rows([body for (body,) in rows[:limit]])
        return EventPage(row[1], events, events[-1]["sequence"] if has_more else None)

    def events_after(
        self, session_id: str, after_sequence: int, limit: int
    ) -> list[dict[str, Json]]:
        """Retained events with sequence > `after_sequence`, oldest first."""
        if limit <= 0:
            raise SqliteTunedError("event catch-up limit must be positive")
        db = self._conn().db
        row = db.execute("SELECT sk FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return []
        base = row[0] << SHIFT
        rows = db.execute(
            "SELECT body FROM events WHERE k > ? AND k <= ? ORDER BY k LIMIT ?",
            (base | min(after_sequence, LOW), base | LOW, limit),
        ).fetchall()
        return _decode_rows([body for (body,) in rows])

    def _range_page(
        self, table: str, column: str, session_id: str, before: int | None, limit: int
    ) -> tuple[list[Json], int | None]:
        """One newest-first page of a (session, sequence) table: the decoded bodies and the
        next exclusive cursor."""
        db = self._conn().db
        row = db.execute("SELECT sk FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return [], None
        base = row[0] << SHIFT
        end = base + (LOW + 1 if before is None else min(before, LOW + 1))
        rows = db.execute(
            f"SELECT k, {column} FROM {table} WHERE k >= ? AND k < ? ORDER BY k DESC LIMIT ?",
            (base, end, limit + 1),
        ).fetchall()
        page = rows[:limit]
        nxt = page[-1][0] & LOW if len(rows) > limit else None
        return _decode_rows([blob for _, blob in page]), nxt

    def transcript_page(
        self, session_id: str, before_sequence: int | None, max_batches: int
    ) -> TranscriptPage:
        if max_batches <= 0:
            raise SqliteTunedError("transcript page limit must be positive")
        batches, nxt = self._range_page(
            "transcript", "items", session_id, before_sequence, max_batches
        )
        return TranscriptPage(batches, nxt)

    def execution_page(
        self, session_id: str, before_sequence: int | None, limit: int
    ) -> ExecutionPage:
        if limit <= 0:
            raise SqliteTunedError("execution page limit must be positive")
        executions, nxt = self._range_page(
            "executions", "record", session_id, before_sequence, limit
        )
        return ExecutionPage(executions, nxt)

    def recent_executions(self, limit: int) -> list[dict[str, Json]]:
        """Newest executions across all sessions (started_at_ms, session_id, sequence DESC)."""
        if limit <= 0:
            raise SqliteTunedError("recent execution limit must be positive")
        rows = self._conn().db.execute(
            "SELECT record FROM executions ORDER BY started_at_ms DESC, sid DESC, k DESC LIMIT ?",
            (limit,),
        )
        return _decode_rows([record for (record,) in rows])

    def session_summary(self, session_id: str) -> dict[str, Json] | None:
        row = (
            self._conn()
            .db.execute("SELECT summary FROM sessions WHERE id = ?", (session_id,))
            .fetchone()
        )
        if row is None:
            return None
        summary: dict[str, Json] = _decode(row[0])
        return summary

    def session_metadata(self, session_id: str) -> dict[str, Json] | None:
        row = (
            self._conn()
            .db.execute("SELECT header FROM sessions WHERE id = ?", (session_id,))
            .fetchone()
        )
        if row is None:
            return None
        metadata: dict[str, Json] = _decode(row[0])["metadata"]
        return metadata

    def list_sessions_page(
        self, owner_id: str | None, cursor: SessionCursor | None, limit: int
    ) -> SessionPage:
        """Most recently updated first: (updated_at, sequence, session_id) DESC, exclusive
        cursor; the owner filter applies before paging."""
        if limit <= 0:
            raise SqliteTunedError("session page limit must be positive")
        params: list[Any] = []
        if owner_id is not None:
            validate_identifier("session owner filter", owner_id)
            params.append(owner_id)
        if cursor is not None:
            params.extend(cursor)
        params.append(limit + 1)
        sql = _LIST[(owner_id is not None, cursor is not None)]
        rows = self._conn().db.execute(sql, params).fetchall()
        has_more = len(rows) > limit
        sessions = _decode_rows([summary for (summary,) in rows[:limit]])
        next_cursor = None
        if has_more:
            last = sessions[-1]
            next_cursor = SessionCursor(last["updated_at"], last["sequence"], last["session_id"])
        return SessionPage(sessions, next_cursor)

    def load_state(self, scope: str, key: str) -> Json | None:
        row = (
            self._conn()
            .db.execute("SELECT value FROM state WHERE scope = ? AND key = ?", (scope, key))
            .fetchone()
        )
        return None if row is None else _decode(row[0])


if __name__ == "__main__":
    import sqlite_tuned_smoke

    sqlite_tuned_smoke.smoke()

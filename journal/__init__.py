"""journal: durable AI-agent sessions in plain directories.

An embedded, append-only, event-sourced checkpoint store implementing the
contract of mobius's `CheckpointStore`. Start with `journal.open(root)`.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Literal

from .errors import (
    ContractViolationError,
    CorruptionError,
    FencedError,
    FormatVersionError,
    InvalidInputError,
    JournalError,
    LockTimeoutError,
    NotFoundError,
    ReplicaCorruptionError,
    ReplicaDivergedError,
    ReplicaError,
    ReplicaUnavailableError,
    StorageError,
)
from .protocol import CheckpointStore, SyncCheckpointStore
from .reader import SessionReader
from .retention import PruneReport, RetentionPolicy
from .store import Durability, Store
from .types import (
    CHECKPOINT_VERSION,
    Checkpoint,
    Event,
    EventPage,
    EventPageRequest,
    ExecutionPage,
    ExecutionPageRequest,
    ExecutionRecord,
    ExecutionStats,
    JournalEvent,
    MessageTarget,
    QueuedMessage,
    SessionContext,
    SessionCursor,
    SessionPage,
    SessionPageRequest,
    SessionSummary,
    StreamMetrics,
    TimestampedEvent,
    TokenUsage,
    TranscriptBatch,
    TranscriptPage,
    TranscriptPageRequest,
)
from .validate import check_json_value, validate_session_id

if TYPE_CHECKING:
    from .aio import AsyncStore, open_async
    from .compact import CompactReport
else:

    def __getattr__(name: str) -> object:
        """`AsyncStore`, `open_async` and `CompactReport`, imported on first use."""
        if name in _LAZY_NAMES:
            module = importlib.import_module(f"{__name__}.{_LAZY_NAMES[name]}")
            value = getattr(module, name)
            globals()[name] = value
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY_NAMES})

    # Imported on first use: the asyncio facade imports asyncio (tens of
    # milliseconds), and the compaction tool its own modules, which a synchronous
    # caller, and most `journal` commands, never need.
    _LAZY_NAMES = {"AsyncStore": "aio", "open_async": "aio", "CompactReport": "compact"}

__version__ = "0.1.0"


def open(
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
) -> Store:
    """Open (creating if needed) the store at `root`.

    Options: durability ("fsync" default: a call returns after its commit is on
    stable storage; "os": after the OS has the bytes, which survives a process
    crash but not a power loss), segment_bytes, lock_timeout, max_record_bytes,
    max_open_sessions, read_cache_bytes (memory for records read again; 0: none),
    create, read_only, dictionary (True: compress each session's records with a zstd
    dictionary trained on its first ones, FORMAT.md section 3), retention (a policy
    the store applies in the background, docs/retention.md).

    Replication (the `journal[s3]` extra, docs/replication.md): `replica`
    ("s3://bucket/prefix"; endpoint and credentials from the AWS_* environment)
    ships every commit to an object store. `replica_mode` "sync": a call returns
    once its commit is durable locally and in the bucket; "async" (default): a
    background shipper sends commits within about `replica_lag` seconds,
    batching them, and `store.flush()` waits for it.
    """
    return Store(
        root,
        durability=durability,
        segment_bytes=segment_bytes,
        lock_timeout=lock_timeout,
        max_record_bytes=max_record_bytes,
        max_open_sessions=max_open_sessions,
        read_cache_bytes=read_cache_bytes,
        create=create,
        read_only=read_only,
        dictionary=dictionary,
        retention=retention,
        replica=replica,
        replica_mode=replica_mode,
        replica_lag=replica_lag,
    )


__all__ = [
    "CHECKPOINT_VERSION",
    "AsyncStore",
    "CheckpointStore",
    "SyncCheckpointStore",
    "open_async",
    "Checkpoint",
    "CompactReport",
    "ContractViolationError",
    "CorruptionError",
    "Durability",
    "Event",
    "EventPage",
    "FencedError",
    "EventPageRequest",
    "ExecutionPage",
    "ExecutionPageRequest",
    "ExecutionRecord",
    "ExecutionStats",
    "FormatVersionError",
    "InvalidInputError",
    "JournalError",
    "JournalEvent",
    "LockTimeoutError",
    "MessageTarget",
    "NotFoundError",
    "PruneReport",
    "QueuedMessage",
    "ReplicaCorruptionError",
    "ReplicaDivergedError",
    "ReplicaError",
    "ReplicaUnavailableError",
    "RetentionPolicy",
    "SessionContext",
    "SessionCursor",
    "SessionPage",
    "SessionPageRequest",
    "SessionReader",
    "SessionSummary",
    "StorageError",
    "Store",
    "StreamMetrics",
    "TimestampedEvent",
    "TokenUsage",
    "TranscriptBatch",
    "TranscriptPage",
    "TranscriptPageRequest",
    "open",
    "check_json_value",
    "validate_session_id",
]

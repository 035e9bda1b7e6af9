"""`AsyncStore`: the asyncio facade. Every method is a coroutine running the blocking
store call in a worker thread (`asyncio.to_thread`), so the event loop never waits on disk.

As in mobius, cancelling the awaiting task does not interrupt a write that has
started: the worker thread finishes the commit (it is never left half-done).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import os
from collections.abc import Sequence
from typing import Any, Literal

from .reader import SessionReader
from .retention import PruneReport, RetentionPolicy
from .store import Durability, Store
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


class AsyncStore:
    def __init__(self, store: Store):
        self.sync = store

    async def load(self, session_id: str) -> Checkpoint | None:
        return await asyncio.to_thread(self.sync.load, session_id)

    async def checkpoint_at(self, session_id: str, sequence: int) -> Checkpoint | None:
        return await asyncio.to_thread(self.sync.checkpoint_at, session_id, sequence)

    async def message_accepted(self, session_id: str, submission_id: str) -> bool:
        return await asyncio.to_thread(self.sync.message_accepted, session_id, submission_id)

    async def delete_sessions(self, session_ids: Sequence[str]) -> bool:
        return await asyncio.to_thread(self.sync.delete_sessions, list(session_ids))

    async def take_over(self, session_id: str) -> SessionSummary | None:
        return await asyncio.to_thread(self.sync.take_over, session_id)

    async def flush(self) -> None:
        return await asyncio.to_thread(self.sync.flush)

    async def prune(
        self,
        *,
        older_than: float | datetime.timedelta | None = None,
        keep_last: int | None = None,
        owner_id: str | None = None,
        dry_run: bool = True,
    ) -> PruneReport:
        return await asyncio.to_thread(
            functools.partial(
                self.sync.prune,
                older_than=older_than,
                keep_last=keep_last,
                owner_id=owner_id,
                dry_run=dry_run,
            )
        )

    async def save(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = (),
        execution: ExecutionRecord | None = None,
    ) -> None:
        await asyncio.to_thread(self.sync.save, checkpoint, list(transcript_delta), execution)

    async def save_with_events(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = (),
        execution: ExecutionRecord | None = None,
        events: Sequence[TimestampedEvent] = (),
    ) -> list[JournalEvent]:
        return await asyncio.to_thread(
            self.sync.save_with_events, checkpoint, list(transcript_delta), execution, list(events)
        )

    async def append_event(
        self,
        session_id: str,
        recorded_at_ms: int,
        event: Event,
        *,
        expected_latest: int | None = None,
    ) -> JournalEvent:
        return await asyncio.to_thread(
            functools.partial(self.sync.append_event, expected_latest=expected_latest),
            session_id,
            recorded_at_ms,
            event,
        )

    async def event_page(self, session_id: str, request: EventPageRequest) -> EventPage:
        return await asyncio.to_thread(self.sync.event_page, session_id, request)

    async def events_after(
        self, session_id: str, after_sequence: int, limit: int
    ) -> list[JournalEvent]:
        return await asyncio.to_thread(self.sync.events_after, session_id, after_sequence, limit)

    async def reader(self, session_id: str) -> AsyncSessionReader:
        """`Store.reader` (reads of one session checked once): `async with await
        store.reader(session_id) as r: ...`."""
        return AsyncSessionReader(await asyncio.to_thread(self.sync.reader, session_id))

    async def load_state(self, scope: str, key: str) -> Any:
        return await asyncio.to_thread(self.sync.load_state, scope, key)

    async def save_state(self, scope: str, key: str, value: Any) -> None:
        await asyncio.to_thread(self.sync.save_state, scope, key, value)

    async def session_summary(self, session_id: str) -> SessionSummary | None:
        return await asyncio.to_thread(self.sync.session_summary, session_id)

    async def child_sessions(self, session_id: str) -> list[SessionSummary]:
        return await asyncio.to_thread(self.sync.child_sessions, session_id)

    async def session_metadata(self, session_id: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.sync.session_metadata, session_id)

    async def list_sessions_page(self, request: SessionPageRequest) -> SessionPage:
        return await asyncio.to_thread(self.sync.list_sessions_page, request)

    async def transcript_page(
        self, session_id: str, request: TranscriptPageRequest
    ) -> TranscriptPage:
        return await asyncio.to_thread(self.sync.transcript_page, session_id, request)

    async def execution_page(self, session_id: str, request: ExecutionPageRequest) -> ExecutionPage:
        return await asyncio.to_thread(self.sync.execution_page, session_id, request)

    async def recent_executions(self, limit: int) -> list[ExecutionRecord]:
        return await asyncio.to_thread(self.sync.recent_executions, limit)

    async def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: Checkpoint
    ) -> SessionSummary:
        return await asyncio.to_thread(
            self.sync.fork, parent_session_id, parent_sequence, checkpoint
        )

    async def fork_at(
        self,
        parent_session_id: str,
        parent_sequence: int,
        child_session_id: str,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> SessionSummary:
        return await asyncio.to_thread(
            functools.partial(
                self.sync.fork_at,
                parent_session_id,
                parent_sequence,
                child_session_id,
                metadata=metadata,
            )
        )

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncSessionReader:
    """`SessionReader` with coroutine methods (each read runs in a worker thread)."""

    def __init__(self, reader: SessionReader):
        self.sync = reader
        self.session_id = reader.session_id

    async def event_page(self, request: EventPageRequest) -> EventPage:
        return await asyncio.to_thread(self.sync.event_page, request)

    async def events_after(self, after_sequence: int, limit: int) -> list[JournalEvent]:
        return await asyncio.to_thread(self.sync.events_after, after_sequence, limit)

    async def load(self) -> Checkpoint | None:
        return await asyncio.to_thread(self.sync.load)

    async def checkpoint_at(self, sequence: int) -> Checkpoint | None:
        return await asyncio.to_thread(self.sync.checkpoint_at, sequence)

    async def load_prefix(self, items: int) -> Checkpoint | None:
        return await asyncio.to_thread(self.sync.load_prefix, items)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncSessionReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open_async(
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
) -> AsyncStore:
    """Open a store for asyncio use (the opening itself also runs off the loop);
    the options are `journal.open`'s."""
    store = await asyncio.to_thread(
        functools.partial(
            Store,
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
    )
    return AsyncStore(store)

"""`typing.Protocol`s mirroring mobius's `CheckpointStore` trait, for other backends too.

The trait's methods are asynchronous (they return futures), so `CheckpointStore`
has coroutine methods and is satisfied by `AsyncStore` (`journal.open_async`).
`SyncCheckpointStore` is the same contract with blocking methods, satisfied by
`Store` (`journal.open`). Method names, argument order and result types follow
the trait (0.16.33), including the newer provided methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

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


class SyncCheckpointStore(Protocol):
    def load(self, session_id: str) -> Checkpoint | None: ...
    def message_accepted(self, session_id: str, submission_id: str) -> bool: ...
    def delete_sessions(self, session_ids: Sequence[str]) -> bool: ...
    def save(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = ...,
        execution: ExecutionRecord | None = ...,
    ) -> None: ...
    def save_with_events(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = ...,
        execution: ExecutionRecord | None = ...,
        events: Sequence[TimestampedEvent] = ...,
    ) -> list[JournalEvent]: ...
    def append_event(self, session_id: str, recorded_at_ms: int, event: Event) -> JournalEvent: ...
    def event_page(self, session_id: str, request: EventPageRequest) -> EventPage: ...
    def events_after(
        self, session_id: str, after_sequence: int, limit: int
    ) -> list[JournalEvent]: ...
    def load_state(self, scope: str, key: str) -> Any: ...
    def save_state(self, scope: str, key: str, value: Any) -> None: ...
    def session_summary(self, session_id: str) -> SessionSummary | None: ...
    def session_metadata(self, session_id: str) -> dict[str, Any] | None: ...
    def list_sessions_page(self, request: SessionPageRequest) -> SessionPage: ...
    def transcript_page(
        self, session_id: str, request: TranscriptPageRequest
    ) -> TranscriptPage: ...
    def execution_page(self, session_id: str, request: ExecutionPageRequest) -> ExecutionPage: ...
    def recent_executions(self, limit: int) -> list[ExecutionRecord]: ...
    def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: Checkpoint
    ) -> SessionSummary: ...


class CheckpointStore(Protocol):
    async def load(self, session_id: str) -> Checkpoint | None: ...
    async def message_accepted(self, session_id: str, submission_id: str) -> bool: ...
    async def delete_sessions(self, session_ids: Sequence[str]) -> bool: ...
    async def save(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = ...,
        execution: ExecutionRecord | None = ...,
    ) -> None: ...
    async def save_with_events(
        self,
        checkpoint: Checkpoint,
        transcript_delta: Sequence[Any] = ...,
        execution: ExecutionRecord | None = ...,
        events: Sequence[TimestampedEvent] = ...,
    ) -> list[JournalEvent]: ...
    async def append_event(
        self, session_id: str, recorded_at_ms: int, event: Event
    ) -> JournalEvent: ...
    async def event_page(self, session_id: str, request: EventPageRequest) -> EventPage: ...
    async def events_after(
        self, session_id: str, after_sequence: int, limit: int
    ) -> list[JournalEvent]: ...
    async def load_state(self, scope: str, key: str) -> Any: ...
    async def save_state(self, scope: str, key: str, value: Any) -> None: ...
    async def session_summary(self, session_id: str) -> SessionSummary | None: ...
    async def session_metadata(self, session_id: str) -> dict[str, Any] | None: ...
    async def list_sessions_page(self, request: SessionPageRequest) -> SessionPage: ...
    async def transcript_page(
        self, session_id: str, request: TranscriptPageRequest
    ) -> TranscriptPage: ...
    async def execution_page(
        self, session_id: str, request: ExecutionPageRequest
    ) -> ExecutionPage: ...
    async def recent_executions(self, limit: int) -> list[ExecutionRecord]: ...
    async def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: Checkpoint
    ) -> SessionSummary: ...


def _conformance() -> None:
    """Never called: lets mypy prove both stores satisfy the protocols."""
    from .aio import AsyncStore
    from .store import Store

    def takes_sync(store: SyncCheckpointStore) -> None: ...
    def takes_async(store: CheckpointStore) -> None: ...

    takes_sync(Store.__new__(Store))
    takes_async(AsyncStore.__new__(AsyncStore))

"""The data model of the store: mobius 0.16 `CheckpointStore` types as msgspec Structs.

Field names and JSON shapes follow mobius 0.16.27/0.16.33, so JSON written by mobius
decodes with `msgspec.json.decode(data, type=Checkpoint)` and the other way round.
Values the store does not interpret (model context items, message authors, event
payloads, pending tool calls, ...) are loose JSON (`JSONValue`), so frameworks other
than mobius can use the store. Unknown JSON fields are ignored when decoding.

Numbers follow the Rust types: `u64` fields are non-negative, `i64` fields may be
negative, timestamps ending in `_ms` are Unix milliseconds, `created_at`/`updated_at`
are Unix seconds. `journal.validate` enforces the ranges; these types do not.
"""

from __future__ import annotations

from typing import Any

import msgspec

from journal.errors import InvalidInputError

JSONValue = Any
"""Any JSON value: dict with str keys, list, str, int, finite float, bool or None."""

CHECKPOINT_VERSION = 20
"""The checkpoint version this package writes (mobius 0.16.33)."""

SUPPORTED_CHECKPOINT_VERSIONS = frozenset({19, 20})
"""Checkpoint versions accepted on save and load (mobius 0.16.27 wrote 19)."""


class TokenUsage(msgspec.Struct, kw_only=True):
    """Token counts of one model call, a turn, or a whole session (all i64)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_output_tokens: int = 0
    total_tokens: int = 0


class ExecutionStats(msgspec.Struct, kw_only=True):
    """Totals over the finished turns of one session (u64), copied into the catalog."""

    run_count: int = 0
    failed_run_count: int = 0
    aborted_run_count: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    failed_tool_calls: int = 0
    elapsed_ms: int = 0
    usage: TokenUsage = msgspec.field(default_factory=TokenUsage)


class SessionContext(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Owner, tenant and workspace labels of a session; correlation only, not authentication.

    Like mobius, the optional labels are left out of the JSON when they are None.
    """

    owner_id: str
    tenant_id: str | None = None
    user_id: str | None = None
    user_name: str | None = None
    workspace_id: str | None = None
    workspace_label: str | None = None
    origin_label: str | None = None


class QueuedMessage(msgspec.Struct, kw_only=True):
    """One durable input waiting for its delivery boundary; `id` is the submission id.

    `boundary` is `{"type": "turn" | "queue"}` or `{"type": "steer", "turn_id": ...}`
    in mobius; it and the other payload fields are kept as loose JSON.
    """

    owner: str
    id: str
    boundary: JSONValue = None
    author: JSONValue = None
    message: JSONValue = None
    attachments: list[JSONValue] = []
    reply: JSONValue = None


class Checkpoint(msgspec.Struct, kw_only=True):
    """The latest durable state of one session, replaced at each loop boundary.

    `active_execution`, `active_model_step`, `pending_tools` and `pending_approval`
    are loose JSON objects shaped like mobius's `ActiveExecution`, `ActiveModelStep`,
    `ToolCall` and `PendingApproval`. `compaction_count` exists in version 19 only;
    it is kept so version-19 JSON round-trips, and mobius 0.16.33 ignores it.
    """

    version: int
    session_id: str
    session_context: SessionContext
    metadata: dict[str, JSONValue] = {}
    catalog_visible: bool = True
    first_user_message: str | None = None
    model_route: str | None = None
    context_model_route: str | None = None
    sequence: int = 0
    context: list[JSONValue] = []
    delivered_once: dict[str, list[str]] = {}
    context_epoch: int = 0
    compaction_count: int = 0
    last_context_rewrite: JSONValue = None
    total_usage: TokenUsage = msgspec.field(default_factory=TokenUsage)
    last_usage: TokenUsage | None = None
    pending_messages: list[QueuedMessage] = []
    active_execution: JSONValue = None
    active_model_step: JSONValue = None
    execution_stats: ExecutionStats = msgspec.field(default_factory=ExecutionStats)
    pending_tools: list[JSONValue] = []
    pending_approval: JSONValue = None

    @classmethod
    def empty(cls, session_id: str, owner_id: str = "local") -> Checkpoint:
        """A new session at sequence 0 and epoch 0 with an empty context (`Checkpoint::empty`)."""
        return cls(
            version=CHECKPOINT_VERSION,
            session_id=session_id,
            session_context=SessionContext(owner_id=owner_id),
        )


class ExecutionRecord(msgspec.Struct, kw_only=True):
    """One finished user turn; `outcome` is "completed", "aborted" or "failed"."""

    session_id: str
    submission_id: str
    author: JSONValue
    turn_id: str
    started_at_ms: int
    finished_at_ms: int
    elapsed_ms: int
    outcome: str
    model_calls: int = 0
    tool_calls: int = 0
    failed_tool_calls: int = 0
    usage: TokenUsage = msgspec.field(default_factory=TokenUsage)


class Event(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """A protocol event; `msg` is an `EventMsg` object tagged by its "type" key.

    `submission_id` is left out of the JSON when it is None, as in mobius.

    Events, `JournalEvent`s and `StreamMetrics` are not tracked by Python's cycle
    collector (msgspec `gc=False`): pages create thousands of them, and tracking
    them made collections cost more than decoding. They hold JSON trees, which
    cannot form cycles; do not put an event inside its own `msg`.
    """

    submission_id: str | None = None
    msg: dict[str, JSONValue]

    @property
    def kind(self) -> str:
        """The event kind, i.e. `msg["type"]` ("turn_started", "message_delta", ...)."""
        kind = self.msg.get("type") if isinstance(self.msg, dict) else None
        if not isinstance(kind, str):
            raise InvalidInputError('event msg has no string "type"')
        return kind


class TimestampedEvent(msgspec.Struct, kw_only=True):
    """An event with the Unix-millisecond time the runtime recorded it."""

    recorded_at_ms: int
    event: Event


class StreamMetrics(msgspec.Struct, kw_only=True, gc=False):
    """Delivery metrics of one text stream ("reasoning", "commentary", "final_answer")."""

    phase: str
    first_delta_at_ms: int
    last_delta_at_ms: int
    chunk_count: int
    utf8_bytes: int
    longest_gap_ms: int


class JournalEvent(msgspec.Struct, kw_only=True, gc=False):
    """An event as stored: a session-local sequence (from 1) and the record time."""

    sequence: int
    recorded_at_ms: int
    event: Event
    stream_metrics: list[StreamMetrics] = []


class MessageTarget(msgspec.Struct, kw_only=True):
    """A transcript item: the batch written at `checkpoint_sequence`, 1-based item count."""

    checkpoint_sequence: int
    batch_item_count: int


class EventPageRequest(msgspec.Struct, kw_only=True):
    """Events with `sequence < before_sequence` (None: from the newest), at most `limit`."""

    before_sequence: int | None = None
    limit: int


class EventPage(msgspec.Struct, kw_only=True):
    """Events newest first; `latest_sequence` is the session's event counter."""

    latest_sequence: int = 0
    events: list[JournalEvent] = []
    next_before_sequence: int | None = None

    def into_chronological(self) -> list[JournalEvent]:
        """The events oldest first (a new list; the page is unchanged)."""
        return self.events[::-1]


class TranscriptPageRequest(msgspec.Struct, kw_only=True):
    """Batches with `sequence < before_sequence` (None: from the newest), at most `max_batches`."""

    before_sequence: int | None = None
    max_batches: int


class TranscriptBatch(msgspec.Struct, kw_only=True):
    """The transcript delta of one save; `created_at` is in Unix seconds."""

    sequence: int
    created_at: int
    items: list[JSONValue]


class TranscriptPage(msgspec.Struct, kw_only=True):
    """Transcript batches newest first."""

    batches: list[TranscriptBatch] = []
    next_before_sequence: int | None = None

    def items_chronological(self) -> list[tuple[MessageTarget, JSONValue]]:
        """Every item oldest first, with its durable address (mobius's positioned items)."""
        return [
            (MessageTarget(checkpoint_sequence=batch.sequence, batch_item_count=index), item)
            for batch in reversed(self.batches)
            for index, item in enumerate(batch.items, start=1)
        ]


class ExecutionPageRequest(msgspec.Struct, kw_only=True):
    """Records with `sequence < before_sequence` (None: from the newest), at most `limit`."""

    before_sequence: int | None = None
    limit: int


class ExecutionPage(msgspec.Struct, kw_only=True):
    """Execution records newest first."""

    executions: list[ExecutionRecord] = []
    next_before_sequence: int | None = None


class SessionSummary(msgspec.Struct, kw_only=True):
    """Catalog entry of one session; `created_at`/`updated_at` are Unix seconds."""

    session_id: str
    session_context: SessionContext
    parent_session_id: str | None = None
    parent_sequence: int | None = None
    sequence: int
    catalog_visible: bool
    first_user_message: str | None = None
    execution_stats: ExecutionStats = msgspec.field(default_factory=ExecutionStats)
    created_at: int
    updated_at: int


class SessionCursor(msgspec.Struct, kw_only=True):
    """The exclusive key (updated_at, sequence, session_id) of a catalog page's last row."""

    updated_at: int
    sequence: int
    session_id: str


class SessionPageRequest(msgspec.Struct, kw_only=True):
    """Sessions newest first, optionally of one owner, after `cursor`, at most `limit`."""

    owner_id: str | None = None
    cursor: SessionCursor | None = None
    limit: int


class SessionPage(msgspec.Struct, kw_only=True):
    """One catalog page; `next_cursor` is set only when more sessions exist."""

    sessions: list[SessionSummary] = []
    next_cursor: SessionCursor | None = None


__all__ = [
    "CHECKPOINT_VERSION",
    "SUPPORTED_CHECKPOINT_VERSIONS",
    "Checkpoint",
    "Event",
    "EventPage",
    "EventPageRequest",
    "ExecutionPage",
    "ExecutionPageRequest",
    "ExecutionRecord",
    "ExecutionStats",
    "JSONValue",
    "JournalEvent",
    "MessageTarget",
    "QueuedMessage",
    "SessionContext",
    "SessionCursor",
    "SessionPage",
    "SessionPageRequest",
    "SessionSummary",
    "StreamMetrics",
    "TimestampedEvent",
    "TokenUsage",
    "TranscriptBatch",
    "TranscriptPage",
    "TranscriptPageRequest",
]

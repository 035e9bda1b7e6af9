"""JSON shapes of `journal.types`: hand-written mobius 0.16 fixtures decode and round-trip."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

# reaches inside: the supported checkpoint versions are what a test pins
from journal import (
    CHECKPOINT_VERSION,
    Checkpoint,
    Event,
    EventPage,
    EventPageRequest,
    ExecutionPage,
    ExecutionPageRequest,
    ExecutionRecord,
    ExecutionStats,
    InvalidInputError,
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
from journal.types import SUPPORTED_CHECKPOINT_VERSIONS

USAGE = {
    "input_tokens": 1200,
    "cached_input_tokens": 800,
    "cache_write_input_tokens": 0,
    "output_tokens": 90,
    "reasoning_output_tokens": 40,
    "total_tokens": 1290,
}

STATS = {
    "run_count": 3,
    "failed_run_count": 1,
    "aborted_run_count": 0,
    "model_calls": 7,
    "tool_calls": 4,
    "failed_tool_calls": 1,
    "elapsed_ms": 15234,
    "usage": USAGE,
}

# A mid-turn checkpoint as mobius 0.16.33 serializes it (version 20, no compaction_count;
# SessionContext leaves out its None labels).
CHECKPOINT_V20 = {
    "version": 20,
    "session_id": "0b6c1d4e-5f7a-4b8c-9d0e-1f2a3b4c5d6e",
    "session_context": {
        "owner_id": "cli",
        "user_name": "ada",
        "workspace_label": "~/src/app",
    },
    "metadata": {"title_hint": "fix tests", "labels": ["a", "b"], "score": 0.5},
    "catalog_visible": True,
    "first_user_message": "Fix the failing tests",
    "model_route": "main",
    "context_model_route": "main",
    "sequence": 5,
    "context": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix"}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"cmd":"pytest"}',
        },
    ],
    "delivered_once": {"skills": ["intro", "testing"]},
    "context_epoch": 2,
    "last_context_rewrite": {"epoch": 2, "reasons": ["compaction", "model_change"]},
    "total_usage": USAGE,
    "last_usage": USAGE,
    "pending_messages": [
        {
            "owner": "messages",
            "id": "sub-2",
            "boundary": {"type": "steer", "turn_id": "turn-1"},
            "author": {"type": "user"},
            "message": "also run the linter",
            "attachments": [
                {"id": "file-1", "name": "log.txt", "size": 12, "media_type": "text/plain"}
            ],
            "reply": None,
        }
    ],
    "active_execution": {
        "submission_id": "sub-1",
        "author": {"type": "user"},
        "turn_id": "turn-1",
        "started_at_ms": 1_760_000_000_000,
        "model_calls": 2,
        "tool_calls": 1,
        "failed_tool_calls": 0,
        "usage": USAGE,
        "next_model_step": 2,
        "stop_hook_active": False,
        "phase": {"type": "model"},
    },
    "active_model_step": {
        "model_step_id": "step-2",
        "step_index": 1,
        "started_at_ms": 1_760_000_001_000,
    },
    "execution_stats": STATS,
    "pending_tools": [{"call_id": "call_1", "name": "shell", "arguments": {"cmd": "pytest"}}],
    "pending_approval": None,
}

EXECUTION_RECORD = {
    "session_id": "s-1",
    "submission_id": "msg-42",
    "author": {
        "type": "source",
        "message_id": "msg-42",
        "source": {"type": "session", "session_id": "s-0"},
        "cause_id": None,
        "ancestry": ["msg-41"],
        "handle": "planner",
    },
    "turn_id": "turn-3",
    "started_at_ms": 1_760_000_000_000,
    "finished_at_ms": 1_760_000_004_500,
    "elapsed_ms": 4500,
    "outcome": "completed",
    "model_calls": 2,
    "tool_calls": 3,
    "failed_tool_calls": 1,
    "usage": USAGE,
}

MODEL_STEP_COMPLETED = {
    "submission_id": "sub-1",
    "msg": {
        "type": "model_step_completed",
        "session_id": "s-1",
        "turn_id": "turn-1",
        "model_step_id": "step-1",
        "step_index": 0,
        "completed_at_ms": 1_760_000_002_000,
        "outcome": {
            "type": "completed",
            "end_turn": True,
            "tool_call_ids": [],
            "usage": USAGE,
        },
    },
}

STREAM_METRICS: dict[str, Any] = {
    "phase": "final_answer",
    "first_delta_at_ms": 1_760_000_001_100,
    "last_delta_at_ms": 1_760_000_001_900,
    "chunk_count": 4,
    "utf8_bytes": 120,
    "longest_gap_ms": 350,
}

SUMMARY = {
    "session_id": "child",
    "session_context": {"owner_id": "gateway", "tenant_id": "acme"},
    "parent_session_id": "parent",
    "parent_sequence": 1,
    "sequence": 0,
    "catalog_visible": True,
    "first_user_message": "hello",
    "execution_stats": STATS,
    "created_at": 1_760_000_000,
    "updated_at": 1_760_000_060,
}


def roundtrip(value: msgspec.Struct) -> Any:
    """Encode, decode with the same type, and check equality; return the JSON as Python."""
    data = msgspec.json.encode(value)
    assert msgspec.json.decode(data, type=type(value)) == value
    return json.loads(data)


def decode(fixture: object, cls: type[Any]) -> Any:
    return msgspec.json.decode(json.dumps(fixture).encode(), type=cls)


def test_version_constants() -> None:
    assert CHECKPOINT_VERSION == 20
    assert frozenset({19, 20}) == SUPPORTED_CHECKPOINT_VERSIONS


def test_checkpoint_v20_decodes_from_mobius_json() -> None:
    cp = decode(CHECKPOINT_V20, Checkpoint)
    assert cp.version == 20
    assert cp.session_context == SessionContext(
        owner_id="cli", user_name="ada", workspace_label="~/src/app"
    )
    assert cp.sequence == 5
    assert cp.context_epoch == 2
    assert cp.compaction_count == 0  # absent in version 20
    assert cp.context[1]["call_id"] == "call_1"
    assert cp.delivered_once == {"skills": ["intro", "testing"]}
    assert cp.total_usage == TokenUsage(**USAGE)
    assert cp.last_usage == TokenUsage(**USAGE)
    assert cp.execution_stats.usage.total_tokens == 1290
    assert cp.execution_stats.elapsed_ms == 15234
    assert cp.pending_messages[0].owner == "messages"
    assert cp.pending_messages[0].boundary == {"type": "steer", "turn_id": "turn-1"}
    assert cp.active_execution["phase"] == {"type": "model"}
    assert cp.active_model_step["model_step_id"] == "step-2"
    assert cp.pending_tools[0]["arguments"] == {"cmd": "pytest"}
    assert cp.pending_approval is None


def test_checkpoint_v20_roundtrip_keeps_every_mobius_field() -> None:
    cp = decode(CHECKPOINT_V20, Checkpoint)
    encoded = roundtrip(cp)
    # We add compaction_count (mobius 0.16.33 ignores it); everything else is identical.
    assert encoded.pop("compaction_count") == 0
    assert encoded == CHECKPOINT_V20


def test_checkpoint_v19_keeps_compaction_count() -> None:
    fixture = {**CHECKPOINT_V20, "version": 19, "compaction_count": 3}
    cp = decode(fixture, Checkpoint)
    assert cp.version == 19
    assert cp.compaction_count == 3
    assert roundtrip(cp) == fixture


def test_checkpoint_field_order_matches_mobius() -> None:
    cp = decode({**CHECKPOINT_V20, "compaction_count": 0}, Checkpoint)
    keys = list(json.loads(msgspec.json.encode(cp)))
    assert keys[:9] == [
        "version",
        "session_id",
        "session_context",
        "metadata",
        "catalog_visible",
        "first_user_message",
        "model_route",
        "context_model_route",
        "sequence",
    ]
    assert keys[-3:] == ["execution_stats", "pending_tools", "pending_approval"]


def test_checkpoint_ignores_unknown_fields() -> None:
    cp = decode({**CHECKPOINT_V20, "future_field": {"x": 1}}, Checkpoint)
    assert "future_field" not in roundtrip(cp)


def test_checkpoint_minimal_json_gets_defaults() -> None:
    cp = decode(
        {"version": 20, "session_id": "s", "session_context": {"owner_id": "o"}}, Checkpoint
    )
    assert cp == Checkpoint.empty("s", owner_id="o")


def test_checkpoint_empty_matches_mobius_empty() -> None:
    cp = Checkpoint.empty("s-1")
    assert cp.version == CHECKPOINT_VERSION
    assert cp.session_id == "s-1"
    assert cp.session_context == SessionContext(owner_id="local")
    assert (cp.sequence, cp.context_epoch, cp.compaction_count) == (0, 0, 0)
    assert cp.catalog_visible is True
    assert cp.context == []
    assert cp.metadata == {}
    assert cp.pending_messages == []
    assert cp.active_execution is None
    assert cp.last_usage is None
    assert cp.execution_stats == ExecutionStats()
    roundtrip(cp)


def test_checkpoint_mutable_defaults_are_not_shared() -> None:
    first, second = Checkpoint.empty("a"), Checkpoint.empty("b")
    first.context.append({"type": "message"})
    first.metadata["k"] = 1
    assert second.context == []
    assert second.metadata == {}


def test_session_context_omits_none_labels() -> None:
    context = SessionContext(owner_id="o", tenant_id="t")
    assert roundtrip(context) == {"owner_id": "o", "tenant_id": "t"}


def test_session_context_requires_owner() -> None:
    with pytest.raises(msgspec.ValidationError, match="owner_id"):
        decode({"tenant_id": "t"}, SessionContext)


def test_queued_message_decodes_and_roundtrips() -> None:
    fixture = CHECKPOINT_V20["pending_messages"][0]  # type: ignore[index]
    message = decode(fixture, QueuedMessage)
    assert message.id == "sub-2"
    assert message.message == "also run the linter"
    assert message.attachments[0]["media_type"] == "text/plain"
    assert roundtrip(message) == fixture


def test_token_usage_and_stats_roundtrip() -> None:
    assert roundtrip(decode(USAGE, TokenUsage)) == USAGE
    stats = decode(STATS, ExecutionStats)
    assert stats.run_count == 3
    assert roundtrip(stats) == STATS


def test_execution_record_decodes_and_roundtrips() -> None:
    record = decode(EXECUTION_RECORD, ExecutionRecord)
    assert record.outcome == "completed"
    assert record.elapsed_ms == 4500
    assert record.author["handle"] == "planner"
    assert record.usage == TokenUsage(**USAGE)
    assert roundtrip(record) == EXECUTION_RECORD


def test_event_with_submission_id_roundtrips() -> None:
    event = decode(MODEL_STEP_COMPLETED, Event)
    assert event.submission_id == "sub-1"
    assert event.kind == "model_step_completed"
    assert roundtrip(event) == MODEL_STEP_COMPLETED


def test_event_omits_submission_id_when_none() -> None:
    event = Event(msg={"type": "warning", "message": "disk almost full"})
    assert msgspec.json.encode(event) == b'{"msg":{"type":"warning","message":"disk almost full"}}'
    assert decode({"msg": {"type": "warning", "message": "x"}}, Event).submission_id is None


def test_event_keeps_unknown_variants_and_nested_tags() -> None:
    fixture = {
        "msg": {
            "type": "frontend",
            "frontend_type": "widget",
            "id": "w1",
            "body": {"rows": [[1, 2.5, None]]},
        }
    }
    event = decode(fixture, Event)
    assert event.kind == "frontend"
    assert roundtrip(event) == fixture
    assert decode({"msg": {"type": "brand_new_kind"}}, Event).kind == "brand_new_kind"


def test_event_kind_without_type_raises() -> None:
    with pytest.raises(InvalidInputError, match='no string "type"'):
        _ = Event(msg={"text": "x"}).kind
    with pytest.raises(InvalidInputError):
        _ = Event(msg={"type": 3}).kind


def test_timestamped_event_roundtrips() -> None:
    fixture = {
        "recorded_at_ms": 1_760_000_000_123,
        "event": {"msg": {"type": "turn_started", "turn_id": "t1", "model_context_window": 1}},
    }
    stamped = decode(fixture, TimestampedEvent)
    assert stamped.event.kind == "turn_started"
    assert roundtrip(stamped) == fixture


def test_journal_event_with_stream_metrics_roundtrips() -> None:
    fixture = {
        "sequence": 9,
        "recorded_at_ms": 1_760_000_002_000,
        "event": MODEL_STEP_COMPLETED,
        "stream_metrics": [STREAM_METRICS],
    }
    event = decode(fixture, JournalEvent)
    assert event.stream_metrics == [StreamMetrics(**STREAM_METRICS)]
    assert roundtrip(event) == fixture


def test_journal_event_stream_metrics_default_empty() -> None:
    event = decode(
        {"sequence": 1, "recorded_at_ms": 0, "event": {"msg": {"type": "x"}}}, JournalEvent
    )
    assert event.stream_metrics == []
    assert roundtrip(event)["stream_metrics"] == []


def journal_event(sequence: int) -> dict[str, Any]:
    return {
        "sequence": sequence,
        "recorded_at_ms": 1000 + sequence,
        "event": {"msg": {"type": "message_delta", "text": str(sequence)}},
        "stream_metrics": [],
    }


def test_event_page_roundtrips_and_reverses() -> None:
    fixture = {
        "latest_sequence": 6,
        "events": [journal_event(5), journal_event(3)],
        "next_before_sequence": 3,
    }
    page = decode(fixture, EventPage)
    assert [e.sequence for e in page.into_chronological()] == [3, 5]
    assert [e.sequence for e in page.events] == [5, 3]  # unchanged
    assert roundtrip(page) == fixture


def test_page_requests_roundtrip() -> None:
    assert roundtrip(EventPageRequest(limit=100)) == {"before_sequence": None, "limit": 100}
    assert decode({"before_sequence": 7, "limit": 2}, EventPageRequest) == EventPageRequest(
        before_sequence=7, limit=2
    )
    assert roundtrip(TranscriptPageRequest(before_sequence=3, max_batches=100)) == {
        "before_sequence": 3,
        "max_batches": 100,
    }
    assert roundtrip(ExecutionPageRequest(limit=2)) == {"before_sequence": None, "limit": 2}
    cursor: dict[str, Any] = {"updated_at": 1_760_000_000, "sequence": 4, "session_id": "c"}
    fixture = {"owner_id": "gateway", "cursor": cursor, "limit": 100}
    request = decode(fixture, SessionPageRequest)
    assert request.cursor == SessionCursor(**cursor)
    assert roundtrip(request) == fixture
    assert decode({"limit": 5}, SessionPageRequest).owner_id is None


def test_transcript_page_roundtrips_and_positions_items() -> None:
    fixture = {
        "batches": [
            {"sequence": 3, "created_at": 1_760_000_003, "items": [{"n": 4}]},
            {"sequence": 1, "created_at": 1_760_000_001, "items": [{"n": 1}, {"n": 2}, {"n": 3}]},
        ],
        "next_before_sequence": 1,
    }
    page = decode(fixture, TranscriptPage)
    assert page.batches[0] == TranscriptBatch(
        sequence=3, created_at=1_760_000_003, items=[{"n": 4}]
    )
    assert page.items_chronological() == [
        (MessageTarget(checkpoint_sequence=1, batch_item_count=1), {"n": 1}),
        (MessageTarget(checkpoint_sequence=1, batch_item_count=2), {"n": 2}),
        (MessageTarget(checkpoint_sequence=1, batch_item_count=3), {"n": 3}),
        (MessageTarget(checkpoint_sequence=3, batch_item_count=1), {"n": 4}),
    ]
    assert roundtrip(page) == fixture


def test_message_target_roundtrips() -> None:
    fixture = {"checkpoint_sequence": 4, "batch_item_count": 2}
    assert roundtrip(decode(fixture, MessageTarget)) == fixture


def test_execution_page_roundtrips() -> None:
    fixture = {"executions": [EXECUTION_RECORD], "next_before_sequence": None}
    page = decode(fixture, ExecutionPage)
    assert page.executions[0].turn_id == "turn-3"
    assert roundtrip(page) == fixture


def test_session_summary_and_page_roundtrip() -> None:
    summary = decode(SUMMARY, SessionSummary)
    assert summary.parent_sequence == 1
    assert summary.session_context.tenant_id == "acme"
    assert roundtrip(summary) == SUMMARY
    cursor: dict[str, Any] = {"updated_at": 1_760_000_060, "sequence": 0, "session_id": "child"}
    fixture = {"sessions": [SUMMARY], "next_cursor": cursor}
    page = decode(fixture, SessionPage)
    assert page.next_cursor == SessionCursor(**cursor)
    assert roundtrip(page) == fixture


def test_session_summary_root_has_no_parent() -> None:
    fixture = {**SUMMARY, "parent_session_id": None, "parent_sequence": None}
    summary = decode(fixture, SessionSummary)
    assert summary.parent_session_id is None
    assert roundtrip(summary) == fixture


def test_wrong_field_type_is_rejected_on_decode() -> None:
    with pytest.raises(msgspec.ValidationError, match="sequence"):
        decode({**CHECKPOINT_V20, "sequence": "5"}, Checkpoint)


def test_events_of_a_page_are_not_tracked_by_the_cycle_collector(tmp_path: Any) -> None:
    """Pages create many events; tracking them made collections cost more than
    decoding (see `journal.types.Event`)."""
    import gc

    import journal

    store = journal.open(tmp_path / "s", durability="os", read_cache_bytes=0)
    try:
        store.save(journal.Checkpoint.empty("a"))
        store.append_event("a", 1, journal.Event(msg={"type": "warning", "message": "m"}))
        (ev,) = store.event_page("a", journal.EventPageRequest(limit=5)).events
        assert not gc.is_tracked(ev) and not gc.is_tracked(ev.event)
        assert ev.event.msg == {"type": "warning", "message": "m"}
    finally:
        store.close()

"""The `CheckpointStore` contract: one named test per behaviour of mobius's store tests.

Each test follows a behaviour listed in §5 of `reference/mobius-api.md` (or a rule
of §2 it depends on) for the methods load, save, save_with_events, append_event,
event_page, events_after, message_accepted, load_state, save_state, checkpoint_at,
transcript_page and execution_page. Stores are opened in both durability modes.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path
from typing import Any

import helpers
import msgspec
import pytest
from helpers import T0, event, incompressible, item, stamped

# reaches inside: some tests check how checkpoints are stored, record by record (FORMAT.md)
import journal
import journal.inspect as tools
from journal import (
    Checkpoint,
    ContractViolationError,
    Event,
    EventPageRequest,
    ExecutionPageRequest,
    ExecutionRecord,
    InvalidInputError,
    JournalError,
    JournalEvent,
    TimestampedEvent,
    TranscriptPageRequest,
)
from journal.payloads import checkpoint_decoder
from journal.record import CHECKPOINT

OWNER = "owner-1"
ADA = {"type": "user", "name": "ada"}


# --- helpers -----------------------------------------------------------------------------

checkpoint = functools.partial(helpers.checkpoint, owner=OWNER)


def execution(session_id: str, n: int, *, outcome: str = "completed") -> ExecutionRecord:
    """A finished turn of ada's: two model calls, one tool call."""
    return helpers.execution(
        session_id,
        n,
        started=T0 + n * 10_000,
        elapsed=1234,
        author=ADA,
        outcome=outcome,
        model_calls=2,
        tool_calls=1,
        failed_tool_calls=0,
    )


def retained(store: journal.Store, session_id: str) -> list[int]:
    """Sequences of every retained event, oldest first (walks the newest-first pages)."""
    out: list[int] = []
    before: int | None = None
    while True:
        page = store.event_page(session_id, EventPageRequest(before_sequence=before, limit=2))
        out.extend(e.sequence for e in page.events)
        if page.next_before_sequence is None:
            return out[::-1]
        before = page.next_before_sequence


def latest(store: journal.Store, session_id: str) -> int:
    return store.event_page(session_id, EventPageRequest(limit=1)).latest_sequence


def events_by_seq(store: journal.Store, session_id: str) -> dict[int, JournalEvent]:
    return {e.sequence: e for e in store.events_after(session_id, 0, 10_000)}


def committed_records(store: journal.Store, session_id: str) -> list[list[Any]]:
    """Every committed record group of a session's log, oldest first (read-only)."""
    return list(tools.replay(store.session_dir(session_id)))


def checkpoint_payloads(store: journal.Store, session_id: str) -> list[Any]:
    """Decode every committed checkpoint record of a session's log, oldest first."""
    return [
        (rec, checkpoint_decoder.decode(rec.payload))
        for commit in committed_records(store, session_id)
        for rec in commit
        if rec.rtype == CHECKPOINT
    ]


def decoded_items(raw_items: list[msgspec.Raw]) -> list[Any]:
    return [msgspec.msgpack.decode(bytes(r)) for r in raw_items]


def everything(store: journal.Store, session_ids: list[str], scopes: list[tuple[str, str]]) -> Any:
    """Every observable answer of the store for these sessions, as plain data."""
    out: dict[str, Any] = {}
    for sid in session_ids:
        s: dict[str, Any] = {"load": msgspec.to_builtins(store.load(sid))}
        cp = store.load(sid)
        top = cp.sequence if cp is not None else -1
        s["history"] = [msgspec.to_builtins(store.checkpoint_at(sid, q)) for q in range(top + 2)]
        try:
            pages = []
            before = None
            while True:
                page = store.event_page(sid, EventPageRequest(before_sequence=before, limit=2))
                pages.append(msgspec.to_builtins(page))
                if page.next_before_sequence is None:
                    break
                before = page.next_before_sequence
            s["event_pages"] = pages
        except JournalError as exc:
            s["event_pages"] = type(exc).__name__
        s["events_after"] = msgspec.to_builtins(store.events_after(sid, 0, 1000))
        s["transcript"] = msgspec.to_builtins(
            store.transcript_page(sid, TranscriptPageRequest(max_batches=1000))
        )
        s["executions"] = msgspec.to_builtins(
            store.execution_page(sid, ExecutionPageRequest(limit=1000))
        )
        s["receipts"] = {
            sub: store.message_accepted(sid, sub) for sub in ("m1", "m2", "m3", "missing")
        }
        out[sid] = s
    out["state"] = {f"{sc}/{k}": store.load_state(sc, k) for sc, k in scopes}
    return out


# --- admission receipts ------------------------------------------------------------------


def test_receipt_commits_only_with_successful_save(store: journal.Store) -> None:
    store.save(checkpoint("s", 1))
    with pytest.raises(ContractViolationError, match="did not advance"):
        store.save(checkpoint("s", 1, pending=["m1"]))
    assert store.message_accepted("s", "m1") is False
    with pytest.raises(ContractViolationError, match="did not advance"):
        store.save(checkpoint("s", 0, pending=["m1"]))
    assert store.message_accepted("s", "m1") is False
    # An invalid save carrying the message writes no receipt either.
    with pytest.raises(InvalidInputError):
        store.save(checkpoint("s", 2, [float("nan")], pending=["m1"]))
    assert store.message_accepted("s", "m1") is False
    store.save(checkpoint("s", 2, pending=["m1"]))
    assert store.message_accepted("s", "m1") is True


def test_receipt_persists_after_queue_consumed(root: Path, durability: str) -> None:
    store = journal.open(root, durability=durability)
    store.save(checkpoint("s", 0, pending=["m1", "m2"]))
    store.save(checkpoint("s", 1, pending=["m2"]))
    store.save(checkpoint("s", 2))
    assert store.message_accepted("s", "m1") is True
    assert store.message_accepted("s", "m2") is True
    assert store.message_accepted("s", "m3") is False
    store.close()
    reopened = journal.open(root, durability=durability)
    assert reopened.message_accepted("s", "m1") is True
    assert reopened.message_accepted("s", "m2") is True
    assert reopened.message_accepted("s", "m3") is False
    reopened.close()


def test_receipts_are_per_session(store: journal.Store) -> None:
    store.save(checkpoint("a", 0, pending=["m1"]))
    store.save(checkpoint("b", 0, pending=["m2"]))
    assert store.message_accepted("a", "m1") is True
    assert store.message_accepted("a", "m2") is False
    assert store.message_accepted("b", "m2") is True
    assert store.message_accepted("b", "m1") is False
    assert store.message_accepted("missing", "m1") is False


# --- context storage ---------------------------------------------------------------------


def test_context_append_stores_only_new_tail(store: journal.Store) -> None:
    first = [item(0), item(1)]
    second = [*first, item(2), item(3)]
    store.save(checkpoint("s", 0, first))
    store.save(checkpoint("s", 1, second))
    records = checkpoint_payloads(store, "s")
    assert [p.sequence for _, p in records] == [0, 1]
    _, p0 = records[0]
    _, p1 = records[1]
    assert (p0.base, decoded_items(p0.items)) == (0, first)
    assert (p1.base, decoded_items(p1.items)) == (2, [item(2), item(3)])
    for _, p in records:
        header = msgspec.msgpack.decode(bytes(p.header))
        assert not header.get("context"), "the stored header must not carry the context"
    assert store.load("s") == checkpoint("s", 1, second)
    assert store.checkpoint_at("s", 1) == checkpoint("s", 1, second)


def test_unchanged_context_writes_no_items(store: journal.Store) -> None:
    big = [item(n, "x" * 4000 + str(n)) for n in range(4)]
    store.save(checkpoint("s", 0, big))
    store.save(checkpoint("s", 1, big, metadata={"turn": 1}))
    records = checkpoint_payloads(store, "s")
    rec0, p0 = records[0]
    rec1, p1 = records[1]
    assert len(p0.items) == 4
    assert p1.items == []
    assert p1.base == 4
    assert len(rec1.payload) < 1024 < 16000 < len(rec0.payload)
    assert store.load("s") == checkpoint("s", 1, big, metadata={"turn": 1})


def test_epoch_bump_replaces_context_and_reopen_equal(root: Path, durability: str) -> None:
    store = journal.open(root, durability=durability)
    store.save(checkpoint("s", 0, [item(0), item(1), item(2)]))
    rewritten = checkpoint(
        "s",
        1,
        [{"type": "compaction_summary", "text": "summary of 0..2"}],
        epoch=1,
        last_context_rewrite={"epoch": 1, "reasons": ["compaction"]},
    )
    store.save(rewritten)
    _, p1 = checkpoint_payloads(store, "s")[1]
    assert p1.base == 0
    assert p1.epoch == 1
    assert decoded_items(p1.items) == rewritten.context
    assert store.load("s") == rewritten
    # A later append in the new epoch builds on the replaced context only.
    grown = checkpoint("s", 2, [*rewritten.context, item(3)], epoch=1)
    store.save(grown)
    store.close()
    reopened = journal.open(root, durability=durability)
    assert reopened.load("s") == grown
    assert reopened.checkpoint_at("s", 1) == rewritten
    reopened.close()


def test_epoch_cannot_move_backwards(store: journal.Store) -> None:
    store.save(checkpoint("s", 0, [item(0)], epoch=3))
    with pytest.raises(ContractViolationError, match="epoch cannot move backwards"):
        store.save(checkpoint("s", 1, [item(0)], epoch=2))
    assert store.load("s") == checkpoint("s", 0, [item(0)], epoch=3)


def test_equal_values_new_objects_accepted(store: journal.Store) -> None:
    original = [
        {"type": "message", "role": "user", "content": [{"text": "hi", "n": 1}]},
        {"a": 1, "b": [1, 2.5, None, True], "c": {"d": "e"}},
        "plain string",
        42,
    ]
    store.save(checkpoint("s", 0, original))
    # Fresh objects, equal values; one dict with another key order.
    fresh = json.loads(json.dumps(original))
    fresh[1] = {"c": {"d": "e"}, "b": [1, 2.5, None, True], "a": 1}
    store.save(checkpoint("s", 1, [*fresh, item(9)]))
    loaded = store.load("s")
    assert loaded is not None
    assert loaded.sequence == 1
    assert loaded.context == [*original, item(9)]


@pytest.mark.parametrize(
    "edited",
    [
        [True, {"a": 1}, {"b": [0]}, "x"],  # 1 -> true
        [1.0, {"a": 1}, {"b": [0]}, "x"],  # 1 -> 1.0
        [1, {"a": 1.0}, {"b": [0]}, "x"],
        [1, {"a": 1}, {"b": [False]}, "x"],  # 0 -> false
        [1, {"a": 1}, {"b": [0.0]}, "x"],
        [1, {"a": 1}, {"b": [0]}, ["x"]],
        [1, {"a": 1, "extra": None}, {"b": [0]}, "x"],
    ],
    ids=[
        "int-bool",
        "int-float",
        "nested-int-float",
        "nested-int-bool",
        "zero-float",
        "str-list",
        "extra-key",
    ],
)
def test_prefix_comparison_keeps_json_types_apart(store: journal.Store, edited: list[Any]) -> None:
    """Python finds 1 == 1.0 == True; JSON (and serde_json) does not."""
    stored = [1, {"a": 1}, {"b": [0]}, "x"]
    store.save(checkpoint("s", 0, stored))
    with pytest.raises(ContractViolationError, match="prefix changed"):
        store.save(checkpoint("s", 1, [*edited, "new"]))
    loaded = store.load("s")
    assert loaded == checkpoint("s", 0, stored)
    assert loaded is not None
    assert [type(v) for v in loaded.context[:1]] == [int]
    store.save(checkpoint("s", 1, [*edited, "new"], epoch=1))  # fine with a new epoch
    loaded = store.load("s")
    assert loaded is not None
    assert json.dumps(loaded.context) == json.dumps([*edited, "new"])


def test_edited_item_rejected_prefix_changed(store: journal.Store) -> None:
    base = [item(0), item(1), item(2)]
    store.save(checkpoint("s", 0, base), [item(0)])
    edited = copy.deepcopy(base)
    edited[1]["content"][0]["text"] = "edited"
    with pytest.raises(ContractViolationError, match="prefix changed"):
        store.save_with_events(
            checkpoint("s", 1, [*edited, item(3)], pending=["m1"]),
            [item(3)],
            None,
            [stamped(5, event("warning", message="x"))],
        )
    assert store.load("s") == checkpoint("s", 0, base)
    assert store.message_accepted("s", "m1") is False
    assert latest(store, "s") == 0
    page = store.transcript_page("s", TranscriptPageRequest(max_batches=10))
    assert [b.sequence for b in page.batches] == [0]
    # The rejected save did not poison anything: the correct save succeeds.
    store.save(checkpoint("s", 1, [*base, item(3)]))
    assert store.load("s") == checkpoint("s", 1, [*base, item(3)])


def test_shorter_context_rejected_truncated(store: journal.Store) -> None:
    base = [item(0), item(1), item(2)]
    store.save(checkpoint("s", 0, base))
    with pytest.raises(ContractViolationError, match="prefix was truncated"):
        store.save(checkpoint("s", 1, base[:2]))
    with pytest.raises(ContractViolationError, match="prefix was truncated"):
        store.save(checkpoint("s", 1, []))
    assert store.load("s") == checkpoint("s", 0, base)
    # Truncating is fine with a new epoch.
    store.save(checkpoint("s", 1, base[:1], epoch=1))
    assert store.load("s") == checkpoint("s", 1, base[:1], epoch=1)


def test_validation_across_store_handles(root: Path, durability: str) -> None:
    one = journal.open(root, durability=durability)
    two = journal.open(root, durability=durability)
    try:
        one.save(checkpoint("s", 0, [item(0)]))
        one.save(checkpoint("other", 0, [item(7), item(8)]))
        assert one.load("s") == checkpoint("s", 0, [item(0)])  # warm `one`'s cache
        # `two` extends the context; `one`'s cache is now stale.
        two.save(checkpoint("s", 1, [item(0), item(1)]))
        with pytest.raises(ContractViolationError, match="did not advance"):
            one.save(checkpoint("s", 1, [item(0), item(1), item(2)]))
        with pytest.raises(ContractViolationError, match="prefix was truncated"):
            one.save(checkpoint("s", 2, [item(0)]))
        with pytest.raises(ContractViolationError, match="prefix changed"):
            one.save(checkpoint("s", 2, [item(0), item(5), item(2)]))
        assert two.load("s") == checkpoint("s", 1, [item(0), item(1)])
        assert one.load("s") == checkpoint("s", 1, [item(0), item(1)])
        # The other session's context does not take part in the check.
        one.save(checkpoint("s", 2, [item(0), item(1), item(2)]))
        two.save(checkpoint("other", 1, [item(7), item(8), item(9)]))
        # `two` bumps the epoch; `one` must check against the new context.
        two.save(checkpoint("s", 3, [item(4)], epoch=1))
        with pytest.raises(ContractViolationError, match="prefix"):
            one.save(checkpoint("s", 4, [item(0), item(1), item(2), item(3)], epoch=1))
        one.save(checkpoint("s", 4, [item(4), item(5)], epoch=1))
        assert two.load("s") == checkpoint("s", 4, [item(4), item(5)], epoch=1)
        assert one.load("other") == checkpoint("other", 1, [item(7), item(8), item(9)])
        assert two.checkpoint_at("s", 2) == checkpoint("s", 2, [item(0), item(1), item(2)])
    finally:
        one.close()
        two.close()


# --- atomicity ---------------------------------------------------------------------------


def test_failed_save_leaves_previous_state(store: journal.Store) -> None:
    store.save(checkpoint("s", 0, [item(0)]))
    with pytest.raises(InvalidInputError, match="negative"):
        store.save_with_events(
            checkpoint("s", 1, [item(0), item(1)], epoch=0, pending=["m1"]),
            [item(1)],
            execution("s", 1),
            [
                stamped(10, event("turn_started", "sub-1", turn_id="t1")),
                stamped(-1, event("warning", message="bad clock")),
            ],
        )
    page = store.event_page("s", EventPageRequest(limit=10))
    assert page.latest_sequence == 0
    assert page.events == []
    assert store.events_after("s", 0, 10) == []
    assert store.load("s") == checkpoint("s", 0, [item(0)])
    assert store.message_accepted("s", "m1") is False
    assert store.transcript_page("s", TranscriptPageRequest(max_batches=5)).batches == []
    assert store.execution_page("s", ExecutionPageRequest(limit=5)).executions == []
    # A retry afterwards succeeds and gets sequence 1.
    got = store.save_with_events(
        checkpoint("s", 1, [item(0), item(1)]),
        [item(1)],
        None,
        [stamped(10, event("turn_started", "sub-1", turn_id="t1"))],
    )
    assert [e.sequence for e in got] == [1]


def test_failed_first_save_creates_nothing(store: journal.Store) -> None:
    with pytest.raises(InvalidInputError):
        store.save_with_events(
            checkpoint("new", 0),
            [],
            None,
            [stamped(-5, event("session_configured", session_id="new"))],
        )
    assert store.load("new") is None
    assert store.events_after("new", 0, 10) == []
    with pytest.raises(JournalError, match="event journal session does not exist"):
        store.event_page("new", EventPageRequest(limit=1))


def test_invalid_execution_rolls_back_checkpoint_and_transcript(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    bad = msgspec.structs.replace(execution("s", 1), elapsed_ms=1)
    with pytest.raises(ContractViolationError, match="elapsed"):
        store.save(checkpoint("s", 1, [item(1)]), [item(1)], bad)
    assert store.load("s") == checkpoint("s", 0)
    assert store.transcript_page("s", TranscriptPageRequest(max_batches=5)).batches == []
    assert store.execution_page("s", ExecutionPageRequest(limit=5)).executions == []


@pytest.mark.parametrize("failing", ["event", "execution"])
def test_failed_insert_rolls_back_the_whole_commit(
    root: Path, durability: str, failing: str
) -> None:
    """An event or execution record too large for the log fails the commit it was part of."""
    store = journal.open(root, durability=durability, max_record_bytes=8192)
    store.save(checkpoint("s", 0, [item(0), item(1)]), [item(0)])
    store.append_event("s", 1, event("warning", message="kept"))
    huge = "x" * 20_000
    events = [stamped(2, event("turn_started", "sub-1", turn_id="t1"))]
    record = None
    if failing == "event":
        events.append(stamped(3, event("warning", message=huge)))
    else:
        record = msgspec.structs.replace(execution("s", 1), author={"name": huge})
    rewritten = checkpoint("s", 1, [{"type": "summary"}], epoch=1, pending=["m1"])
    with pytest.raises(InvalidInputError, match="exceeds"):
        store.save_with_events(rewritten, [item(1)], record, events)
    assert store.load("s") == checkpoint("s", 0, [item(0), item(1)])
    assert store.message_accepted("s", "m1") is False
    page = store.transcript_page("s", TranscriptPageRequest(max_batches=5))
    assert [(b.sequence, b.items) for b in page.batches] == [(0, [item(0)])]
    assert store.execution_page("s", ExecutionPageRequest(limit=5)).executions == []
    assert retained(store, "s") == [1]
    assert latest(store, "s") == 1
    # A retry without the oversized part commits everything, with the next event sequence.
    got = store.save_with_events(rewritten, [item(1)], None, events[:1])
    assert [e.sequence for e in got] == [2]
    assert store.load("s") == rewritten
    assert store.message_accepted("s", "m1") is True
    store.close()


# --- event journal -----------------------------------------------------------------------


def test_event_sequences_start_at_1_and_page_newest_first(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    first = store.append_event("s", 100, event("warning", message="one"))
    second = store.append_event("s", 200, event("warning", message="two"))
    assert (first.sequence, second.sequence) == (1, 2)
    page = store.event_page("s", EventPageRequest(limit=1))
    assert [e.sequence for e in page.events] == [2]
    assert page.next_before_sequence == 2
    assert page.latest_sequence == 2
    assert page.events[0] == second
    page = store.event_page("s", EventPageRequest(before_sequence=2, limit=1))
    assert [e.sequence for e in page.events] == [1]
    assert page.next_before_sequence is None
    assert page.latest_sequence == 2
    assert page.events[0] == first
    assert page.events[0].event.msg == {"type": "warning", "message": "one"}
    assert page.events[0].recorded_at_ms == 100
    # A page larger than the rest has no cursor; before 1 is empty.
    page = store.event_page("s", EventPageRequest(limit=5))
    assert [e.sequence for e in page.events] == [2, 1]
    assert page.next_before_sequence is None
    assert page.into_chronological() == [first, second]
    assert store.event_page("s", EventPageRequest(before_sequence=1, limit=5)).events == []


def test_save_with_events_continues_one_gapless_counter(store: journal.Store) -> None:
    got = store.save_with_events(
        checkpoint("s", 0),
        [],
        None,
        [
            stamped(1, event("session_configured", session_id="s", model="m")),
            stamped(2, event("turn_started", "sub-1", turn_id="t1")),
        ],
    )
    assert [e.sequence for e in got] == [1, 2]
    assert store.append_event("s", 3, event("warning", message="w")).sequence == 3
    got = store.save_with_events(
        checkpoint("s", 1), [], None, [stamped(4, event("turn_complete", "sub-1", turn_id="t1"))]
    )
    assert [e.sequence for e in got] == [4]
    assert got[0].event == event("turn_complete", "sub-1", turn_id="t1")
    assert retained(store, "s") == [1, 2, 3, 4]
    assert latest(store, "s") == 4
    # A save without events leaves the counter alone.
    assert store.save_with_events(checkpoint("s", 2)) == []
    assert latest(store, "s") == 4


def frontend(frontend_type: str, **fields: Any) -> Event:
    return event("frontend", frontend_type=frontend_type, **fields)


def test_transient_controls_advance_latest_but_not_retained(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    durable = store.append_event("s", 1, event("warning", message="kept"))
    transients = [
        event("session_history", events=[{"type": "warning", "message": "old"}]),
        event("session_resume_requested", session_id="s", context=[]),
        frontend("picker", id="p1", items=["a", "b"]),
        frontend("preview", id="v1", text="preview"),
        frontend("widget", id="w1", body={"kind": "status"}),
    ]
    returned = [store.append_event("s", 2 + n, ev) for n, ev in enumerate(transients)]
    # Returned for live delivery with their sequences, never retained.
    assert [e.sequence for e in returned] == [2, 3, 4, 5, 6]
    assert [e.event for e in returned] == transients
    page = store.event_page("s", EventPageRequest(limit=10))
    assert page.latest_sequence == 6
    assert [e.sequence for e in page.events] == [1]
    assert page.events[0] == durable
    assert [e.sequence for e in store.events_after("s", 0, 10)] == [1]
    # remove_widget is transient too; a render frontend event is durable.
    assert store.append_event("s", 8, frontend("remove_widget", id="w1")).sequence == 7
    assert store.append_event("s", 9, frontend("render", body="x")).sequence == 8
    # Transient events inside a save consume a sequence as well.
    got = store.save_with_events(
        checkpoint("s", 1), [], None, [stamped(10, event("session_history", events=[]))]
    )
    assert [e.sequence for e in got] == [9]
    assert retained(store, "s") == [1, 8]
    assert latest(store, "s") == 9


def test_user_message_removes_only_own_submission_deltas(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    store.append_event("s", 1, event("message_delta", "sub-a", text="he"))  # 1
    store.append_event("s", 2, event("message_delta", "sub-b", text="yo"))  # 2
    store.append_event("s", 3, event("message_delta", "sub-a", text="llo"))  # 3
    store.append_event("s", 4, event("message_delta", None, text="anon"))  # 4
    message_a = event(
        "message",
        "sub-a",
        author={"type": "user"},
        delivery="turn",
        text="hello",
        attachments=[],
    )
    store.append_event("s", 5, message_a)  # 5
    assert retained(store, "s") == [2, 4, 5]
    assert events_by_seq(store, "s")[5].event == message_a
    store.save_with_events(
        checkpoint("s", 1),
        [],
        None,
        [stamped(6, event("message", "sub-b", text="yo", delivery="queue", attachments=[]))],
    )  # 6
    assert retained(store, "s") == [4, 5, 6]
    assert latest(store, "s") == 6


def step_event(kind: str, step: str, **fields: Any) -> Event:
    """An event of one model step of turn t1 (submission sub-1)."""
    return event(kind, "sub-1", session_id="s", turn_id="t1", model_step_id=step, **fields)


def step_events(step: str, phases: list[tuple[str, str, int]]) -> list[tuple[int, Event]]:
    """model_step_started plus one assistant_content_delta per (phase, text, time)."""
    started = step_event("model_step_started", step, step_index=0, started_at_ms=1000)
    deltas = [
        (at, step_event("assistant_content_delta", step, delta=text, phase=phase))
        for phase, text, at in phases
    ]
    return [(1000, started), *deltas]


def step_completed(step: str, outcome: dict[str, Any], at: int = 2000) -> Event:
    return step_event(
        "model_step_completed", step, step_index=0, completed_at_ms=at, outcome=outcome
    )


def assistant_message(step: str, content: list[Any]) -> Event:
    return step_event("assistant_message", step, content=content)


COMPLETED = {"type": "completed", "end_turn": True, "tool_call_ids": [], "usage": {}}


def test_completed_assistant_message_removes_step_deltas_keeps_metrics(
    store: journal.Store,
) -> None:
    store.save(checkpoint("s", 0))
    for at, ev in step_events(
        "step-1", [("reasoning", "abcd", 1100), ("final_answer", "wxyz", 1200)]
    ):
        store.append_event("s", at, ev)  # 1, 2, 3
    completed = store.append_event("s", 1300, step_completed("step-1", COMPLETED))  # 4
    citation = {"type": "url_citation", "url": "https://example.com", "start_index": 0}
    part = {"output_index": 0, "part_index": 0, "phase": "final_answer", "text": "wxyz"}
    message = assistant_message("step-1", [{**part, "annotations": [citation]}])
    store.append_event("s", 1400, message)  # 5
    assert retained(store, "s") == [1, 4, 5]
    assert latest(store, "s") == 5
    stored = events_by_seq(store, "s")
    assert stored[5].event.msg["content"][0]["annotations"] == [citation]
    metrics = {m.phase: m for m in stored[4].stream_metrics}
    assert set(metrics) == {"reasoning", "final_answer"}
    for phase, at in (("reasoning", 1100), ("final_answer", 1200)):
        m = metrics[phase]
        assert (m.chunk_count, m.utf8_bytes) == (1, 4)
        assert (m.first_delta_at_ms, m.last_delta_at_ms, m.longest_gap_ms) == (at, at, 0)
    assert completed.stream_metrics == stored[4].stream_metrics
    # Only model_step_completed rows carry metrics.
    assert all(stored[s].stream_metrics == [] for s in (1, 5))


def test_assistant_message_without_content_keeps_deltas(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    for at, ev in step_events("step-1", [("final_answer", "abcd", 1100)]):
        store.append_event("s", at, ev)  # 1, 2
    store.append_event("s", 1200, assistant_message("step-1", []))  # 3
    # A message for another step removes nothing of this one.
    store.append_event("s", 1300, assistant_message("step-2", [{"text": "x"}]))  # 4
    assert retained(store, "s") == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "outcome",
    [
        {"type": "failed", "message": "upstream 500"},
        {"type": "interrupted"},
        {"type": "retrying", "attempt": 1, "delay_ms": 500},
    ],
    ids=["failed", "interrupted", "retrying"],
)
def test_failed_interrupted_retrying_steps_keep_deltas(
    store: journal.Store, outcome: dict[str, Any]
) -> None:
    store.save(checkpoint("s", 0))
    for at, ev in step_events("step-1", [("reasoning", "ab", 1100), ("final_answer", "cd", 1200)]):
        store.append_event("s", at, ev)  # 1, 2, 3
    done = store.append_event("s", 1300, step_completed("step-1", outcome))  # 4
    store.append_event("s", 1400, event("turn_aborted", "sub-1", turn_id="t1", reason="x"))  # 5
    assert retained(store, "s") == [1, 2, 3, 4, 5]
    stored = events_by_seq(store, "s")
    assert stored[2].event.msg["delta"] == "ab"
    assert stored[3].event.msg["delta"] == "cd"
    assert {m.phase: m.chunk_count for m in done.stream_metrics} == {
        "reasoning": 1,
        "final_answer": 1,
    }


def test_stream_metrics_tolerate_clock_going_backwards(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    deltas = [
        ("final_answer", "aa", 5000),
        ("final_answer", "bb", 4000),  # the wall clock jumped back
        ("final_answer", "cc", 5300),
        ("final_answer", "dd", 100),  # and again, far back
    ]
    for at, ev in step_events("step-1", deltas):
        store.append_event("s", at, ev)
    done = store.append_event("s", 6000, step_completed("step-1", COMPLETED))
    assert len(done.stream_metrics) == 1
    m = done.stream_metrics[0]
    assert m.phase == "final_answer"
    assert m.chunk_count == 4
    assert m.utf8_bytes == 8
    assert m.first_delta_at_ms == 5000
    assert m.last_delta_at_ms == 5300
    assert m.longest_gap_ms == 300
    assert m.first_delta_at_ms <= m.last_delta_at_ms
    stored = store.event_page("s", EventPageRequest(limit=1)).events[0]
    assert stored.stream_metrics == done.stream_metrics


def test_stream_metrics_count_utf8_bytes_per_phase(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    deltas = [
        ("commentary", "é", 1000),  # 2 bytes
        ("final_answer", "€", 1010),  # 3 bytes
        ("commentary", "🦀", 1050),  # 4 bytes
    ]
    for at, ev in step_events("step-1", deltas):
        store.append_event("s", at, ev)
    done = store.append_event("s", 1100, step_completed("step-1", COMPLETED))
    metrics = {m.phase: m for m in done.stream_metrics}
    assert (metrics["commentary"].chunk_count, metrics["commentary"].utf8_bytes) == (2, 6)
    assert metrics["commentary"].longest_gap_ms == 50
    assert (metrics["final_answer"].chunk_count, metrics["final_answer"].utf8_bytes) == (1, 3)


def test_token_count_keeps_only_latest(root: Path, durability: str) -> None:
    store = journal.open(root, durability=durability)

    def token_count(total: int) -> Event:
        usage = {"input_tokens": total, "total_tokens": total}
        return event(
            "token_count",
            info={
                "total_token_usage": usage,
                "last_token_usage": usage,
                "model_context_window": 272000,
            },
        )

    store.save(checkpoint("s", 0))
    store.append_event("s", 1, token_count(10))  # 1
    store.append_event("s", 2, event("warning", message="w"))  # 2
    store.append_event("s", 3, token_count(20))  # 3
    store.save_with_events(checkpoint("s", 1), [], None, [stamped(4, token_count(30))])  # 4
    assert retained(store, "s") == [2, 4]
    assert events_by_seq(store, "s")[4].event == token_count(30)
    store.close()
    # The rule survives a reopen: the next token count replaces sequence 4.
    store = journal.open(root, durability=durability)
    store.append_event("s", 5, token_count(40))  # 5
    assert retained(store, "s") == [2, 5]
    store.close()


def test_event_rules_survive_reopen_without_close(root: Path, durability: str) -> None:
    store = journal.open(root, durability=durability)
    store.save(checkpoint("s", 0))
    store.append_event("s", 1, event("message_delta", "sub-a", text="he"))  # 1
    for at, ev in step_events("step-1", [("final_answer", "abcd", 1100)]):
        store.append_event("s", at, ev)  # 2, 3
    # No close: the new handle must rebuild the rules from the log alone.
    again = journal.open(root, durability=durability)
    again.append_event("s", 4, event("message", "sub-a", text="hello"))  # 4
    done = again.append_event("s", 1200, step_completed("step-1", COMPLETED))  # 5
    assert [(m.phase, m.chunk_count, m.utf8_bytes) for m in done.stream_metrics] == [
        ("final_answer", 1, 4)
    ]
    again.append_event("s", 1300, assistant_message("step-1", [{"text": "abcd"}]))  # 6
    assert retained(again, "s") == [2, 4, 5, 6]
    assert retained(store, "s") == [2, 4, 5, 6]
    again.close()
    store.close()


def test_events_after_ascending(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    for n in range(1, 6):
        store.append_event("s", n * 10, event("warning", message=f"w{n}"))
    assert [e.sequence for e in store.events_after("s", 2, 10)] == [3, 4, 5]
    assert [e.sequence for e in store.events_after("s", 0, 2)] == [1, 2]
    assert [e.sequence for e in store.events_after("s", 2, 2)] == [3, 4]
    assert store.events_after("s", 5, 10) == []
    assert store.events_after("s", 99, 10) == []
    got = store.events_after("s", 3, 1)
    assert got[0].event.msg["message"] == "w4"
    assert got[0].recorded_at_ms == 40
    # Removed and transient events are skipped; the cursor still counts them.
    store.append_event("s", 60, event("session_history", events=[]))  # 6, transient
    store.append_event("s", 70, event("message_delta", "sub-x", text="a"))  # 7
    store.append_event("s", 80, event("message", "sub-x", text="a"))  # 8, removes 7
    assert [e.sequence for e in store.events_after("s", 4, 10)] == [5, 8]
    assert [e.sequence for e in store.events_after("s", 5, 1)] == [8]


def test_event_page_cursor_walks_every_retained_event_once(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    for n in range(1, 21):
        if n % 3 == 0:
            store.append_event("s", n, event("session_history", events=[]))
        else:
            store.append_event("s", n, event("warning", message=str(n)))
    expected = [n for n in range(1, 21) if n % 3]
    for limit in (1, 2, 3, 7, 100):
        seen: list[int] = []
        before: int | None = None
        while True:
            page = store.event_page("s", EventPageRequest(before_sequence=before, limit=limit))
            assert len(page.events) <= limit
            assert page.latest_sequence == 20
            seqs = [e.sequence for e in page.events]
            assert seqs == sorted(seqs, reverse=True)
            assert all(before is None or s < before for s in seqs)
            seen.extend(seqs)
            if page.next_before_sequence is None:
                break
            assert page.next_before_sequence == seqs[-1]
            before = page.next_before_sequence
        assert seen[::-1] == expected
    page = store.event_page("s", EventPageRequest(before_sequence=10, limit=2))
    assert [e.sequence for e in page.events] == [8, 7]
    assert page.next_before_sequence == 7


def tool_output_commit(
    store: journal.Store, output: str, event_output: str
) -> tuple[list[JournalEvent], int]:
    """Save a tool result as transcript item + tool_call_end event; return events, commit bytes."""
    store.save(checkpoint("s", 0))
    transcript_item = {"type": "function_call_output", "call_id": "call_1", "output": output}
    end = event(
        "tool_call_end",
        "sub-1",
        turn_id="t1",
        call_id="call_1",
        name="shell",
        output=event_output,
        is_error=False,
    )
    got = store.save_with_events(checkpoint("s", 1), [transcript_item], None, [stamped(5, end)])
    last_commit = committed_records(store, "s")[-1]
    return got, sum(rec.size for rec in last_commit)


def test_large_tool_output_stored_once(store: journal.Store) -> None:
    """A >4 KiB text tool output equal to a function_call_output of the same save.

    mobius stores it once (the event row keeps a reference to the transcript item) and
    both event readers restore it. Here the tool output is the plain string the
    runtime puts in both places.
    """
    output = incompressible(60_000)  # 80,000 characters
    got, commit_bytes = tool_output_commit(store, output, output)
    assert got[0].event.msg["output"] == output
    for ev in (
        store.event_page("s", EventPageRequest(limit=5)).events[0],
        store.events_after("s", 0, 5)[0],
    ):
        assert ev.event == got[0].event
    batch = store.transcript_page("s", TranscriptPageRequest(max_batches=1)).batches[0]
    assert batch.items[0]["output"] == output
    # Stored twice, even compressed, the commit would need about 2 x 60,000 bytes.
    assert commit_bytes < 1.4 * 60_000


def test_tool_output_not_in_transcript_stays_inline(store: journal.Store) -> None:
    output = incompressible(6_000)
    other = incompressible(6_000)
    got, _ = tool_output_commit(store, output, other)
    assert store.events_after("s", 0, 5)[0].event.msg["output"] == other
    assert store.event_page("s", EventPageRequest(limit=5)).events[0] == got[0]


# --- transcript and execution journals ---------------------------------------------------


def test_transcript_paging_3_2_then_1(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))  # an empty delta writes no batch
    for seq in (1, 2, 3):
        store.save(checkpoint("s", seq), [item(seq), item(seq + 10)])
    store.save(checkpoint("s", 4), [])
    page = store.transcript_page("s", TranscriptPageRequest(max_batches=2))
    assert [b.sequence for b in page.batches] == [3, 2]
    assert page.next_before_sequence == 2
    assert page.batches[0].items == [item(3), item(13)]
    assert all(b.created_at > 0 for b in page.batches)
    page = store.transcript_page("s", TranscriptPageRequest(before_sequence=2, max_batches=2))
    assert [b.sequence for b in page.batches] == [1]
    assert page.next_before_sequence is None
    assert page.batches[0].items == [item(1), item(11)]
    whole = store.transcript_page("s", TranscriptPageRequest(max_batches=10))
    assert [b.sequence for b in whole.batches] == [3, 2, 1]
    assert whole.next_before_sequence is None
    targets = [(t.checkpoint_sequence, t.batch_item_count) for t, _ in whole.items_chronological()]
    assert targets == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]


def test_transcript_is_not_rewritten_by_compaction(store: journal.Store) -> None:
    store.save(checkpoint("s", 0, [item(0)]), [item(0)])
    store.save(checkpoint("s", 1, [item(0), item(1)]), [item(1)])
    store.save(checkpoint("s", 2, [{"type": "summary"}], epoch=1), [])
    page = store.transcript_page("s", TranscriptPageRequest(max_batches=10))
    assert [(b.sequence, b.items) for b in page.batches] == [(1, [item(1)]), (0, [item(0)])]


def test_execution_paging(store: journal.Store) -> None:
    store.save(checkpoint("s", 0))
    records = {seq: execution("s", seq) for seq in (1, 2, 3)}
    for seq, rec in records.items():
        store.save(checkpoint("s", seq), [], rec)
    store.save(checkpoint("s", 4))  # no record at 4
    page = store.execution_page("s", ExecutionPageRequest(limit=2))
    assert [e.turn_id for e in page.executions] == ["turn-3", "turn-2"]
    assert page.next_before_sequence == 2
    assert page.executions == [records[3], records[2]]
    page = store.execution_page("s", ExecutionPageRequest(before_sequence=2, limit=2))
    assert [e.turn_id for e in page.executions] == ["turn-1"]
    assert page.next_before_sequence is None
    assert (
        store.execution_page("s", ExecutionPageRequest(before_sequence=1, limit=2)).executions == []
    )


# --- strictness --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [9, 11, 12, 13, 16, 17, 18])
def test_older_checkpoint_versions_rejected(store: journal.Store, version: int) -> None:
    old = msgspec.structs.replace(checkpoint("s", 0), version=version)
    with pytest.raises(ContractViolationError, match=f"unsupported checkpoint version {version}"):
        store.save(old)
    assert store.load("s") is None
    store.save(checkpoint("s", 0))
    with pytest.raises(ContractViolationError, match="unsupported checkpoint version"):
        store.save(msgspec.structs.replace(checkpoint("s", 1), version=version))
    assert store.load("s") == checkpoint("s", 0)


def test_non_advancing_sequence_rejected_state_unchanged(store: journal.Store) -> None:
    store.save_with_events(
        checkpoint("s", 5, [item(0)], pending=["m1"]),
        [item(0)],
        execution("s", 5),
        [stamped(1, event("turn_complete", "sub-5", turn_id="turn-5"))],
    )
    before = everything(store, ["s"], [])
    for seq in (5, 4, 0):
        with pytest.raises(ContractViolationError, match="checkpoint sequence did not advance"):
            store.save_with_events(
                checkpoint("s", seq, [item(0), item(1)], pending=["m2"], metadata={"x": 1}),
                [item(1)],
                execution("s", 9),
                [stamped(2, event("warning", message="lost"))],
            )
    assert everything(store, ["s"], []) == before
    assert store.message_accepted("s", "m2") is False
    store.save(checkpoint("s", 6, [item(0), item(1)]))
    assert store.load("s") == checkpoint("s", 6, [item(0), item(1)])


@pytest.mark.parametrize("first", [0, 2])
def test_first_save_any_sequence(store: journal.Store, first: int) -> None:
    store.save(checkpoint("s", first, [item(0)]))
    assert store.load("s") == checkpoint("s", first, [item(0)])
    # Gaps are allowed afterwards.
    store.save(checkpoint("s", first + 5, [item(0)]))
    loaded = store.load("s")
    assert loaded is not None
    assert loaded.sequence == first + 5


def test_append_event_requires_session(store: journal.Store, root: Path) -> None:
    with pytest.raises(JournalError, match="event journal session does not exist"):
        store.append_event("missing", 1, event("warning", message="w"))
    assert store.load("missing") is None
    assert os.listdir(root / "sessions") == []
    store.save(checkpoint("s", 0))
    with pytest.raises(InvalidInputError, match="event journal timestamp cannot be negative"):
        store.append_event("s", -1, event("warning", message="w"))
    assert latest(store, "s") == 0
    assert store.append_event("s", 0, event("warning", message="w")).sequence == 1


def test_event_page_missing_session_errors(store: journal.Store) -> None:
    with pytest.raises(JournalError, match="event journal session does not exist"):
        store.event_page("missing", EventPageRequest(limit=10))
    store.save(checkpoint("other", 0))
    with pytest.raises(JournalError, match="event journal session does not exist"):
        store.event_page("missing", EventPageRequest(before_sequence=5, limit=1))


def test_events_after_missing_session_empty(store: journal.Store) -> None:
    assert store.events_after("missing", 0, 10) == []
    store.save(checkpoint("other", 0))
    store.append_event("other", 1, event("warning", message="w"))
    assert store.events_after("missing", 0, 10) == []


def test_transcript_page_missing_session_empty(store: journal.Store) -> None:
    page = store.transcript_page("missing", TranscriptPageRequest(max_batches=10))
    assert page.batches == []
    assert page.next_before_sequence is None
    executions = store.execution_page("missing", ExecutionPageRequest(limit=10))
    assert executions.executions == []
    assert executions.next_before_sequence is None
    assert store.load("missing") is None
    assert store.checkpoint_at("missing", 0) is None
    assert store.message_accepted("missing", "m1") is False


LIMIT_ZERO_CALLS = {
    "event_page": lambda s: s.event_page("s", EventPageRequest(limit=0)),
    "event_page_cursor": lambda s: s.event_page("s", EventPageRequest(before_sequence=3, limit=0)),
    "events_after": lambda s: s.events_after("s", 0, 0),
    "transcript_page": lambda s: s.transcript_page("s", TranscriptPageRequest(max_batches=0)),
    "execution_page": lambda s: s.execution_page("s", ExecutionPageRequest(limit=0)),
    "event_page_missing": lambda s: s.event_page("nope", EventPageRequest(limit=0)),
    "events_after_missing": lambda s: s.events_after("nope", 0, 0),
    "transcript_page_missing": lambda s: s.transcript_page(
        "nope", TranscriptPageRequest(max_batches=0)
    ),
    "execution_page_missing": lambda s: s.execution_page("nope", ExecutionPageRequest(limit=0)),
}


@pytest.mark.parametrize("call", list(LIMIT_ZERO_CALLS))
def test_limit_zero_rejected(store: journal.Store, call: str) -> None:
    store.save(checkpoint("s", 0), [item(0)], None)
    store.append_event("s", 1, event("warning", message="w"))
    with pytest.raises(InvalidInputError, match="limit must be positive"):
        LIMIT_ZERO_CALLS[call](store)


def test_load_state_save_state_last_writer_wins(root: Path, durability: str) -> None:
    one = journal.open(root, durability=durability)
    two = journal.open(root, durability=durability)
    assert one.load_state("s", "tasks.v1") is None
    one.save_state("s", "tasks.v1", {"tasks": [1]})
    one.save_state("s", "notes", "n1")
    one.save_state("global", "tasks.v1", [1, 2, 3])
    assert two.load_state("s", "tasks.v1") == {"tasks": [1]}
    two.save_state("s", "tasks.v1", {"tasks": [1, 2]})
    assert one.load_state("s", "tasks.v1") == {"tasks": [1, 2]}
    one.save_state("s", "tasks.v1", None)
    one.save_state("s", "tasks.v1", {"tasks": []})
    assert two.load_state("s", "tasks.v1") == {"tasks": []}
    # (scope, key) pairs are independent, and state is not tied to a checkpoint.
    assert one.load_state("s", "notes") == "n1"
    assert one.load_state("global", "tasks.v1") == [1, 2, 3]
    assert one.load_state("tasks.v1", "s") is None
    assert one.load("s") is None
    one.close()
    two.close()
    reopened = journal.open(root, durability=durability)
    assert reopened.load_state("s", "tasks.v1") == {"tasks": []}
    assert reopened.load_state("global", "tasks.v1") == [1, 2, 3]
    reopened.close()


def test_state_values_round_trip_any_json(store: journal.Store) -> None:
    values: list[Any] = [0, -1, 2**63 - 1, 1.5, "text", True, False, [], {}, [{"a": [None]}]]
    for n, value in enumerate(values):
        store.save_state("scope", f"k{n}", value)
    assert [store.load_state("scope", f"k{n}") for n in range(len(values))] == values


# --- checkpoint history -------------------------------------------------------------------


def test_checkpoint_at_returns_historical_exactly(root: Path, durability: str) -> None:
    store = journal.open(root, durability=durability)
    saved: dict[int, Checkpoint] = {}

    def save(cp: Checkpoint) -> None:
        store.save(cp, [item(cp.sequence)])
        saved[cp.sequence] = checkpoint_copy(cp)

    save(checkpoint("s", 0, [item(0)], first_user_message="hi"))
    save(checkpoint("s", 1, [item(0), item(1)], model_route="main"))
    save(checkpoint("s", 3, [item(0), item(1), item(2)], pending=["m1"]))
    save(checkpoint("s", 4, [item(0), item(1), item(2)], metadata={"k": "v"}))  # no new items
    save(checkpoint("s", 5, [{"type": "summary", "n": 1}], epoch=1))
    save(checkpoint("s", 6, [{"type": "summary", "n": 1}, item(6)], epoch=1))
    save(checkpoint("s", 7, [], epoch=2))
    save(checkpoint("s", 8, [item(8)], epoch=2))
    save(checkpoint("s", 9, [item(8), item(9), item(10)], epoch=2))
    store.save(checkpoint("t", 1, [item(99)]))  # another session in between

    def check(s: journal.Store) -> None:
        for seq, cp in saved.items():
            assert s.checkpoint_at("s", seq) == cp, f"checkpoint_at({seq})"
        assert s.checkpoint_at("s", 2) is None
        assert s.checkpoint_at("s", 10) is None
        assert s.checkpoint_at("t", 0) is None
        assert s.load("s") == saved[9]

    check(store)
    again = journal.open(root, durability=durability)  # cold, caches not flushed
    check(again)
    again.close()
    store.close()
    reopened = journal.open(root, durability=durability)
    check(reopened)
    reopened.close()


def checkpoint_copy(cp: Checkpoint) -> Checkpoint:
    return msgspec.json.decode(msgspec.json.encode(cp), type=Checkpoint)


def test_loaded_checkpoint_is_a_copy(store: journal.Store) -> None:
    cp = checkpoint("s", 0, [item(0)], metadata={"k": [1]})
    store.save(cp)
    cp.context.append(item(1))  # the caller keeps mutating its object
    cp.metadata["k"].append(2)
    loaded = store.load("s")
    assert loaded == checkpoint("s", 0, [item(0)], metadata={"k": [1]})
    assert loaded is not None
    loaded.context.clear()
    loaded.metadata.clear()
    historical = store.checkpoint_at("s", 0)
    assert historical is not None
    historical.context.append("x")
    assert store.load("s") == checkpoint("s", 0, [item(0)], metadata={"k": [1]})
    assert store.checkpoint_at("s", 0) == checkpoint("s", 0, [item(0)], metadata={"k": [1]})


# --- mobius JSON and reopen --------------------------------------------------------------

MOBIUS_CHECKPOINT_V19 = b"""{
  "version": 19,
  "session_id": "5f0c2a9e-8d41-4c1b-9a7e-3b2d1c0e9f8a",
  "session_context": {"owner_id": "cli", "user_name": "ada", "workspace_label": "~/src/app"},
  "metadata": {"client": {"name": "mobius-tui", "version": "0.16.27"}, "pinned": false},
  "catalog_visible": true,
  "first_user_message": "Why does the build fail?",
  "model_route": "main",
  "context_model_route": "main",
  "sequence": 7,
  "context": [
    {"type": "message", "role": "user",
     "content": [{"type": "input_text", "text": "Why does the build fail?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB..."},
    {"type": "function_call", "call_id": "call_1", "name": "shell",
     "arguments": "{\\"cmd\\":[\\"cargo\\",\\"build\\"]}"},
    {"type": "function_call_output", "call_id": "call_1",
     "output": "error[E0425]: cannot find value `x`"}
  ],
  "delivered_once": {"agents_md": ["root"]},
  "context_epoch": 2,
  "compaction_count": 1,
  "last_context_rewrite": {"epoch": 2, "reasons": ["compaction"]},
  "total_usage": {"input_tokens": 5120, "cached_input_tokens": 4096,
                  "cache_write_input_tokens": 0, "output_tokens": 310,
                  "reasoning_output_tokens": 128, "total_tokens": 5430},
  "last_usage": {"input_tokens": 2600, "cached_input_tokens": 2048,
                 "cache_write_input_tokens": 0, "output_tokens": 150,
                 "reasoning_output_tokens": 64, "total_tokens": 2750},
  "pending_messages": [
    {"owner": "cli", "id": "sub-2", "boundary": {"type": "steer", "turn_id": "turn-1"},
     "author": {"type": "user"}, "message": "also check the tests", "attachments": [],
     "reply": null}
  ],
  "active_execution": {
    "submission_id": "sub-1", "author": {"type": "user"}, "turn_id": "turn-1",
    "started_at_ms": 1732870000000, "model_calls": 1, "tool_calls": 1,
    "failed_tool_calls": 0,
    "usage": {"input_tokens": 2600, "cached_input_tokens": 2048,
              "cache_write_input_tokens": 0, "output_tokens": 150,
              "reasoning_output_tokens": 64, "total_tokens": 2750},
    "next_model_step": 1, "stop_hook_active": false, "phase": {"type": "model"}
  },
  "active_model_step": {"model_step_id": "step-2", "step_index": 1,
                        "started_at_ms": 1732870004000},
  "execution_stats": {"run_count": 2, "failed_run_count": 0, "aborted_run_count": 1,
                      "model_calls": 6, "tool_calls": 4, "failed_tool_calls": 1,
                      "elapsed_ms": 48211,
                      "usage": {"input_tokens": 9000, "cached_input_tokens": 7000,
                                "cache_write_input_tokens": 0, "output_tokens": 800,
                                "reasoning_output_tokens": 300, "total_tokens": 9800}},
  "pending_tools": [{"call_id": "call_2", "name": "shell",
                     "arguments": {"cmd": ["cargo", "test"]}}],
  "pending_approval": null
}"""

MOBIUS_EVENTS = b"""[
  {"recorded_at_ms": 1732870004001,
   "event": {"submission_id": "sub-1",
             "msg": {"type": "model_step_started",
                     "session_id": "5f0c2a9e-8d41-4c1b-9a7e-3b2d1c0e9f8a",
                     "turn_id": "turn-1", "model_step_id": "step-2", "step_index": 1,
                     "started_at_ms": 1732870004000}}},
  {"recorded_at_ms": 1732870004100,
   "event": {"submission_id": "sub-1",
             "msg": {"type": "assistant_content_delta",
                     "session_id": "5f0c2a9e-8d41-4c1b-9a7e-3b2d1c0e9f8a",
                     "turn_id": "turn-1", "model_step_id": "step-2",
                     "delta": "Running the tests", "phase": "commentary"}}},
  {"recorded_at_ms": 1732870004200,
   "event": {"submission_id": "sub-1",
             "msg": {"type": "tool_call_begin", "turn_id": "turn-1", "call_id": "call_2",
                     "name": "shell", "arguments": {"cmd": ["cargo", "test"]}}}},
  {"recorded_at_ms": 1732870004300,
   "event": {"msg": {"type": "frontend", "frontend_type": "render",
                     "id": "status", "body": {"text": "running"}}}}
]"""

MOBIUS_EXECUTION = b"""{
  "session_id": "5f0c2a9e-8d41-4c1b-9a7e-3b2d1c0e9f8a", "submission_id": "sub-1",
  "author": {"type": "user"}, "turn_id": "turn-1",
  "started_at_ms": 1732870000000, "finished_at_ms": 1732870009000, "elapsed_ms": 9000,
  "outcome": "completed", "model_calls": 2, "tool_calls": 2, "failed_tool_calls": 0,
  "usage": {"input_tokens": 5200, "cached_input_tokens": 4096,
            "cache_write_input_tokens": 0, "output_tokens": 300,
            "reasoning_output_tokens": 128, "total_tokens": 5500}
}"""


def test_mobius_json_decodes(root: Path, durability: str) -> None:
    busy = msgspec.json.decode(MOBIUS_CHECKPOINT_V19, type=Checkpoint)
    events = msgspec.json.decode(MOBIUS_EVENTS, type=list[TimestampedEvent])
    record = msgspec.json.decode(MOBIUS_EXECUTION, type=ExecutionRecord)
    sid = busy.session_id
    store = journal.open(root, durability=durability)
    got = store.save_with_events(busy, [busy.context[-1]], None, events)
    assert [e.sequence for e in got] == [1, 2, 3, 4]
    idle = msgspec.structs.replace(
        busy,
        sequence=8,
        active_execution=None,
        active_model_step=None,
        pending_tools=[],
        pending_messages=[],
        context=[*busy.context, {"type": "message", "role": "assistant", "content": []}],
    )
    store.save_with_events(idle, [], record, [])
    assert store.message_accepted(sid, "sub-2") is True
    store.close()

    store = journal.open(root, durability=durability)
    assert store.load(sid) == idle
    assert store.checkpoint_at(sid, 7) == busy
    # The JSON we give back has mobius's shape: every field of the input, same values.
    original = json.loads(MOBIUS_CHECKPOINT_V19)
    echoed = json.loads(msgspec.json.encode(store.checkpoint_at(sid, 7)))
    assert {k: echoed[k] for k in original} == original
    assert set(echoed["session_context"]) == set(original["session_context"])
    page = store.event_page(sid, EventPageRequest(limit=10))
    chronological = page.into_chronological()
    assert [e.event for e in chronological] == [e.event for e in events]
    assert [e.recorded_at_ms for e in chronological] == [e.recorded_at_ms for e in events]
    journal_json = json.loads(msgspec.json.encode(chronological[3]))
    assert journal_json == {
        "sequence": 4,
        "recorded_at_ms": 1732870004300,
        "event": json.loads(MOBIUS_EVENTS)[3]["event"],
        "stream_metrics": [],
    }
    assert "submission_id" not in journal_json["event"]
    executions = store.execution_page(sid, ExecutionPageRequest(limit=5))
    assert executions.executions == [record]
    assert json.loads(msgspec.json.encode(executions.executions[0])) == json.loads(MOBIUS_EXECUTION)
    batches = store.transcript_page(sid, TranscriptPageRequest(max_batches=5)).batches
    assert [(b.sequence, b.items) for b in batches] == [(7, [original["context"][-1]])]
    store.close()


def build_rich_store(store: journal.Store) -> None:
    store.save_with_events(
        checkpoint("a", 0, [item(0)], pending=["m1"]),
        [item(0)],
        None,
        [stamped(1, event("session_configured", session_id="a", model="m"))],
    )
    store.append_event("a", 2, event("message_delta", "m1", text="h"))
    store.append_event("a", 3, event("message", "m1", text="hi"))
    store.append_event("a", 4, event("session_history", events=[]))
    for at, ev in step_events("step-1", [("final_answer", "abcd", 5)]):
        store.append_event("a", at, ev)
    store.append_event("a", 7, step_completed("step-1", COMPLETED))
    store.append_event("a", 8, assistant_message("step-1", [{"text": "abcd"}]))
    store.save(checkpoint("a", 1, [item(0), item(1)]), [item(1)], execution("a", 1))
    store.save(checkpoint("a", 2, [item(5)], epoch=1), [item(2)])
    store.save(checkpoint("b", 3, [item(3)], pending=["m2"]), [], None)
    store.append_event("b", 9, event("token_count", info=None))
    store.append_event("b", 10, event("token_count", info={"x": 1}))
    store.save_state("a", "tasks.v1", {"tasks": ["t"]})
    store.save_state("global", "g", [1, 2])


STATE_KEYS = [("a", "tasks.v1"), ("global", "g"), ("b", "none")]


def test_reopen_returns_same_everything(root: Path, durability: str) -> None:
    store = journal.open(root, durability=durability)
    build_rich_store(store)
    before = everything(store, ["a", "b", "missing"], STATE_KEYS)
    assert before["a"]["load"]["sequence"] == 2
    assert [e["sequence"] for e in before["a"]["events_after"]] == [1, 3, 5, 7, 8]
    store.close()
    for mode in ("fsync", "os"):
        reopened = journal.open(root, durability=mode)
        assert everything(reopened, ["a", "b", "missing"], STATE_KEYS) == before
        reopened.close()


def test_reopen_without_close_returns_same_everything(root: Path, durability: str) -> None:
    store = journal.open(root, durability=durability)
    build_rich_store(store)
    before = everything(store, ["a", "b", "missing"], STATE_KEYS)
    second = journal.open(root, durability=durability)  # the first handle never closes
    assert everything(second, ["a", "b", "missing"], STATE_KEYS) == before
    # Both handles keep writing the same sessions without losing anything.
    assert second.append_event("a", 11, event("warning", message="second")).sequence == 9
    assert store.append_event("a", 12, event("warning", message="first")).sequence == 10
    assert [e.sequence for e in second.events_after("a", 8, 10)] == [9, 10]
    assert [e.sequence for e in store.events_after("a", 8, 10)] == [9, 10]
    second.close()
    store.close()

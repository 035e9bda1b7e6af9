"""The event journal's side effects, as mobius applies them on insert.

Every event consumes a sequence number. Some are never retained (transient
controls), and some compact earlier ones away (a user message removes its own
submission's typing deltas; a completed assistant message removes its step's
stream deltas; a token count replaces the previous one). A model step's
completion carries stream metrics computed from that step's deltas.

The writer decides these effects once, from the session's head state, and
records them explicitly in the event record (`removes`, `transient`,
`stream_metrics`), so readers, indexes and recovery never re-derive policy from
history: they apply what the log says.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .types import Event, StreamMetrics

TRANSIENT_KINDS = frozenset({"session_history", "session_resume_requested"})
TRANSIENT_FRONTEND = frozenset({"picker", "preview", "widget", "remove_widget"})
# Deltas of steps/submissions that never finish are tracked for at most this many keys.
MAX_TRACKED = 1024


class Delta(msgspec.Struct, array_like=True):
    sequence: int
    recorded_at_ms: int
    phase: str
    utf8_bytes: int


class EventRules(msgspec.Struct):
    """What the rules must remember about retained events (part of the head state)."""

    message_deltas: dict[str, list[int]] = msgspec.field(default_factory=dict)
    step_deltas: dict[str, list[Delta]] = msgspec.field(default_factory=dict)
    token_count: int = 0  # sequence of the retained token_count event, 0 if none


# How to take back what `plan` changed, newest last (see `undo`). Copying the rules
# before each event instead cost O(tracked deltas) per append: 5,000 deltas of one
# open model step made every append copy 5,000 entries.
Undo = list[tuple[Any, ...]]
_APPENDED = 0  # (op, table, key, created): an item appended to table[key]
_POPPED_LAST = 1  # (op, table, key, value): the newest key popped
_REPLACED = 2  # (op, table, saved): table as it was (a pop in the middle, an eviction)
_TOKEN = 3  # (op, previous token_count)


def undo(rules: EventRules, changes: Undo, start: int = 0) -> None:
    """Take back the changes recorded in `changes[start:]` (newest first) and drop them."""
    for change in reversed(changes[start:]):
        op = change[0]
        if op == _APPENDED:
            _, table, key, created = change
            if created:
                del table[key]
            else:
                table[key].pop()
        elif op == _POPPED_LAST:
            _, table, key, value = change
            table[key] = value
        elif op == _REPLACED:
            _, table, saved = change
            table.clear()
            table.update(saved)
        else:
            rules.token_count = change[1]
    del changes[start:]


def is_transient(event: Event) -> bool:
    kind = event.msg.get("type")
    if kind in TRANSIENT_KINDS:
        return True
    return kind == "frontend" and _frontend_type(event.msg) in TRANSIENT_FRONTEND


def _frontend_type(msg: dict[str, Any]) -> Any:
    inner = msg.get("event", msg)
    if isinstance(inner, dict) and "frontend_type" in inner:
        return inner["frontend_type"]
    return msg.get("frontend_type")


def _outcome_kind(outcome: Any) -> str:
    if isinstance(outcome, str):
        return outcome
    if isinstance(outcome, dict):
        if isinstance(outcome.get("type"), str):
            return str(outcome["type"])
        if len(outcome) == 1:
            return str(next(iter(outcome)))
    return ""


def plan(
    rules: EventRules,
    sequence: int,
    recorded_at_ms: int,
    event: Event,
    changes: Undo | None = None,
) -> tuple[list[int], bool, list[StreamMetrics]]:
    """Decide (removes, transient, stream_metrics) for a new event and update `rules`.

    With `changes`, also record how to take the update back (`undo`): a writer
    plans in place and undoes an event that then fails to encode or to be written.
    """
    msg = event.msg
    kind = msg.get("type")
    if is_transient(event):
        return [], True, []
    removes: list[int] = []
    metrics: list[StreamMetrics] = []
    if kind == "message_delta" and event.submission_id is not None:
        _track(rules.message_deltas, event.submission_id, sequence, changes)
    elif kind == "message" and event.submission_id is not None:
        removes = _pop(rules.message_deltas, event.submission_id, changes)
    elif kind == "assistant_content_delta":
        step = msg.get("model_step_id")
        if isinstance(step, str):
            text = msg.get("delta")
            size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else 0
            delta = Delta(sequence, recorded_at_ms, str(msg.get("phase", "")), size)
            _track(rules.step_deltas, step, delta, changes)
    elif kind == "assistant_message":
        step = msg.get("model_step_id")
        if isinstance(step, str) and msg.get("content"):
            removes = [d.sequence for d in _pop(rules.step_deltas, step, changes)]
    elif kind == "token_count":
        if rules.token_count:
            removes = [rules.token_count]
        if changes is not None:
            changes.append((_TOKEN, rules.token_count))
        rules.token_count = sequence
    elif kind == "model_step_completed":
        step = msg.get("model_step_id")
        if isinstance(step, str):
            metrics = stream_metrics(rules.step_deltas.get(step, []))
            outcome = _outcome_kind(msg.get("outcome"))
            if outcome not in ("completed", "retrying"):
                # failed or interrupted steps keep their deltas for good
                _pop(rules.step_deltas, step, changes)
    return removes, False, metrics


def replay(
    rules: EventRules, sequence: int, recorded_at_ms: int, event: Event, transient: bool
) -> None:
    """Bring `rules` up to date with a committed event read back from the log."""
    if not transient:
        plan(rules, sequence, recorded_at_ms, event)


def _track(table: dict[str, list[Any]], key: str, item: Any, changes: Undo | None) -> None:
    entries = table.get(key)
    if entries is None:
        if len(table) >= MAX_TRACKED:
            if changes is not None:
                changes.append((_REPLACED, table, dict(table)))
                changes = None  # restoring the saved table also removes the new key
            table.pop(next(iter(table)))
        table[key] = entries = []
        if changes is not None:
            changes.append((_APPENDED, table, key, True))
    elif changes is not None:
        changes.append((_APPENDED, table, key, False))
    entries.append(item)


def _pop(table: dict[str, list[Any]], key: str, changes: Undo | None) -> list[Any]:
    """table.pop(key, []), recorded in `changes` (the key order matters for eviction)."""
    if key not in table:
        return []
    if changes is not None:
        if next(reversed(table)) == key:
            changes.append((_POPPED_LAST, table, key, table[key]))
        else:
            changes.append((_REPLACED, table, dict(table)))
    return table.pop(key)


def stream_metrics(deltas: list[Delta]) -> list[StreamMetrics]:
    """Per phase, in order of first appearance; a clock going backwards is clamped."""
    out: dict[str, StreamMetrics] = {}
    last: dict[str, int] = {}
    for d in deltas:
        m = out.get(d.phase)
        if m is None:
            out[d.phase] = StreamMetrics(
                phase=d.phase,
                first_delta_at_ms=d.recorded_at_ms,
                last_delta_at_ms=d.recorded_at_ms,
                chunk_count=1,
                utf8_bytes=d.utf8_bytes,
                longest_gap_ms=0,
            )
            last[d.phase] = d.recorded_at_ms
            continue
        at = max(d.recorded_at_ms, last[d.phase])
        m.longest_gap_ms = max(m.longest_gap_ms, at - last[d.phase])
        m.last_delta_at_ms = at
        m.chunk_count += 1
        m.utf8_bytes += d.utf8_bytes
        last[d.phase] = at
    return list(out.values())

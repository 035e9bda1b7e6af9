"""Erasure: a writer's declaration that no reader needs some records any more.

The event journal is append-only history, with one documented exception: an
event whose `msg` carries the key `journal_erase` (`ERASE_KEY`) declares earlier
events and checkpoints *erasable* (FORMAT.md section 11). Nothing changes when
it is written; `compact` then rewrites each named event as a small stub of the
same sequence (`{"type": "journal_erased", "erased_type": <its type>}`, its
submission id, timestamp, removals and transient flag kept), so sequences are
never reused or renumbered and the journal stays gap-free, and each named
checkpoint's header as a compacted stub (its context items kept: later
checkpoints build on them). A declaration is the integration's word that what
it names is hidden from its own readers; the core keeps whatever its rules need:

- an event that is itself a declaration, or an erased stub already;
- an event of a kind the journal rules fold into the head state
  (`RULE_KINDS`: rebuilding the head from the log must give the same state);
- events at or after the declaring event (a declaration erases only the past);
- the session's newest checkpoint (the head `load` returns).

A declaration is a map: `events` (sequences), `ranges` (inclusive
`[first, last]` pairs), `types` (when present, only events whose `msg.type`
is listed are named) and `checkpoints` (checkpoint sequences). Put it in the
event that hides the records (one commit: the hide and the declaration are
atomic), or append `erase_event(...)` as a commit of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .payloads import EventPayload, encode
from .types import Event, JournalEvent

ERASE_KEY = "journal_erase"
ERASE_EVENT = "journal_erase"  # `msg.type` of a declaration written on its own
ERASED_TYPE = "journal_erased"  # `msg.type` of an erased event's stub

# Event kinds `eventrules.plan` reads to keep its head state (open deltas, the
# retained token count): their stubs would fold differently, so they stay.
RULE_KINDS = frozenset(
    {
        "message_delta",
        "message",
        "assistant_content_delta",
        "assistant_message",
        "token_count",
        "model_step_completed",
    }
)


def erase_declaration(
    *,
    events: Iterable[int] = (),
    ranges: Iterable[tuple[int, int]] = (),
    types: Iterable[str] | None = None,
    checkpoints: Iterable[int] = (),
) -> dict[str, Any]:
    """The value of `msg["journal_erase"]` naming these records (see the module doc)."""
    decl: dict[str, Any] = {}
    evs = sorted({int(s) for s in events})
    if evs:
        decl["events"] = evs
    rs = sorted([int(a), int(b)] for a, b in ranges if int(a) <= int(b))
    if rs:
        decl["ranges"] = rs
    if types is not None:
        decl["types"] = sorted({str(t) for t in types})
    cps = sorted({int(s) for s in checkpoints})
    if cps:
        decl["checkpoints"] = cps
    return decl


def erase_event(declaration: Mapping[str, Any]) -> Event:
    """A declaration as an event of its own (`store.append_event(sid, ts, erase_event(d))`)."""
    return Event(msg={"type": ERASE_EVENT, ERASE_KEY: dict(declaration)})


def is_erased(event: JournalEvent | Event | Mapping[str, Any]) -> bool:
    """Whether an event (a `JournalEvent`, its `Event`, or its `msg`) is an erased stub."""
    if isinstance(event, JournalEvent):
        event = event.event
    msg = event.msg if isinstance(event, Event) else event
    return msg.get("type") == ERASED_TYPE


def event_stub(p: EventPayload) -> EventPayload:
    """The payload an erased event is rewritten as."""
    kind = p.event.msg.get("type")
    msg = {"type": ERASED_TYPE, "erased_type": kind if isinstance(kind, str) else None}
    return EventPayload(
        p.sequence,
        p.recorded_at_ms,
        Event(msg=msg, submission_id=p.event.submission_id),
        p.stream_metrics,
        p.removes,
        p.transient,
        None,
    )


def padded(payload: bytes, extra: int) -> bytes:
    """`payload` (a msgpack array of fewer than 15 fields) with one more element of
    exactly `extra` bytes that readers ignore: nil (1 byte) or a zero `bin 8`."""
    if extra == 0:
        return payload
    if not 0x90 <= payload[0] < 0x9F or not 1 <= extra <= 257:
        raise ValueError(f"cannot pad this payload by {extra} bytes")
    tail = b"\xc0" if extra == 1 else b"\xc4" + bytes([extra - 2]) + bytes(extra - 2)
    return bytes([payload[0] + 1]) + payload[1:] + tail


def encoded_stub(p: EventPayload, extra: int = 0) -> bytes:
    return padded(encode(event_stub(p)), extra)


@dataclass
class Declarations:
    """Every declaration of one session's log, as a compaction reads them."""

    events: dict[int, set[str] | None] = field(default_factory=dict)  # seq -> types (None: any)
    ranges: list[tuple[int, int, frozenset[str] | None]] = field(default_factory=list)
    checkpoints: set[int] = field(default_factory=set)
    malformed: int = 0  # declarations that did not parse (ignored)
    count: int = 0

    def add(self, declared_at: int, decl: Any) -> None:
        """Take the declaration carried by event `declared_at` (malformed: ignored)."""
        try:
            if not isinstance(decl, dict):
                raise TypeError("not a map")
            raw_types = decl.get("types")
            types = None if raw_types is None else frozenset(str(t) for t in raw_types)
            evs = [int(s) for s in decl.get("events", ())]
            rs = [(int(a), min(int(b), declared_at - 1)) for a, b in decl.get("ranges", ())]
            cps = [int(s) for s in decl.get("checkpoints", ())]
        except (TypeError, ValueError):
            self.malformed += 1
            return
        self.count += 1
        for s in evs:
            if 0 < s < declared_at:
                old = self.events.get(s, set())
                self.events[s] = None if old is None or types is None else old | types
        self.ranges.extend((a, b, types) for a, b in rs if a <= b)
        self.checkpoints.update(cps)

    def names_event(self, sequence: int, kind: Any) -> bool:
        if sequence in self.events:
            types = self.events[sequence]
            if types is None or kind in types:
                return True
        return any(a <= sequence <= b and (t is None or kind in t) for a, b, t in self.ranges)


def erasable_event(p: EventPayload) -> bool:
    """Whether the core may erase this event when a declaration names it."""
    msg = p.event.msg
    kind = msg.get("type")
    return ERASE_KEY not in msg and kind != ERASED_TYPE and kind not in RULE_KINDS


__all__ = [
    "ERASED_TYPE",
    "ERASE_EVENT",
    "ERASE_KEY",
    "RULE_KINDS",
    "erase_declaration",
    "erase_event",
    "is_erased",
]

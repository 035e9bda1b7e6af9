"""Replaying one session's LangGraph commits into another (`copy_thread`)."""

from __future__ import annotations

from typing import Any

from journal import (
    CorruptionError,
    Event,
    EventPageRequest,
    JournalEvent,
    Store,
    TimestampedEvent,
)

from . import fingerprint
from .events import EV_CHECKPOINT, EV_DELETE, EV_WRITES, nonce
from .threads import PAGE


class Replay:
    """Copies the saver's events of session `source` into session `target` (of the
    thread `thread_id`), in order: each put with its checkpoint, each with a new
    nonce and the target's own `fp` chain (the source's describes the source's
    log). The target exists (its sequence-0 checkpoint at least)."""

    def __init__(self, store: Store, source: str, target: str, thread_id: str) -> None:
        self.store = store
        self.source = source
        self.target = target
        self.thread_id = thread_id
        head = store.load(target)
        self.next_seq = (head.sequence if head is not None else 0) + 1
        top = store.event_page(target, EventPageRequest(limit=1))
        self.high = top.latest_sequence
        self.high_fp = fingerprint.of(top.events[0]) if top.events else None
        self.copied: dict[int, str] = {}  # target event sequence -> id of the writes copied there

    def run(self) -> None:
        after = 0
        while True:
            events = self.store.events_after(self.source, after, PAGE)
            if not events:
                break
            for ev in events:
                after = ev.sequence
                self._copy(ev)

    def _copy(self, ev: JournalEvent) -> None:
        msg = dict(ev.event.msg)
        kind = msg.get("type")
        if kind not in (EV_CHECKPOINT, EV_WRITES, EV_DELETE):
            return
        msg["n"] = nonce()
        cid = msg.get("id") if kind != EV_DELETE else None
        msg["fp"] = fingerprint.for_new(
            self.high_fp,
            self.high,
            str(kind),
            cid if isinstance(cid, str) else None,
            self.copied.get,
        )
        if kind == EV_CHECKPOINT:
            done = self._copy_put(ev, msg)
        else:
            done = self.store.append_event(self.target, ev.recorded_at_ms, Event(msg=msg))
            if kind == EV_WRITES and isinstance(cid, str):
                self.copied[done.sequence] = cid
        self.high, self.high_fp = done.sequence, fingerprint.of(done)

    def _copy_put(self, ev: JournalEvent, msg: dict[str, Any]) -> JournalEvent:
        """Save the checkpoint of the put event `ev` in the target, with `msg` as its event."""
        cp = self.store.checkpoint_at(self.source, int(msg["seq"]))
        if cp is None:
            raise CorruptionError(
                f"session {self.source!r}: checkpoint sequence {msg['seq']} is missing"
            )
        cp.session_id = self.target
        cp.sequence = self.next_seq
        lg = dict(cp.metadata.get("langgraph") or {})
        lg["thread_id"] = self.thread_id
        cp.metadata = {**cp.metadata, "langgraph": lg}
        msg["seq"] = self.next_seq
        stamped = TimestampedEvent(recorded_at_ms=ev.recorded_at_ms, event=Event(msg=msg))
        done = self.store.save_with_events(cp, events=[stamped])[0]
        self.next_seq += 1
        return done

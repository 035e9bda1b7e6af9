"""Replaying one session's LangGraph commits into another (`copy_thread`), and the
seal that finishes a copy (`copymark`)."""

from __future__ import annotations

import time
from typing import Any

from journal import (
    ContractViolationError,
    CorruptionError,
    Event,
    EventPageRequest,
    JournalEvent,
    NotFoundError,
    Store,
    TimestampedEvent,
)
from journal.erase import ERASE_KEY, erase_declaration

from . import fingerprint, puts
from .copymark import COPY_FLAG, SEAL_REASON
from .events import EV_CHECKPOINT, EV_DELETE, EV_WRITES, delete_msg, nonce
from .threads import PAGE


def copy_sessions(
    store: Store, pairs: list[tuple[str, str, str]], thread_id: str, source: str, owner_id: str
) -> None:
    """Copy the sessions of a thread, `(source session, target session, namespace)`
    with the root first, into the new thread `thread_id`, atomically (`copymark`):
    the target root's placeholder names `source`, the root's events are flagged,
    each namespace is a fork of the target root, and the seal comes last."""
    root = pairs[0][1]
    # Refused (nothing written) if the target appeared meanwhile.
    store.save(puts.placeholder(root, thread_id, "", owner_id, copy_of=source))
    ident = store.incarnation(root)
    sealer: Replay | None = None
    for sid, target, ns in pairs:
        if ns:  # a fork of the target root, as the saver makes a namespace's session
            head = store.session_summary(root)
            if head is None:
                raise NotFoundError(f"copy_thread: target root {root!r} vanished")
            store.fork(root, head.sequence, puts.placeholder(target, thread_id, ns, owner_id))
        replay = Replay(store, sid, target, thread_id, flag=not ns)
        replay.run()
        if not ns:
            sealer = replay
    if sealer is None:
        raise NotFoundError(f"copy_thread: the source of {thread_id!r} has no root")
    if store.incarnation(root) != ident:
        raise ContractViolationError(
            f"copy_thread: target thread {thread_id!r} was deleted while it was copied"
        )
    sealer.seal()


class Replay:
    """Copies the saver's events of session `source` into session `target` (of the
    thread `thread_id`), in order: each put with its checkpoint, each with a new
    nonce and the target's own `fp` chain (the source's describes the source's
    log). The target exists (its sequence-0 checkpoint at least). `flag`: mark
    each copied event as written by an unfinished copy (`copymark`; the target
    root's events)."""

    def __init__(
        self, store: Store, source: str, target: str, thread_id: str, *, flag: bool = False
    ) -> None:
        self.store = store
        self.source = source
        self.target = target
        self.thread_id = thread_id
        self.flag = flag
        head = store.load(target)
        self.next_seq = (head.sequence if head is not None else 0) + 1
        top = store.event_page(target, EventPageRequest(limit=1))
        self.high = top.latest_sequence
        self.high_fp = fingerprint.of(top.events[0]) if top.events else None
        self.copied: dict[int, str] = {}  # target event sequence -> id of the writes copied there
        # Source -> target sequences of what is copied (events; checkpoints), so
        # that an erase declaration names the target's records (`_declaration`).
        self.event_map: dict[int, int] = {}
        self.checkpoint_map: dict[int, int] = {}

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
        msg.pop(COPY_FLAG, None)  # the source's own copy flags say nothing of this copy
        if ERASE_KEY in msg:  # it names the source's sequences: name the target's
            decl = self._declaration(msg.pop(ERASE_KEY))
            if decl:
                msg[ERASE_KEY] = decl
        if self.flag:
            msg[COPY_FLAG] = 1
        cid = msg.get("id") if kind != EV_DELETE else None
        msg["fp"] = fingerprint.for_new(
            self.high_fp,
            self.high,
            str(kind),
            cid if isinstance(cid, str) else None,
            self.copied.get,
        )
        if kind == EV_CHECKPOINT:
            source_seq = int(msg["seq"])
            done = self._copy_put(ev, msg)
            self.checkpoint_map[source_seq] = int(msg["seq"])
        else:
            done = self.store.append_event(self.target, ev.recorded_at_ms, Event(msg=msg))
            if kind == EV_WRITES and isinstance(cid, str):
                self.copied[done.sequence] = cid
        self.event_map[ev.sequence] = done.sequence
        self.high, self.high_fp = done.sequence, fingerprint.of(done)

    def _declaration(self, decl: Any) -> dict[str, Any]:
        """A source event's erase declaration for its copy: what it names that was
        copied, by the copies' sequences (records not copied, such as erased stubs,
        are left out). Only `events` and `checkpoints` are translated; any other
        form is dropped (nothing is erased in the target then)."""
        if not isinstance(decl, dict) or set(decl) - {"events", "checkpoints"}:
            return {}
        events = decl.get("events") or []
        checkpoints = decl.get("checkpoints") or []
        if not isinstance(events, list) or not isinstance(checkpoints, list):
            return {}
        return erase_declaration(
            events=[self.event_map[s] for s in events if s in self.event_map],
            checkpoints=[self.checkpoint_map[c] for c in checkpoints if c in self.checkpoint_map],
        )

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

    def seal(self) -> None:
        """Append the seal (`copymark`): a delete that hides nothing, unflagged,
        only if the target's newest event is still the last one copied (else
        `ContractViolationError`, and the copy stays unfinished)."""
        fp = fingerprint.for_new(self.high_fp, self.high, EV_DELETE, None, self.copied.get)
        msg = delete_msg([], SEAL_REASON, fp)
        done = self.store.append_event(
            self.target, int(time.time() * 1000), Event(msg=msg), expected_latest=self.high
        )
        self.high, self.high_fp = done.sequence, fingerprint.of(done)

"""How `JournalSaver`'s writes stay right without reading the log first.

A `put_writes` appends with `expected_latest` (the store refuses it if anything
was appended since the saver's index), so it reads nothing when nothing
changed; a `put` checks the session's incarnation and reads only events newer
than its index (none, usually). These tests check the reads saved and what must
not change: another writer's commits are seen (no duplicate, no lost write), a
session deleted and created again is never taken for the old one, events the
log does not keep do not wedge a write, and the stored form of list items is
reused only for unchanged items.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_checks import Reads, cfg, index_of, same

from journal import Event
from journal.integrations.langgraph import JournalSaver


def put(savers: list[Any], thread: str, step: int, parent: str | None, messages: list[Any]) -> str:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=step))
    cp["channel_values"] = {"messages": messages, "step": step}
    cp["channel_versions"] = {"messages": f"{step:032}.0", "step": f"{step:032}.0"}
    for s in savers:
        s.put(cfg(thread, parent), cp, {"step": step}, dict(cp["channel_versions"]))
    return cp["id"]


def writes_of(root: Path, thread: str, cid: str) -> list[Any]:
    with JournalSaver(root) as fresh:
        tup = fresh.get_tuple(cfg(thread, cid))
    assert tup is not None
    return sorted(tup.pending_writes or [], key=repr)


def events(saver: JournalSaver, sid: str) -> list[Any]:
    return [e.event.msg for e in saver.store.events_after(sid, 0, 10_000)]


def test_warm_writes_read_no_event(tmp_path: Path) -> None:
    with JournalSaver(tmp_path / "store") as saver:
        msgs: list[Any] = [HumanMessage("h0")]
        parent = put([saver], "t", 0, None, msgs)
        saver.put_writes(cfg("t", parent), [("messages", "w0")], "task-0")
        reads = Reads(saver)
        for step in range(1, 6):
            msgs = [*msgs, AIMessage(f"a{step}")]
            parent = put([saver], "t", step, parent, msgs)
            saver.put_writes(cfg("t", parent), [("messages", f"w{step}")], f"task-{step}")
        # Each put: one catch-up read that finds nothing; each put_writes: no read.
        assert (reads.calls, reads.n) == (5, 0)
    assert writes_of(tmp_path / "store", "t", parent) == [("task-5", "messages", "w5")]


def test_another_writers_commits_are_seen(tmp_path: Path) -> None:
    # Two savers on one store directory, as two processes: each one's index goes
    # stale when the other writes, and neither may duplicate or lose a write.
    root = tmp_path / "store"
    ref = InMemorySaver()
    a, b = JournalSaver(root), JournalSaver(root)
    msgs: list[Any] = [HumanMessage("h0")]
    parent = put([a, ref], "t", 0, None, msgs)
    for s in (a, ref):
        s.put_writes(cfg("t", parent), [("x", 0)], "task")
    for step in range(1, 8):
        writer, other = (a, b) if step % 2 else (b, a)
        msgs = [*msgs, AIMessage(f"a{step}")]
        parent = put([writer, ref], "t", step, parent, msgs)
        writer.put_writes(cfg("t", parent), [("x", step), ("y", step)], "task")
        ref.put_writes(cfg("t", parent), [("x", step), ("y", step)], "task")
        # The other saver repeats the call (a retried task): stored already, not again.
        other.put_writes(cfg("t", parent), [("x", step), ("y", step)], "task")
        # Its next write, after its index went stale, lands and is kept.
        other.put_writes(cfg("t", parent), [("z", step)], "other")
        ref.put_writes(cfg("t", parent), [("z", step)], "other")
    kinds = [m["type"] for m in events(a, "t")]
    assert kinds.count("langgraph_writes") == 1 + 2 * 7
    with JournalSaver(root) as fresh:
        for tup in ref.list(cfg("t")):
            same(fresh.get_tuple(tup.config), tup)
        # Neither saver raced the other: the newest event is still clean, so a
        # fresh saver's cold reads may use the fast path.
        idx = index_of(fresh, "t")
        assert idx is not None and idx.high_fp is not None and idx.high_fp.clean
    a.close()
    b.close()


def test_a_session_created_again_is_not_the_old_one(tmp_path: Path) -> None:
    # Saver `a` indexes a thread whose checkpoint `cid` has a write; saver `b`
    # deletes the thread and creates it again with as many events and the same
    # checkpoint id, without the write. `a` must see a new session (a stale index
    # would skip the write as stored already: a lost write).
    root = tmp_path / "store"
    a, b = JournalSaver(root), JournalSaver(root)
    cid = put([a], "t", 0, None, [HumanMessage("h0")])
    a.put_writes(cfg("t", cid), [("x", 1)], "task")
    b.delete_thread("t")
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_values"] = {"messages": [HumanMessage("again")]}
    b.put(cfg("t"), cp, {"step": 0}, {})
    put([b], "t", 1, cid, [HumanMessage("again"), AIMessage("a1")])
    assert len(events(b, "t")) == len(events(a, "t")) == 2
    a.put_writes(cfg("t", cid), [("x", 1)], "task")
    assert writes_of(root, "t", cid) == [("task", "x", 1)]
    a.close()
    b.close()


def test_events_the_log_does_not_keep_do_not_wedge_a_write(tmp_path: Path) -> None:
    # A transient event takes a sequence and is not kept: the saver's conditional
    # append names a latest sequence that no readable event has.
    root = tmp_path / "store"
    with JournalSaver(root) as saver:
        cid = put([saver], "t", 0, None, [HumanMessage("h0")])
        saver.put_writes(cfg("t", cid), [("x", 1)], "task")
        saver.store.append_event("t", 1, Event(msg={"type": "session_history"}))
        assert len(events(saver, "t")) == 2  # not kept
        appends: list[Any] = []
        real = saver.store.append_event

        def counted(*a: Any, **k: Any) -> Any:
            appends.append(k.get("expected_latest"))
            return real(*a, **k)

        saver.store.append_event = counted  # type: ignore[method-assign]
        saver.put_writes(cfg("t", cid), [("y", 2)], "task-2")
        # Refused once (sequence 2 is not the latest), then right with the latest
        # sequence taken from a new index.
        assert appends == [2, 3]
        saver.put_writes(cfg("t", cid), [("y", 2)], "task-2")  # repeated: stored once
        cid2 = put([saver], "t", 1, cid, [HumanMessage("h0"), AIMessage("a1")])
        saver.put_writes(cfg("t", cid2), [("z", 3)], "task-3")
        assert [m["type"] for m in events(saver, "t")].count("langgraph_writes") == 3
    assert writes_of(root, "t", cid) == [("task", "x", 1), ("task-2", "y", 2)]
    assert writes_of(root, "t", cid2) == [("task-3", "z", 3)]


def test_list_items_are_stored_again_when_changed(tmp_path: Path) -> None:
    # The stored form of a list item is reused only for the same object with the
    # same attributes as in the last put; plain values are immutable, dicts and
    # lists are always serialised again.
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        msgs: list[Any] = [HumanMessage(f"h{i}") for i in range(6)]
        parent = put([saver, ref], "t", 0, None, msgs)
        msgs[2].content = "changed in place"  # an attribute set again, same object
        msgs = [*msgs, AIMessage("a")]
        parent = put([saver, ref], "t", 1, parent, msgs)
        msgs = [msgs[0], HumanMessage("replaced"), *msgs[2:]]  # another object
        parent = put([saver, ref], "t", 2, parent, msgs)
        msgs[5].additional_kwargs = {"k": "v"}
        parent = put([saver, ref], "t", 3, parent, list(msgs))
        mixed: list[Any] = ["s", {"d": 1}, ["l"], HumanMessage("m")]
        parent = put([saver, ref], "t", 4, parent, mixed)
        mixed[1]["d"] = 2
        mixed[2].append("more")
        parent = put([saver, ref], "t", 5, parent, mixed)
        mixed = [*mixed, AIMessage("b")]
        mixed[3].content = "m2"
        parent = put([saver, ref], "t", 6, parent, mixed)
    with JournalSaver(root) as fresh:
        for tup in ref.list(cfg("t")):
            got = fresh.get_tuple(tup.config)
            same(got, tup)

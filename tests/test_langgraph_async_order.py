"""Writes stored before their checkpoint (LangGraph's default `durability="async"`).

With async durability LangGraph submits a step's `put_writes` without waiting
for the deferred `put` of its checkpoint, so a thread's log holds writes for
checkpoints that are only put a few steps later. These tests build such logs
(by hand, with a fresh saver now and then so that writers start cold, and with
a real graph) and check that

- every read (cold scan, cold fast path, warm) returns exactly what
  LangGraph's `InMemorySaver` fed the same calls returns, pending writes
  included, at every depth and across page boundaries;
- cold deep reads take the fast path (they read a few dozen events, not the
  log), and a session whose `fp` cannot be trusted is read by the scan;
- `put_writes` of a checkpoint not yet put does not store a write twice.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph_checks import Reads, cfg, index_of, same, slow_saver
from typing_extensions import TypedDict

from journal.integrations.langgraph import JournalSaver, events, fastpath, fingerprint


def build_async(
    root: Path,
    ref: Any,
    thread: str,
    steps: int,
    seed: int,
    *,
    lag: int = 4,
    fan_out: int = 3,
    late_rate: float = 0.05,
    travel_rate: float = 0.05,
    cold_rate: float = 0.1,
    ids: list[str] | None = None,
    start: int = 0,
) -> list[str]:
    """Puts lag up to `lag` steps behind their writes, like LangGraph's async durability.

    Each step creates a checkpoint whose tasks' writes (1..fan_out calls, some
    repeated) are stored at once; its put is stored later, in order, when the
    random backlog drains. Now and then a write goes to an old checkpoint
    (late), a put branches off an old one (time travel), or the journal saver
    is replaced by a fresh one (a cold writer). Returns the put ids in order.
    """
    rnd = random.Random(seed)
    saver = JournalSaver(root)
    put_ids: list[str] = []
    backlog: list[tuple[Any, Any, dict[str, Any]]] = []  # puts not stored yet, in order
    messages: dict[str, list[Any]] = {}
    parent: str | None = None
    try:

        def flush(k: int) -> None:
            for _ in range(k):
                if not backlog:
                    return
                conf, cp, md = backlog.pop(0)
                for s in (saver, ref):
                    s.put(conf, cp, md, dict(cp["channel_versions"]))
                put_ids.append(cp["id"])

        for step in range(start, start + steps):
            cid = ids[step - start] if ids is not None else str(uuid6(clock_seq=step))
            known = put_ids + [cp["id"] for _, cp, _ in backlog]
            if put_ids and rnd.random() < travel_rate:
                flush(len(backlog))  # a time-travel fork starts from a stored checkpoint
                parent = rnd.choice(put_ids)
            base = list(messages.get(parent, [])) if parent else []
            base.append(HumanMessage(f"m{step}") if step % 2 == 0 else AIMessage(f"a{step}"))
            messages[cid] = base
            cp = empty_checkpoint()
            cp["id"] = cid
            cp["channel_values"] = {"messages": base, "step": step}
            cp["channel_versions"] = {"messages": f"{step:032}.0", "step": f"{step:032}.0"}
            md = {"source": "loop", "step": step, "run_id": f"run-{step // 40}"}
            backlog.append((cfg(thread, parent), cp, md))
            parent = cid
            # The step's tasks finish (often) before its put is stored.
            for t in range(rnd.randint(1, fan_out)):
                w = [("messages", f"w{step}.{t}"), ("__interrupt__", f"i{step}.{t}")]
                for _ in range(2 if rnd.random() < 0.2 else 1):  # a repeated call
                    for s in (saver, ref):
                        s.put_writes(cfg(thread, cid), w, f"task-{step}-{t}")
            if known and rnd.random() < late_rate:
                old = rnd.choice(known)
                for s in (saver, ref):
                    s.put_writes(cfg(thread, old), [("x", f"late{step}")], f"late-{step}")
            if rnd.random() < cold_rate:
                saver.close()
                saver = JournalSaver(root)  # the next calls start from a cold index
            flush(max(0, len(backlog) - rnd.randint(0, lag)))
        flush(len(backlog))
    finally:
        saver.close()
    return put_ids


def check(
    root: Path,
    ref: Any,
    thread: str,
    put_ids: list[str],
    depths: list[int],
    *,
    expect_fast: bool = True,
) -> None:
    """Cold, warm and scan answers at many depths == `ref`'s."""
    for depth in depths:
        anchor = put_ids[-1 - depth]
        for limit in (1, 4, 10):
            with JournalSaver(root) as fresh:
                reads = Reads(fresh)
                got = list(fresh.list(cfg(thread), before=cfg(thread, anchor), limit=limit))
                idx = index_of(fresh, thread)
                assert idx is not None
                if expect_fast and limit == 10 and 20 < depth < len(put_ids) - 20:
                    assert idx.iranges, "the fast path was not taken"
                    # A few probes, the late chain, pages around the answer: not the log.
                    assert reads.n < 250, reads.n
                    if depth > len(put_ids) // 2:
                        assert reads.n < idx.high // 2, (reads.n, idx.high)
                # The same saver again (warm: islands and caches).
                again = list(fresh.list(cfg(thread), before=cfg(thread, anchor), limit=limit))
            want = list(ref.list(cfg(thread), before=cfg(thread, anchor), limit=limit))
            assert [t.config for t in got] == [t.config for t in want], (depth, limit)
            assert [t.config for t in again] == [t.config for t in want], (depth, limit)
            for g, a, w in zip(got, again, want, strict=True):
                same(g, w)
                same(a, w)
        with JournalSaver(root) as fresh:
            same(fresh.get_tuple(cfg(thread, anchor)), ref.get_tuple(cfg(thread, anchor)))
        with slow_saver(root) as slow:
            same(slow.get_tuple(cfg(thread, anchor)), ref.get_tuple(cfg(thread, anchor)))
    # A cold full listing (the scan, page by page) and the head.
    with JournalSaver(root) as fresh:
        got = list(fresh.list(cfg(thread)))
        head = fresh.get_tuple(cfg(thread))
    want = list(ref.list(cfg(thread)))
    assert [t.config for t in got] == [t.config for t in want]
    for g, w in zip(got, want, strict=True):
        same(g, w)
    same(head, ref.get_tuple(cfg(thread)))


def test_writes_before_their_put_read_right_cold_and_warm(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    ids = build_async(root, ref, "t", 360, seed=1)
    check(root, ref, "t", ids, [0, 1, 3, 9, 30, 77, 150, 222, 300, 340, 358, 359])
    with JournalSaver(root) as saver:
        saver.delete_for_runs(["run-3"])  # a late delete event hides 40 checkpoints
    check(root, slow_saver(root), "t", ids, [5, 100, 200, 230, 300], expect_fast=False)


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_async_orders_match_the_in_memory_saver(tmp_path: Path, seed: int) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    rnd = random.Random(seed)
    ids = build_async(
        root,
        ref,
        "t",
        200,
        seed=seed,
        lag=rnd.randint(1, 8),
        fan_out=rnd.randint(1, 5),
        cold_rate=rnd.choice([0.0, 0.3]),
    )
    check(root, ref, "t", ids, [0, 2, 25, 60, 110, 170, 199])


def test_a_page_boundary_between_writes_and_their_put(tmp_path: Path) -> None:
    """The scan must not build a checkpoint before reading its earlier writes.

    Two writes then the put, for 300 steps: some put is the oldest event of a
    256-event page while its writes are on the next page.
    """
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        parent = None
        for s in (saver, ref):
            s.put_writes(cfg("t", "zz-orphan"), [("x", 1)], "orphan")
        for step in range(300):
            cid = str(uuid6(clock_seq=step))
            cp = empty_checkpoint()
            cp["id"] = cid
            cp["channel_values"] = {"step": step}
            cp["channel_versions"] = {"step": f"{step:032}.0"}
            for s in (saver, ref):
                s.put_writes(cfg("t", cid), [("x", f"w{step}")], f"task{step}")
                s.put_writes(cfg("t", cid), [("y", f"w{step}")], f"tusk{step}")
                s.put(cfg("t", parent), cp, {"step": step}, dict(cp["channel_versions"]))
            parent = cid
    for make in (JournalSaver, slow_saver):
        with make(root) as fresh:
            got = list(fresh.list(cfg("t")))
        want = list(ref.list(cfg("t")))
        assert len(got) == len(want) == 300
        for g, w in zip(got, want, strict=True):
            same(g, w)


def old_fp_next(prev: Any, high: int, kind: str, checkpoint_id: str | None) -> list[Any]:
    """The 5-field `fp` (no `pend`: ahead writes counted as late)."""
    if high == 0:
        late, last, ok = 0, None, True
    elif prev is None or prev.seq != high:
        late, last, ok = 0, None, False
    else:
        late = prev.seq if prev.is_late else prev.late
        last, ok = prev.last, prev.clean
    if kind == events.EV_CHECKPOINT:
        is_late = False
        if checkpoint_id is None or (last is not None and not checkpoint_id > last):
            ok = False
        last = checkpoint_id
    else:
        is_late = kind != events.EV_WRITES or last is None or checkpoint_id != last
    return [high, late, last, ok, is_late]


def test_sessions_written_with_the_5_field_fp_read_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log of 5-field `fp`s (no `pend`), then continued by the saver."""
    # internal: the saver writes only the current `fp`; this writes the 5-field one
    monkeypatch.setattr(fingerprint, "for_new", lambda p, h, k, c, r: old_fp_next(p, h, k, c))
    monkeypatch.setattr(fastpath, "MAX_LATE", 10**6)  # let the fast path walk the old chain
    root = tmp_path / "store"
    ref = InMemorySaver()
    ids = build_async(root, ref, "t", 150, seed=5, cold_rate=0.0)
    with JournalSaver(root) as fresh:
        idx = index_of(fresh, "t")
        assert idx is not None and idx.high_fp is not None
        assert idx.high_fp.clean and not idx.high_fp.current
    check(root, ref, "t", ids, [0, 10, 70, 140], expect_fast=False)
    monkeypatch.undo()
    # The saver continues the log: not clean from then on (old pending writes
    # are unknown), and every answer still right.
    later = [str(uuid6(clock_seq=10_000 + i)) for i in range(60)]
    ids += build_async(root, ref, "t", 60, seed=6, ids=later, start=150)
    with JournalSaver(root) as fresh:
        idx = index_of(fresh, "t")
        assert idx is not None and idx.high_fp is not None
        assert idx.high_fp.current and not idx.high_fp.ok
    check(root, ref, "t", ids, [0, 10, 40, 70, 140, 200], expect_fast=False)


def test_too_many_pending_checkpoints_stop_the_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fingerprint, "MAX_PEND", 3)  # internal: a limit with no option
    root = tmp_path / "store"
    ref = InMemorySaver()
    ids = build_async(root, ref, "t", 120, seed=7, lag=8, cold_rate=0.0)
    with JournalSaver(root) as fresh:
        idx = index_of(fresh, "t")
        assert idx is not None and idx.high_fp is not None and not idx.high_fp.ok
    check(root, ref, "t", ids, [0, 30, 90], expect_fast=False)


def test_a_put_listing_writes_that_are_not_its_own_is_refused(tmp_path: Path) -> None:
    """`mine` pointing at an event that is not a write of that put: the scan answers."""
    root = tmp_path / "store"
    ref = InMemorySaver()
    ids = build_async(root, ref, "t", 120, seed=8, cold_rate=0.0)
    anchor = ids[-60]
    with JournalSaver(root) as fresh:
        # internal: a corrupt `mine` cannot be written through the API
        real = fresh._fast.island_events

        def lying(idx: Any, events: list[Any]) -> None:
            real(idx, events)
            for seq, put in list(idx.iputs.items()):
                if put.ahead:
                    put.ahead = (seq - 1,)  # the event just before: usually not its write

        fresh._fast.island_events = lying  # type: ignore[method-assign]
        got = list(fresh.list(cfg("t"), before=cfg("t", anchor), limit=10))
    want = list(ref.list(cfg("t"), before=cfg("t", anchor), limit=10))
    assert [t.config for t in got] == [t.config for t in want]
    for g, w in zip(got, want, strict=True):
        same(g, w)


def test_put_writes_of_a_pending_checkpoint_reads_little_and_stores_once(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    ids = build_async(root, ref, "t", 400, seed=9, late_rate=0.0, travel_rate=0.0)
    cid = str(uuid6(clock_seq=10_000))
    with JournalSaver(root) as saver:
        saver.put_writes(cfg("t", cid), [("x", 1), ("y", 2)], "task")
    with JournalSaver(root) as cold:
        reads = Reads(cold)
        cold.put_writes(cfg("t", cid), [("x", 1), ("y", 2)], "task")  # a repeated call
        assert reads.n < 40, reads.n  # not the whole log
        cp = empty_checkpoint()
        cp["id"] = cid
        cold.put(cfg("t", ids[-1]), cp, {}, {})
    with JournalSaver(root) as fresh:
        tup = fresh.get_tuple(cfg("t", cid))
    assert tup is not None
    assert sorted(tup.pending_writes or []) == [("task", "x", 1), ("task", "y", 2)]


class GState(TypedDict):
    messages: Annotated[list[Any], add_messages]
    n: int


def g_step(state: GState) -> dict[str, Any]:
    return {"messages": [AIMessage(f"a{state['n']}")], "n": state["n"] + 1}


def g_other(state: GState) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"h{state['n']}")]}


def g_route(state: GState) -> str:
    return END if state["n"] >= 120 else "step"


def test_a_real_graph_with_async_durability(tmp_path: Path) -> None:
    g = StateGraph(GState)
    g.add_node("step", g_step)
    g.add_node("other", g_other)
    g.add_edge(START, "step")
    g.add_edge("step", "other")
    g.add_conditional_edges("other", g_route, ["step", END])
    root = tmp_path / "store"
    conf: Any = {"configurable": {"thread_id": "g"}, "recursion_limit": 1000}
    with JournalSaver(root) as saver:
        graph = g.compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("go")], "n": 0}, conf, durability="async")
    with slow_saver(root) as slow:
        every = list(slow.list(cfg("g")))
        ids = [t.config["configurable"]["checkpoint_id"] for t in every]
        assert len(ids) > 200
        for depth in (5, 50, 120, 200):
            anchor = ids[depth]
            with JournalSaver(root) as fresh:
                got = list(fresh.list(cfg("g"), before=cfg("g", anchor), limit=10))
                idx = index_of(fresh, "g")
                assert idx is not None and idx.iranges, "the fast path was not taken"
                one = fresh.get_tuple(cfg("g", anchor))
            want = list(slow.list(cfg("g"), before=cfg("g", anchor), limit=10))
            assert [t.config for t in got] == [t.config for t in want]
            for a, b in zip(got, want, strict=True):
                same(a, b)
            same(one, slow.get_tuple(cfg("g", anchor)))

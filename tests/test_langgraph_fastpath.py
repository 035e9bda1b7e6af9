"""The cold-read fast path of `JournalSaver` (`list(before=...)`, `get_tuple(id)`).

A fresh saver finds an old checkpoint by binary search over the event log
instead of reading everything newer. These tests build long threads with
time-travel branches, writes to old checkpoints, interrupt/resume writes and
logical deletes, then compare every answer of a fresh saver (fast path) with
LangGraph's `InMemorySaver` fed the same calls and with the scan (fast path
switched off); and check that the fast path is refused, not wrong, when put
ids are not monotonic.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_checks import Reads, cfg, index_of, same, slow_saver

from journal.integrations.langgraph import JournalSaver, fastpath


@pytest.fixture(autouse=True)
def long_late_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the fast path walk the long late chains these tests build (it must stay right)."""
    monkeypatch.setattr(fastpath, "MAX_LATE", 10**6)  # internal: a limit with no option


def build(
    savers: list[Any],
    thread: str,
    steps: int,
    seed: int,
    ids: list[str] | None = None,
    late_rate: float = 0.15,
) -> list[str]:
    """Drive every saver with the same puts/writes/deletes; returns the put ids in order."""
    rnd = random.Random(seed)
    put_ids: list[str] = []
    messages: dict[str, list[Any]] = {}
    parent: str | None = None
    for step in range(steps):
        cid = ids[step] if ids is not None else str(uuid6(clock_seq=step))
        if put_ids and rnd.random() < 0.1:
            parent = rnd.choice(put_ids)  # time travel: the new put branches off an old one
        base = list(messages.get(parent, [])) if parent else []
        base.append(HumanMessage(f"m{step}") if step % 2 == 0 else AIMessage(f"a{step}"))
        messages[cid] = base
        cp = empty_checkpoint()
        cp["id"] = cid
        cp["channel_values"] = {"messages": base, "step": step}
        cp["channel_versions"] = {"messages": f"{step:032}.0", "step": f"{step:032}.0"}
        md = {"source": "loop", "step": step, "run_id": f"run-{step // 50}"}
        for s in savers:
            s.put(cfg(thread, parent), cp, md, dict(cp["channel_versions"]))
        put_ids.append(cid)
        parent = cid
        r = rnd.random()
        if r < 0.6:  # local writes (the normal case)
            for s in savers:
                s.put_writes(cfg(thread, cid), [("messages", f"w{step}")], f"task-{step}")
        if r < late_rate and len(put_ids) > 3:  # writes to an old checkpoint (a resumed past step)
            old = rnd.choice(put_ids[:-1])
            for s in savers:
                s.put_writes(cfg(thread, old), [("__interrupt__", f"late{step}")], f"late-{step}")
                s.put_writes(cfg(thread, old), [("x", f"late{step}")], f"late-{step}")
    return put_ids


def check_against(root: Path, ref: Any, thread: str, put_ids: list[str], depths: list[int]) -> None:
    """Fresh savers' answers at many depths == `ref`'s (None: the scan's)."""
    if ref is None:
        ref = slow_saver(root)
    for depth in depths:
        anchor = put_ids[-1 - depth]
        for limit in (1, 3, 10):
            with JournalSaver(root) as fresh:
                got = list(fresh.list(cfg(thread), before=cfg(thread, anchor), limit=limit))
                idx = index_of(fresh, thread)
                assert idx is not None
                fast_expected = 10 < depth < len(put_ids) - 1
                if fast_expected and limit == 10 and not isinstance(ref, JournalSaver):
                    assert idx.iranges, "the fast path was not taken"
            want = list(ref.list(cfg(thread), before=cfg(thread, anchor), limit=limit))
            assert [t.config for t in got] == [t.config for t in want], (depth, limit)
            for g, w in zip(got, want, strict=True):
                same(g, w)
        with JournalSaver(root) as fresh:
            same(fresh.get_tuple(cfg(thread, anchor)), ref.get_tuple(cfg(thread, anchor)))
        # A warm saver: the same answers again, from its islands.
        with JournalSaver(root) as fresh:
            for _ in range(2):
                got = list(fresh.list(cfg(thread), before=cfg(thread, anchor), limit=5))
                want = list(ref.list(cfg(thread), before=cfg(thread, anchor), limit=5))
                assert [t.config for t in got] == [t.config for t in want]
                for g, w in zip(got, want, strict=True):
                    same(g, w)


def test_fast_path_matches_in_memory_saver(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        ids = build([saver, ref], "t", 400, seed=7)
    depths = [0, 1, 2, 5, 17, 60, 120, 200, 251, 299, 300, 380, 398, 399]
    check_against(root, ref, "t", ids, depths)
    with JournalSaver(root) as saver:
        saver.delete_for_runs(["run-2"])  # hides steps 100..149 (a late delete event)
    check_against(root, None, "t", ids, depths)
    ref = slow_saver(root)
    # A checkpoint that does not exist, and a deleted one.
    with JournalSaver(root) as fresh:
        assert fresh.get_tuple(cfg("t", str(uuid6(clock_seq=1)))) is None
        assert fresh.get_tuple(cfg("t", ids[120])) is None
    with JournalSaver(root) as fresh:
        got = [t.config for t in fresh.list(cfg("t"), before=cfg("t", ids[120]), limit=4)]
    want = [t.config for t in ref.list(cfg("t"), before=cfg("t", ids[120]), limit=4)]
    assert got == want


def test_fast_path_agrees_with_the_scan_and_reads_little(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JournalSaver(root) as saver:
        ids = build([saver], "t", 600, seed=3, late_rate=0.01)
    for depth in (10, 300, 550):
        anchor = ids[-1 - depth]
        with JournalSaver(root) as fast:
            reads = Reads(fast)
            got = list(fast.list(cfg("t"), before=cfg("t", anchor), limit=10))
            fast_reads = reads.n
        with slow_saver(root) as slow:
            reads = Reads(slow)
            want = list(slow.list(cfg("t"), before=cfg("t", anchor), limit=10))
            slow_reads = reads.n
        assert [t.config for t in got] == [t.config for t in want]
        for g, w in zip(got, want, strict=True):
            same(g, w)
        # log2(~1000 events) probes + the late chain (~12) + ~40 events of pages.
        assert fast_reads < 100, fast_reads
        if depth >= 300:
            assert fast_reads < slow_reads, (fast_reads, slow_reads)


def test_a_long_late_chain_falls_back_to_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fastpath, "MAX_LATE", 5)  # internal: a limit with no option
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        ids = build([saver, ref], "t", 150, seed=2)
    for depth in (20, 100):
        with JournalSaver(root) as fresh:
            got = list(fresh.list(cfg("t"), before=cfg("t", ids[-1 - depth]), limit=5))
            idx = index_of(fresh, "t")
            assert idx is not None and not idx.iranges and idx.low < len(ids)
        want = list(ref.list(cfg("t"), before=cfg("t", ids[-1 - depth]), limit=5))
        assert [t.config for t in got] == [t.config for t in want]
        for g, w in zip(got, want, strict=True):
            same(g, w)


def test_non_monotonic_ids_fall_back_to_the_scan(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    ids = [str(uuid6(clock_seq=i)) for i in range(120)]
    ids[40], ids[80] = ids[80], ids[40]  # one put out of id order
    with JournalSaver(root) as saver:
        build([saver, ref], "t", 120, seed=11, ids=ids)
    with JournalSaver(root) as fresh:
        idx = index_of(fresh, "t")
        assert idx is not None and idx.high_fp is not None and not idx.high_fp.ok
    for anchor in (ids[10], ids[40], ids[60], ids[80], ids[100]):
        with JournalSaver(root) as fresh:
            got = list(fresh.list(cfg("t"), before=cfg("t", anchor), limit=5))
        with slow_saver(root) as slow:
            want = list(slow.list(cfg("t"), before=cfg("t", anchor), limit=5))
        assert [t.config for t in got] == [t.config for t in want]
        with JournalSaver(root) as fresh:
            same(fresh.get_tuple(cfg("t", anchor)), ref.get_tuple(cfg("t", anchor)))


def test_copy_thread_and_prune_keep_the_fast_path_right(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    ids = [str(uuid6(clock_seq=i)) for i in range(200)]
    build([ref], "dst", 200, seed=5, ids=ids)  # what the copy must read like
    with JournalSaver(root) as saver:
        build([saver], "src", 200, seed=5, ids=ids)
        saver.copy_thread("src", "dst")
    check_against(root, ref, "dst", ids, [3, 77, 150, 199])
    check_against(root, None, "dst", ids, [3, 77, 150, 199])
    with JournalSaver(root) as saver:
        idx = index_of(saver, "dst")
        assert idx is not None and idx.high_fp is not None and idx.high_fp.clean
        saver.prune(["dst"])
    check_against(root, None, "dst", ids, [0, 5, 100])

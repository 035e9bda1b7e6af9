"""`JournalSession.pop_item` as a compare-and-append: the tombstone is appended only
if the session's latest event is still the one the pop's cache reflects
(`Store.append_event(..., expected_latest=N)`); otherwise the pop catches up with
the log and tries again.

Other processes are modelled two ways: several `JournalSession` objects in this
process whose stores are opened through different paths to one directory (so
they share no in-process lock and no item cache, as separate processes would),
and real processes. The invariant checked on the log afterwards: every
tombstone names the newest live item at the point it was appended.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import journal
from journal import ContractViolationError, EventPageRequest
from journal.integrations.openai_agents import CLEAR, ITEMS, POP, JournalSession


def msgs(*contents: str) -> list[Any]:
    return [{"role": "user", "content": c} for c in contents]


def contents(items: list[Any]) -> list[Any]:
    return [i.get("content") if i is not None else None for i in items]


def views(tmp_path: Path, n: int) -> list[Path]:
    """`n` paths to one store directory: stores opened through them are as separate
    as those of different processes (no shared lock, no shared item cache)."""
    root = tmp_path / "store"
    root.mkdir()
    out = [root]
    for k in range(1, n):
        link = tmp_path / f"view{k}"
        link.symlink_to(root, target_is_directory=True)
        out.append(link)
    return out


class Calls:
    """Counts a store's log reads and records its appends (kwargs and outcome)."""

    def __init__(self, store: journal.Store, monkeypatch: pytest.MonkeyPatch):
        self.reads: list[str] = []
        self.appends: list[tuple[int | None, str]] = []
        for name in ("events_after", "event_page", "load"):
            real = getattr(store, name)
            monkeypatch.setattr(store, name, self._count(name, real))
        real_append = store.append_event

        def append_event(*args: Any, **kw: Any) -> Any:
            try:
                jev = real_append(*args, **kw)
            except ContractViolationError:
                self.appends.append((kw.get("expected_latest"), "conflict"))
                raise
            self.appends.append((kw.get("expected_latest"), "ok"))
            return jev

        monkeypatch.setattr(store, "append_event", append_event)

    def _count(self, name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            self.reads.append(name)
            return real(*args, **kw)

        return wrapper

    def reset(self) -> None:
        self.reads.clear()
        self.appends.clear()


def replay(store: journal.Store, session_id: str) -> list[str]:
    """The live items by replaying the log; asserts that every tombstone names the
    newest live item at its point in the log."""
    live: list[tuple[tuple[int, int], str]] = []
    events = []
    before = None
    while True:
        page = store.event_page(session_id, EventPageRequest(limit=512, before_sequence=before))
        events.extend(page.events)
        if page.next_before_sequence is None:
            break
        before = page.next_before_sequence
    for jev in reversed(events):
        msg = jev.event.msg
        if msg["type"] == ITEMS:
            live += [((jev.sequence, i), it["content"]) for i, it in enumerate(msg["items"])]
        elif msg["type"] == POP:
            depth, seq, index = msg["target"]
            assert depth == 0
            assert live, f"event {jev.sequence}: a tombstone with nothing live"
            assert live[-1][0] == (seq, index), (
                f"event {jev.sequence}: tombstone of {(seq, index)}, newest is {live[-1]}"
            )
            live.pop()
        elif msg["type"] == CLEAR:
            live.clear()
    return [c for _, c in live]


# ------------------------------------------------------------------- the fast path
@pytest.mark.asyncio
async def test_a_pop_with_a_current_cache_reads_nothing_and_appends_conditionally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with JournalSession("fast", tmp_path / "store", durability="os") as s:
        await s.add_items(msgs("a", "b"))
        await s.add_items(msgs("c"))
        assert contents(await s.get_items()) == ["a", "b", "c"]  # the cache is warm
        latest = s.store.event_page("fast", EventPageRequest(limit=1)).latest_sequence
        calls = Calls(s.store, monkeypatch)
        assert contents([await s.pop_item(), await s.pop_item()]) == ["c", "b"]
        assert calls.reads == []  # no freshness read, no rebuild
        assert calls.appends == [(latest, "ok"), (latest + 1, "ok")]
        # An add keeps the cache's latest sequence exact: the next pop is still direct.
        await s.add_items(msgs("d"))
        calls.reset()
        assert contents([await s.pop_item()]) == ["d"]
        assert calls.reads == [] and calls.appends == [(latest + 3, "ok")]
        assert contents(await s.get_items()) == ["a"]
    with journal.open(tmp_path / "store") as store:
        assert replay(store, "fast") == ["a"]


@pytest.mark.asyncio
async def test_a_pop_checks_the_sessions_identity_with_one_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The identity file alone tells incarnations apart (as the store does): one
    # `stat` of it per pop (through `Store.incarnation`), not one of the directory
    # as well, and none by the integration itself.
    async with JournalSession("one", tmp_path / "store", durability="os") as s:
        await s.add_items(msgs("a", "b"))
        assert contents(await s.get_items()) == ["a", "b"]
        real_stat, real_incarnation = os.stat, s.store.incarnation
        asking: set[int] = set()  # threads inside Store.incarnation
        mine: list[str] = []

        def stat(path: Any, *a: Any, **k: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if threading.get_ident() in asking or caller.startswith(
                "journal.integrations.openai_agents"
            ):
                mine.append(os.fspath(path))
            return real_stat(path, *a, **k)

        def incarnation(session_id: str) -> Any:
            asking.add(threading.get_ident())
            try:
                return real_incarnation(session_id)
            finally:
                asking.discard(threading.get_ident())

        monkeypatch.setattr(s.store, "incarnation", incarnation)
        monkeypatch.setattr(os, "stat", stat)
        assert contents([await s.pop_item()]) == ["b"]
        # FORMAT.md names the identity file `SESSION`
        assert mine == [os.path.join(s.store.session_dir("one"), "SESSION")]


@pytest.mark.asyncio
async def test_a_pop_after_another_process_added_returns_the_new_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pa, pb = views(tmp_path, 2)
    a = JournalSession("s", pa, durability="os")
    b = JournalSession("s", pb, durability="os")
    await a.add_items(msgs("one", "two"))
    assert contents(await a.get_items()) == ["one", "two"]  # a's cache: current
    await b.add_items(msgs("three"))  # a's cache does not know
    calls = Calls(a.store, monkeypatch)
    assert contents([await a.pop_item()]) == ["three"]
    # the conditional append failed once, then the pop caught up and took the new item
    assert [r for _, r in calls.appends] == ["conflict", "ok"]
    assert "events_after" in calls.reads
    assert contents(await b.get_items()) == ["one", "two"]
    # and a pop after another process popped takes the next item, not the same one
    assert contents(await a.get_items()) == ["one", "two"]
    assert contents([await b.pop_item()]) == ["two"]
    assert contents([await a.pop_item()]) == ["one"]
    assert await a.pop_item() is None and await b.pop_item() is None
    # an add by another process into what our cache saw as empty is found
    await b.add_items(msgs("late"))
    assert contents([await a.pop_item()]) == ["late"]
    assert replay(a.store, "s") == []
    a.close()
    b.close()


@pytest.mark.asyncio
async def test_a_pop_after_another_process_cleared(tmp_path: Path) -> None:
    pa, pb = views(tmp_path, 2)
    a = JournalSession("s", pa, durability="os")
    b = JournalSession("s", pb, durability="os")
    await a.add_items(msgs("one", "two"))
    assert contents(await a.get_items()) == ["one", "two"]
    await b.clear_session()
    assert await a.pop_item() is None
    await b.add_items(msgs("after"))
    await b.clear_session()
    await b.add_items(msgs("again"))
    assert contents([await a.pop_item()]) == ["again"]
    assert await a.pop_item() is None
    assert contents(await b.get_items()) == []
    a.close()
    b.close()


@pytest.mark.asyncio
async def test_a_pop_after_the_session_was_deleted_and_created_again(tmp_path: Path) -> None:
    pa, pb = views(tmp_path, 2)
    a = JournalSession("s", pa, durability="os")
    b = JournalSession("s", pb, durability="os")
    await a.add_items(msgs("old1"))
    await a.add_items(msgs("old2"))
    assert contents(await a.get_items()) == ["old1", "old2"]
    assert await b.delete()
    # the same number of events as before, other items: a's cache must not be used
    await b.add_items(msgs("new1"))
    await b.add_items(msgs("new2"))
    assert contents([await a.pop_item()]) == ["new2"]
    assert contents(await b.get_items()) == ["new1"]
    assert await b.delete()
    assert await a.pop_item() is None
    a.close()
    b.close()


@pytest.mark.asyncio
async def test_a_conflict_that_is_not_a_stale_view_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with JournalSession("s", tmp_path / "store", durability="os") as s:
        await s.add_items(msgs("one"))
        real = s.store.append_event
        attempts: list[Any] = []

        def refuse(*args: Any, **kw: Any) -> Any:
            attempts.append(kw.get("expected_latest"))
            raise ContractViolationError("refused")

        monkeypatch.setattr(s.store, "append_event", refuse)
        with pytest.raises(ContractViolationError, match="refused"):
            await s.pop_item()
        assert len(attempts) == 1  # nothing changed in the log: no retry loop
        monkeypatch.setattr(s.store, "append_event", real)
        assert contents([await s.pop_item()]) == ["one"]


# ------------------------------------------------------------ concurrent pops
@pytest.mark.asyncio
@pytest.mark.parametrize("cache_bytes", [16 << 20, 0, 600])
async def test_pops_and_adds_from_separate_views_race_correctly(
    tmp_path: Path, cache_bytes: int
) -> None:
    paths = views(tmp_path, 4)
    sessions = [JournalSession("race", p, durability="os", cache_bytes=cache_bytes) for p in paths]
    await sessions[0].add_items(msgs(*(f"m{i}" for i in range(60))))
    for s in sessions:
        await s.get_items(5)  # every view starts with a cache
    start = threading.Barrier(4)

    def popper(sess: JournalSession, out: list[Any]) -> None:
        loop = asyncio.new_event_loop()
        start.wait()
        for _ in range(15):
            out.append(loop.run_until_complete(sess.pop_item()))
        loop.close()

    def adder(sess: JournalSession, out: list[Any]) -> None:
        loop = asyncio.new_event_loop()
        start.wait()
        for i in range(15):
            loop.run_until_complete(sess.add_items(msgs(f"new{i}")))
        loop.close()

    outs: list[list[Any]] = [[], [], [], []]
    threads = [threading.Thread(target=popper, args=(sessions[k], outs[k])) for k in range(3)]
    threads.append(threading.Thread(target=adder, args=(sessions[3], outs[3])))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    popped = contents([x for out in outs for x in out])
    assert None not in popped and len(popped) == 45 and len(set(popped)) == 45
    live = replay(sessions[0].store, "race")  # every tombstone named the newest item
    everything = [f"m{i}" for i in range(60)] + [f"new{i}" for i in range(15)]
    assert sorted(live + popped) == sorted(everything)
    for s in sessions:
        assert contents(await s.get_items()) == live
    for s in sessions:
        s.close()


def pop_in_child(root: str, n: int, go: Any, send: Any) -> None:
    """A separate process: wait for `go`, pop `n` items, send what each pop returned."""

    async def run() -> list[Any]:
        async with JournalSession("mp", root, durability="os") as s:
            await s.get_items(5)  # a warm cache, as a long-lived process has
            send.send("ready")
            go.wait()
            return [await s.pop_item() for _ in range(n)]

    send.send(contents(asyncio.run(run())))
    send.close()


def add_in_child(root: str, n: int, go: Any, send: Any) -> None:
    async def run() -> None:
        async with JournalSession("mp", root, durability="os") as s:
            await s.get_items(5)
            send.send("ready")
            go.wait()
            for i in range(n):
                await s.add_items(msgs(f"child{i}"))

    asyncio.run(run())
    send.send([])
    send.close()


@pytest.mark.skipif(os.name != "posix", reason="forkserver")
def test_pops_from_real_processes_never_take_one_item_twice(tmp_path: Path) -> None:
    root = str(tmp_path / "store")

    async def seed() -> None:
        async with JournalSession("mp", root, durability="os") as s:
            await s.add_items(msgs(*(f"m{i}" for i in range(100))))

    asyncio.run(seed())
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["journal.integrations.openai_agents", "test_openai_agents_pop"])
    go = ctx.Event()
    procs, pipes = [], []
    for k in range(4):
        recv, send = ctx.Pipe(duplex=False)
        target = add_in_child if k == 3 else pop_in_child
        proc = ctx.Process(target=target, args=(root, 25, go, send))
        proc.start()
        send.close()
        procs.append(proc)
        pipes.append(recv)
    assert [recv.recv() for recv in pipes] == ["ready"] * 4  # all open, caches warm
    go.set()
    results = [recv.recv() for recv in pipes]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    popped = [x for r in results for x in r]
    assert None not in popped and len(popped) == 75 and len(set(popped)) == 75
    with journal.open(root) as store:
        live = replay(store, "mp")
    everything = [f"m{i}" for i in range(100)] + [f"child{i}" for i in range(25)]
    assert sorted(live + popped) == sorted(everything)
    # pops take the newest: the seed items left are a prefix of them
    kept = [x for x in live if x.startswith("m")]
    assert kept == [f"m{i}" for i in range(len(kept))]

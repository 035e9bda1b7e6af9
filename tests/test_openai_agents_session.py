"""`JournalSession` against the behaviours the SDK's own SQLiteSession tests check
(tests/memory/test_session.py and test_session_limit.py of openai-agents-python),
plus what it adds: newest-first cursor paging, branching, strict decoding and
compare-and-set pops."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents.memory import Session, SessionSettings

import journal
from journal import CorruptionError, Event, InvalidInputError, NotFoundError
from journal.integrations import openai_agents as oa
from journal.integrations.openai_agents import ITEMS, JournalSession

Factory = Callable[..., JournalSession]


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = journal.open(tmp_path / "store", durability="os")
    yield s
    s.close()


# Every test runs with the default item cache, with none (every read goes to the
# log) and with a tiny one (evictions mid-history: reads mix cache and log).
CACHES = {"cached": 32 << 20, "uncached": 0, "tiny": 600}


@pytest.fixture(params=list(CACHES))
def make(store: journal.Store, request: pytest.FixtureRequest) -> Factory:
    def factory(session_id: str, **kw: Any) -> JournalSession:
        kw.setdefault("cache_bytes", CACHES[request.param])
        return JournalSession(session_id, store, **kw)

    return factory


def msgs(*contents: str, role: str = "user") -> list[Any]:
    return [{"role": role, "content": c} for c in contents]


def contents(items: list[Any]) -> list[Any]:
    return [i.get("content") for i in items]


# ------------------------------------------------------- ported SQLiteSession tests
def test_implements_the_sdk_session_protocol(make: Factory) -> None:
    s = make("p")
    assert isinstance(s, Session)
    assert isinstance(s.session_settings, SessionSettings)
    assert s.session_settings.limit is None


@pytest.mark.asyncio
async def test_direct_add_get_clear(make: Factory) -> None:
    s = make("direct_test")
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]
    await s.add_items(items)
    got = await s.get_items()
    assert got == items
    await s.clear_session()
    assert await s.get_items() == []
    # the session stays usable after a clear
    await s.add_items(msgs("again"))
    assert contents(await s.get_items()) == ["again"]


@pytest.mark.asyncio
async def test_pop_item(make: Factory) -> None:
    s = make("pop_test")
    assert await s.pop_item() is None
    await s.add_items(
        [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
            {"role": "user", "content": "How are you?"},
        ]
    )
    assert len(await s.get_items()) == 3
    assert await s.pop_item() == {"role": "user", "content": "How are you?"}
    after = await s.get_items()
    assert len(after) == 2 and after[-1]["content"] == "Hi there!"
    assert await s.pop_item() == {"role": "assistant", "content": "Hi there!"}
    assert await s.pop_item() == {"role": "user", "content": "Hello"}
    assert await s.pop_item() is None
    assert await s.get_items() == []


@pytest.mark.asyncio
async def test_pop_only_affects_its_session(make: Factory) -> None:
    s1, s2 = make("session_1"), make("session_2")
    await s1.add_items(msgs("Session 1 message"))
    await s2.add_items(msgs("Session 2 message 1", "Session 2 message 2"))
    popped = await s2.pop_item()
    assert popped is not None and popped["content"] == "Session 2 message 2"
    assert contents(await s1.get_items()) == ["Session 1 message"]
    assert contents(await s2.get_items()) == ["Session 2 message 1"]


@pytest.mark.asyncio
async def test_get_items_with_limit(make: Factory) -> None:
    s = make("count_test")
    names = ["Message 1", "Response 1", "Message 2", "Response 2", "Message 3", "Response 3"]
    await s.add_items(msgs(*names))
    assert contents(await s.get_items()) == names
    assert contents(await s.get_items(limit=2)) == names[-2:]
    assert contents(await s.get_items(limit=4)) == names[-4:]
    assert contents(await s.get_items(limit=10)) == names
    assert await s.get_items(limit=0) == []
    # Negative limits return nothing, like limit=0 (upstream's later SQLiteSession,
    # Redis, MongoDB, Dapr); SQLite's own LIMIT -1 would mean "everything".
    assert await s.get_items(limit=-1) == []


@pytest.mark.asyncio
async def test_limit_spans_many_add_calls(make: Factory) -> None:
    s = make("many")
    for i in range(40):
        await s.add_items(msgs(*(f"{i}.{j}" for j in range(i % 4 + 1))))
    everything = contents(await s.get_items())
    assert len(everything) == sum(i % 4 + 1 for i in range(40))
    for limit in (1, 2, 3, 5, 7, 11, 50, 99, 100, 101, 1000):
        assert contents(await s.get_items(limit)) == everything[-limit:]


@pytest.mark.asyncio
async def test_unicode_content(make: Factory) -> None:
    s = make("unicode_test")
    await s.add_items(
        [
            {"role": "user", "content": "こんにちは"},
            {"role": "assistant", "content": "😊👍"},
            {"role": "user", "content": "Привет"},
        ]
    )
    assert contents(await s.get_items()) == ["こんにちは", "😊👍", "Привет"]


@pytest.mark.asyncio
async def test_special_characters_and_sql_injection(make: Factory) -> None:
    s = make("special_chars_test'; DROP TABLE x;--")
    texts = [
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
        "Normal message",
    ]
    await s.add_items(msgs(*texts))
    assert contents(await s.get_items()) == texts


@pytest.mark.asyncio
async def test_concurrent_access_from_threads_with_their_own_loops(make: Factory) -> None:
    s = make("concurrent_test")
    items = msgs(*(f"Message {i}" for i in range(10)))

    def add_item(item: Any) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(s.add_items([item]))
        loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as ex:
        list(ex.map(add_item, items))
    got = contents(await s.get_items())
    assert sorted(got) == sorted(f"Message {i}" for i in range(10))


@pytest.mark.asyncio
async def test_concurrent_adds_and_pops_on_one_loop(make: Factory) -> None:
    s = make("gather")
    await s.add_items(msgs(*(f"base {i}" for i in range(20))))
    results = await asyncio.gather(
        *(s.pop_item() for _ in range(10)), *(s.add_items(msgs(f"new {i}")) for i in range(5))
    )
    popped = [r["content"] for r in results[:10] if r is not None]
    assert len(popped) == len(set(popped)) == 10
    remaining = contents(await s.get_items())
    assert len(remaining) == 15 and not set(remaining) & set(popped)


@pytest.mark.asyncio
async def test_session_settings(make: Factory) -> None:
    s = make("settings", session_settings=SessionSettings(limit=3))
    assert s.session_settings is not None and s.session_settings.limit == 3
    await s.add_items(msgs(*(f"Message {i}" for i in range(10))))
    assert contents(await s.get_items()) == ["Message 7", "Message 8", "Message 9"]
    assert contents(await s.get_items(limit=2)) == ["Message 8", "Message 9"]


@pytest.mark.asyncio
async def test_sessions_with_odd_ids_are_separate(make: Factory, store: journal.Store) -> None:
    ids = ["a", "A", "a/b", "../x", "\x00", "é" * 300, "user:42|chat:7", "CON", ".git"]
    for i, sid in enumerate(ids):
        await make(sid).add_items(msgs(f"only {i}"))
    for i, sid in enumerate(ids):
        assert contents(await make(sid).get_items()) == [f"only {i}"]
    listed = {
        s.session_id
        for s in store.list_sessions_page(journal.SessionPageRequest(limit=50)).sessions
    }
    assert listed == set(ids)
    for blank in ("", "  "):  # journal's one rule for ids: not blank (and at most 4 KiB)
        with pytest.raises(InvalidInputError):
            make(blank)


@pytest.mark.asyncio
async def test_rejects_non_object_items_and_leaves_nothing(make: Factory) -> None:
    s = make("bad")
    with pytest.raises(InvalidInputError):
        await s.add_items(["just a string"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError):
        await s.add_items([{"role": "user", "content": float("nan")}])
    assert await s.get_items() == []


@pytest.mark.asyncio
async def test_persists_across_store_objects(tmp_path: Path) -> None:
    root = tmp_path / "s"
    async with JournalSession("persist", root) as a:
        await a.add_items(msgs("one", "two"))
        await a.pop_item()
        await a.add_items(msgs("three"))
    async with JournalSession("persist", root) as b:
        assert contents(await b.get_items()) == ["one", "three"]
    with pytest.raises(RuntimeError, match="is closed"):  # as SQLiteSession raises
        await b.get_items()


# ------------------------------------------------------------------------- paging
async def all_pages(s: JournalSession, limit: int) -> AsyncIterator[list[Any]]:
    before = None
    while True:
        page = await s.get_items_page(limit, before=before)
        assert len(page.items) == len(page.cursors) <= limit
        yield page.items
        if page.next_before is None:
            return
        assert page.next_before == page.cursors[-1]
        before = page.next_before


@pytest.mark.asyncio
async def test_pages_newest_first_cover_everything_once(make: Factory) -> None:
    s = make("paging")
    expected: list[str] = []
    for i in range(60):
        batch = [f"{i}.{j}" for j in range(i % 3 + 1)]
        expected += batch
        await s.add_items(msgs(*batch))
        if i % 7 == 6:  # some pops in the history
            popped = await s.pop_item()
            assert popped is not None and popped["content"] == expected.pop()
    for limit in (1, 4, 25, 500):
        seen = [c for items in [p async for p in all_pages(s, limit)] for c in contents(items)]
        assert seen == expected[::-1]
    assert (await s.get_items_page(3)).into_chronological() == msgs(*expected[-3:])


@pytest.mark.asyncio
async def test_cursor_stays_valid_across_adds_and_pops(make: Factory) -> None:
    s = make("cursor")
    await s.add_items(msgs(*(f"m{i}" for i in range(10))))
    page = await s.get_items_page(3)
    assert contents(page.items) == ["m9", "m8", "m7"]
    cursor = page.next_before
    assert cursor is not None

    async def below(n: int) -> list[Any]:
        # the same answer from this object and from a fresh one (which resumes the
        # cursor on the log: pops since the cursor was issued are applied exactly)
        got = contents((await s.get_items_page(n, before=cursor)).items)
        oa.drop_caches()  # as in a new process: nothing cached
        fresh = contents((await make("cursor").get_items_page(n, before=cursor)).items)
        assert got == fresh
        return got

    await s.add_items(msgs("late"))  # newer items do not move older pages
    assert await below(2) == ["m6", "m5"]
    for _ in range(6):
        await s.pop_item()  # late, m9, m8, m7, m6, m5
    assert await below(2) == ["m4", "m3"]
    await s.add_items(msgs("new"))
    await s.pop_item()  # new
    await s.pop_item()  # m4
    assert await below(5) == ["m3", "m2", "m1", "m0"]
    await s.clear_session()
    assert await below(2) == []


@pytest.mark.asyncio
async def test_bad_cursors_are_typed_errors(make: Factory) -> None:
    a, b = make("a"), make("b")
    await a.add_items(msgs("x", "y"))
    await b.add_items(msgs("x", "y"))
    cursor = (await a.get_items_page(1)).next_before
    assert cursor is not None
    for bad in ("nope", "jc1.!!!", cursor[:-3]):
        with pytest.raises(InvalidInputError):
            await a.get_items_page(1, before=bad)
    with pytest.raises(InvalidInputError):
        await b.get_items_page(1, before=cursor)  # another session's cursor
    with pytest.raises(InvalidInputError):
        await a.get_items_page(0)


# ---------------------------------------------------------------------- branching
@pytest.mark.asyncio
async def test_branch_shares_history_and_diverges(make: Factory, store: journal.Store) -> None:
    s = make("main")
    await s.add_items(msgs("q1", "a1"))
    await s.add_items(msgs("q2", "a2"))
    await s.add_items(msgs("q3", "a3"))
    page = await s.get_items_page(10)
    by_content = dict(zip(contents(page.items), page.cursors, strict=True))

    at = await s.branch("at-a2", at=by_content["a2"])
    assert contents(await at.get_items()) == ["q1", "a1", "q2", "a2"]
    retry = await s.branch("before-q2", before=by_content["q2"])
    assert contents(await retry.get_items()) == ["q1", "a1"]
    whole = await s.branch("whole")
    assert contents(await whole.get_items()) == ["q1", "a1", "q2", "a2", "q3", "a3"]

    # writes on either side stay on that side
    await retry.add_items(msgs("q2 (retried)"))
    await s.add_items(msgs("q4"))
    assert contents(await retry.get_items()) == ["q1", "a1", "q2 (retried)"]
    assert contents(await s.get_items())[-2:] == ["a3", "q4"]
    # popping into shared history, or clearing, does not touch the other side
    assert contents([await retry.pop_item(), await retry.pop_item()]) == ["q2 (retried)", "a1"]
    assert contents(await retry.get_items()) == ["q1"]
    assert contents(await s.get_items(3)) == ["q3", "a3", "q4"]
    await s.clear_session()
    assert contents(await at.get_items()) == ["q1", "a1", "q2", "a2"]
    assert contents(await retry.get_items()) == ["q1"]

    summary = store.session_summary("before-q2")
    assert summary is not None and summary.parent_session_id == "main"
    # journal's tree semantics: deleting the parent deletes its branches
    assert await s.delete()
    assert await at.get_items() == [] and store.load("before-q2") is None


@pytest.mark.asyncio
async def test_branch_of_a_branch_and_paging_across_the_chain(make: Factory) -> None:
    s = make("root")
    await s.add_items(msgs(*(f"r{i}" for i in range(5))))
    b1 = await s.branch("b1")
    await b1.add_items(msgs("b1-x", "b1-y"))
    await b1.pop_item()  # b1-y
    await b1.pop_item()  # b1-x
    await b1.pop_item()  # r4, from the shared part
    await b1.add_items(msgs("b1-z"))
    page = await b1.get_items_page(10)
    assert contents(page.items) == ["b1-z", "r3", "r2", "r1", "r0"]
    b2 = await b1.branch("b2", at=page.cursors[2])  # at r2 (held by "root")
    assert contents(await b2.get_items()) == ["r0", "r1", "r2"]
    b3 = await b1.branch("b3")
    await b3.add_items(msgs("b3"))
    seen = [c for items in [p async for p in all_pages(b3, 2)] for c in contents(items)]
    assert seen == ["b3", "b1-z", "r3", "r2", "r1", "r0"]
    assert contents(await s.get_items()) == [f"r{i}" for i in range(5)]
    # a cursor of an item that was popped cannot be branched at
    stale = (await s.get_items_page(1)).cursors[0]
    await s.pop_item()
    with pytest.raises(NotFoundError):
        await s.branch("nope", at=stale)
    with pytest.raises(journal.ContractViolationError):
        await s.branch("b1")  # exists


# ---------------------------------------------------------------- strict decoding
@pytest.mark.asyncio
async def test_malformed_record_is_reported_not_skipped(
    make: Factory, store: journal.Store
) -> None:
    s = make("strict")
    await s.add_items(msgs("ok 1"))
    store.append_event("strict", 1, Event(msg={"type": ITEMS, "items": "not a list"}))
    await s.add_items(msgs("ok 2"))
    assert contents(await s.get_items(1)) == ["ok 2"]  # newer than the damage: readable
    with pytest.raises(CorruptionError) as err:
        await s.get_items()
    assert "'strict'" in str(err.value) and "event 2" in str(err.value)
    store.append_event("strict", 1, Event(msg={"type": ITEMS, "items": [1]}))
    with pytest.raises(CorruptionError, match="item 0 is not a JSON object"):
        await s.get_items(1)
    with pytest.raises(CorruptionError):
        await s.pop_item()


@pytest.mark.asyncio
async def test_damaged_bytes_on_disk_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "store"
    async with JournalSession("disk", root, durability="os") as s:
        for i in range(30):
            await s.add_items(msgs(f"item-{i:03d}-" + "x" * 40))
    segs = list((root / "sessions").glob("*/log/*.seg"))
    assert len(segs) == 1
    data = bytearray(segs[0].read_bytes())
    at = data.index(b"item-010-")
    data[at + 5] ^= 0x01  # "item-010" -> "item-110": valid msgpack, wrong checksum
    segs[0].write_bytes(bytes(data))
    for name in ("events.idx", "snapshot"):  # make the reader go to the log
        for p in segs[0].parent.parent.glob(name):
            os.remove(p)
    async with JournalSession("disk", root, durability="os") as s2:
        # The store cannot establish the session's state past the damage, so every
        # read says so (file and offset) instead of returning a history with a hole.
        for read in (
            s2.get_items,
            lambda: s2.get_items(3),
            lambda: s2.get_items_page(5),
            s2.pop_item,
        ):
            with pytest.raises(CorruptionError) as err:
                await read()
            assert err.value.path is not None and err.value.offset is not None


# ------------------------------------------------------------- compare-and-set pops
@pytest.mark.asyncio
async def test_pops_from_three_store_objects_never_take_one_item_twice(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    # three paths to one store: separate in-process locks and item caches, as three
    # processes would have; only the conditional append of the tombstone (the
    # session's latest event must still be the one the pop saw) keeps pops apart
    paths = [root]
    for k in (1, 2):
        (tmp_path / f"view{k}").symlink_to(root, target_is_directory=True)
        paths.append(tmp_path / f"view{k}")
    sessions = [JournalSession("race", p, durability="os") for p in paths]
    await sessions[0].add_items(msgs(*(f"m{i}" for i in range(60))))

    def popper(sess: JournalSession, out: list[Any]) -> None:
        loop = asyncio.new_event_loop()
        for _ in range(15):
            out.append(loop.run_until_complete(sess.pop_item()))
        loop.close()

    outs: list[list[Any]] = [[], [], []]
    threads = [
        threading.Thread(target=popper, args=(s, o)) for s, o in zip(sessions, outs, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    popped = contents([x for out in outs for x in out if x is not None])
    assert len(popped) == 45 and len(set(popped)) == 45
    assert contents(await sessions[1].get_items()) == [f"m{i}" for i in range(15)]
    for s in sessions:
        s.close()


@pytest.fixture
def tiny_budget() -> Iterator[None]:
    oa.set_cache_budget(1)  # every other session's cache is dropped
    yield
    oa.set_cache_budget(oa.CACHE_BUDGET)


@pytest.mark.asyncio
@pytest.mark.usefixtures("tiny_budget")
async def test_process_wide_cache_budget(make: Factory) -> None:
    sessions = [make(f"budget-{k}") for k in range(3)]
    expected: list[list[str]] = [[], [], []]
    for i in range(12):
        k = i % 3
        await sessions[k].add_items(msgs(f"{k}.{i}"))
        expected[k].append(f"{k}.{i}")
        if i % 4 == 3:
            popped = await sessions[(k + 1) % 3].pop_item()
            if popped is not None:
                assert popped["content"] == expected[(k + 1) % 3].pop()
        fresh = make(f"budget-{(k + 2) % 3}")  # a new object shares (or rebuilds) the cache
        assert contents(await fresh.get_items()) == expected[(k + 2) % 3]
    for k in range(3):
        assert contents(await sessions[k].get_items()) == expected[k]

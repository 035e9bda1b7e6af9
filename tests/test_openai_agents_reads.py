"""What a `JournalSession` reads from the log when nothing is cached (a new process):
the newest items and the latest event sequence come from one page of events (sized
for one item per event), and a page below a cursor is read without filling a cache
first. Each test also checks the answers (and that
the cache built by the read stays exact for the calls after it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import journal
from journal import EventPageRequest
from journal.integrations import openai_agents as oa
from journal.integrations.openai_agents import JournalSession

# The scan's page size is internal; the test checks a long read keeps to it.
from journal.integrations.openai_agents.scan import PAGE_EVENTS


def msgs(*contents: str) -> list[Any]:
    return [{"role": "user", "content": c} for c in contents]


def contents(items: list[Any]) -> list[Any]:
    return [i.get("content") for i in items]


class Reads:
    """Records a store's log reads: ("load",), ("events_after",), ("event_page", limit)."""

    def __init__(self, store: journal.Store, monkeypatch: pytest.MonkeyPatch):
        self.log: list[tuple[Any, ...]] = []
        load, after, page = store.load, store.events_after, store.event_page

        def load_(*a: Any, **kw: Any) -> Any:
            self.log.append(("load",))
            return load(*a, **kw)

        def after_(*a: Any, **kw: Any) -> Any:
            self.log.append(("events_after",))
            return after(*a, **kw)

        def page_(session_id: str, request: EventPageRequest) -> Any:
            self.log.append(("event_page", request.limit))
            return page(session_id, request)

        monkeypatch.setattr(store, "load", load_)
        monkeypatch.setattr(store, "events_after", after_)
        monkeypatch.setattr(store, "event_page", page_)

    def names(self) -> list[str]:
        return [r[0] for r in self.log]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[journal.Store]:
    s = journal.open(tmp_path / "store", durability="os")
    yield s
    s.close()


@pytest.mark.asyncio
async def test_a_cold_read_takes_items_and_latest_sequence_from_one_page(
    store: journal.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = JournalSession("cold", store)
    names = [f"m{i}" for i in range(120)]
    for n in names:
        await writer.add_items(msgs(n))  # one item per event, as the Runner adds them
    oa.drop_caches()
    reads = Reads(store, monkeypatch)
    s = JournalSession("cold", store)
    assert contents(await s.get_items(50)) == names[-50:]
    # no separate read of the latest sequence, and no second page of events
    assert reads.log == [("load",), ("event_page", 51)]
    # The cache it built reflects the log exactly: nothing applied twice, nothing missed.
    await writer.add_items(msgs("late"))
    reads.log.clear()
    assert contents(await s.get_items(3)) == [*names[-2:], "late"]
    assert reads.names() == ["events_after"]
    assert contents(await s.get_items()) == [*names, "late"]
    assert contents([await s.pop_item()]) == ["late"]
    oa.drop_caches()
    assert contents(await JournalSession("cold", store).get_items()) == names


@pytest.mark.asyncio
async def test_a_cold_read_of_an_empty_session_and_of_a_cleared_one(
    store: journal.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = JournalSession("cleared", store)
    await s.add_items(msgs("a", "b"))
    await s.clear_session()
    oa.drop_caches()
    reads = Reads(store, monkeypatch)
    fresh = JournalSession("cleared", store)
    assert await fresh.get_items() == []
    assert reads.names() == ["load", "event_page"]
    assert await fresh.pop_item() is None
    await s.add_items(msgs("c"))
    assert contents(await fresh.get_items()) == ["c"]
    oa.drop_caches()
    assert await JournalSession("never", store).get_items() == []


@pytest.mark.asyncio
async def test_a_cold_page_below_a_cursor_reads_only_that_page(
    store: journal.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = JournalSession("deep", store)
    for i in range(100):
        await s.add_items(msgs(f"m{i}"))
    cursor = (await s.get_items_page(40)).next_before
    assert cursor is not None
    oa.drop_caches()
    reads = Reads(store, monkeypatch)
    fresh = JournalSession("deep", store)
    page = await fresh.get_items_page(10, before=cursor)
    assert contents(page.items) == [f"m{i}" for i in range(59, 49, -1)]
    # the checkpoint (branch chain), removals since the cursor, one page of events
    # (11 items: one more tells whether there is a next page; the event of the
    # cursor's own item comes first)
    assert reads.log == [("load",), ("events_after",), ("event_page", 12)]
    assert contents(await fresh.get_items(2)) == ["m98", "m99"]
    nxt = await fresh.get_items_page(10, before=page.next_before)
    assert contents(nxt.items) == [f"m{i}" for i in range(49, 39, -1)]


@pytest.mark.asyncio
async def test_a_cold_scan_through_tombstones_pages_geometrically(
    store: journal.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = JournalSession("pops", store)
    names = [f"m{i}" for i in range(300)]
    for n in names:
        await s.add_items(msgs(n))
    for _ in range(40):  # 40 tombstones at the newest end, naming the 40 items below them
        await s.pop_item()
    live = names[:-40]
    oa.drop_caches()
    reads = Reads(store, monkeypatch)
    assert contents(await JournalSession("pops", store).get_items(50)) == live[-50:]
    # the first page is sized for one item per event; it yields nothing live, the next
    # one is twice as large
    assert [r[1] for r in reads.log if r[0] == "event_page"] == [51, 102]
    oa.drop_caches()
    reads.log.clear()
    assert contents(await JournalSession("pops", store).get_items()) == live
    # a whole history is read in pages of at most PAGE_EVENTS events
    pages = [r[1] for r in reads.log if r[0] == "event_page"]
    assert pages == [PAGE_EVENTS] * len(pages) and len(pages) == -(-340 // PAGE_EVENTS)


@pytest.mark.asyncio
async def test_the_items_a_cold_read_returns_are_the_callers(store: journal.Store) -> None:
    # A read with nothing cached returns the items as it read them from the log (no
    # second decode of the cache's copies): changing them must not change the cache.
    writer = JournalSession("mine", store)
    for i in range(40):
        await writer.add_items([{"role": "user", "content": [{"type": "text", "text": f"m{i}"}]}])
    for limit in (None, 10):
        oa.drop_caches()
        s = JournalSession("mine", store)
        got = await s.get_items(limit)
        want = [f"m{i}" for i in range(40)][-(limit or 40) :]
        assert [i["content"][0]["text"] for i in got] == want
        for item in got:
            item["content"][0]["text"] = "changed"
            item["role"] = "changed"
        again = await s.get_items(limit)  # from the cache the first read built
        assert [i["content"][0]["text"] for i in again] == want
        assert all(i["role"] == "user" for i in again)
        assert all(a is not b for a, b in zip(got, again, strict=True))

"""`Store.reader`: reads of one session that check the session once.

A reader answers what the store's reads answer (same arguments, same results),
with at least what was committed when the reader was made: it does not look for
commits another process makes meanwhile (a second `Store` object on the same
root stands for another process here), while this process's commits are seen.
A read that would open a file of a session deleted meanwhile answers as for a
missing session: the file may be the next incarnation's.
"""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path

import pytest
from helpers import T0

# reaches inside: counts the refreshes a reader makes
import journal
from journal import Checkpoint, Event, EventPageRequest, InvalidInputError, NotFoundError
from journal.session import Session


def _fill(store: journal.Store, sid: str, events: int) -> None:
    cp = Checkpoint.empty(sid)
    cp.context = [{"role": "user", "content": "hi"}]
    store.save(cp)
    for n in range(events):
        store.append_event(sid, T0 + n, Event(msg={"type": "warning", "n": n}))
    cp.sequence = 1
    cp.context = [*cp.context, {"role": "assistant", "content": "hello"}]
    store.save(cp)


def test_a_reader_answers_what_the_store_answers(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        _fill(store, "a", 40)
        with store.reader("a") as r:
            assert r.session_id == "a"
            for req in (
                EventPageRequest(limit=1),
                EventPageRequest(limit=50),
                EventPageRequest(before_sequence=20, limit=7),
                EventPageRequest(before_sequence=1, limit=3),
            ):
                assert r.event_page(req) == store.event_page("a", req)
            for after, limit in ((0, 10), (35, 100), (40, 5)):
                assert r.events_after(after, limit) == store.events_after("a", after, limit)
            assert r.load() == store.load("a")
            for seq in (0, 1, 2):
                assert r.checkpoint_at(seq) == store.checkpoint_at("a", seq)
            with pytest.raises(InvalidInputError):
                r.event_page(EventPageRequest(limit=0))
            with pytest.raises(InvalidInputError):
                r.events_after(-1, 10)
    finally:
        store.close()


def test_load_prefix_is_load_with_the_first_items_of_the_context(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        cp = Checkpoint.empty("a")
        store.save(cp)
        for n in range(1, 6):  # one context item more per save
            cp.sequence = n
            cp.context = [*cp.context, {"n": n, "text": f"item {n}"}]
            store.save(cp)
        full = store.load("a")
        assert full is not None and len(full.context) == 5
        with store.reader("a") as r:
            for items in (0, 1, 3, 5, 6, 1 << 40):
                got = r.load_prefix(items)
                assert got is not None
                assert got.context == full.context[:items]
                got.context = full.context
                assert got == full  # everything else is what `load` gives
            for bad in (-1, 1.5, True, "2"):
                with pytest.raises(InvalidInputError):
                    r.load_prefix(bad)  # type: ignore[arg-type]
        assert store.load("a") == full  # nothing was cut from the session
    finally:
        store.close()


def test_a_reader_checks_the_session_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    writer = journal.open(root, durability="os")
    _fill(writer, "a", 10)
    writer.close()
    store = journal.open(root, durability="os")  # has never written: not "quiet"
    refreshes: list[int] = []
    original = Session.refresh

    def counted(self: Session) -> None:
        refreshes.append(1)
        original(self)

    monkeypatch.setattr(Session, "refresh", counted)
    try:
        with store.reader("a") as r:
            assert len(refreshes) == 1
            for seq in range(1, 11):
                [ev] = r.event_page(EventPageRequest(before_sequence=seq + 1, limit=1)).events
                assert ev.sequence == seq
            r.events_after(0, 5)
            r.load()
            r.checkpoint_at(0)
        assert len(refreshes) == 1  # the store's own reads check at every call
        store.event_page("a", EventPageRequest(limit=1))
        store.events_after("a", 0, 1)
        assert len(refreshes) == 3
    finally:
        store.close()


def test_a_reader_does_not_see_later_commits_of_other_processes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    other = journal.open(root, durability="os")  # another process
    try:
        _fill(store, "a", 3)
        with store.reader("a") as r:
            before = r.event_page(EventPageRequest(limit=10))
            other.append_event("a", T0, Event(msg={"type": "warning", "n": "late"}))
            assert r.event_page(EventPageRequest(limit=10)) == before
            assert r.events_after(3, 10) == []
            # ... which the store's reads see, and a new reader too.
            assert store.event_page("a", EventPageRequest(limit=1)).latest_sequence == 4
        with store.reader("a") as r2:
            assert [e.sequence for e in r2.events_after(3, 10)] == [4]
    finally:
        other.close()
        store.close()


def test_a_reader_sees_this_processs_commits(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        _fill(store, "a", 3)
        with store.reader("a") as r:
            store.append_event("a", T0, Event(msg={"type": "warning", "n": "mine"}))
            assert [e.sequence for e in r.events_after(3, 10)] == [4]
    finally:
        store.close()


def test_a_reader_of_a_missing_session_and_a_closed_reader(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        with pytest.raises(NotFoundError):
            store.reader("nobody")
        _fill(store, "a", 1)
        r = store.reader("a")
        r.close()
        r.close()  # idempotent
        with pytest.raises(InvalidInputError):
            r.load()
        with pytest.raises(InvalidInputError):
            store.reader("")
    finally:
        store.close()


def test_a_reader_keeps_its_session_open_past_the_open_session_limit(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os", max_open_sessions=1)
    try:
        _fill(store, "a", 5)
        with store.reader("a") as r:
            for k in range(4):  # each opens a session; the limit closes idle ones
                _fill(store, f"other-{k}", 1)
                store.load(f"other-{k}")
            assert [e.sequence for e in r.events_after(0, 10)] == [1, 2, 3, 4, 5]
            assert r.load() == store.load("a")
            sess = store.open_sessions.peek("a")  # the reader's, pinned
            assert sess is not None and not sess.closed  # pinned: the limit left it open
        store.load("other-0")
        assert sess.users == 0 and sess.closed  # released: closed by the limit
        assert "a" not in store.open_sessions
    finally:
        store.close()


def test_a_reader_of_a_session_deleted_meanwhile(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    other = journal.open(root, durability="os")
    try:
        _fill(store, "a", 5)
        with store.reader("a") as r:
            want = r.events_after(0, 10)
            assert other.delete_sessions(["a"])
            # As if the read came before the delete, or after it: never an error.
            got = r.events_after(0, 10)
            assert got in (want, [])
            try:
                page = r.event_page(EventPageRequest(limit=10))
            except NotFoundError:
                pass
            else:
                assert page.events == want[::-1]
        with pytest.raises(NotFoundError):
            store.reader("a")
    finally:
        other.close()
        store.close()


def _fill_tagged(store: journal.Store, tag: str, events: int = 200) -> None:
    cp = Checkpoint.empty("a")
    cp.context = [{"role": "user", "content": "hi " + tag}]
    store.save(cp)
    for n in range(events):
        store.append_event("a", T0 + n, Event(msg={"type": "warning", "tag": tag, "n": n}))


@pytest.mark.parametrize("new_tag", ["NEW", "NEWER-AND-LONGER"])
def test_a_reader_never_reads_the_next_incarnation(tmp_path: Path, new_tag: str) -> None:
    """Deleted and created again by another process, over several segments: the old
    session's reader has only its newest segment open (it was opened from its
    caches), and the oldest segment's path now holds the new session's. The reader
    never answers the new session's events as the old session's, and no index
    rebuild from the new log discards the new session's index files."""
    root = tmp_path / "s"
    opts = {"durability": "os", "segment_bytes": 4096}
    writer = journal.open(root, **opts)
    _fill_tagged(writer, "OLD")
    writer.close()
    store = journal.open(root, **opts)
    other = journal.open(root, **opts)  # another process
    try:
        r = store.reader("a")
        assert r.event_page(EventPageRequest(limit=1)).latest_sequence == 200
        assert other.delete_sessions(["a"])
        _fill_tagged(other, new_tag)
        session_dir = other.session_dir("a")
        other.close()  # writes its caches
        indexes = sorted(f for f in os.listdir(session_dir) if f.endswith(".idx"))
        assert indexes  # the new session's caches
        got = r.events_after(0, 3)
        assert all(e.event.msg["tag"] == "OLD" for e in got), got
        for _ in range(2):  # the file it opened is not used by the next read either
            try:
                page = r.event_page(EventPageRequest(before_sequence=4, limit=3))
            except NotFoundError:
                continue  # answered as for a missing session
            assert all(e.event.msg["tag"] == "OLD" for e in page.events)
        assert sorted(f for f in os.listdir(session_dir) if f.endswith(".idx")) == indexes
        r.close()
        # The store's own reads answer the new session.
        tags = {e.event.msg["tag"] for e in store.events_after("a", 0, 3)}
        assert tags == {new_tag}
        assert store.checkpoint_at("a", 0).context[0]["content"] == "hi " + new_tag  # type: ignore[union-attr]
    finally:
        other.close()
        store.close()


def test_a_reader_dropped_unclosed_releases_its_session(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    _fill(store, "a", 3)
    r = store.reader("a")
    sess = store.open_sessions.peek("a")  # the reader's
    assert sess is not None and sess.users == 1
    del r
    gc.collect()
    assert sess.users == 0
    store.close()
    assert sess.closed  # not left open (with its files) past the store's close


def test_a_reader_closed_during_a_read_keeps_the_session_until_it_ends(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os", max_open_sessions=1)
    try:
        _fill(store, "a", 5)
        _fill(store, "b", 5)
        r = store.reader("a")
        rb = store.reader("b")  # "a" is over the open-session limit, kept by r's pin
        sess = store.open_sessions.peek("a")  # the reader's
        assert sess is not None
        seen: list[bool] = []
        read_records = sess.log.read_records

        def closing_meanwhile(spans: list[tuple[int, int]]) -> list[object]:
            r.close()  # another thread, while this read runs
            seen.append(sess.closed)
            return read_records(spans)  # type: ignore[return-value]

        sess.log.forget_cached()
        sess.log.read_records = closing_meanwhile  # type: ignore[method-assign]
        assert [e.sequence for e in r.events_after(0, 5)] == [1, 2, 3, 4, 5]
        assert seen == [False]  # still open under the read ...
        assert sess.closed and sess.users == 0  # ... and released when it ended
        with pytest.raises(InvalidInputError):
            r.load()
        rb.close()
    finally:
        store.close()


def test_the_async_reader(tmp_path: Path) -> None:
    async def run() -> None:
        store = await journal.open_async(tmp_path / "s", durability="os")
        try:
            await store.save(Checkpoint.empty("a"))
            for n in range(5):
                await store.append_event("a", T0 + n, Event(msg={"type": "warning", "n": n}))
            async with await store.reader("a") as r:
                assert r.session_id == "a"
                page = await r.event_page(EventPageRequest(limit=3))
                assert page == await store.event_page("a", EventPageRequest(limit=3))
                assert await r.events_after(2, 10) == await store.events_after("a", 2, 10)
                assert await r.load() == await store.load("a")
                assert await r.checkpoint_at(0) == await store.checkpoint_at("a", 0)
                assert await r.load_prefix(3) == await store.load("a")  # an empty context
            with pytest.raises(InvalidInputError):
                await r.load()  # closed
            with pytest.raises(NotFoundError):
                await store.reader("nobody")
        finally:
            await store.close()

    asyncio.run(run())

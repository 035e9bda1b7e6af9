"""Concurrent append_event calls on one session share a write, each with its own outcome."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import T0, warning_event

# reaches inside: counts and fails the log's writes and syncs under a batch of appends
import journal
from journal import Checkpoint, Event, EventPageRequest, InvalidInputError, JournalEvent, fsio
from journal.log import Log


def _queue_behind_the_lock(store: journal.Store, session_id: str, events: list[Event]) -> list[Any]:
    """Start one thread per event while the session's write lock is held, wait until
    every append is queued, release the lock, and return each call's outcome."""
    sess = store.open_sessions.get(session_id)
    assert sess is not None
    outcomes: list[Any] = [None] * len(events)

    def append(i: int) -> None:
        try:
            outcomes[i] = store.append_event(session_id, T0 + i, events[i])
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=append, args=(i,)) for i in range(len(events))]
    with sess.locked():
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(sess.appends) < len(events):
            assert time.monotonic() < deadline, "appends did not queue up"
            time.sleep(0.001)
    for thread in threads:
        thread.join(30)
    return outcomes


@pytest.mark.parametrize("durability", ["fsync", "os"])
def test_queued_appends_share_one_write_and_keep_their_own_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    root = tmp_path / "s"
    store = journal.open(root, durability=durability, max_record_bytes=4096)
    writes: list[int] = []
    original = Log.write

    def counting(self: Log, data: bytes) -> int:
        writes.append(len(data))
        return original(self, data)

    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", T0, warning_event("before"))
        store.spares.wait()  # spare session directories are synced in the background
        monkeypatch.setattr(Log, "write", counting)
        syncs: list[str] = []
        real_sync = fsio.ops.sync_data

        def counting_sync(fd: int, path: str) -> None:
            syncs.append(path)
            real_sync(fd, path)

        monkeypatch.setattr(fsio.ops, "sync_data", counting_sync)
        events = [warning_event(f"queued {i}") for i in range(8)]
        # too large for a record of 4 KiB: only this one fails
        events[3] = warning_event("x" * 10_000)
        outcomes = _queue_behind_the_lock(store, "a", events)
        assert len(writes) == 1, f"{len(writes)} writes for one queue of appends"
        assert len(syncs) == (1 if durability == "fsync" else 0), syncs
        assert isinstance(outcomes[3], InvalidInputError)
        assert "exceeds the limit" in str(outcomes[3])
        ok = [o for i, o in enumerate(outcomes) if i != 3]
        assert all(isinstance(o, JournalEvent) for o in ok)
        assert sorted(o.sequence for o in ok) == list(range(2, 9))
        for i, o in enumerate(outcomes):
            if i != 3:
                assert o.event == events[i] and o.recorded_at_ms == T0 + i
    finally:
        store.close()
    # Each event is its own commit, and all of them are there after reopening.
    store = journal.open(root, durability=durability)
    try:
        page = store.event_page("a", EventPageRequest(limit=20))
        assert page.latest_sequence == 8
        by_sequence = {o.sequence: o for o in ok}
        assert [e.sequence for e in page.events] == list(range(8, 0, -1))
        for stored in page.events[:-1]:
            assert stored == by_sequence[stored.sequence]
        # the next append continues the sequence
        assert store.append_event("a", T0 + 100, warning_event("after")).sequence == 9
    finally:
        store.close()


def test_a_failed_commit_fails_every_queued_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        failing = journal.StorageError("disk full (injected)")

        def broken(self: Log, data: bytes) -> int:
            raise failing

        monkeypatch.setattr(Log, "write", broken)
        outcomes = _queue_behind_the_lock(store, "a", [warning_event(f"e{i}") for i in range(5)])
        assert all(isinstance(o, journal.StorageError) for o in outcomes), outcomes
        assert all(str(o) == str(failing) for o in outcomes)
        # the leader raises the failure itself, every other caller its own copy of it
        assert sum(o is failing for o in outcomes) == 1
        assert all(o.__cause__ is failing for o in outcomes if o is not failing)
        monkeypatch.undo()
        page = store.event_page("a", EventPageRequest(limit=10))
        assert page.latest_sequence == 0 and page.events == []
        assert store.append_event("a", T0, warning_event("later")).sequence == 1
    finally:
        store.close()


# ------------------------------------------------------------ compare-and-append


def test_expected_latest_appends_only_after_that_sequence(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        first = store.append_event("a", T0, warning_event("one"), expected_latest=0)
        assert first.sequence == 1
        with pytest.raises(journal.ContractViolationError, match="latest sequence is 1"):
            store.append_event("a", T0 + 1, warning_event("stale"), expected_latest=0)
        page = store.event_page("a", EventPageRequest(limit=10))
        assert [e.sequence for e in page.events] == [1], "a rejected append left an event"
        assert (
            store.append_event("a", T0 + 2, warning_event("two"), expected_latest=1).sequence == 2
        )
        with pytest.raises(InvalidInputError, match="expected_latest"):
            store.append_event("a", T0 + 3, warning_event("bad"), expected_latest=-1)
        assert store.event_page("a", EventPageRequest(limit=10)).latest_sequence == 2
    finally:
        store.close()


def test_in_one_queue_only_the_first_of_two_with_the_same_expectation_wins(
    tmp_path: Path,
) -> None:
    """Two callers that read the same latest sequence: one appends, the other is told."""
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        sess = store.open_sessions.get("a")
        assert sess is not None
        outcomes: list[Any] = [None, None]

        def append(i: int) -> None:
            try:
                outcomes[i] = store.append_event(
                    "a", T0 + i, warning_event(f"pop {i}"), expected_latest=0
                )
            except Exception as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=append, args=(i,)) for i in range(2)]
        with sess.locked():
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 30
            while len(sess.appends) < 2:
                assert time.monotonic() < deadline
                time.sleep(0.001)
        for thread in threads:
            thread.join(30)
        won = [o for o in outcomes if isinstance(o, JournalEvent)]
        lost = [o for o in outcomes if isinstance(o, journal.ContractViolationError)]
        assert len(won) == 1 and len(lost) == 1 and won[0].sequence == 1
        assert store.event_page("a", EventPageRequest(limit=10)).latest_sequence == 1
    finally:
        store.close()


def test_expected_latest_through_the_async_store(tmp_path: Path) -> None:
    import asyncio

    async def run() -> None:
        store = await journal.open_async(tmp_path / "s", durability="os")
        try:
            await store.save(Checkpoint.empty("a"))
            ev = await store.append_event("a", T0, warning_event("x"), expected_latest=0)
            assert ev.sequence == 1
            with pytest.raises(journal.ContractViolationError):
                await store.append_event("a", T0, warning_event("y"), expected_latest=0)
        finally:
            await store.close()

    asyncio.run(run())


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_an_append_interrupted_while_queued_leaves_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal handler raising in a queued caller must not leave its append at the head
    of the queue with nobody to lead it (every later append waited forever)."""
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        sess = store.open_sessions.get("a")
        assert sess is not None
        original = sess.after_commit

        def slow_after_commit() -> None:  # the leader is busy with its batch meanwhile
            time.sleep(0.6)
            original()

        monkeypatch.setattr(sess, "after_commit", slow_after_commit)
        leader = threading.Thread(target=store.append_event, args=("a", T0, warning_event("lead")))
        leader.start()
        deadline = time.monotonic() + 10
        while not sess.appends.front_taken():
            assert time.monotonic() < deadline
            time.sleep(0.005)

        class Interrupted(Exception):
            pass

        def on_alarm(signum: int, frame: Any) -> None:
            raise Interrupted

        previous = signal.signal(signal.SIGALRM, on_alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                store.append_event("a", T0 + 1, warning_event("interrupted"))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        leader.join(10)
        monkeypatch.undo()
        assert len(sess.appends) == 0
        outcome: list[Any] = []
        later = threading.Thread(
            target=lambda: outcome.append(store.append_event("a", T0 + 2, warning_event("later"))),
            daemon=True,
        )
        later.start()
        later.join(10)
        assert not later.is_alive(), "a later append waited for an abandoned one"
        assert outcome[0].sequence == 2
        page = store.event_page("a", EventPageRequest(limit=10))
        assert [e.event.msg["message"] for e in page.events] == ["later", "lead"]
    finally:
        store.close()

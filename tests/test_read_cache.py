"""The read cache: pages read again come from memory, and are the pages the disk holds."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from helpers import T0, execution, warning

# reaches inside: counts the records each read takes from disk, and tests the cache itself
import journal
from journal import (
    Checkpoint,
    Event,
    EventPageRequest,
    ExecutionPageRequest,
    InvalidInputError,
    TranscriptPageRequest,
)
from journal.cache import ReadCache
from journal.log import Log


def _event(n: int, width: int = 200) -> Event:
    return Event(msg={"type": "warning", "message": f"{n:08d}" + "x" * width})


def _count_disk_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many records each read of the log takes from disk."""
    reads: list[int] = []
    # reaches inside: counts the records each read takes from disk
    original = Log._read_spans

    def counting(self: Log, spans: list[tuple[int, int]]) -> Any:
        reads.append(len(spans))
        return original(self, spans)

    monkeypatch.setattr(Log, "_read_spans", counting)
    return reads


def _fill(store: journal.Store, session_id: str, events: int, width: int = 200) -> None:
    store.save(Checkpoint.empty(session_id))
    for n in range(events):
        store.append_event(session_id, T0 + n, _event(n, width))


def _sequences(page: journal.EventPage) -> list[int]:
    return [e.sequence for e in page.events]


def test_a_page_read_again_comes_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        _fill(store, "a", 80)
        reads = _count_disk_reads(monkeypatch)
        request = EventPageRequest(limit=50)
        first = store.event_page("a", request)
        second = store.event_page("a", request)  # read twice lately: admitted
        assert sum(reads) == 100
        third = store.event_page("a", request)
        assert sum(reads) == 100, "the third read touched the disk"
        assert first == second == third
        assert _sequences(third) == list(range(80, 30, -1))
        # One more event: the new one is read from disk, the other 49 from memory.
        store.append_event("a", T0 + 999, _event(999))
        fourth = store.event_page("a", request)
        assert sum(reads) == 101
        assert _sequences(fourth) == list(range(81, 31, -1))
        assert fourth.events[1:] == third.events[:-1]
    finally:
        store.close()


def test_paging_once_through_a_history_caches_nothing(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        _fill(store, "a", 600)
        before: int | None = None
        seen = 0
        while True:
            page = store.event_page("a", EventPageRequest(limit=50, before_sequence=before))
            seen += len(page.events)
            if page.next_before_sequence is None:
                break
            before = page.next_before_sequence
        assert seen == 600
        cache = store.options.read_cache
        assert cache is not None
        assert cache.stats() == (0, 0), "a single pass admitted records"
    finally:
        store.close()


def test_memory_stays_within_the_capacity(tmp_path: Path) -> None:
    capacity = 64 << 10
    store = journal.open(tmp_path / "s", durability="os", read_cache_bytes=capacity)
    try:
        _fill(store, "a", 400, width=900)
        for before in range(400, 0, -40):
            for _ in range(3):
                request = EventPageRequest(limit=40, before_sequence=before + 1)
                assert len(store.event_page("a", request).events) == 40
        cache = store.options.read_cache
        assert cache is not None
        entries, charged = cache.stats()
        assert 0 < charged <= capacity
        assert entries < 400
    finally:
        store.close()


def test_cached_and_uncached_stores_give_the_same_pages(tmp_path: Path) -> None:
    """Random pages of all three journals, each asked three times, against no cache."""
    root = tmp_path / "s"
    cached = journal.open(root, durability="os")
    plain = journal.open(root, durability="os", read_cache_bytes=0)
    assert plain.options.read_cache is None
    rng = random.Random(7)
    try:
        cp = Checkpoint.empty("a")
        for seq in range(1, 60):
            cp = Checkpoint.empty("a")
            cp.sequence = seq
            cp.context = [{"role": "user", "content": f"turn {i}"} for i in range(seq)]
            events = [warning(f"e{seq}.{k}", T0 + seq) for k in range(rng.randrange(4))]
            turn = execution("a", seq) if seq % 3 else None
            cached.save_with_events(cp, cp.context[-1:], turn, events)
        for _ in range(120):
            before = rng.choice([None, rng.randrange(1, 200)])
            limit = rng.randrange(1, 30)
            method = rng.choice(["event_page", "transcript_page", "execution_page"])
            if method == "event_page":
                request: Any = EventPageRequest(limit=limit, before_sequence=before)
            elif method == "transcript_page":
                request = TranscriptPageRequest(max_batches=limit, before_sequence=before)
            else:
                request = ExecutionPageRequest(limit=limit, before_sequence=before)
            expected = getattr(plain, method)("a", request)
            for _ in range(3):
                assert getattr(cached, method)("a", request) == expected
        assert cached.options.read_cache is not None
        assert cached.options.read_cache.stats()[0] > 0
    finally:
        cached.close()
        plain.close()


def test_a_session_recreated_elsewhere_is_not_served_from_memory(tmp_path: Path) -> None:
    """Deleted and created again by another store (process) at the same positions."""
    root = tmp_path / "s"
    reader = journal.open(root, durability="os")
    writer = journal.open(root, durability="os")
    try:
        _fill(writer, "a", 30)
        request = EventPageRequest(limit=20)
        for _ in range(3):
            old = reader.event_page("a", request)
        assert old.events[0].event.msg["message"].startswith("00000029")
        assert writer.delete_sessions(["a"])
        writer.save(Checkpoint.empty("a"))
        for n in range(30):  # same sizes, so the same log positions
            writer.append_event("a", T0 + n, _event(n + 50_000_000))
        new = reader.event_page("a", request)
        assert [e.event.msg["message"][:8] for e in new.events] == [
            f"{n + 50_000_000:08d}" for n in range(29, 9, -1)
        ]
    finally:
        reader.close()
        writer.close()


def test_another_writers_appends_show_up_under_a_warm_cache(tmp_path: Path) -> None:
    root = tmp_path / "s"
    reader = journal.open(root, durability="os")
    writer = journal.open(root, durability="os")
    try:
        _fill(writer, "a", 40)
        request = EventPageRequest(limit=10)
        for _ in range(3):
            assert _sequences(reader.event_page("a", request)) == list(range(40, 30, -1))
        for n in range(5):
            writer.append_event("a", T0 + 100 + n, _event(100 + n))
        assert _sequences(reader.event_page("a", request)) == list(range(45, 35, -1))
    finally:
        reader.close()
        writer.close()


def test_reads_after_our_own_commits_scan_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read after this store's own commit knows where the log ends (no rescan);
    one after another writer's commit still scans and sees it."""
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    other = journal.open(root, durability="os")
    try:
        _fill(store, "a", 3)
        request = EventPageRequest(limit=10)
        store.event_page("a", request)
        scans: list[int] = []
        original = Log.committed

        def counting(self: Log, start: int, *args: Any, **kwargs: Any) -> Any:
            scans.append(start)
            return original(self, start, *args, **kwargs)

        monkeypatch.setattr(Log, "committed", counting)
        for n in range(3, 8):  # single appends, a batch of them, and a save
            store.append_event("a", T0 + n, _event(n))
            assert _sequences(store.event_page("a", request))[0] == n + 1
        cp = Checkpoint.empty("a")
        cp.sequence = 1
        store.save_with_events(cp, [{"t": 1}], None, [])
        assert store.load("a") == cp
        assert scans == [], "a read after our own commit scanned the log again"
        other.append_event("a", T0 + 99, _event(99))
        assert _sequences(store.event_page("a", request))[0] == 9
        assert scans, "another writer's commit must be picked up by a scan"
    finally:
        store.close()
        other.close()


def test_recent_executions_read_again_match_an_uncached_store(tmp_path: Path) -> None:
    root = tmp_path / "s"
    cached = journal.open(root, durability="os")
    plain = journal.open(root, durability="os", read_cache_bytes=0)
    try:
        for i in range(30):
            sid = f"s{i:02d}"
            cp = Checkpoint.empty(sid)
            cp.sequence = 1
            cached.save_with_events(cp, [], execution(sid, 1 + i), [])
        expected = plain.recent_executions(20)
        assert [r.session_id for r in expected] == [f"s{i:02d}" for i in range(29, 9, -1)]
        for _ in range(3):
            assert cached.recent_executions(20) == expected
    finally:
        cached.close()
        plain.close()


def test_read_cache_bytes_must_not_be_negative(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="read_cache_bytes"):
        journal.open(tmp_path / "s", read_cache_bytes=-1)
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------- the cache itself


def test_admission_needs_a_second_read() -> None:
    cache = ReadCache(1 << 20)
    key = ReadCache.key(cache.new_space(), 4096)
    cache.offer(key, "record", 100)
    assert cache.get(key) is None
    cache.offer(key, "record", 100)
    assert cache.get(key) == "record"


def test_spaces_never_repeat_and_keep_positions_apart() -> None:
    cache = ReadCache(1 << 20)
    a, b = cache.new_space(), cache.new_space()
    assert a != b
    for _ in range(2):
        cache.offer(ReadCache.key(a, 64), "from a", 10)
    assert cache.get(ReadCache.key(b, 64)) is None


def test_eviction_gives_used_entries_a_second_chance() -> None:
    cache = ReadCache(10 * (1000 + 200))
    space = cache.new_space()
    keys = [ReadCache.key(space, i) for i in range(12)]
    for key in keys[:10]:
        cache.offer(key, key, 1000)
        cache.offer(key, key, 1000)
    assert cache.stats()[0] == 10
    assert cache.get(keys[0]) == keys[0]  # used: survives the next eviction
    for key in keys[10:]:
        cache.offer(key, key, 1000)
        cache.offer(key, key, 1000)
    assert cache.get(keys[0]) == keys[0]
    assert cache.get(keys[1]) is None  # the oldest unused went first
    entries, charged = cache.stats()
    assert entries == 10 and charged <= cache.capacity


def test_a_record_too_large_for_the_cache_is_not_admitted() -> None:
    cache = ReadCache(64 << 10)
    key = ReadCache.key(cache.new_space(), 0)
    for _ in range(3):
        cache.offer(key, "big", 16 << 10)
    assert cache.get(key) is None
    assert cache.stats() == (0, 0)

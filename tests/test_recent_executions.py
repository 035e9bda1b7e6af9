"""`recent_executions` reads copies of execution records kept in the catalog log.

The copies are derived data: these tests check that the answer comes from them
(no session is opened), that they survive a reopen through the catalog snapshot,
and that a damaged, stale or missing copy falls back to the session's own log
without changing the answer.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
from helpers import execution, fold

# reaches inside: the execution copies in the catalog log are what it checks and damages
import journal
from journal import Checkpoint, ExecutionStats, Store
from journal.catalogrecords import OP_EXECUTION, CatalogRecord, decode_record_payload
from journal.log import KIND_CATALOG, Log
from journal.record import HEADER_SIZE
from journal.scan import ScanState

SESSIONS = 30


def _fill(root: Path, sessions: int = SESSIONS, turns: int = 2) -> list[tuple[str, int]]:
    """Each session saves `turns` checkpoints with one execution record each."""
    store = journal.open(root, durability="os")
    keys = []
    n = 0
    for i in range(sessions):
        sid = f"s{i}"
        cp = Checkpoint.empty(sid)
        stats = ExecutionStats()
        for seq in range(turns):
            rec = execution(sid, n, started=1_700_000_000_000 + ((n * 7919) % 1000) * 1000 + n)
            n += 1
            stats = fold(stats, rec)
            cp.sequence = seq
            cp.execution_stats = stats
            store.save(cp, [], rec)
            keys.append((sid, seq))
    store.close()
    return keys


def _expected(root: Path, limit: int) -> list[tuple[str, str, int]]:
    """The answer computed the slow way: every execution of every session, sorted."""
    store = journal.open(root, read_only=True)
    try:
        rows = []
        page = store.list_sessions_page(journal.SessionPageRequest(limit=10_000))
        for summary in page.sessions:
            got = store.execution_page(
                summary.session_id, journal.ExecutionPageRequest(limit=10_000)
            )
            rows.extend((r.started_at_ms, r.session_id, r.turn_id) for r in got.executions)
        rows.sort(reverse=True)
        return [(sid, turn, started) for started, sid, turn in rows[:limit]]
    finally:
        store.close()


def _answer(store: Store, limit: int) -> list[tuple[str, str, int]]:
    return [(r.session_id, r.turn_id, r.started_at_ms) for r in store.recent_executions(limit)]


def _count_session_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    original = Store._read  # reaches inside: counts the sessions a call reads

    def counting(self, session_id, fn, absent):  # type: ignore[no-untyped-def]
        opened.append(session_id)
        return original(self, session_id, fn, absent)

    monkeypatch.setattr(Store, "_read", counting)
    return opened


def test_answer_comes_from_the_catalog_without_opening_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    _fill(root)
    expected = _expected(root, 25)
    opened = _count_session_reads(monkeypatch)
    store = journal.open(root)
    try:
        assert _answer(store, 25) == expected
        assert opened == [], f"opened sessions {opened[:5]}..."
        # a new save is visible at once, also from its copy
        cp = store.load("s3")
        assert cp is not None
        rec = execution("s3", 999, started=1_800_000_000_000)
        cp.sequence += 1
        cp.execution_stats = fold(cp.execution_stats, rec)
        store.save(cp, [], rec)
        assert _answer(store, 1) == [("s3", "turn-999", 1_800_000_000_000)]
        assert "s3" not in opened[1:]  # load opened it once; the answer did not
    finally:
        store.close()


def test_copies_survive_a_reopen_through_the_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    _fill(root, sessions=150, turns=5)
    with journal.open(root) as store:
        store.catalog.rewrite_base()  # what the background job does past the bound
    assert (root / "catalog" / "base").exists()
    expected = _expected(root, 50)
    opened = _count_session_reads(monkeypatch)
    store = journal.open(root, read_only=True)
    try:
        # reaches inside: whether the open read the base is the catalog's own
        assert store.catalog.base_meta.sessions == 150, "the base was not used"
        assert store.catalog.delta_size() == 0
        assert _answer(store, 50) == expected
        assert opened == []
    finally:
        store.close()


def _copy_spans(store: Store) -> dict[tuple[str, int], tuple[int, int]]:
    keys, _ = store.catalog.recent_execution_keys(1 << 20)
    return {(sid, seq): span for (_, sid, seq), span in keys if span is not None}


def test_damaged_copy_falls_back_to_the_session_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    _fill(root, sessions=6)
    expected = _expected(root, 12)
    store = journal.open(root)
    try:
        spans = _copy_spans(store)
        assert len(spans) == 12
        # flip one byte inside the payload of the newest execution's copy, on disk
        newest_sid, _, _ = expected[0]
        seq = max(s for (sid, s) in spans if sid == newest_sid)
        pos, size = spans[(newest_sid, seq)]
        log = store.catalog.log
        assert log is not None
        _, seg = log.segment_for(pos)
        offset = 32 + pos - seg.base + HEADER_SIZE + size // 2 - HEADER_SIZE // 2
        with open(seg.path, "r+b") as f:
            f.seek(offset)
            byte = f.read(1)
            f.seek(offset)
            f.write(bytes([byte[0] ^ 0xFF]))
        opened = _count_session_reads(monkeypatch)
        assert _answer(store, 12) == expected
        assert opened == [newest_sid], opened
    finally:
        store.close()


def test_copy_of_another_key_is_not_trusted(tmp_path: Path) -> None:
    """A remembered position that holds a different record (a stale cache) is not used."""
    root = tmp_path / "s"
    _fill(root, sessions=4)
    expected = _expected(root, 8)
    store = journal.open(root)
    try:
        # reaches inside: the delta's remembered positions of the copies
        delta = store.catalog.view.delta
        keys = sorted(_copy_spans(store))
        (sa, qa), (sb, qb) = keys[0], keys[1]
        a, b = delta[sa], delta[sb]
        assert a is not None and b is not None
        # swap two remembered positions: each now points at the other key's copy
        a.where[qa], b.where[qb] = b.where[qb], a.where[qa]
        assert _answer(store, 8) == expected
    finally:
        store.close()


def test_deleted_and_recreated_session_drops_old_copies(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill(root, sessions=3)
    store = journal.open(root)
    try:
        assert store.delete_sessions(["s1"])
        assert not any(sid == "s1" for sid, _ in _copy_spans(store))
        cp = Checkpoint.empty("s1")
        rec = execution("s1", 500, started=1_600_000_000_000)
        cp.execution_stats = fold(ExecutionStats(), rec)
        store.save(cp, [], rec)
        got = [r for r in store.recent_executions(100) if r.session_id == "s1"]
        assert [r.turn_id for r in got] == ["turn-500"]
    finally:
        store.close()
    assert _answer(journal.open(root, read_only=True), 100) == _expected(root, 100)


def test_catalog_records_of_a_save_are_upsert_then_copy(tmp_path: Path) -> None:
    """The on-disk shape FORMAT.md describes: op 1 with the key, then op 4 with the body."""
    root = tmp_path / "s"
    _fill(root, sessions=1, turns=1)

    log_dir = os.path.join(root, "catalog", "log")
    log = Log(log_dir, KIND_CATALOG, segment_bytes=1 << 20, label="catalog")
    try:
        records: list[CatalogRecord] = []
        for commit in log.committed(0, ScanState(), strict=True):
            records.extend(decode_record_payload(r.payload) for r in commit)
    finally:
        log.close()
    ops = [(r.op, r.session_id, r.execution) for r in records]
    assert ops[-2][0] == 1 and ops[-1][0] == OP_EXECUTION
    assert ops[-2][2] == ops[-1][2] is not None and ops[-1][2][0] == 0
    copy = msgspec.msgpack.decode(records[-1].record, type=journal.ExecutionRecord)
    assert (copy.session_id, copy.turn_id, copy.started_at_ms) == ("s0", "turn-0", ops[-1][2][1])

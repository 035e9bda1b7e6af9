"""A session deleted and created again under the same id is a new session everywhere.

Found by review: a Store that had the old session open wrote into the new one from
a stale position (or into the deleted file), and catalog records of a save could land
after the delete's, listing a deleted session (and its executions) forever.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers import execution, fold

import journal
from journal import Checkpoint, ExecutionStats, SessionPageRequest
from journal.store import Store
from journal.tree import Tree
from journal.upkeep import Upkeep
from journal.verify import verify_store


def _cp(sid: str, seq: int, note: str) -> Checkpoint:
    cp = Checkpoint.empty(sid)
    cp.sequence = seq
    cp.metadata = {"note": note}
    return cp


@pytest.mark.parametrize("trash_emptied", [True, False])
def test_a_store_holding_the_old_session_writes_to_the_new_one(
    tmp_path: Path, trash_emptied: bool
) -> None:
    root = tmp_path / "s"
    a = journal.open(root)
    a.save(_cp("s", 0, "a0"))
    a.save(_cp("s", 1, "a1"))  # a holds an open writer on the first incarnation
    b = journal.open(root)
    if not trash_emptied:
        b.tree.empty_trash_soon = lambda: None  # type: ignore[method-assign]
    assert b.delete_sessions(["s"])
    c = journal.open(root)
    c.save(_cp("s", 0, "c0"))  # same id, a new session
    # a sees the new session, not its cached one
    loaded = a.load("s")
    assert loaded is not None and loaded.metadata == {"note": "c0"}
    a.save(_cp("s", 5, "a5"))  # advances the new session's sequence: accepted
    with pytest.raises(journal.ContractViolationError):
        c.save(_cp("s", 1, "c1"))  # 1 does not advance past 5
    for store in (a, b, c):
        store.close()
    fresh = journal.open(root, read_only=True)
    try:
        loaded = fresh.load("s")
        assert loaded is not None and loaded.metadata == {"note": "a5"}
        assert [fresh.checkpoint_at("s", n) is not None for n in (0, 1, 5)] == [True, False, True]
    finally:
        fresh.close()
    assert [f for _, found in verify_store(str(root)) for f in found] == []


def _with_execution(store: Store, sid: str, n: int) -> None:
    cp = Checkpoint.empty(sid)
    rec = execution(sid, n)
    cp.execution_stats = fold(ExecutionStats(), rec)
    store.save(cp, [], rec)


def test_recent_executions_skips_a_session_under_a_delete_intent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    a = journal.open(root)
    _with_execution(a, "keep", 1)
    _with_execution(a, "doomed", 2)
    assert {r.session_id for r in a.recent_executions(10)} == {"keep", "doomed"}
    reached, gate = threading.Event(), threading.Event()
    original = Tree.carry_out

    def paused(self, path, intent, **kwargs):  # type: ignore[no-untyped-def]
        reached.set()
        gate.wait(10)
        return original(self, path, intent, **kwargs)

    monkeypatch.setattr(Tree, "carry_out", paused)
    deleter = journal.open(root)
    thread = threading.Thread(target=lambda: deleter.delete_sessions(["doomed"]))
    thread.start()
    try:
        assert reached.wait(10)
        assert a.load("doomed") is None  # past the delete's commit point
        assert [r.session_id for r in a.recent_executions(10)] == ["keep"]
    finally:
        gate.set()
        thread.join()
        deleter.close()
        a.close()


def test_a_saves_catalog_record_cannot_land_after_a_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    a = journal.open(root, durability="os")
    _with_execution(a, "s", 0)
    gate, reached = threading.Event(), threading.Event()
    original = Upkeep.catalog_upsert

    def slow(self, sess, *args):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "saver":
            reached.set()
            gate.wait(10)
        return original(self, sess, *args)

    monkeypatch.setattr(Upkeep, "catalog_upsert", slow)
    cp = a.load("s")
    assert cp is not None
    rec = execution("s", 1)
    cp.sequence = 1
    cp.execution_stats = fold(cp.execution_stats, rec)
    saver = threading.Thread(target=lambda: a.save(cp, [], rec), name="saver")
    saver.start()
    assert reached.wait(10)  # committed; its catalog record not yet written
    d = journal.open(root, durability="os")
    deleted: list[bool] = []
    deleter = threading.Thread(target=lambda: deleted.append(d.delete_sessions(["s"])))
    deleter.start()
    deleter.join(1.0)  # the delete must wait for the save to finish publishing
    gate.set()
    saver.join()
    deleter.join()
    d.close()
    a.close()
    assert deleted == [True]
    fresh = journal.open(root, durability="os")
    try:
        assert fresh.load("s") is None
        assert fresh.list_sessions_page(SessionPageRequest(limit=10)).sessions == []
        assert fresh.recent_executions(10) == []
    finally:
        fresh.close()

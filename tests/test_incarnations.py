"""A session deleted and created again under the same id is a new session everywhere.

A store that had the old session open sees the new one and writes into it (never
into the deleted file, nor from the old one's position); a save's catalog records
never land after the delete's (which would list a deleted session, and its
executions, for good). A save of an id whose delete is still under way (between the
delete's renames and the retiring of its intent) waits for that delete, then
creates the id anew: the delete's catalog records cannot unlist it, nor a
roll-forward after the deleter's death move it, acknowledged save and all, to the
trash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers import execution, fold, listed_ids

# reaches inside: pauses a delete and a save at the steps that race
import journal
from journal import Checkpoint, ExecutionStats, SessionPageRequest, Store
from journal.inspect import verify_store
from journal.tree import Tree
from journal.upkeep import Upkeep


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


# --- an id saved while its delete is under way ------------------------------------------

# reaches inside: the deleter pauses inside its delete, after the renames are synced
_SLOW_DELETER = textwrap.dedent(
    """
    import sys, time, journal
    import journal.fsio as fsio
    root, flag = sys.argv[1], sys.argv[2]
    real = fsio.sync_all
    def sync_all(*a, dirs=(), **k):
        real(*a, dirs=dirs, **k)
        if any(str(d).endswith("trash") for d in dirs):  # carry_out: renames synced
            open(flag, "w").close()      # intent still there (catalog append next)
            time.sleep(float(sys.argv[3]))  # e.g. waiting for the catalog lock
    fsio.sync_all = sync_all
    s = journal.open(root)
    print(s.delete_sessions(["x"]), flush=True)
    s.close()
    """
)


def _deleting_x(root: Path, flag: Path, pause: float) -> subprocess.Popen[str]:
    """Another process deleting "x", once it is between its renames and the retiring
    of its intent (where it pauses `pause` seconds, as if waiting for the catalog's
    lock); it prints what `delete_sessions` returned."""
    d = subprocess.Popen(
        [sys.executable, "-c", _SLOW_DELETER, str(root), str(flag), str(pause)],
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not flag.exists():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return d


def test_an_id_saved_during_its_delete_is_listed_after_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("x", owner_id="o"))
    d = _deleting_x(root, tmp_path / "flag", pause=1)
    with journal.open(root) as c:
        c.save(Checkpoint.empty("x", owner_id="o"))  # returns: x (new) exists
        print("right after its own save, load(x) =", c.load("x"))  # None: under the intent
    out, _ = d.communicate(30)
    assert out.strip() == "True"
    with journal.open(root) as s:
        present = s.load("x") is not None
        listed = listed_ids(s)
    print(f"after: load(x) present={present}; listed={listed}")
    assert not present or "x" in listed, "x exists but is not listed"


def test_an_id_saved_during_its_delete_survives_a_roll_forward(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("x", owner_id="o"))
    d = _deleting_x(root, tmp_path / "flag", pause=30)
    c = journal.open(root)
    cp = Checkpoint.empty("x", owner_id="o")
    cp.metadata = {"acknowledged": True}
    outcome: list[object] = []
    saver = threading.Thread(target=lambda: outcome.append(c.save(cp)))
    saver.start()  # waits for the delete of the old "x" to be done
    saver.join(0.5)
    assert saver.is_alive(), "a save of an id under a delete must wait for the delete"
    os.kill(d.pid, signal.SIGKILL)  # the deleter dies before retiring its intent
    d.wait(10)
    saver.join(30)
    assert outcome == [None]  # the orphan finished, then the save went through
    c.close()
    with journal.open(root) as s:
        got = s.load("x")
    print(f"after roll-forward: load(x) = {None if got is None else got.metadata}")
    assert got is not None, "an acknowledged save was deleted by the orphan's roll-forward"

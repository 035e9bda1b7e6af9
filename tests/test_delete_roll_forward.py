"""A delete whose process died after its intent was durable is rolled forward by the
next process that opens the store or deletes: again, idempotently, when it died after
the delete's catalog records; without losing those records when the finishing
process cannot write the catalog at that moment (the names stay in the dead
deleter's registration until its delete is finished, and in the finishing process's
own); without it and a listing that re-derives missing catalog entries waiting on
each other; and never by a read-only store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path

from faults import save_whose_catalog_append_fails
from helpers import listed_ids, lock_held_elsewhere

import journal
from journal import Checkpoint

# reaches inside: the kill must land between two given steps of a delete
_DELETE_AND_DIE = textwrap.dedent(
    """
    import importlib, os, sys, journal
    root, where, when, *ids = sys.argv[1:]
    module, owner, name = where.rsplit(".", 2)
    cls = getattr(importlib.import_module(module), owner)
    real = getattr(cls, name)
    def dying(self, *args, **kwargs):
        if when == "after":
            real(self, *args, **kwargs)
        os._exit(9)
    setattr(cls, name, dying)
    journal.open(root).delete_sessions(ids)
    """
)


def _delete_and_die(root: Path, ids: list[str], where: str, when: str) -> int:
    """Delete `ids` in another process that dies (exit 9, as a kill leaves it) on
    entering `where` (module.Class.method), or on leaving it (`when` "after"); its
    exit code. Dying before `journal.tree.Tree.carry_out` leaves the intent durable
    and no session renamed."""
    args = [sys.executable, "-c", _DELETE_AND_DIE, str(root), where, when, *ids]
    return subprocess.run(args).returncode


# --- a listing and the finishing of a dead process's delete -----------------------------
# The hooks below only pause threads at fixed points to force the interleaving; they
# take no locks.


def _stacks(threads: list[threading.Thread]) -> str:
    frames = sys._current_frames()
    out = []
    for t in threads:
        f = frames.get(t.ident or -1)
        if f is not None:
            out.append(f"--- {t.name}\n" + "".join(traceback.format_stack(f)[-6:]))
    return "\n".join(out)


def test_a_listing_and_a_delete_finishing_an_orphan_do_not_deadlock(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("x", owner_id="o"))
    store.save(Checkpoint.empty("a", owner_id="o"))

    # x's catalog append fails once: x is kept for later (re-derived by the next listing).
    x1 = Checkpoint.empty("x", owner_id="o")
    x1.sequence = 1
    save_whose_catalog_append_fails(store, x1)
    assert store.upkeep.unannounced()

    a_at, a_go = threading.Event(), threading.Event()
    b_at, b_go = threading.Event(), threading.Event()
    real_session = store.open_sessions.get
    real_forget = store.upkeep.catalog_forget

    def session_hook(sid: str, **kw):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "A-listing" and sid == "x" and not a_at.is_set():
            a_at.set()
            a_go.wait(20)
        return real_session(sid, **kw)

    def forget_hook(ids):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "B-delete" and not b_at.is_set():
            b_at.set()
            b_go.wait(20)
        return real_forget(ids)

    store.open_sessions.get = session_hook  # type: ignore[method-assign]
    store.upkeep.catalog_forget = forget_hook  # type: ignore[method-assign]

    a = threading.Thread(
        target=lambda: store.list_sessions_page(journal.SessionPageRequest(limit=10)),
        name="A-listing",
        daemon=True,
    )
    a.start()
    assert a_at.wait(10)  # A is inside Upkeep.reconcile, before open_sessions.get("x")

    # Meanwhile another process starts deleting x and dies with its intent durable.
    t0 = time.monotonic()
    rc = _delete_and_die(root, ["x"], "journal.tree.Tree.carry_out", "before")
    print("orphan-maker took", time.monotonic() - t0)
    assert rc == 9
    assert list((root / "txn").glob("delete-*")), "no orphaned intent left"

    b = threading.Thread(target=lambda: store.delete_sessions(["a"]), name="B-delete", daemon=True)
    b.start()
    assert b_at.wait(10)  # B holds the tree lock, rolling the orphan forward
    a_go.set()  # A: x is pending, an orphan exists -> tree.locked() -> waits for B
    time.sleep(0.5)
    b_go.set()  # B: finishes the orphan -> reconcile_dead -> announce_again -> waits for A
    a.join(8)
    b.join(0.1)
    stuck = [t for t in (a, b) if t.is_alive()]
    assert not stuck, "deadlock (both threads blocked forever):\n" + _stacks(stuck)
    store.close()


def test_a_read_only_store_leaves_a_dead_process_delete_alone(tmp_path: Path) -> None:
    """A read-only store treats the sessions of a dead process's delete as absent and
    rolls nothing forward (it did rename them to the trash); a writable open then
    finishes the delete."""
    root = tmp_path / "s"
    with journal.open(root) as store:
        store.save(Checkpoint.empty("x", owner_id="o"))
    rc = _delete_and_die(root, ["x"], "journal.tree.Tree.carry_out", "before")
    assert rc == 9
    intents = sorted(p.name for p in (root / "txn").glob("delete-*"))
    assert intents
    sessions = sorted(p.name for p in (root / "sessions").iterdir())
    reader = journal.open(root, read_only=True)
    try:
        assert reader.load("x") is None
        assert reader.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions == []
    finally:
        reader.close()
    assert sorted(p.name for p in (root / "txn").glob("delete-*")) == intents
    assert sorted(p.name for p in (root / "sessions").iterdir()) == sessions
    with journal.open(root) as writer:
        assert writer.load("x") is None
    assert not list((root / "txn").glob("delete-*"))
    assert not list((root / "sessions").iterdir())


# --- the catalog records of a dead process's delete -------------------------------------


def test_an_orphan_delete_record_that_failed_is_made_good_later(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("x", owner_id="o"))
        s.save(Checkpoint.empty("y", owner_id="o"))
    live = journal.open(root)  # a long-lived reader/writer
    assert _delete_and_die(root, ["x"], "journal.tree.Tree.carry_out", "before") == 9
    dead_files = os.listdir(root / "procs")
    assert dead_files, "the deleter's registration"
    live.upkeep._last_reconcile = 0.0  # reaches inside: probe dead processes now
    assert listed_ids(live) == {"y"}  # x is under the intent: hidden
    print("procs/ after the live listing:", os.listdir(root / "procs"), "was", dead_files)
    with lock_held_elsewhere(root / "catalog" / "LOCK"):
        q = journal.open(root, lock_timeout=0.3)  # rolls the orphan forward
        assert not list((root / "txn").glob("delete-*"))  # the delete is complete
        print("q unannounced:", q.upkeep.unannounced())
        q.close()
    live.close()
    with journal.open(root) as r:
        assert r.load("x") is None
        listed = listed_ids(r)
    assert listed == {"y"}, f"a deleted session is listed for good: {listed}"


def test_kill_after_catalog_delete_before_unlink(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("p", owner_id="o"))
        s.fork("p", 0, Checkpoint.empty("kid", owner_id="o"))
        s.save(Checkpoint.empty("z", owner_id="o"))
    assert _delete_and_die(root, ["p"], "journal.upkeep.Upkeep.catalog_forget", "after") == 9
    assert list((root / "txn").glob("delete-*"))
    with journal.open(root) as s:
        assert not list((root / "txn").glob("delete-*"))
        ids = {
            x.session_id for x in s.list_sessions_page(journal.SessionPageRequest(limit=9)).sessions
        }
        assert ids == {"z"} and s.child_sessions("p") == []
        assert s.load("p") is None and s.load("kid") is None
        s.save(Checkpoint.empty("p", owner_id="o"))  # the id can be created again
    with journal.open(root) as s:
        ids = {
            x.session_id for x in s.list_sessions_page(journal.SessionPageRequest(limit=9)).sessions
        }
        assert ids == {"z", "p"}

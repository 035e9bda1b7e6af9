"""A listing re-deriving missing catalog entries and a delete finishing a dead
process's delete do not wait on each other (found by review: a lock of the
re-derivation and the tree lock, taken in opposite orders, hung both threads).
The hooks below only pause threads at fixed points to force the interleaving;
they take no locks.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path

from faults import save_whose_catalog_append_fails

import journal
from journal import Checkpoint

_DIE_AFTER_INTENT = textwrap.dedent(
    """
    import os, sys, journal
    import journal.tree as jt
    def carry_out(self, path, intent, **kw):
        os._exit(9)          # killed after the intent is durable, before any rename
    jt.Tree.carry_out = carry_out
    s = journal.open(sys.argv[1])
    s.delete_sessions(["x"])
    """
)


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

    def session_hook(sid: str):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "A-listing" and sid == "x" and not a_at.is_set():
            a_at.set()
            a_go.wait(20)
        return real_session(sid)

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
    rc = subprocess.run([sys.executable, "-c", _DIE_AFTER_INTENT, str(root)]).returncode
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
    rc = subprocess.run([sys.executable, "-c", _DIE_AFTER_INTENT, str(root)]).returncode
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

"""The catalog records of a dead process's delete, rolled forward by a process
that cannot write the catalog at that moment, are not lost: the names stay in
the dead deleter's registration until its delete is finished, and in the
finishing process's own (found by review: the deleted session stayed listed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import listed_ids, lock_held_elsewhere

import journal
from journal import Checkpoint

_DIE_AFTER_INTENT = textwrap.dedent(
    """
    import os, sys, journal
    import journal.tree as jt
    def carry_out(self, path, intent, **kw):
        os._exit(9)
    jt.Tree.carry_out = carry_out
    s = journal.open(sys.argv[1])
    s.delete_sessions(["x"])
    """
)


def test_an_orphan_delete_record_that_failed_is_made_good_later(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("x", owner_id="o"))
        s.save(Checkpoint.empty("y", owner_id="o"))
    live = journal.open(root)  # a long-lived reader/writer
    assert subprocess.run([sys.executable, "-c", _DIE_AFTER_INTENT, str(root)]).returncode == 9
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

"""SIGKILL between a delete's catalog records and the retiring of its intent: the
next open rolls the delete forward again (idempotent) and the tree and catalog
agree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import journal
from journal import Checkpoint

_KILL = textwrap.dedent(
    """
    import os, sys, journal
    import journal.upkeep as ju
    real = ju.Upkeep.catalog_forget
    def forget(self, ids):
        real(self, ids)
        os._exit(9)  # OP_DELETE appended, intent not yet unlinked
    ju.Upkeep.catalog_forget = forget
    s = journal.open(sys.argv[1])
    s.delete_sessions(["p"])
    """
)


def test_kill_after_catalog_delete_before_unlink(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("p", owner_id="o"))
        s.fork("p", 0, Checkpoint.empty("kid", owner_id="o"))
        s.save(Checkpoint.empty("z", owner_id="o"))
    assert subprocess.run([sys.executable, "-c", _KILL, str(root)]).returncode == 9
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

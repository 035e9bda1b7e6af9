"""A save of an id whose delete is still under way (between the delete's renames
and the retiring of its intent) waits for that delete, then creates the id
anew: the delete's catalog records cannot unlist it, nor a roll-forward after
the deleter's death move it, acknowledged save and all, to the trash (found by
review).
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

from helpers import listed_ids

import journal
from journal import Checkpoint

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


def _wait(flag: Path) -> None:
    deadline = time.monotonic() + 30
    while not flag.exists():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_an_id_saved_during_its_delete_is_listed_after_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("x", owner_id="o"))
    flag = tmp_path / "flag"
    d = subprocess.Popen(
        [sys.executable, "-c", _SLOW_DELETER, str(root), str(flag), "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    _wait(flag)
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
    flag = tmp_path / "flag"
    d = subprocess.Popen(
        [sys.executable, "-c", _SLOW_DELETER, str(root), str(flag), "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    _wait(flag)
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

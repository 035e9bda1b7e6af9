"""After a reboot the catalog is re-checked against the sessions' logs, and a re-check
that cannot settle every session (a lock held elsewhere, a kill part-way) is done
again by the next open: BOOT is recorded only once the re-check is done, and what
it could not settle is kept for later, so the catalog never keeps a commit the log
lost. The power loss is emulated as in test_catalog_truth.py: the disk as before the
save of x@1, with the catalog as that save left it (the catalog ahead of x's log).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from faults import catalog_outlived_a_save
from helpers import listed_sequences, lock_held_elsewhere

# reaches inside: the machine's boot id is what tells a reboot
import journal
import journal.registry as jc
from journal import Checkpoint
from journal.inspect import dir_name


def _power_loss_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # reaches inside: the machine's boot id is what tells a reboot

    monkeypatch.setattr(jc, "boot_id", lambda: "before-the-power-loss")
    root = tmp_path / "s"
    with journal.open(root) as store:
        store.save(Checkpoint.empty("x", owner_id="o"))
    x1 = Checkpoint.empty("x", owner_id="o")
    x1.sequence = 1
    catalog_outlived_a_save(root, tmp_path, lambda s: s.save(x1))
    monkeypatch.setattr(jc, "boot_id", lambda: "after-the-reboot")
    return root


def test_control_without_interference_the_reboot_recheck_resets_x(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _power_loss_root(tmp_path, monkeypatch)
    with journal.open(root) as store:
        assert store.load("x").sequence == 0  # type: ignore[union-attr]
        assert listed_sequences(store) == {"x": 0}


def test_an_unsettled_boot_recheck_is_done_again_by_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _power_loss_root(tmp_path, monkeypatch)
    # Another process holds x's writer lock across this process's life (longer
    # than lock_timeout): the reset of x's entry cannot be written now.
    lock = root / "sessions" / dir_name("x") / "LOCK"
    with lock_held_elsewhere(lock):
        store = journal.open(root, lock_timeout=0.3)
        assert not store.upkeep.catalog_opened  # the re-check waits for the catalog's use
        listed_sequences(store)
        assert dir_name("x") in store.upkeep.unannounced()  # kept for later (in memory)
        store.close()
        print("procs/ after close:", os.listdir(root / "procs"))
    # The lock is free again; a later open (same boot) should settle x.
    with journal.open(root) as store:
        assert store.load("x").sequence == 0  # type: ignore[union-attr]
        listed = listed_sequences(store)
    assert listed == {"x": 0}, f"catalog still ahead of x's log after reopen: {listed}"


# reaches inside: the child dies inside the re-check, after BOOT is recorded
_KILLED_DURING_RECHECK = textwrap.dedent(
    """
    import os, sys, journal
    import journal.registry as jc
    import journal.upkeep as ju
    jc.boot_id = lambda: "after-the-reboot"
    def die(self, names):
        os._exit(9)  # SIGKILL while the re-check runs (after BOOT was recorded)
    ju.Upkeep.reconcile = die
    journal.open(sys.argv[1]).list_sessions_page(journal.SessionPageRequest(limit=1))
    """
)


def test_a_boot_recheck_cut_short_by_a_kill_is_done_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _power_loss_root(tmp_path, monkeypatch)
    rc = subprocess.run([sys.executable, "-c", _KILLED_DURING_RECHECK, str(root)]).returncode
    assert rc == 9
    with journal.open(root) as store:
        assert store.load("x").sequence == 0  # type: ignore[union-attr]
        listed = listed_sequences(store)
    assert listed == {"x": 0}, f"catalog still ahead of x's log after reopen: {listed}"

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


def test_a_process_that_only_writes_leaves_the_recheck_to_the_next_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening re-checks nothing (the catalog waits for its first read): a process
    that only loads and saves after the reboot leaves BOOT as it was, so the
    re-check is not lost, and the first process that lists does it."""
    root = _power_loss_root(tmp_path, monkeypatch)
    boot = root / "catalog" / "BOOT"
    before = boot.read_text()
    with journal.open(root) as store:
        assert store.load("x").sequence == 0  # type: ignore[union-attr]
        store.save(Checkpoint.empty("y", owner_id="o"))  # appends to the catalog
        assert not store.upkeep.unannounced()
    assert boot.read_text() == before  # not recorded: nothing was re-checked
    with journal.open(root) as store:
        assert listed_sequences(store) == {"x": 0, "y": 0}
    assert boot.read_text() != before
    assert "after-the-reboot" in boot.read_text()


def test_the_recheck_of_every_session_keeps_few_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-check runs inside the first listing's call: each session is held only
    while it is derived, so the open-session cache stays at its bound meanwhile
    (pinned for the whole call, 7,000 sessions ran out of descriptors)."""
    monkeypatch.setattr(jc, "boot_id", lambda: "boot-1")
    root = tmp_path / "s"
    with journal.open(root, durability="os") as store:
        for i in range(40):
            store.save(Checkpoint.empty(f"s{i}", owner_id="o"))
    monkeypatch.setattr(jc, "boot_id", lambda: "boot-2")
    import journal.upkeep as ju

    sizes: list[int] = []
    real = ju.Upkeep._rederive_open

    def counting(self, sess):  # type: ignore[no-untyped-def]
        sizes.append(len(self.sessions))
        return real(self, sess)

    monkeypatch.setattr(ju.Upkeep, "_rederive_open", counting)
    with journal.open(root, max_open_sessions=4) as store:
        assert len(listed_sequences(store)) == 40
    assert len(sizes) == 40
    assert max(sizes) <= 5, sizes

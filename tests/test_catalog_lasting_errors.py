"""A session that fails with a lasting OS error (here its identity file replaced by
a directory: EISDIR, standing for EIO on a bad sector or EACCES) is a final answer
for reconciliation, like damage: a reboot re-check still completes (BOOT is
recorded) and no open leaves another procs/ file behind for it (found by review:
one more per process lifetime, each re-read by every later open)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import journal
import journal.upkeep
from journal import Checkpoint
from journal.layout import dir_name


def test_a_lasting_os_error_does_not_keep_the_reboot_recheck_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import journal.catalog as jc

    monkeypatch.setattr(jc, "boot_id", lambda: "boot-1")
    root = tmp_path / "s"
    with journal.open(root) as s:
        for i in range(3):
            s.save(Checkpoint.empty(f"ok{i}", owner_id="o"))
        s.save(Checkpoint.empty("x", owner_id="o"))
    ident = root / "sessions" / dir_name("x") / "SESSION"
    ident.unlink()
    ident.mkdir()  # reading it fails with IsADirectoryError (an OSError), for good
    monkeypatch.setattr(jc, "boot_id", lambda: "boot-2")  # a reboot
    boot_file = root / "catalog" / "BOOT"
    procs, rechecks = [], []
    real = journal.upkeep.Upkeep.reconcile
    for _ in range(6):
        calls: list[int] = []

        def counting(self, names, real=real, calls=calls):  # type: ignore[no-untyped-def]
            calls.append(len(names))
            return real(self, names)

        monkeypatch.setattr(journal.upkeep.Upkeep, "reconcile", counting)
        s = journal.open(root)
        time.sleep(1.05)  # past the 1 s retry window, so close() tries once more
        s.close()
        monkeypatch.setattr(journal.upkeep.Upkeep, "reconcile", real)
        procs.append(len(os.listdir(root / "procs")))
        rechecks.append(max(calls) if calls else 0)
    print("BOOT:", boot_file.read_text(), "procs/ per open:", procs, "largest reconcile:", rechecks)
    assert "boot-2" in boot_file.read_text(), "BOOT never recorded: every open re-checks all"
    assert procs[-1] <= 1, f"procs/ files accumulate, one per open: {procs}"


def test_a_lasting_os_error_does_not_grow_procs_without_a_boot_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no boot id (not Linux) every open re-checks: no reboot needed."""
    import journal.catalog as jc

    monkeypatch.setattr(jc, "boot_id", lambda: "")
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("ok", owner_id="o"))
        s.save(Checkpoint.empty("x", owner_id="o"))
    ident = root / "sessions" / dir_name("x") / "SESSION"
    ident.unlink()
    ident.mkdir()
    procs = []
    for _ in range(5):
        with journal.open(root) as s:
            s.load("ok")
        procs.append(len(os.listdir(root / "procs")))
    print("procs/ per open:", procs)
    assert procs[-1] <= 1, f"procs/ files accumulate, one per open: {procs}"

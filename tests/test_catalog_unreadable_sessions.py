"""A session that cannot be read for a lasting reason (a format version from
elsewhere, damage, a lasting OS error such as EISDIR standing for EIO on a bad
sector or EACCES) is a final answer for reconciliation: a dead process's
registration naming it is reconciled once and forgotten, not kept and re-read at
every open and listing; a reboot re-check around it completes (BOOT is recorded);
and no open leaves another procs/ file behind for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# reaches inside: counts reconciliations; the boot id is what tells a reboot
import journal
import journal.registry as jc
import journal.upkeep
from journal import Checkpoint
from journal.inspect import dir_name

_WRITE_AND_DIE = textwrap.dedent(
    """
    import os, sys, journal
    from journal import Checkpoint
    s = journal.open(sys.argv[1])
    s.save(Checkpoint.empty("x", owner_id="o"))
    s.save(Checkpoint.empty("y", owner_id="o"))
    os._exit(0)   # dies without close: its registration is a dead process's
    """
)


def test_a_dead_registration_naming_an_unreadable_session_is_forgotten(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    journal.open(root).close()
    assert subprocess.run([sys.executable, "-c", _WRITE_AND_DIE, str(root)]).returncode == 0
    assert len(os.listdir(root / "procs")) == 1
    ident = root / "sessions" / dir_name("x") / "SESSION"
    data = bytearray(ident.read_bytes())
    data[8] ^= 0x02  # one flipped bit in the version field (outside the CRC)
    ident.write_bytes(bytes(data))
    for i in range(5):
        store = journal.open(root)
        try:
            unsettled = store.upkeep.reconcile([dir_name("x")])
            listed = [
                s.session_id
                for s in store.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
            ]
            try:
                store.load("x")
            except journal.JournalError as exc:
                err = type(exc).__name__
        finally:
            store.close()
        print(
            f"open {i}: unsettled={sorted(unsettled)} load(x) -> {err}; listed={listed};"
            f" procs={os.listdir(root / 'procs')}"
        )
    assert not os.listdir(root / "procs"), "the dead registration is never forgotten"


def test_without_a_boot_id_an_unreadable_session_is_not_reconciled_at_every_listing(
    tmp_path: Path, monkeypatch: object
) -> None:
    """Where there is no boot id every open re-checks every session; a session
    that cannot be read for a lasting reason is a final answer, not kept for
    re-deriving: listings do not re-run the reconciliation for it each time."""

    root = tmp_path / "s"
    journal.open(root).close()
    assert subprocess.run([sys.executable, "-c", _WRITE_AND_DIE, str(root)]).returncode == 0
    ident = root / "sessions" / dir_name("x") / "SESSION"
    data = bytearray(ident.read_bytes())
    data[8] ^= 0x02
    ident.write_bytes(bytes(data))
    monkeypatch.setattr(jc, "boot_id", lambda: "")  # type: ignore[attr-defined]
    counts = []
    for i in range(4):
        store = journal.open(root)
        calls = 0

        def counting(names, real=store.upkeep.reconcile):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            return real(names)

        store.upkeep.reconcile = counting  # type: ignore[method-assign]
        y = Checkpoint.empty("y", owner_id="o")
        y.sequence = i + 1
        store.save(y)
        for _ in range(10):
            store.list_sessions_page(journal.SessionPageRequest(limit=10))
        store.close()
        counts.append(calls)
        print(
            f"process {i}: reconcile calls for 10 listings={calls};"
            f" procs/ files after a clean close={len(os.listdir(root / 'procs'))}"
        )
    assert max(counts) <= 3, f"reconcile runs at every listing: {counts}"


# --- a lasting OS error: the identity file replaced by a directory (EISDIR) ------------


def test_a_lasting_os_error_does_not_keep_the_reboot_recheck_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

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
        s.list_sessions_page(journal.SessionPageRequest(limit=1))  # the re-check runs here
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
            s.list_sessions_page(journal.SessionPageRequest(limit=1))  # the re-check runs
        procs.append(len(os.listdir(root / "procs")))
    print("procs/ per open:", procs)
    assert procs[-1] <= 1, f"procs/ files accumulate, one per open: {procs}"

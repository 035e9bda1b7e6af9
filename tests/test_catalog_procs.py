"""A dead process's registration naming a session that cannot be read for a
lasting reason (a format version from elsewhere, damage) is reconciled once and
forgotten, not kept and re-read at every open and listing (found by review).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import journal
from journal.layout import dir_name

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
    import journal.catalog as jc
    from journal import Checkpoint

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

"""A cache that cannot be written never fails a call that committed (issue 15, fault 1).

Index files are flushed after the commit point, every few hundred entries. A full
disk there must leave the committed appends and saves acknowledged, and every read
right, in this process and in the next.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from helpers import checkpoint, warning

import journal
from journal import fsio
from journal.errors import StorageError

APPENDS = 4500  # past the 4096 pending index entries that make a flush


def test_index_flush_on_a_full_disk_fails_no_committed_call(
    tmp_path: Path, monkeypatch: Any
) -> None:
    root = tmp_path / "store"
    store = journal.open(root, durability="os")
    store.save(checkpoint("s", 0, [{"n": 0}]))
    real = fsio.pwrite
    refused: list[str] = []

    def pwrite(fd: int, data: bytes, offset: int, path: str) -> None:
        if path.endswith(".idx"):
            refused.append(path)
            raise StorageError(f"write failed on {path}: {errno.errorcode[errno.ENOSPC]}")
        real(fd, data, offset, path)

    monkeypatch.setattr(fsio, "pwrite", pwrite)
    sequences = [
        store.append_event("s", n, warning(f"e{n}").event).sequence for n in range(APPENDS)
    ]
    cp = store.load("s")
    assert cp is not None
    cp.sequence = 1
    store.save(cp, [])
    assert refused, "the appends reached an index flush"
    assert sequences == list(range(1, APPENDS + 1))
    assert [e.sequence for e in store.events_after("s", 0, APPENDS)] == sequences
    monkeypatch.setattr(fsio, "pwrite", real)
    store.close()
    again = journal.open(root)
    try:
        assert [e.sequence for e in again.events_after("s", 0, APPENDS)] == sequences
        assert again.load("s").sequence == 1  # type: ignore[union-attr]
    finally:
        again.close()

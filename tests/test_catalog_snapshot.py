"""The catalog snapshot bounds the cost of opening a store, and is only a cache."""

from __future__ import annotations

from pathlib import Path

import journal
from journal import Checkpoint, SessionPageRequest
from journal.catalog import SNAPSHOT_FILE


def _listing(root: Path) -> list[tuple[str, int]]:
    store = journal.open(root)
    try:
        page = store.list_sessions_page(SessionPageRequest(limit=10_000))
        return [(s.session_id, s.sequence) for s in page.sessions]
    finally:
        store.close()


def _fill(root: Path, sessions: int, saves: int) -> None:
    store = journal.open(root, durability="os")
    for i in range(sessions):
        cp = Checkpoint.empty(f"s{i}", owner_id="o")
        cp.metadata = {"pad": "x" * 2000}
        for seq in range(saves):
            cp.sequence = seq
            store.save(cp)
    store.close()


def test_reopen_reads_only_the_catalog_tail(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "s"
    _fill(root, sessions=40, saves=20)
    assert (root / "catalog" / SNAPSHOT_FILE).exists()
    expected = _listing(root)
    applied: list[str] = []
    from journal import catalog

    original = catalog.Catalog._apply

    def counting(self, r, span=None):  # type: ignore[no-untyped-def]
        applied.append(r.session_id)
        return original(self, r, span)

    monkeypatch.setattr(catalog.Catalog, "_apply", counting)
    assert _listing(root) == expected
    assert len(applied) < 40 * 20 // 2, f"replayed {len(applied)} catalog records"


def test_damaged_catalog_snapshot_is_ignored(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill(root, sessions=40, saves=20)
    expected = _listing(root)
    snap = root / "catalog" / SNAPSHOT_FILE
    data = bytearray(snap.read_bytes())
    data[len(data) // 2] ^= 0xFF
    snap.write_bytes(bytes(data))
    assert _listing(root) == expected
    snap.unlink()
    assert _listing(root) == expected

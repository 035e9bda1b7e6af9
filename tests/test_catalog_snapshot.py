"""The catalog snapshot bounds the cost of opening a store, and is only a cache."""

from __future__ import annotations

from pathlib import Path

# reaches inside: the snapshot file, the records an open replays, the locks it takes
import journal
from journal import Checkpoint, SessionPageRequest, catalog
from journal.catalog import SNAPSHOT_FILE
from journal.session import Session


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


def _count_applied(monkeypatch) -> list[str]:  # type: ignore[no-untyped-def]
    """Record the session id of every catalog record applied from now on."""
    # reaches inside: counts the catalog records an open replays

    applied: list[str] = []
    # reaches inside: counts the catalog records an open replays
    original = catalog.Catalog._apply

    def counting(self, r, span=None):  # type: ignore[no-untyped-def]
        applied.append(r.session_id)
        return original(self, r, span)

    monkeypatch.setattr(catalog.Catalog, "_apply", counting)
    return applied


def test_reopen_reads_only_the_catalog_tail(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "s"
    _fill(root, sessions=40, saves=20)
    assert (root / "catalog" / SNAPSHOT_FILE).exists()
    expected = _listing(root)
    applied = _count_applied(monkeypatch)
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


def test_open_after_a_short_tail_snapshots_it(tmp_path: Path, monkeypatch) -> None:
    """A writer that stopped below the snapshot threshold does not make every open replay."""

    root = tmp_path / "s"
    _fill(root, sessions=1, saves=1)
    snap = root / "catalog" / SNAPSHOT_FILE
    size_before = snap.stat().st_size if snap.exists() else 0
    # A writer that never snapshots, not even when it closes (as if it had died)
    monkeypatch.setattr(catalog, "SNAPSHOT_MIN_GROWTH", 1 << 30)
    monkeypatch.setattr(catalog.Catalog, "_snapshot_worth_it", lambda self: False)
    store = journal.open(root, durability="os")
    for i in range(60):
        cp = Checkpoint.empty(f"t{i}", owner_id="o")
        for seq in range(10):
            cp.sequence = seq
            store.save(cp)
    store.close()
    assert (snap.stat().st_size if snap.exists() else 0) == size_before
    monkeypatch.undo()
    expected = _listing(root)  # this open replays the tail, then snapshots it
    assert snap.exists() and snap.stat().st_size > size_before
    applied = _count_applied(monkeypatch)
    assert _listing(root) == expected
    assert applied == [], f"replayed {len(applied)} catalog records after the snapshot"


def test_a_clean_close_leaves_nothing_to_replay(tmp_path: Path, monkeypatch) -> None:
    """A writer that stops below the writers' snapshot threshold snapshots as it closes."""
    root = tmp_path / "s"
    _fill(root, sessions=1, saves=1)
    snap = root / "catalog" / SNAPSHOT_FILE
    size_before = snap.stat().st_size if snap.exists() else 0
    store = journal.open(root, durability="os")
    for i in range(30):  # a few KiB of catalog records: far below the 32 KiB threshold
        store.save(Checkpoint.empty(f"t{i}", owner_id="o"))
    store.close()
    assert snap.exists() and snap.stat().st_size > size_before
    applied = _count_applied(monkeypatch)
    listing = _listing(root)
    assert applied == [], f"replayed {len(applied)} catalog records after a clean close"
    assert len(listing) == 31


def test_close_after_reads_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    """Closing a store that only read: no writer lock, no recovery scan, no cache write."""
    # reaches inside: counts the sessions that take their writer lock

    root = tmp_path / "s"
    _fill(root, sessions=3, saves=5)
    store = journal.open(root)
    entered: list[str] = []
    original = Session.writing

    def counting(self):  # type: ignore[no-untyped-def]
        entered.append(self.id)
        return original(self)

    monkeypatch.setattr(Session, "writing", counting)
    for i in range(3):
        assert store.load(f"s{i}") is not None
    store.close()
    assert entered == []
    # a session whose caches are behind (written by this store) is still flushed
    store = journal.open(root)
    cp = store.load("s0")
    assert cp is not None
    cp.sequence += 1
    monkeypatch.setattr(Session, "writing", original)
    store.save(cp)
    monkeypatch.setattr(Session, "writing", counting)
    store.close()
    assert entered == ["s0"]


def test_a_writer_follows_a_catalog_that_another_process_set_aside(tmp_path: Path) -> None:
    """A damaged catalog is renamed to catalog.broken.* and rebuilt by another store;
    a live writer must append to the new catalog, not keep writing the old file."""
    root = tmp_path / "s"
    writer = journal.open(root, durability="os")
    try:
        writer.save(Checkpoint.empty("s1", owner_id="o"))
        (root / "catalog").rename(root / "catalog.broken.test")  # what upkeep.open_catalog does
        other = journal.open(root, durability="os")  # rebuilds the catalog from sessions/
        other.close()
        writer.save(Checkpoint.empty("s2", owner_id="o"))
        writer.save(Checkpoint.empty("s3", owner_id="o"))
        assert sorted(sid for sid, _ in _listing(root)) == ["s1", "s2", "s3"]
        # and it locks the new catalog's LOCK, which other writers use, not the old one
        assert writer.catalog.flock.is_at_path()
    finally:
        writer.close()

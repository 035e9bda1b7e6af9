"""The catalog's paged base: opening reads what an answer needs, never the whole
catalog; the base is only a cache of the catalog log, checked before it is used."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
from helpers import execution

# reaches inside: the base's file, its block size and bounds, the records an open
# replays, the locks it takes
import journal
import journal.catalog as jc
import journal.catalogbase as jcb
from journal import Checkpoint, SessionPageRequest, catalog
from journal.catalogrecords import T_DIRS, T_EXECS, T_ORDER, TABLES, sort_key
from journal.session import Session

TESTS = Path(__file__).resolve().parent


def _pages(store: journal.Store, owner: str | None = None, limit: int = 7) -> list[tuple]:
    out: list[tuple] = []
    cursor = None
    while True:
        page = store.list_sessions_page(
            SessionPageRequest(limit=limit, cursor=cursor, owner_id=owner)
        )
        out.extend((s.session_id, s.sequence, s.parent_session_id) for s in page.sessions)
        cursor = page.next_cursor
        if cursor is None:
            return out


def _listing(root: Path, owner: str | None = None) -> list[tuple]:
    store = journal.open(root)
    try:
        return _pages(store, owner)
    finally:
        store.close()


def _count_applied(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the session id of every catalog record applied from now on."""
    applied: list[str] = []
    original = catalog.Catalog._apply

    def counting(self, r, span=None):  # type: ignore[no-untyped-def]
        applied.append(r.session_id)
        return original(self, r, span)

    monkeypatch.setattr(catalog.Catalog, "_apply", counting)
    return applied


def _fill(root: Path, sessions: int, saves: int = 1, *, owners: int = 3) -> None:
    store = journal.open(root, durability="os")
    for i in range(sessions):
        cp = Checkpoint.empty(f"s{i:04d}", owner_id=f"o{i % owners}")
        cp.metadata = {"pad": "x" * 200}
        for seq in range(saves):
            cp.sequence = seq
            store.save(cp, [], execution(f"s{i:04d}", seq, started=1_700_000_000_000 + i))
    store.close()


def _rewrite(root: Path) -> None:
    with journal.open(root, durability="os") as store:
        store.catalog.rewrite_base()


def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jcb, "BLOCK_BYTES", 512)  # many blocks per table
    monkeypatch.setattr(jcb, "INDEX_FANOUT", 3)  # and many index pages


def test_opening_a_store_reads_no_catalog(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill(root, 20)
    with journal.open(root) as store:
        assert store.load("s0003") is not None
        store.event_page("s0003", journal.EventPageRequest(limit=5))
        assert not store.upkeep.catalog_opened
        assert len(_pages(store)) == 20
        assert store.upkeep.catalog_opened


def test_pages_across_many_blocks_match_a_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Updates, forks and deletes over a base of many blocks: every page, by owner
    and overall, is what the sessions say, before and after each rewrite and reopen."""
    _small_blocks(monkeypatch)
    root = tmp_path / "s"
    _fill(root, 120)
    _rewrite(root)
    rng = random.Random(5)
    store = journal.open(root, durability="os")
    try:
        for rnd in range(4):
            ids = [s for s, _, _ in _pages(store)]
            for sid in rng.sample(ids, 15):
                cp = store.load(sid)
                assert cp is not None
                cp.sequence += 1
                store.save(cp)
            assert store.delete_sessions(rng.sample(ids, 5))
            parent = rng.choice([s for s, _, _ in _pages(store)])
            store.fork(parent, 0, Checkpoint.empty(f"kid{rnd}", owner_id="o1"))
            truth = {}
            for sid, _, _ in _pages(store, limit=1000):
                summary = store.session_summary(sid)
                assert summary is not None
                truth[sid] = summary
            order = sorted(truth.values(), key=sort_key, reverse=True)
            want = [(s.session_id, s.sequence, s.parent_session_id) for s in order]
            for st in (store,):
                assert _pages(st) == want
                for owner in ("o0", "o1", "o2", "nobody"):
                    mine = [
                        w
                        for w, s in zip(want, order, strict=True)
                        if s.session_context.owner_id == owner
                    ]
                    assert _pages(st, owner) == mine
                assert {s.session_id for s in st.child_sessions(parent)} >= {f"kid{rnd}"}
            assert store.catalog.delta_size() > 0
            if rnd % 2:
                store.catalog.rewrite_base()
                assert store.catalog.delta_size() == 0
                assert _pages(store) == want
            assert _listing(root) == want  # another process, from the base and the tail
    finally:
        store.close()


def test_reopen_replays_only_the_tail_after_the_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    _fill(root, sessions=40, saves=5)
    _rewrite(root)
    store = journal.open(root, durability="os")
    for i in range(3):
        store.save(Checkpoint.empty(f"t{i}", owner_id="o"))
    store.close()
    expected = _listing(root)
    applied = _count_applied(monkeypatch)
    assert _listing(root) == expected
    assert sorted(set(applied)) == ["t0", "t1", "t2"], applied


def test_a_damaged_block_is_never_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flipped byte in a block is found by its checksum when a page reaches it:
    the catalog drops the base and answers from the log, then writes a new one."""
    _small_blocks(monkeypatch)
    root = tmp_path / "s"
    _fill(root, 80)
    _rewrite(root)
    expected = _listing(root)
    base = root / "catalog" / "base"
    opened = jcb.Base(str(base))
    entry, key, _, _ = TABLES[T_ORDER]
    table = opened.table(T_ORDER, entry, key)
    assert table.blocks > 4
    offset, length, _ = table.span(table.blocks // 2)  # a block in the middle
    opened.close()
    data = bytearray(base.read_bytes())
    data[offset + length // 2] ^= 0xFF
    base.write_bytes(bytes(data))
    with journal.open(root, durability="os") as store:
        assert _pages(store, "o2") == [e for e in expected if int(e[0][1:]) % 3 == 2]
        assert store.catalog.base_meta.sessions == 80  # that table is whole
        assert _pages(store) == expected  # reaches the damaged block
        assert store.catalog.base_meta.sessions == 0  # dropped, not served
        assert not base.exists()
        store.catalog.rewrite_base()
        assert store.catalog.base_meta.sessions == 80
    assert _listing(root) == expected


def test_a_read_only_store_answers_around_a_damaged_index(tmp_path: Path) -> None:
    """A read-only store leaves the damaged base in place, and never reads it again."""
    root = tmp_path / "s"
    _fill(root, 30)
    _rewrite(root)
    expected = _listing(root)
    base = root / "catalog" / "base"
    opened = jcb.Base(str(base))
    info = next(t for t in opened.directory.tables if t.table == T_ORDER)
    opened.close()
    data = bytearray(base.read_bytes())
    data[info.offset + 1] ^= 0xFF  # the order table's top index
    base.write_bytes(bytes(data))
    with journal.open(root, read_only=True) as store:
        for _ in range(3):
            assert _pages(store) == expected
        assert store.catalog.base_meta.sessions == 0
    assert base.read_bytes() == bytes(data)


def test_a_rewrite_over_a_damaged_base_starts_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_blocks(monkeypatch)
    root = tmp_path / "s"
    _fill(root, 40)
    _rewrite(root)
    expected = _listing(root)
    base = root / "catalog" / "base"
    opened = jcb.Base(str(base))
    entry, key, _, _ = TABLES[T_EXECS]
    offset, _, _ = opened.table(T_EXECS, entry, key).span(1)
    opened.close()
    data = bytearray(base.read_bytes())
    data[offset + 3] ^= 0xFF
    base.write_bytes(bytes(data))
    with journal.open(root, durability="os") as store:
        store.save(Checkpoint.empty("new", owner_id="o0"))
        store.catalog.rewrite_base()  # the merge reads every table: finds the damage
        assert store.catalog.base_meta.sessions == 41
        assert store.catalog.delta_size() == 0
    assert sorted(_listing(root)) == sorted([("new", 0, None), *expected])


@pytest.mark.parametrize("where", ["footer", "directory", "header", "truncated", "empty"])
def test_a_damaged_base_is_ignored_at_open(tmp_path: Path, where: str) -> None:
    root = tmp_path / "s"
    _fill(root, 30)
    _rewrite(root)
    expected = _listing(root)
    base = root / "catalog" / "base"
    data = bytearray(base.read_bytes())
    if where == "footer":
        data[-3] ^= 0xFF
    elif where == "directory":
        data[-30] ^= 0xFF
    elif where == "header":
        data[9] ^= 0xFF  # the version
    elif where == "truncated":
        data = data[: len(data) // 2]
    else:
        data = bytearray()
    base.write_bytes(bytes(data))
    with journal.open(root) as store:
        assert _pages(store) == expected
        assert store.catalog.base_meta.sessions == 0  # not used
        assert store.catalog.delta_size() == 30


def test_a_base_of_another_log_is_not_used(tmp_path: Path) -> None:
    """A base copied beside another catalog log fails the anchor check."""
    a, b = tmp_path / "a", tmp_path / "b"
    _fill(a, 10)
    _rewrite(a)
    _fill(b, 4)
    expected = _listing(b)
    (b / "catalog" / "base").write_bytes((a / "catalog" / "base").read_bytes())
    with journal.open(b) as store:
        assert _pages(store) == expected
        assert store.catalog.base_meta.sessions == 0


def test_an_old_whole_catalog_snapshot_is_ignored_and_removed(tmp_path: Path) -> None:
    """Stores written before the base have `catalog/snapshot`: it is not read (the log
    is), and the first base rewrite removes it; no upgrade step."""
    root = tmp_path / "s"
    _fill(root, 12)
    expected = _listing(root)
    from journal.metafile import KIND_CATALOG_SNAPSHOT, write_meta

    snap = root / "catalog" / "snapshot"
    bogus = msgspec.msgpack.encode([10**9, 0, 0, []])  # says: nothing is listed
    write_meta(str(snap), KIND_CATALOG_SNAPSHOT, bogus, durable=False)
    assert _listing(root) == expected
    _rewrite(root)
    assert not snap.exists()
    assert _listing(root) == expected


def test_the_base_is_rewritten_in_the_background_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jc, "DELTA_SESSIONS", 8)
    monkeypatch.setattr(jc, "ADOPT_EVERY", 0.0)
    root = tmp_path / "s"
    base = root / "catalog" / "base"
    with journal.open(root, durability="os") as store:
        for i in range(20):
            store.save(Checkpoint.empty(f"s{i}", owner_id="o"))
        deadline = time.monotonic() + 60
        while store.catalog.base_meta.sessions == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            store.catalog.refresh()
        assert base.exists()
        assert store.catalog.base_meta.sessions >= 8
        assert store.catalog.delta_size() < 20
        assert len(_pages(store)) == 20


def test_another_process_adopts_a_newer_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jc, "DELTA_SESSIONS", 8)
    monkeypatch.setattr(jc, "ADOPT_EVERY", 0.0)
    root = tmp_path / "s"
    reader = journal.open(root, read_only=False)
    monkeypatch.setattr(reader.jobs, "request", lambda task: None)  # it never rewrites
    writer = journal.open(root, durability="os")
    try:
        assert _pages(reader) == []
        for i in range(30):
            writer.save(Checkpoint.empty(f"s{i}", owner_id="o"))
        writer.catalog.rewrite_base()
        assert reader.catalog.base_meta.sessions == 0
        assert len(_pages(reader)) == 30  # past the bound: it looks for a newer base
        assert reader.catalog.base_meta.sessions == 30
        assert reader.catalog.delta_size() == 0
        # Bases left behind are closed: many rewrites and adoptions hold no more files
        # (counted once the writer's own background rewrite, if one runs, is done).
        writer.jobs.wait()
        fds = _base_files_open()
        for round in range(6):
            for i in range(10):
                writer.save(Checkpoint.empty(f"r{round}-{i}", owner_id="o"))
            writer.catalog.rewrite_base()
            assert len(_pages(reader, limit=100)) == 40 + 10 * round
            assert reader.catalog.delta_size() == 0
        writer.jobs.wait()
        assert _base_files_open() <= fds
    finally:
        writer.close()
        reader.close()


def _base_files_open() -> int:
    """How many of this process's descriptors are base files (renamed-over ones too)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if "base" in os.path.basename(os.readlink(f"/proc/self/fd/{fd}")):
                count += 1
    return count


_KILLED_IN_REWRITE = textwrap.dedent(
    """
    import os, sys, journal
    import journal.catalogbase as jcb
    real = jcb.BaseWriter.table
    def table(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if len(self._tables) == 3:
            print("ready", flush=True)
            os.kill(os.getpid(), 9)  # kill -9 in the middle of writing the base
    jcb.BaseWriter.table = table
    jcb.WRITE_BYTES = 1  # every table on disk before the kill
    store = journal.open(sys.argv[1], durability="os")
    for i in range(10):
        store.save(journal.Checkpoint.empty(f"late{i}", owner_id="o"))
    store.catalog.rewrite_base()
    """
)


def test_a_kill_during_a_base_rewrite_leaves_a_usable_catalog(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill(root, 25)
    _rewrite(root)
    before = (root / "catalog" / "base").read_bytes()
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_IN_REWRITE, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "ready" in proc.stdout
    temps = [n for n in os.listdir(root / "catalog") if n.startswith(".base.tmp.")]
    assert temps, "the kill came before the temporary base was written"
    assert (root / "catalog" / "base").read_bytes() == before  # the old base, whole
    listing = _listing(root)
    assert len(listing) == 35
    assert {f"late{i}" for i in range(10)} <= {sid for sid, _, _ in listing}
    # An abandoned temporary base is removed by a later rewrite once it is old.
    old = time.time() - 2 * jc.BASE_TMP_MAX_AGE
    for name in temps:
        os.utime(root / "catalog" / name, (old, old))
    _rewrite(root)
    assert not [n for n in os.listdir(root / "catalog") if n.startswith(".base.tmp.")]
    assert _listing(root) == listing


def test_close_after_reads_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing a store that only read: no writer lock, no recovery scan, no cache write."""
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
        assert store.load(f"s{i:04d}") is not None
    store.close()
    assert entered == []
    # a session whose caches are behind (written by this store) is still flushed
    store = journal.open(root)
    cp = store.load("s0000")
    assert cp is not None
    cp.sequence += 1
    monkeypatch.setattr(Session, "writing", original)
    store.save(cp)
    monkeypatch.setattr(Session, "writing", counting)
    store.close()
    assert entered == ["s0000"]


def test_a_writer_follows_a_catalog_that_another_process_set_aside(tmp_path: Path) -> None:
    """A damaged catalog is renamed to catalog.broken.* and rebuilt by another store;
    a live writer must append to the new catalog, not keep writing the old file."""
    root = tmp_path / "s"
    writer = journal.open(root, durability="os")
    try:
        writer.save(Checkpoint.empty("s1", owner_id="o"))
        writer.catalog.rewrite_base()
        (root / "catalog").rename(root / "catalog.broken.test")  # what upkeep.open_catalog does
        other = journal.open(root, durability="os")  # makes a new catalog
        other.close()
        writer.save(Checkpoint.empty("s2", owner_id="o"))
        writer.save(Checkpoint.empty("s3", owner_id="o"))
        assert sorted(sid for sid, _, _ in _listing(root)) == ["s1", "s2", "s3"]
        # and it locks the new catalog's LOCK, which other writers use, not the old one
        assert writer.catalog.flock.is_at_path()
        assert writer.catalog.base_meta.sessions == 0  # the old base is not the new log's
    finally:
        writer.close()


def test_unlisted_names_by_lookup_and_by_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few names are looked up one by one, many by one scan of the name table:
    both answers are the names no listed session has."""
    _small_blocks(monkeypatch)
    root = tmp_path / "s"
    _fill(root, 60)
    _rewrite(root)
    with journal.open(root, durability="os") as store:
        names = sorted(os.listdir(root / "sessions"))
        store.save(Checkpoint.empty("fresh", owner_id="o"))  # in the delta
        assert store.delete_sessions(["s0007"])  # a tombstone over its base entries
        gone = next(n for n in names if n.startswith("s0007-"))
        table = store.catalog.view.table(T_DIRS)
        assert table is not None and table.blocks > 4
        few = [names[3], gone, "zz-stray"]
        assert store.catalog.unlisted(few) == {gone, "zz-stray"}
        many = [*names, "aa-stray", "zz-stray"]
        assert len(many) > table.blocks
        assert store.catalog.unlisted(many) == {gone, "aa-stray", "zz-stray"}

"""A clean close gives back the preallocated zeros at the end of the newest segment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# reaches inside: measures the zeros after the data; counts catch-up scans; fails a truncate
import journal
from journal import Checkpoint, Event, EventPageRequest, fsio
from journal.segment import SEGMENT_HEADER_SIZE
from journal.session import Session


def _newest_segment(store_root: Path, session_dir: str) -> Path:
    segs = sorted((Path(session_dir) / "log").glob("*.seg"))
    return segs[-1]


def _count_scans(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Record every catch-up scan of a session log from now on."""
    # reaches inside: counts the catch-up scans of a session log

    scans: list[int] = []
    # reaches inside: counts the catch-up scans of a session log
    original = Session._catch_up

    def counting(self, **kw):  # type: ignore[no-untyped-def]
        scans.append(1)
        return original(self, **kw)

    monkeypatch.setattr(Session, "_catch_up", counting)
    return scans


def _event(n: int) -> Event:
    return Event(msg={"type": "warning", "message": f"event {n}"})


def test_close_trims_to_the_data_and_writing_continues(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("a"))
    for n in range(20):
        store.append_event("a", 1_700_000_000_000 + n, _event(n))
    session_dir = store.session_dir("a")
    seg = _newest_segment(root, session_dir)
    assert seg.stat().st_size >= 64 << 10, "writers preallocate"
    store.close()
    size = seg.stat().st_size
    assert size < 4096, f"{size} bytes left after close"
    data = seg.read_bytes()
    assert data[-1:] != b"\0" or data[SEGMENT_HEADER_SIZE:].rstrip(b"\0") != b""
    # reopen: everything there, and the next writer preallocates again
    store = journal.open(root)
    try:
        page = store.event_page("a", EventPageRequest(limit=100))
        assert [e.sequence for e in page.events] == list(range(20, 0, -1))
        store.append_event("a", 1_700_000_001_000, _event(99))
        assert seg.stat().st_size > size
        assert store.event_page("a", EventPageRequest(limit=1)).events[0].sequence == 21
    finally:
        store.close()
    assert seg.stat().st_size < 4096
    # the catalog is trimmed too
    catalog_segs = sorted((root / "catalog" / "log").glob("*.seg"))
    assert catalog_segs[-1].stat().st_size < 8192


def test_closing_one_of_two_writers_keeps_the_others_commits(tmp_path: Path) -> None:
    """Another store appended after ours: a trim at our close cuts only zeros."""
    root = tmp_path / "s"
    first = journal.open(root)
    second = journal.open(root)
    try:
        first.save(Checkpoint.empty("a"))
        first.append_event("a", 1, _event(1))
        second.append_event("a", 2, _event(2))  # second writes after first
        first.close()  # catches up under the lock before it trims (or leaves it)
        page = second.event_page("a", EventPageRequest(limit=10))
        assert [e.sequence for e in page.events] == [2, 1]
        second.append_event("a", 3, _event(3))  # its preallocation end is stale now
        second.append_event("a", 4, _event(4))
    finally:
        second.close()
    store = journal.open(root, read_only=True)
    try:
        page = store.event_page("a", EventPageRequest(limit=10))
        assert [e.sequence for e in page.events] == [4, 3, 2, 1]
        seg = _newest_segment(root, store.session_dir("a"))
    finally:
        store.close()
    assert os.path.getsize(seg) < 4096
    from journal.inspect import verify_store

    findings = [f for _, found in verify_store(str(root)) for f in found]
    assert findings == []


def test_appends_stay_on_the_fast_path_after_the_segments_are_listed_again(
    tmp_path: Path, monkeypatch
) -> None:
    """A re-listing of the log directory must not send every later write to a full scan."""
    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, _event(1))
        sess = store.open_sessions.peek("a")
        assert sess is not None
        sess.log.list_segments()  # what a scan does when it reaches the end of a segment
        store.append_event("a", 2, _event(2))  # may catch up once
        scans = _count_scans(monkeypatch)
        for n in range(3, 13):
            store.append_event("a", n, _event(n))
        assert scans == [], f"{len(scans)} catch-up scans for 10 appends"
    finally:
        store.close()


def test_reads_of_a_trimmed_session_take_the_fast_path(tmp_path: Path, monkeypatch) -> None:
    """A segment that ends at its data is as quiet as one ending in zeros."""
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("a"))
    store.append_event("a", 1, _event(1))
    store.close()  # trims
    reader = journal.open(root, read_only=True)
    try:
        assert reader.load("a") is not None
        scans = _count_scans(monkeypatch)
        for _ in range(10):
            assert reader.event_page("a", EventPageRequest(limit=5)).events[0].sequence == 1
        assert scans == []
        # ... and a writer appending to the trimmed file is seen at once
        writer = journal.open(root)
        writer.append_event("a", 2, _event(2))
        assert reader.event_page("a", EventPageRequest(limit=5)).events[0].sequence == 2
        big = Event(msg={"type": "warning", "message": "x" * 1500})
        for n in range(3, 7):
            writer.append_event("a", n, big)
        writer.close()  # trims again, now past 4 KiB of data
        assert reader.event_page("a", EventPageRequest(limit=5)).events[0].sequence == 6
        # ... and one that rolls to a new segment right at the trimmed end
        writer = journal.open(root, segment_bytes=4096)
        writer.append_event("a", 7, _event(7))
        segs = sorted((Path(writer.session_dir("a")) / "log").glob("*.seg"))
        assert len(segs) == 2
        assert reader.event_page("a", EventPageRequest(limit=5)).events[0].sequence == 7
        writer.close()
    finally:
        reader.close()


def test_a_session_deleted_here_is_not_trimmed_on_its_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its files go to the trash: cutting their zeros first was a lock, a check and a
    truncate per open session of the tree, on the delete's time."""
    # reaches inside: fails the truncate of a clean close

    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("a"))
        for n in range(3):
            store.append_event("a", 1_700_000_000_000 + n, _event(n))
        store.spares.wait()
        sess = store.open_sessions.peek("a")
        assert sess is not None
        assert sess.log.has_writer()
        cuts: list[str] = []
        real = fsio.truncate

        def counting(fd: int, size: int, path: str) -> None:
            cuts.append(path)
            real(fd, size, path)

        monkeypatch.setattr(fsio, "truncate", counting)
        assert store.delete_sessions(["a"])
        assert sess.closed and cuts == []
    finally:
        store.close()

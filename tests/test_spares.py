"""Spare session directories: prepared ahead, used by the next new session, never stale."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import exit_code_of_child

# reaches inside: the spare directories' files and sizes are what these tests check
import journal
from journal import Checkpoint, EventPageRequest, jobs, sessiondir, spares
from journal.inspect import verify_store
from journal.layout import IDENTITY_FILE
from journal.segment import SEGMENT_HEADER_SIZE
from journal.session import Session
from journal.sessiondir import SPARE_IDENTITY_BYTES, SPARE_SEGMENT_ZEROS


def _spares_on_disk(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root / "tmp") if n.startswith(spares.SPARE_PREFIX))


@pytest.fixture
def store_with_spares(tmp_path: Path) -> Iterator[tuple[journal.Store, Path]]:
    """A store that created one session and has its spares ready."""
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(Checkpoint.empty("first"))
        store.spares.wait()
        yield store, root
    finally:
        store.close()


def test_a_new_session_takes_the_spare_prepared_after_the_last_one(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(Checkpoint.empty("first"))  # no spare yet: built on the spot
        store.spares.wait()
        ready = _spares_on_disk(root)
        assert len(ready) == store.spares.target
        inodes = {os.stat(root / "tmp" / n).st_ino for n in ready}
        store.save(Checkpoint.empty("second"))
        store.fork("second", 0, Checkpoint.empty("child"))
        used = {os.stat(store.session_dir(sid)).st_ino for sid in ("second", "child")}
        assert used <= inodes, "the new sessions did not use the prepared directories"
        store.spares.wait()
        for sid in ("first", "second", "child"):
            assert store.load(sid) is not None
        store.append_event("second", 1, journal.Event(msg={"type": "warning", "message": "w"}))
        assert store.event_page("second", EventPageRequest(limit=5)).latest_sequence == 1
    finally:
        store.close()
    assert _spares_on_disk(root) == [], "close left spare directories behind"
    store = journal.open(root, read_only=True)
    try:  # published from spares, they read back like any other session
        child = store.session_summary("child")
        assert child is not None and child.parent_session_id == "second"
        assert store.load("second") is not None
    finally:
        store.close()


def test_a_damaged_spare_is_not_used(store_with_spares: tuple[journal.Store, Path]) -> None:
    store, root = store_with_spares
    for name in _spares_on_disk(root):
        shutil.rmtree(root / "tmp" / name / "log")  # as if half removed
    store.save(Checkpoint.empty("second"))
    assert store.load("second") is not None
    assert os.path.isdir(os.path.join(store.session_dir("second"), "log"))


def test_a_spare_with_an_identity_already_is_not_used(
    store_with_spares: tuple[journal.Store, Path],
) -> None:
    """Its identity is written in place, not over something else (no truncation)."""
    store, root = store_with_spares
    for name in _spares_on_disk(root):
        (root / "tmp" / name / IDENTITY_FILE).write_bytes(b"x" * 4096)
        (root / "tmp" / name / "marker").write_bytes(b"")
    store.save(Checkpoint.empty("second"))
    assert store.load("second") is not None
    assert not os.path.exists(os.path.join(store.session_dir("second"), "marker"))


def test_an_old_spare_is_thrown_away(
    store_with_spares: tuple[journal.Store, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older than MAX_AGE it might be removed as garbage by another process's open."""
    store, root = store_with_spares
    old = set(_spares_on_disk(root))
    monkeypatch.setattr(spares, "MAX_AGE", 0.0)
    store.save(Checkpoint.empty("second"))
    assert store.load("second") is not None
    assert not old & set(_spares_on_disk(root)), "an old spare is still there"
    ino = os.stat(store.session_dir("second")).st_ino
    assert ino not in {os.stat(root / "tmp" / n).st_ino for n in _spares_on_disk(root)}


def test_a_spare_holds_no_identity_until_it_is_used(
    store_with_spares: tuple[journal.Store, Path],
) -> None:
    store, root = store_with_spares
    for name in _spares_on_disk(root):
        # laid out at its final size, zero-filled: no identity record in it
        assert not (root / "tmp" / name / IDENTITY_FILE).read_bytes().strip(b"\0")
        assert not (root / "sessions" / name).exists()
    listed = store.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
    assert [s.session_id for s in listed] == ["first"]


def test_the_refiller_thread_exits_when_idle_and_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store dropped without close() must not keep a parked thread forever."""
    monkeypatch.setattr(jobs, "IDLE_EXIT", 0.05)
    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("first"))
        store.spares.wait()
        thread = store.jobs.thread  # this store's (other tests' stores have theirs)
        if thread is not None:  # (None: it has exited already)
            thread.join(30)
            assert not thread.is_alive(), "the idle refiller never exited"
        assert store.jobs.thread is None
        ready = set(_spares_on_disk(tmp_path / "s"))
        store.save(Checkpoint.empty("second"))  # takes a spare, wakes a new refiller
        store.spares.wait()
        assert len(_spares_on_disk(tmp_path / "s")) == store.spares.target
        assert set(_spares_on_disk(tmp_path / "s")) != ready
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_wait_returns_in_a_process_forked_during_a_refill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refiller thread does not exist in a forked child: waiting for it must not hang."""
    import threading
    import time

    started = threading.Event()
    real_build = sessiondir.build_spare

    def slow_build(directory: str) -> None:
        started.set()
        time.sleep(0.5)
        real_build(directory)

    monkeypatch.setattr(sessiondir, "build_spare", slow_build)
    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("first"))  # wakes the refiller
        assert started.wait(30)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            store.spares.wait()
            os._exit(0)
        assert exit_code_of_child(pid, seconds=20, hung="wait() hung in a forked child") == 0
    finally:
        store.close()


@pytest.mark.parametrize("how", ["fork", "first save"])
def test_a_session_from_a_spare_keeps_the_spares_file_sizes(
    store_with_spares: tuple[journal.Store, Path], how: str
) -> None:
    """A spare's identity file and segment are laid out zero-filled at their sizes and
    synced ahead of need: the identity and the first commit overwrite that space, so
    the syncs on the way to publishing persist no new file size. Readers ignore the
    zeros after the identity record and after the commit."""
    store, root = store_with_spares
    if how == "fork":
        store.fork("first", 0, Checkpoint.empty("second"))
    else:
        store.save(Checkpoint.empty("second"))
    directory = Path(store.session_dir("second"))
    segment = directory / "log" / "00000000000000000000.seg"
    assert (directory / IDENTITY_FILE).stat().st_size == SPARE_IDENTITY_BYTES
    assert segment.stat().st_size == SEGMENT_HEADER_SIZE + SPARE_SEGMENT_ZEROS
    assert sessiondir.read_identity(str(directory)).session_id == "second"
    assert store.load("second") == Checkpoint.empty("second")
    store.close()
    assert [f for _, found in verify_store(str(root)) for f in found] == []
    reopened = journal.open(root)
    try:
        assert reopened.load("second") == Checkpoint.empty("second")
        cp = Checkpoint.empty("second")
        cp.sequence = 1
        reopened.save(cp)
        assert reopened.load("second") == cp
    finally:
        reopened.close()


def test_an_identity_longer_than_a_spares_file_is_written_whole(
    store_with_spares: tuple[journal.Store, Path],
) -> None:
    store, _ = store_with_spares
    parent, child = "p" * 4000, "c" * 4000  # an identity record over SPARE_IDENTITY_BYTES
    store.save(Checkpoint.empty(parent))
    store.spares.wait()
    store.fork(parent, 0, Checkpoint.empty(child))
    identity = sessiondir.read_identity(store.session_dir(child))
    assert (identity.session_id, identity.parent_session_id) == (child, parent)
    summary = store.session_summary(child)
    assert summary is not None and summary.parent_session_id == parent


@pytest.mark.parametrize("how", ["first save", "fork"])
def test_a_new_session_is_opened_for_writing_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Its first commit is written through a private object: without the warm-up,
    the next append opened the session, took the lock with all its checks and
    opened the writer on the caller's time (and, without a spare, paid for the
    first preallocation step in its own sync)."""
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        if how == "fork":
            store.save(Checkpoint.empty("parent"))
            store.fork("parent", 0, Checkpoint.empty("new"))
        else:
            store.save(Checkpoint.empty("new"))  # the store's first: no spare
        store.spares.wait()
        sess = store.open_sessions.peek("new")
        assert sess is not None and sess.log.has_writer()
        segment = sess.log.segments[-1].path
        data_end = SEGMENT_HEADER_SIZE + sess.head.covered
        assert os.path.getsize(segment) > data_end  # zeros ready after the data
        opened: list[str] = []
        init = Session.__init__

        def counting(self: Session, directory: str, *args: object, **kwargs: object) -> None:
            opened.append(directory)
            init(self, directory, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Session, "__init__", counting)
        acquisitions = sess.flock.acquisitions
        ev = journal.Event(msg={"type": "warning", "message": "x"})
        assert store.append_event("new", 1_700_000_000_000, ev).sequence == 1
        assert opened == []  # the session was open already
        assert sess.flock.acquisitions == acquisitions + 1
        assert store.event_page("new", EventPageRequest(limit=5)).latest_sequence == 1
    finally:
        store.close()
    # Closed cleanly: reopened, the session and its one event are there.
    with journal.open(root) as again:
        assert again.event_page("new", EventPageRequest(limit=5)).latest_sequence == 1


def test_a_store_closed_right_after_creating_a_session(tmp_path: Path) -> None:
    """The warm-up may still be pending or running: close waits for it, and it
    neither fails nor leaves the session open."""
    root = tmp_path / "s"
    for n in range(5):
        store = journal.open(root)
        store.save(Checkpoint.empty(f"s{n}"))
        store.close()
        assert len(store.open_sessions) == 0
        assert store.jobs.thread is None or not store.jobs.thread.is_alive()
    with journal.open(root) as again:
        assert sorted(
            s.session_id
            for s in again.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
        ) == [f"s{n}" for n in range(5)]


def test_sessions_created_back_to_back_are_all_warmed(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s")
    try:
        for n in range(3):
            store.save(Checkpoint.empty(f"s{n}"))
        store.spares.wait()
        for n in range(3):
            sess = store.open_sessions.peek(f"s{n}")
            assert sess is not None and sess.log.has_writer(), n
    finally:
        store.close()

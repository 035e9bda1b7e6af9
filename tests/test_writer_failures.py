"""Failures in the middle of a write must leave nothing a later call trusts wrongly.

Each test breaks one trust of the writer's fast path: a roll that fails halfway
leaves no writer the next (quiet) commit trusts; an interrupt after planning
leaves no unwritten event in the journal rules; a catalog set aside by another
process is followed from its start; a save that re-creates a deleted id has its
whole context checked; a forked child closing an inherited store keeps its
parent's process registration.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import delta, warning_event

# reaches inside: fails writes at the file-operation seam and watches the writer's segment
import journal
from journal import Checkpoint, Event, EventPageRequest, SessionPageRequest, fsio
from journal import log as log_module
from journal import writes as session_module
from journal.inspect import verify_store


def _appends_until_a_roll(store: journal.Store, sid: str, limit: int = 400) -> int:
    """Append until the next append rolls the log; return how many were appended."""
    store.append_event(sid, 0, warning_event("open the writer"))
    sess = store.open_sessions.peek(sid)
    assert sess is not None
    for n in range(limit):
        # reaches inside: where the writer's segment ends is its own
        w = sess.log._writer
        if w is not None and w.data_end - w.seg.base >= store.options.segment_bytes:
            return n
        store.append_event(sid, n, warning_event("x" * 100))
    raise AssertionError("no roll came")


def test_a_roll_that_fails_after_closing_the_old_segment_leaves_no_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old descriptor is closed before the new segment is opened: a failure in
    between must not leave a writer holding that closed number, which the process
    may reuse for another file (the next quiet roll truncated and synced it)."""
    store = journal.open(tmp_path / "s", durability="os", segment_bytes=4096)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n" * 1000)
    try:
        store.save(Checkpoint.empty("a"))
        before = _appends_until_a_roll(store, "a")
        real = log_module.Log.list_segments
        armed = [True]

        def failing(self: log_module.Log) -> list[log_module.Segment]:
            if armed and armed.pop():
                raise journal.StorageError("cannot list (injected)")
            return real(self)

        monkeypatch.setattr(log_module.Log, "list_segments", failing)
        with pytest.raises(journal.StorageError, match="injected"):
            store.append_event("a", before, warning_event("y" * 100))
        opened = [os.open(victim, os.O_RDWR) for _ in range(8)]  # take freed numbers
        try:
            for n in range(20):
                store.append_event("a", 1000 + n, warning_event("z" * 100))
        finally:
            for fd in opened:
                os.close(fd)
        assert victim.read_bytes() == b"precious\n" * 1000
        page = store.event_page("a", EventPageRequest(limit=5))
        assert page.events[0].event.msg["message"] == "z" * 100
    finally:
        store.close()
    assert [f for _, found in verify_store(str(tmp_path / "s")) for f in found] == []


def test_a_failed_header_write_of_a_new_segment_does_not_block_later_rolls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = journal.open(tmp_path / "s", durability="os", segment_bytes=4096)
    try:
        store.save(Checkpoint.empty("a"))
        _appends_until_a_roll(store, "a")
        real = fsio.ops.pwrite
        armed = [True]

        def failing(fd: int, data: bytes, offset: int, path: str) -> None:
            in_sessions = f"{os.sep}sessions{os.sep}" in path  # not a spare's, in tmp/
            if armed and in_sessions and offset == 0 and path.endswith(".seg") and len(data) < 64:
                armed.pop()
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
            real(fd, data, offset, path)

        monkeypatch.setattr(fsio.ops, "pwrite", failing)
        with pytest.raises(journal.StorageError, match="injected"):
            store.append_event("a", 1, warning_event("y" * 100))
        for n in range(100):  # several more rolls, each one fine
            store.append_event("a", 100 + n, warning_event("z" * 100))
        assert len(os.listdir(Path(store.session_dir("a")) / "log")) > 3
    finally:
        store.close()
    assert [f for _, found in verify_store(str(tmp_path / "s")) for f in found] == []


def test_an_interrupt_after_planning_an_event_leaves_the_rules_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal handler raising after the rules were planned but before the write:
    the unwritten delta must not stay tracked, or its sequence, given to the next
    event, is removed by the step's assistant_message."""
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        assert store.append_event("a", 1, delta("x")).sequence == 1
        real = session_module.frame

        def interrupted(*args: object, **kwargs: object) -> bytes:
            monkeypatch.setattr(session_module, "frame", real)
            raise KeyboardInterrupt

        monkeypatch.setattr(session_module, "frame", interrupted)
        with pytest.raises(KeyboardInterrupt):
            store.append_event("a", 2, delta("never written"))
        assert store.append_event("a", 3, warning_event("keep me")).sequence == 2
        done = Event(msg={"type": "assistant_message", "model_step_id": "s1", "content": "x"})
        store.append_event("a", 4, done)
        page = store.event_page("a", EventPageRequest(limit=10))
        assert [(e.sequence, e.event.msg["type"]) for e in page.events] == [
            (3, "assistant_message"),
            (2, "warning"),
        ]
    finally:
        store.close()


_SET_ASIDE = textwrap.dedent(
    """
    import os, sys, uuid, journal
    root, extra = sys.argv[1], int(sys.argv[2])
    os.rename(os.path.join(root, "catalog"),
              os.path.join(root, "catalog.broken." + uuid.uuid4().hex[:8]))
    store = journal.open(root, durability="os")  # rebuilds the catalog from sessions/
    for i in range(extra):
        store.save(journal.Checkpoint.empty(f"other-{i}"))
    store.close()
    """
)


@pytest.mark.parametrize(("before", "resaves", "extra"), [(30, 20, 0), (5, 30, 10), (5, 0, 40)])
def test_a_writer_follows_a_catalog_set_aside_from_its_start(
    tmp_path: Path, before: int, resaves: int, extra: int
) -> None:
    """The writer had read the old catalog's log further than the new one reaches
    (resaves grow the old log), or not as far (extra saves grow the new one): its
    next entries must be listed by everyone while it runs, and the store verify."""
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    try:
        for i in range(before):
            store.save(Checkpoint.empty(f"pre-{i}"))
        cp = Checkpoint.empty("pre-0")
        for n in range(1, resaves + 1):
            cp.sequence = n
            store.save(cp)
        done = subprocess.run(
            [sys.executable, "-c", _SET_ASIDE, str(root), str(extra)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        for i in range(3):
            store.save(Checkpoint.empty(f"post-{i}"))
        reader = journal.open(root, read_only=True)
        try:
            page = reader.list_sessions_page(SessionPageRequest(limit=1000))
            ids = {s.session_id for s in page.sessions}
        finally:
            reader.close()
    finally:
        store.close()
    assert {f"post-{i}" for i in range(3)} <= ids
    assert len(ids) == before + 3 + extra
    assert [f for _, found in verify_store(str(root)) for f in found] == []


def test_a_save_that_recreates_a_deleted_id_checks_its_whole_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store checks only the context past what it saw stored; when the session
    is deleted before the save takes its lock, the save creates it anew, and the
    prefix it skipped must be checked then (NaN was stored)."""
    store = journal.open(tmp_path / "s", durability="os")
    try:
        cp = Checkpoint.empty("a")
        cp.context = [{"k": 1}]
        store.save(cp)
        bad = Checkpoint.empty("a")
        bad.sequence = 1
        bad.context = [float("nan"), {"k": 2}]
        real = store._save_existing  # reaches inside: the step between lookup and lock
        raced: list[bool] = []

        def racing(*args: object, **kwargs: object) -> object:
            if not raced:
                raced.append(True)
                assert store.delete_sessions(["a"])
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "_save_existing", racing)
        with pytest.raises(journal.InvalidInputError, match="NaN"):
            store.save(bad)
        assert raced and store.load("a") is None
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_closing_an_inherited_store_keeps_the_parents_registration(
    tmp_path: Path,
) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))  # registers this process in procs/
        registration = store.registry.path
        assert os.path.exists(registration)
        pid = os.fork()
        if pid == 0:
            try:
                store.registry.close()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert os.path.exists(registration)
    finally:
        store.close()
    assert not os.path.exists(registration)

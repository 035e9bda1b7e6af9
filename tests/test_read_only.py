"""A read-only store answers every read and writes nothing, even beside a writer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import journal
from journal import Checkpoint, Event, EventPageRequest, SessionPageRequest


def _snapshot_tree(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_read_only_reads_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    writer = journal.open(root)
    cp = Checkpoint.empty("a", owner_id="o")
    writer.save(cp)
    writer.append_event("a", 1, Event(msg={"type": "warning"}))
    writer.spares.wait()  # the writer's spare session directories, prepared in the background
    before = _snapshot_tree(root)
    ro = journal.open(root, read_only=True)
    try:
        assert ro.load("a") == cp
        assert ro.event_page("a", EventPageRequest(limit=5)).latest_sequence == 1
        assert [
            s.session_id for s in ro.list_sessions_page(SessionPageRequest(limit=5)).sessions
        ] == ["a"]
        for call in (
            lambda: ro.save(cp),
            lambda: ro.append_event("a", 2, Event(msg={"type": "warning"})),
            lambda: ro.save_state("a", "k", 1),
            lambda: ro.delete_sessions(["a"]),
            lambda: ro.fork("a", 0, Checkpoint.empty("b", owner_id="o")),
        ):
            with pytest.raises(journal.InvalidInputError, match="read-only"):
                call()
        # the writer goes on; the reader sees its new commits
        writer.append_event("a", 2, Event(msg={"type": "warning"}))
        assert ro.event_page("a", EventPageRequest(limit=5)).latest_sequence == 2
    finally:
        ro.close()
        writer.close()
    after_reader = journal.open(root, read_only=True)
    after_reader.close()
    # the reader created, changed and removed nothing (the writer's own files aside)
    now = _snapshot_tree(root)
    for path, stat in before.items():
        if (
            "/log/" in path
            or path.endswith((".idx", "snapshot", "LOCK"))
            or path.startswith(("catalog", "procs", "tmp/spare-"))
        ):
            continue  # the writer's later commits, cache flushes and spares (closed: removed)
        assert now.get(path) == stat, path
    # and made nothing new outside what the writer writes
    created = {p for p in now if p not in before and not p.startswith(("catalog", "procs"))}
    assert not {p for p in created if "/log/" not in p and not p.endswith((".idx", "snapshot"))}


def test_read_only_on_missing_store_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(journal.NotFoundError):
        journal.open(tmp_path / "nothing", read_only=True)
    assert not (tmp_path / "nothing").exists()

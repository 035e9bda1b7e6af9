"""Answers that must be true under faults: a committed call never reports failure,
a state value survives an os-mode power loss readable, a store notices that its
root was swapped, and every acknowledged state value's directory entry is durable.

Faults are real: ENOSPC raised at the file-operation seam (`journal.fsio.ops`)
for chosen paths, power loss modelled by the lost-write recorder (faults.py), a
root directory moved aside for real.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from faults import recording
from helpers import checkpoint, execution, listed_sequences, warning, warning_event

# reaches inside: faults are injected at the file-operation seam
import journal
from journal import StorageError, fsio
from journal.inspect import dir_name


class _FullFor(fsio.FileOps):
    """The real operations, but writes and renames fail with ENOSPC for paths that
    contain any of `parts` (a disk that is full for those files only)."""

    def __init__(self, parts: tuple[str, ...]) -> None:
        self.parts = parts
        self.refused = 0

    def _full(self, path: str) -> None:
        if any(part in path for part in self.parts):
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    def pwrite(self, fd: int, data: bytes, offset: int, path: str) -> None:
        self._full(path)
        super().pwrite(fd, data, offset, path)

    def replace(self, src: str, dst: str) -> None:
        self._full(src)
        super().replace(src, dst)


def _full_for(monkeypatch: pytest.MonkeyPatch, *parts: str) -> _FullFor:
    ops = _FullFor(parts)
    monkeypatch.setattr(fsio, "ops", ops)
    return ops


# --------------------------------------------------------- 1. committed, reported as failed
def test_save_whose_catalog_cannot_be_written_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under the catalog (its log and its snapshot) never fails a save,
    a save_with_events, a fork or an append whose commit is durable: each returns,
    `load` shows it, and the listing catches up once the catalog can be written."""
    root = tmp_path / "store"
    store = journal.open(root)
    try:
        store.save(checkpoint("s", 0, [{"n": 0}]))
        ops = _full_for(monkeypatch, os.sep + "catalog" + os.sep)
        store.save(checkpoint("s", 1, [{"n": 0}, {"n": 1}]), [{"n": 1}], execution("s", 1))
        events = store.save_with_events(
            checkpoint("s", 2, [{"n": 0}, {"n": 1}, {"n": 2}]),
            events=[warning("w")],
        )
        assert [e.sequence for e in events] == [1]
        appended = store.append_event("s", 1_700_000_000_001, warning("x").event)
        assert appended.sequence == 2
        child = store.fork("s", 2, checkpoint("kid", 0, [{"n": 0}]))
        store.save(checkpoint("new", 0, []))  # a first save (a new session) too
        assert ops.refused >= 1, "the fault never fired: this tests nothing"
        loaded = store.load("s")
        assert loaded is not None and loaded.sequence == 2
        assert child.session_id == "kid" and store.load("kid") is not None
        # The retry a caller would make after a false failure is refused: none needed.
        with pytest.raises(journal.ContractViolationError):
            store.save(checkpoint("s", 2, [{"n": 0}]))
        monkeypatch.setattr(fsio, "ops", fsio.FileOps())
        assert listed_sequences(store) == {"s": 2, "kid": 0, "new": 0}
    finally:
        monkeypatch.setattr(fsio, "ops", fsio.FileOps())
        store.close()
    with journal.open(root) as again:
        assert listed_sequences(again) == {"s": 2, "kid": 0, "new": 0}


def test_save_whose_catalog_base_cannot_be_written_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC on `catalog/.base.tmp…` alone (the catalog log takes the record):
    the save returns, and the catalog lists it at once."""
    root = tmp_path / "store"
    with journal.open(root) as store:
        store.save(checkpoint("s", 0, []))
        ops = _full_for(monkeypatch, os.path.join("catalog", ".base.tmp."))
        for seq in range(1, 4):
            store.save(checkpoint("s", seq, []))
            store.catalog.rewrite_base()  # what the background job runs
        assert ops.refused >= 3
        loaded = store.load("s")
        assert loaded is not None and loaded.sequence == 3
        assert listed_sequences(store) == {"s": 3}
        monkeypatch.setattr(fsio, "ops", fsio.FileOps())
    with journal.open(root) as again:
        assert listed_sequences(again) == {"s": 3}


def test_save_whose_session_snapshot_cannot_be_written_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's own snapshot is a cache too: ENOSPC writing it fails no save."""
    root = tmp_path / "store"
    with journal.open(root) as store:
        store.save(checkpoint("s", 0, []))
        sess = store.open_sessions.get("s")
        assert sess is not None
        monkeypatch.setattr(sess.options, "snapshot_bytes", 1)
        ops = _full_for(monkeypatch, os.sep + "snapshot.tmp")
        for seq in range(1, 4):
            store.save(checkpoint("s", seq, [{"n": n, "pad": "x" * 64} for n in range(seq)]))
        assert ops.refused >= 1
        monkeypatch.setattr(fsio, "ops", fsio.FileOps())
    with journal.open(root) as again:
        loaded = again.load("s")
        assert loaded is not None and loaded.sequence == 3


# Index files are flushed after the commit point, every few hundred entries: a full disk
# there leaves the committed appends and saves acknowledged, and every read right, in
# this process and in the next.
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


# ------------------------------------------------ 2. os mode never makes a value unreadable
def test_os_mode_overwrite_of_a_durable_state_value_survives_power_loss(tmp_path: Path) -> None:
    """A value saved durably, then overwritten in os mode: a power loss after the
    rename reached the disk (its directory entry) but before the data did leaves
    the old or the new value, never an unreadable file."""
    root = str(tmp_path / "store")
    with recording(root) as recorder:
        with journal.open(root) as store:
            store.save_state("scope", "key", {"v": 1})
        with journal.open(root, durability="os") as store:
            store.save_state("scope", "key", {"v": 2})
            store.save_state("scope", "other", {"v": 3})
            images = []
            for n, live in enumerate((True, False)):
                dest = str(tmp_path / f"image{n}")
                recorder.crash_image(dest, live_dirs=live)
                images.append(dest)
    for dest in images:
        with journal.open(dest) as store:
            assert store.load_state("scope", "key") in ({"v": 1}, {"v": 2})
            assert store.load_state("scope", "other") in (None, {"v": 3})


# -------------------------------------------------------------- 3. acknowledged into nothing
def test_state_into_a_swapped_root_is_refused(tmp_path: Path) -> None:
    """The store's root moved aside and an empty directory put at its path: a
    save_state that would create directories there refuses with StorageError, and
    creates nothing in either directory."""
    root = tmp_path / "store"
    aside = tmp_path / "aside"
    store = journal.open(root)
    try:
        store.save_state("known", "k", 1)
        store.save(checkpoint("s", 0, []))
        store.spares.wait()  # its background work done: nothing builds in tmp/ now
        os.rename(root, aside)
        root.mkdir()
        for scope in ("new-scope", "known"):
            with pytest.raises(journal.StorageError, match="no longer the directory"):
                store.save_state(scope, "k", 2)
        assert os.listdir(root) == []
        assert not (aside / "state" / dir_name("new-scope")).exists()
        with pytest.raises(journal.StorageError):
            store.save(checkpoint("fresh", 0, []))
        assert os.listdir(root) == []
    finally:
        store.close()
    with journal.open(aside) as moved:
        assert moved.load_state("known", "k") == 1
        assert moved.load_state("new-scope", "k") is None


# ----------------------------------------------------- 5. the scope directory's entry is synced
def test_state_scope_found_unsynced_is_made_durable(tmp_path: Path) -> None:
    """A scope directory another process created and did not sync (it was killed
    between mkdir and sync): a durable save_state into it syncs `state/` before it
    returns, so a power loss keeps the acknowledged value."""
    root = str(tmp_path / "store")
    with recording(root) as recorder, journal.open(root) as store:
        os.mkdir(os.path.join(root, "state", dir_name("scope")))  # not synced
        store.save_state("scope", "key", {"v": 1})
        dest = str(tmp_path / "image")
        recorder.crash_image(dest)
    with journal.open(dest) as store:
        assert store.load_state("scope", "key") == {"v": 1}


# -------------------------------------------------- 6. Structs inside loose-JSON fields
@pytest.mark.parametrize(
    "field",
    [
        "metadata",
        "pending_tools",
        "last_context_rewrite",
        "active_execution",
        "pending_approval",
        "pending_message",
    ],
)
def test_structs_in_loose_json_fields_are_refused(tmp_path: Path, field: str) -> None:
    """A msgspec Struct inside a loose-JSON field would come back as a dict: the save
    is refused with InvalidInputError and nothing changes."""
    root = tmp_path / "store"
    struct = journal.TokenUsage(input_tokens=1)
    with journal.open(root) as store:
        store.save(checkpoint("s", 0, []))
        cp = checkpoint("s", 1, [])
        value: Any
        if field == "metadata":
            cp.metadata = {"usage": struct}  # type: ignore[dict-item]
        elif field == "pending_tools":
            cp.active_execution = _active()
            cp.pending_tools = [{"id": "t", "usage": struct}]
        elif field == "last_context_rewrite":
            cp.last_context_rewrite = {"x": [struct]}
        elif field == "active_execution":
            value = _active()
            value["extra"] = struct
            cp.active_execution = value
        elif field == "pending_approval":
            cp.active_execution = _active()
            cp.pending_approval = struct
        else:
            cp.pending_messages = [journal.QueuedMessage(owner="o", id="m1", message={"u": struct})]
        with pytest.raises(journal.InvalidInputError, match="not a JSON value"):
            store.save(cp)
        loaded = store.load("s")
        assert loaded is not None and loaded.sequence == 0
        # The same checkpoint with plain JSON there is accepted.
        plain = checkpoint("s", 1, [])
        plain.metadata = {"usage": {"input_tokens": 1}}
        store.save(plain)


def _active() -> dict[str, Any]:
    return {
        "submission_id": "sub",
        "turn_id": "turn",
        "started_at_ms": 1,
        "phase": {"type": "model"},
    }


# ------------------------------------------------ a disk that fails is not a missing session
class _UnreadableFor(fsio.FileOps):
    """The real operations, but a stat of a path containing `part` fails with EIO."""

    def __init__(self, part: str) -> None:
        self.part = part

    def stat(self, path: str) -> os.stat_result:
        if self.part in path:
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        return super().stat(path)


def test_session_directory_that_cannot_be_read_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Looking a session up on a disk that answers EIO raises StorageError: the
    session is not reported missing (NotFoundError, or None from load)."""
    store = journal.open(tmp_path / "store")
    try:
        store.save(checkpoint("s1", 0), [])
        fresh = journal.open(tmp_path / "store")  # s1 is not open in it yet
        try:
            monkeypatch.setattr(fsio, "ops", _UnreadableFor(dir_name("s1")))
            with pytest.raises(StorageError, match="Input/output error"):
                fresh.append_event("s1", 1, warning_event("w"))
            with pytest.raises(StorageError, match="Input/output error"):
                fresh.load("s1")
            monkeypatch.undo()
            assert fresh.append_event("s1", 1, warning_event("w")).sequence == 1
        finally:
            fresh.close()
    finally:
        store.close()

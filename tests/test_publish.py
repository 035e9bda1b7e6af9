"""Publishing a new session: everything durable first, then the name.

A new session (first save, fork) is built in private, from a spare directory or
on the spot; its identity file, its segment with the first commit (and, for a
directory built on the spot, its entries) are synced before it is renamed into
`sessions/`, which is synced last, under the new session's write lock (FORMAT.md
section 9). So a power loss never leaves a published directory without a
complete commit. Earlier versions published first and synced after: such a
directory, if one is found, must read as absent and be cleared away, never be
reported as damage, and the same id must be creatable again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from faults import record_stats_and_writes, recording

# reaches inside: pauses, fails and counts publishing's steps where other processes land
import journal
import journal.upkeep
from journal import Checkpoint, Event, fsio
from journal.inspect import verify_store
from journal.layout import LOCK_FILE, LOG_DIR
from journal.locks import FileLock
from journal.opened import OpenSessions
from journal.segment import SEGMENT_HEADER_SIZE
from journal.session import Session
from journal.sessionstate import SessionOptions
from journal.tree import Tree


def _child(sid: str) -> Checkpoint:
    cp = Checkpoint.empty(sid)
    cp.context = [{"role": "user", "content": f"context of {sid}"}]
    return cp


def _segment(session_dir: str) -> str:
    log_dir = os.path.join(session_dir, LOG_DIR)
    (name,) = [n for n in os.listdir(log_dir) if n.endswith(".seg")]
    return os.path.join(log_dir, name)


@pytest.mark.parametrize("how", ["fork", "first save"])
def test_the_first_commit_is_durable_before_the_name_is_published(tmp_path: Path, how: str) -> None:
    root = str(tmp_path / "s")
    with recording(root) as recorder:
        store = journal.open(root)
        try:
            store.save(Checkpoint.empty("parent"))  # builds the first spares (inline here)
            child_dir = os.path.realpath(store.session_dir("child"))
            ops: list[tuple[str, str]] = []
            recorder.hook = lambda op, path: ops.append((op, os.path.realpath(path)))
            if how == "fork":
                store.fork("parent", 0, _child("child"))
            else:
                store.save(_child("child"))
            recorder.hook = None
        finally:
            store.close()
    renamed = ops.index(("rename", child_dir))
    # the only rename of the creation is the one that publishes it
    assert [path for op, path in ops[:renamed] if op == "rename"] == []
    identity = [(op, path) for op, path in ops[:renamed] if path.endswith("/SESSION")]
    built_in = os.path.dirname(identity[0][1])  # the private directory (a spare)
    first_segment = os.path.join(built_in, LOG_DIR, "00000000000000000000.seg")
    segment = [op for op, path in ops[:renamed] if path == first_segment]
    # the identity written and synced, the first commit written and synced: all
    # before the rename; after it, only the name's directory is synced (and the
    # catalog entry written meanwhile). The spare's identity file was laid out at
    # its size and synced: the identity's sync is an fdatasync.
    assert [op for op, _ in identity] == ["pwrite", "sync_data"], identity
    assert segment[-2:] == ["pwrite", "sync_data"], segment
    # (the spare built after it, here inline, is the store's next one)
    after = [(op, path) for op, path in ops[renamed + 1 :] if "/tmp/spare-" not in path]
    assert [(op, path) for op, path in after if op != "pwrite"] == [
        ("sync_dir", os.path.dirname(child_dir))
    ]
    assert all("/catalog/" in path for op, path in after if op == "pwrite"), after


def _images_during(root: str, images: str, call: Any) -> list[str]:
    """Run `call(store)` while taking crash images (unsynced bytes lost) before every
    file operation."""
    out: list[str] = []
    with recording(root) as recorder:
        store = journal.open(root)
        try:
            store.save(Checkpoint.empty("parent"))

            def snap(op: str, path: str) -> None:
                # as synced, and as if every rename had reached the disk already
                # (the syncs after the publishing rename run concurrently: any
                # of them may finish first)
                for live_dirs in (False, True):
                    dest = os.path.join(images, f"img{len(out):03d}")
                    recorder.crash_image(dest, live_dirs=live_dirs)
                    out.append(dest)

            recorder.hook = snap
            call(store)
            recorder.hook = None
        finally:
            store.close()
    return out


@pytest.mark.parametrize("how", ["fork", "first save"])
def test_power_loss_while_publishing_leaves_the_session_absent_or_whole(
    tmp_path: Path, how: str
) -> None:
    sid = "child"

    def create(store: journal.Store) -> None:
        if how == "fork":
            store.fork("parent", 0, _child(sid))
        else:
            store.save_with_events(_child(sid), [{"t": 1}], None, [])

    images = _images_during(str(tmp_path / "s"), str(tmp_path / "images"), create)
    unfinished = 0
    for image in images:
        store = journal.open(image, read_only=True)
        try:
            name = os.path.basename(store.session_dir(sid))
        finally:
            store.close()
        published = os.path.isdir(os.path.join(image, "sessions", name))
        store = journal.open(image)
        try:
            loaded = store.load(sid)
            page = store.list_sessions_page(journal.SessionPageRequest(limit=10))
            listed = [s.session_id for s in page.sessions]
            if loaded is None:
                assert store.session_summary(sid) is None
                assert sid not in listed
                if published:
                    unfinished += 1
                    # moved to the trash, so the id can be created again
                    assert not os.path.isdir(os.path.join(image, "sessions", name))
                create(store)
                assert store.load(sid) is not None
            else:
                assert loaded.context == _child(sid).context
                assert sid in listed
            assert store.load("parent") is not None
        finally:
            store.close()
        shutil.rmtree(image)
    # the name is published only once the first commit is durable
    assert unfinished == 0, "an image has a published session without a durable commit"


def test_a_session_without_a_complete_commit_reads_as_absent(tmp_path: Path) -> None:
    """What a power loss in the sync round after the publishing rename of earlier
    versions could leave, made by hand: the first commit cut off."""
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save_with_events(_child("cut"), [{"t": 1}], None, [])
        store.save(Checkpoint.empty("kept"))
        cut_dir = store.session_dir("cut")
    finally:
        store.close()
    with open(_segment(cut_dir), "r+b") as f:
        f.truncate(SEGMENT_HEADER_SIZE + 20)  # a torn first commit
    # The caches, written after the sync round the power loss cut short (at close, or
    # not at all when the session was closed before: they are optional).
    for cache in Path(cut_dir).glob("*.idx"):
        cache.unlink()
    (Path(cut_dir) / "snapshot").unlink(missing_ok=True)
    (root / "catalog" / "BOOT").write_text("another boot\n")  # as after the power loss

    reader = journal.open(root, read_only=True)
    try:
        assert reader.load("cut") is None
        assert reader.session_summary("cut") is None
        assert os.path.isdir(cut_dir), "a read-only store must not move anything"
    finally:
        reader.close()
    store = journal.open(root)
    try:
        listed = store.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
        assert [s.session_id for s in listed] == ["kept"]
        assert store.load("cut") is None
        assert not os.path.exists(cut_dir)
        assert store.delete_sessions(["cut"]) is False  # absent
        store.save(Checkpoint.empty("cut"))
        summary = store.session_summary("cut")
        assert summary is not None and summary.parent_session_id is None
    finally:
        store.close()


class _HoldPublishingSync(fsio.FileOps):
    """Real operations; the sync of `sessions/` (after the publishing rename, in
    both ways of creating a session) waits for a go-ahead."""

    def __init__(self, sessions_dir: str) -> None:
        self.sessions_dir = sessions_dir
        self.reached = threading.Event()
        self.go = threading.Event()

    def sync_dir(self, path: str) -> None:
        if os.path.realpath(path) == self.sessions_dir:
            self.reached.set()
            assert self.go.wait(30), "never released"
        super().sync_dir(path)


@pytest.mark.parametrize("spare", [True, False])
def test_other_writers_wait_until_the_published_session_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spare: bool
) -> None:
    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("parent"))
        store.spares.wait()
        if not spare:  # the directory is built on the spot (first creation, no spare)
            monkeypatch.setattr(store.spares, "target", 0)
            while (ready := store.spares.take()) is not None:
                ready.discard()
        child_dir = os.path.realpath(store.session_dir("child"))
        ops = _HoldPublishingSync(os.path.dirname(child_dir))
        monkeypatch.setattr(fsio, "ops", ops)
        errors: list[BaseException] = []

        def fork() -> None:
            try:
                store.fork("parent", 0, _child("child"))
            except BaseException as exc:  # reported below
                errors.append(exc)

        forker = threading.Thread(target=fork)
        forker.start()
        assert ops.reached.wait(30), "the fork never synced sessions/"
        assert os.path.isdir(child_dir)  # published already ...
        probe = FileLock(os.path.join(child_dir, LOCK_FILE), "probe")
        try:
            assert not probe.try_acquire(), "the new session's write lock was free"
            ops.go.set()
            forker.join(30)
            assert not forker.is_alive() and errors == []
            store.spares.wait()  # the new session's warm-up takes its lock for a moment
            assert probe.try_acquire(), "the write lock was kept after the fork returned"
            probe.release()
        finally:
            ops.go.set()
            probe.close()
        assert store.load("child") is not None
    finally:
        store.close()


def _first_commit_damaged_with_data_after(root: Path) -> str:
    """A session whose first record fails its checksum, with committed data after it."""
    store = journal.open(root)
    try:
        store.save(_child("hurt"))
        store.append_event("hurt", 1, journal.Event(msg={"type": "warning", "message": "x"}))
        directory = store.session_dir("hurt")
    finally:
        store.close()
    _damage_first_record(directory)
    return directory


def _damage_first_record(directory: str) -> None:
    """Flip a byte inside the first record's payload, with no cache files left (so
    opening must read the log)."""
    for name in os.listdir(directory):
        if name not in ("SESSION", "LOCK", LOG_DIR):
            os.unlink(os.path.join(directory, name))
    with open(_segment(directory), "r+b") as f:
        f.seek(SEGMENT_HEADER_SIZE + 12)
        byte = f.read(1)
        f.seek(SEGMENT_HEADER_SIZE + 12)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("lock_held", [False, True])
def test_damage_in_the_first_commit_is_reported_never_discarded(
    tmp_path: Path, lock_held: bool
) -> None:
    """No complete commit can also mean damage: with data after it, that is an error.

    With the session's lock held elsewhere, opening cannot classify the bytes;
    the store must then wait for the lock and check, not guess "unfinished" (and
    move the session to the trash).
    """
    root = tmp_path / "s"
    directory = _first_commit_damaged_with_data_after(root)
    holder = FileLock(os.path.join(directory, LOCK_FILE), "a writer elsewhere")
    if lock_held:
        assert holder.try_acquire()
        threading.Timer(0.3, holder.release).start()
    store = journal.open(root, lock_timeout=30)
    try:
        with pytest.raises(journal.CorruptionError):
            store.load("hurt")
        with pytest.raises(journal.CorruptionError):
            store.save(Checkpoint.empty("hurt"))
    finally:
        store.close()
        holder.close()
    assert os.path.isdir(directory)
    assert os.listdir(root / "trash") == []


def _cut_first_commit(root: Path, sid: str) -> str:
    store = journal.open(root)
    try:
        store.save(_child(sid))
        directory = store.session_dir(sid)
    finally:
        store.close()
    with open(_segment(directory), "r+b") as f:
        f.truncate(SEGMENT_HEADER_SIZE + 20)
    # As a power loss leaves it: the caches, written after the first commit's sync
    # round (at close, if the background warm-up opened the session), are gone too.
    for cache in [*Path(directory).glob("*.idx"), Path(directory) / "snapshot"]:
        cache.unlink(missing_ok=True)
    return directory


def test_a_directory_replaced_meanwhile_is_not_the_one_discarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between finding a directory unfinished and locking it, another process may
    discard it and create the session anew: that new session must survive."""
    root = tmp_path / "s"
    directory = _cut_first_commit(root, "a")
    other = tmp_path / "other"
    maker = journal.open(other)
    try:
        maker.save(_child("a"))
        fresh = maker.session_dir("a")
    finally:
        maker.close()
    # reaches inside: the settling step is where another process's move must land
    original = OpenSessions._settle_unfinished
    swapped: list[bool] = []

    def swap_first(self: OpenSessions, path: str, key: Any) -> bool:
        if not swapped:  # what the other process does first
            swapped.append(True)
            os.rename(path, str(tmp_path / "gone"))
            os.rename(fresh, path)
        return original(self, path, key)

    monkeypatch.setattr(OpenSessions, "_settle_unfinished", swap_first)
    store = journal.open(root)
    try:
        loaded = store.load("a")
        assert loaded is not None and loaded.context == _child("a").context
        assert swapped and os.path.isdir(directory)
    finally:
        store.close()


def test_a_directory_discarded_meanwhile_by_another_process_is_just_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    directory = _cut_first_commit(root, "a")
    # reaches inside: the settling step is where another process's move must land
    original = OpenSessions._settle_unfinished

    def moved_first(self: OpenSessions, path: str, key: Any) -> bool:
        if os.path.isdir(path):  # another process discards it first
            os.rename(path, str(tmp_path / "elsewhere"))
        return original(self, path, key)

    monkeypatch.setattr(OpenSessions, "_settle_unfinished", moved_first)
    store = journal.open(root)
    try:
        assert store.load("a") is None
        store.save(_child("a"))  # and the id can be created again
        assert store.load("a") is not None and os.path.isdir(directory)
    finally:
        store.close()


def test_a_fork_writes_and_syncs_its_child_before_it_takes_the_tree_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child depends on nothing but the arguments: its first commit is written,
    and its syncs started as soon as it is (before even its summary is made), before
    the tree lock, so they run while the parent is checked under it."""
    events: list[str] = []

    class Recording(fsio.FileOps):
        concurrent = False  # syncs run when started: the order below is theirs

        def pwrite(self, fd: int, data: bytes, offset: int, path: str) -> None:
            if path.endswith(".seg") and "/tmp/" in path:
                events.append("child commit written")
            super().pwrite(fd, data, offset, path)

        def sync_data(self, fd: int, path: str) -> None:
            if path.endswith(".seg") and "/tmp/" in path:
                events.append("child commit synced")
            elif path.endswith("/SESSION") and "/tmp/" in path:
                events.append("child identity synced")
            super().sync_data(fd, path)

    real_locked = Tree.locked
    real_summary = journal.upkeep.fork_summary

    def locked(self: Tree) -> Any:
        events.append("tree lock")
        return real_locked(self)

    def fork_summary(*args: Any) -> Any:
        events.append("summary")
        return real_summary(*args)

    real_validate = journal.validate.validate_checkpoint

    def validate(cp: Checkpoint, **kwargs: Any) -> None:
        events.append("validation")
        real_validate(cp, **kwargs)

    store = journal.open(tmp_path / "s")
    try:
        store.save(_child("parent"))
        store.spares.wait()
        monkeypatch.setattr(fsio, "ops", Recording())
        monkeypatch.setattr(Tree, "locked", locked)
        monkeypatch.setattr(journal.upkeep, "fork_summary", fork_summary)
        monkeypatch.setattr(journal.validate, "validate_checkpoint", validate)
        store.fork("parent", 0, _child("child"))
    finally:
        monkeypatch.undo()
        store.close()
    written, synced = events.index("child commit written"), events.index("child commit synced")
    # the identity's sync is started first, before the commit is even encoded
    assert events.index("child identity synced") < written, events
    assert events.count("validation") == 1, events
    validated = events.index("validation")
    assert written < synced < validated < events.index("summary") < events.index("tree lock")


def test_a_fork_from_a_spare_opens_no_session_and_none_of_the_childs_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's first commit is its whole log, built from the arguments: it is
    written, and it and the identity synced, through the spare's descriptors (opened
    when the spare was built, its LOCK too, which publishing takes), with no Session
    object for the child (its first use opens it from that one commit)."""
    store = journal.open(tmp_path / "s")
    try:
        store.save(_child("parent"))
        store.spares.wait()
        opened: list[str] = []
        sessions: list[str] = []
        real_open, real_init = os.open, Session.__init__
        # The background jobs the fork starts may open sessions and files at any moment:
        # the child's warm-up (a Session, from any thread but the caller's) and the next
        # spare (a new directory in tmp/). What counts: a Session opened by the call
        # itself, and any open of a file of the spares that existed before it.
        caller = threading.get_ident()
        spares_dir = os.path.join(str(tmp_path / "s"), "tmp")
        before = [os.path.join(spares_dir, n) + os.sep for n in os.listdir(spares_dir)]
        assert before, "the store has spares ready"

        def os_open(path: Any, *args: Any, **kwargs: Any) -> int:
            opened.append(os.fspath(path))
            return real_open(path, *args, **kwargs)

        def init(self: Session, directory: str, session_id: str, *a: Any, **k: Any) -> None:
            if threading.get_ident() == caller:
                sessions.append(session_id)
            real_init(self, directory, session_id, *a, **k)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(Session, "__init__", init)
        summary = store.fork("parent", 0, _child("child"))
        monkeypatch.undo()
        assert "child" not in sessions
        child_files = [p for p in opened if p.startswith(tuple(before))]  # LOCK included
        assert child_files == [], child_files
        assert summary.parent_session_id == "parent" and summary.sequence == 0
        assert store.load("child") == _child("child")  # opened from its one commit
        assert store.session_summary("child") == summary
    finally:
        store.close()


_INVALID: dict[str, tuple[str, Any]] = {
    "NaN in the context": ("context", [{"x": float("nan")}]),
    "a tuple in the context": ("context", [{"x": (1, 2)}]),
    "an int msgpack cannot hold": ("context", [{"x": 2**70}]),
    "infinity in the metadata": ("metadata", {"m": [float("inf")]}),
    "a lone surrogate in the metadata": ("metadata", {"m": "\ud800"}),
    "an int key in the metadata": ("metadata", {"m": {1: "x"}}),
    "an object in the metadata": ("metadata", {"m": object()}),
    "an unsupported version": ("version", 99),
    "metadata that is a list": ("metadata", []),
    "a context that is an int": ("context", 5),
    "a context epoch that is a str": ("context_epoch", "1"),
    "a negative token count": ("total_usage", journal.TokenUsage(input_tokens=-(2**63) - 1)),
    "a blank owner": ("session_context", journal.SessionContext(owner_id=" ")),
}


@pytest.mark.parametrize("what", sorted(_INVALID))
def test_a_fork_whose_child_is_invalid_is_refused_and_leaves_nothing(
    tmp_path: Path, what: str
) -> None:
    """The child's validation runs while its syncs run (after its commit is written
    in private): the refusal is the one `validate_checkpoint` gives, and nothing is
    published, listed or left behind."""
    field, value = _INVALID[what]
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(_child("parent"))
        store.spares.wait()
        child = _child("child")
        setattr(child, field, value)
        with pytest.raises(journal.JournalError) as expected:
            journal.validate.validate_checkpoint(child)
        with pytest.raises(journal.JournalError) as refused:
            store.fork("parent", 0, child)
        assert type(refused.value) is type(expected.value)
        assert str(expected.value) in str(refused.value)
        store.spares.wait()
        assert store.load("child") is None and store.session_summary("child") is None
        assert not os.path.exists(store.session_dir("child"))
        left = [n for n in os.listdir(root / "tmp") if not n.startswith("spare-")]
        assert left == []
        listed = store.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
        assert [s.session_id for s in listed] == ["parent"]
        store.fork("parent", 0, _child("child"))  # and the store goes on
        assert store.load("child") == _child("child")
    finally:
        store.close()


def test_no_file_is_stat_then_written_on_the_fork_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on the save path (tests/test_writer_fast_path.py): a stat of a file then a
    write to it slows that file's next sync (Linux 6.13+). A fork writes and syncs the
    child's identity and segment, and appends to the catalog: none may be stat'ed."""
    store = journal.open(tmp_path / "s")
    try:
        store.save(_child("parent"))
        store.fork("parent", 0, _child("warm"))
        store.spares.wait()
        stat_of, written = record_stats_and_writes(monkeypatch)
        for n in range(3):
            store.fork("parent", 0, _child(f"child-{n}"))
            store.spares.wait()
        monkeypatch.undo()
        assert any(p.endswith(".seg") for p in written)
        hot = {p for p in stat_of & written if not p.endswith("LOCK")}
        assert hot == set(), hot
    finally:
        store.close()


@pytest.mark.parametrize("why", ["no parent", "fork point too new", "child exists"])
def test_a_fork_refused_under_the_tree_lock_leaves_nothing_behind(tmp_path: Path, why: str) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(_child("parent"))
        store.save(_child("child"))
        store.spares.wait()
        before = sorted(os.listdir(root / "sessions"))
        parent, point, child = {
            "no parent": ("nobody", 0, "new"),
            "fork point too new": ("parent", 5, "new"),
            "child exists": ("parent", 0, "child"),
        }[why]
        with pytest.raises((journal.NotFoundError, journal.ContractViolationError)):
            store.fork(parent, point, _child(child))
        store.spares.wait()
        assert sorted(os.listdir(root / "sessions")) == before
        left = [n for n in os.listdir(root / "tmp") if not n.startswith("spare-")]
        assert left == []
        listed = store.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
        assert sorted(s.session_id for s in listed) == ["child", "parent"]
        assert store.load("new") is None
        store.fork("parent", 0, _child("new"))  # and the store goes on
        assert store.session_summary("new") is not None
    finally:
        store.close()


def test_fork_makes_the_parents_newest_commits_durable_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child must not outlive its fork point after a power loss."""

    class Recording(fsio.FileOps):
        def __init__(self) -> None:
            self.ops: list[tuple[str, str]] = []

        def sync_data(self, fd: int, path: str) -> None:
            self.ops.append(("sync_data", os.path.realpath(path)))
            super().sync_data(fd, path)

        def rename(self, src: str, dst: str) -> None:
            self.ops.append(("rename", os.path.realpath(dst)))
            super().rename(src, dst)

    store = journal.open(tmp_path / "s", durability="os")  # saves themselves unsynced
    try:
        for seq in range(3):
            cp = _child("parent")
            cp.sequence = seq
            store.save(cp)
        store.spares.wait()
        parent_segment = os.path.realpath(_segment(store.session_dir("parent")))
        child_dir = os.path.realpath(store.session_dir("child"))
        recording = Recording()
        monkeypatch.setattr(fsio, "ops", recording)
        store.fork("parent", 2, _child("child"))
    finally:
        store.close()
    assert ("sync_data", parent_segment) in recording.ops
    assert recording.ops.index(("sync_data", parent_segment)) < recording.ops.index(
        ("rename", child_dir)
    )


def test_fork_syncs_the_parent_only_where_this_process_has_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parent commit this process has made durable already (its own durable save,
    or an earlier fork's sync of it) is not synced again; one it has not is."""

    class Recording(fsio.FileOps):
        def __init__(self) -> None:
            self.synced: list[str] = []

        def sync_data(self, fd: int, path: str) -> None:
            self.synced.append(os.path.realpath(path))
            super().sync_data(fd, path)

    root = tmp_path / "s"
    store = journal.open(root)  # durable saves
    other = journal.open(root, durability="os")  # another writer, saving unsynced
    try:
        for seq in range(3):
            cp = _child("parent")
            cp.sequence = seq
            store.save(cp)
        store.spares.wait()
        parent_segment = os.path.realpath(_segment(store.session_dir("parent")))
        recording = Recording()
        monkeypatch.setattr(fsio, "ops", recording)
        store.fork("parent", 2, _child("a"))  # its own durable saves
        store.spares.wait()
        assert parent_segment not in recording.synced
        cp = _child("parent")
        cp.sequence = 3
        other.save(cp)  # not durable yet
        store.fork("parent", 3, _child("b"))
        store.spares.wait()
        assert recording.synced.count(parent_segment) == 1
        store.fork("parent", 3, _child("c"))  # synced by the fork before
        store.spares.wait()
        assert recording.synced.count(parent_segment) == 1
    finally:
        other.close()
        store.close()


def test_a_session_in_use_is_not_closed_under_its_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call holding a session whose directory is deleted and created anew meanwhile
    (by another process) must keep its own files: closing them under it would let a
    reused descriptor number make its lock "acquire" (and write its holder line
    into) the new incarnation's segment."""
    root = tmp_path / "s"
    store, other = journal.open(root), journal.open(root)  # `other`: another process
    try:
        store.save(Checkpoint.empty("x"))
        reached, go = threading.Event(), threading.Event()
        fds: list[int] = []
        # reaches inside: holds the lock attempt open while the session is recreated
        original = FileLock._try_lock

        def paused(self: FileLock, fd: int) -> bool:
            if threading.current_thread().name == "writer" and not go.is_set():
                fds.append(fd)
                reached.set()
                assert go.wait(30)
            return original(self, fd)

        monkeypatch.setattr(FileLock, "_try_lock", paused)
        errors: list[BaseException] = []

        def write() -> None:
            cp = Checkpoint.empty("x")
            cp.sequence = 1
            try:
                store.save(cp)
            except BaseException as exc:  # checked below
                errors.append(exc)

        writer = threading.Thread(target=write, name="writer")
        writer.start()
        assert reached.wait(30)
        other.delete_sessions(["x"])
        other.save(Checkpoint.empty("x"))
        fresh = store.load("x")  # finds the new incarnation: the old one is in use
        assert fresh is not None and fresh.sequence == 0
        target = os.readlink(f"/proc/self/fd/{fds[0]}") if os.path.isdir("/proc/self/fd") else ""
        go.set()
        writer.join(30)
        assert target == "" or os.path.basename(target).startswith(LOCK_FILE)
        # Its session was gone when it got the lock, before it wrote anything: the
        # save looks the id up again and lands in the new incarnation.
        assert errors == []
    finally:
        go.set()
        store.close()
        other.close()
    session_dir = root / "sessions" / os.path.basename(store.session_dir("x"))
    with open(_segment(str(session_dir)), "rb") as f:
        assert f.read(8) == b"JRNLSEG\x00"
    reopened = journal.open(root)
    try:
        loaded = reopened.load("x")
        assert loaded is not None and loaded.sequence == 1
        assert reopened.checkpoint_at("x", 0) is not None
    finally:
        reopened.close()
    assert [f for _, found in verify_store(str(root)) for f in found] == []


def test_a_session_with_a_damaged_first_commit_can_be_deleted(tmp_path: Path) -> None:
    """Reads report the damage; delete_sessions is the way to get rid of it (and
    frees the id)."""
    root = tmp_path / "s"
    directory = _first_commit_damaged_with_data_after(root)
    store = journal.open(root)
    try:
        with pytest.raises(journal.CorruptionError):
            store.load("hurt")
        assert store.delete_sessions(["hurt"]) is True
        assert not os.path.exists(directory)
        assert store.load("hurt") is None
        store.save(Checkpoint.empty("hurt"))
        assert store.load("hurt") is not None
    finally:
        store.close()


def test_a_session_deleted_while_being_opened_or_locked_is_just_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's delete can move a directory away at any moment: between
    finding it and reading its identity, or before its lock file is opened. That
    is "not found", never damage or a storage failure (found by a stress test)."""

    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(Checkpoint.empty("a"))
        store.save(Checkpoint.empty("b"))
        path_a, path_b = store.session_dir("a"), store.session_dir("b")
    finally:
        store.close()

    sess = Session(path_b, "b", SessionOptions())
    try:
        os.rename(path_b, str(tmp_path / "moved-away"))
        with pytest.raises(journal.NotFoundError), sess.locked():
            pass
    finally:
        sess.close()

    # reaches inside: the directory must vanish between finding and reading it
    original = Session._read_identity

    def vanish_first(self: Session) -> Any:
        if os.path.isdir(path_a):
            os.rename(path_a, str(tmp_path / "deleted"))
        return original(self)

    monkeypatch.setattr(Session, "_read_identity", vanish_first)
    store = journal.open(root)
    try:
        assert store.load("a") is None
    finally:
        store.close()


def test_flush_keeps_the_sessions_it_writes_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread's call may push a session out of the cache while flush() is
    writing its caches under its lock: it must not be closed under flush."""

    store = journal.open(tmp_path / "s", max_open_sessions=1)
    try:
        store.save(_child("a"))
        store.append_event("a", 1, Event(msg={"type": "note"}))  # opens "a" (with caches due)
        inside, go_on = threading.Event(), threading.Event()
        seen: dict[str, bool] = {}
        original = Session.flush_caches

        def slow_flush(self: Session) -> None:
            inside.set()
            assert go_on.wait(30)
            seen["closed under flush"] = self.closed
            original(self)

        monkeypatch.setattr(Session, "flush_caches", slow_flush)
        flusher = threading.Thread(target=store.flush)
        flusher.start()
        assert inside.wait(30)
        store.save(Checkpoint.empty("b"))  # over max_open_sessions: "a" is dropped
        go_on.set()
        flusher.join(30)
        assert seen == {"closed under flush": False}
    finally:
        store.close()


def test_closing_a_dropped_session_that_fails_does_not_fail_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last sync of an "os"-mode writer fails (EIO) when the cache closes it:
    the unrelated read that dropped it still answers, and no file stays open."""
    import errno

    store = journal.open(tmp_path / "s", durability="os", max_open_sessions=1)
    try:
        store.save(Checkpoint.empty("b"))
        store.save(Checkpoint.empty("a"))
        cp = Checkpoint.empty("a")
        cp.sequence = 1
        store.save(cp)  # "a" holds unsynced bytes, synced when closed
        a_dir = os.path.realpath(store.session_dir("a"))

        def eio(fd: int, path: str) -> None:
            raise OSError(errno.EIO, "Input/output error", path)

        with monkeypatch.context() as patch:
            patch.setattr(fsio.ops, "sync_data", eio)
            assert store.load("b") is not None  # drops and closes "a"
    finally:
        store.close()
    if os.path.isdir("/proc/self/fd"):
        open_files = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                open_files.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
        assert not [f for f in open_files if f.startswith(a_dir + os.sep)]


def test_an_unreadable_session_directory_is_a_storage_error_not_a_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a missing file means "deleted"; any other failure to look is reported."""
    import errno

    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("a"))
        path = store.session_dir("a")
    finally:
        store.close()
    sess = Session(path, "a", SessionOptions())
    real_stat = os.stat

    def denied(p: Any, *args: Any, **kwargs: Any) -> Any:
        if str(p).startswith(path + os.sep):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real_stat(p, *args, **kwargs)

    try:
        monkeypatch.setattr(os, "stat", denied)
        with pytest.raises(journal.StorageError, match="Permission denied"):
            sess.still_published()
    finally:
        monkeypatch.undo()
        sess.close()


def test_closing_the_store_under_running_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() must not close a session a running call uses (the call closes it when
    it ends), and a call that began before close() must not leave a session open."""

    root = tmp_path / "s"
    with journal.open(root) as store:
        store.save(Checkpoint.empty("a"))
        store.save(Checkpoint.empty("b"))

    store = journal.open(root)
    inside, go_on = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}
    original_load = Session.load

    def slow_load(self: Session) -> Any:
        inside.set()
        assert go_on.wait(30)
        seen["closed while loading"] = self.closed
        seen["session"] = self
        return original_load(self)

    monkeypatch.setattr(Session, "load", slow_load)
    loader = threading.Thread(target=lambda: seen.setdefault("loaded", store.load("a")))
    loader.start()
    assert inside.wait(30)
    store.close()
    go_on.set()
    loader.join(30)
    assert seen["closed while loading"] is False and seen["loaded"] is not None
    assert seen["session"].closed, "the call that used it last did not close it"
    monkeypatch.undo()

    store = journal.open(root)
    past, gate = threading.Event(), threading.Event()
    original_pending = store.tree.pending_session_dirs

    def pending_then_wait() -> Any:
        answer = original_pending()
        if threading.current_thread().name == "late":
            past.set()
            assert gate.wait(30)
        return answer

    monkeypatch.setattr(store.tree, "pending_session_dirs", pending_then_wait)
    result: dict[str, Any] = {}

    def late() -> None:
        try:
            result["load"] = store.load("b")
        except journal.JournalError as exc:
            result["load"] = exc

    caller = threading.Thread(target=late, name="late")
    caller.start()
    assert past.wait(30)
    store.close()
    gate.set()
    caller.join(30)
    assert isinstance(result["load"], journal.JournalError)  # "store is closed"
    assert len(store.open_sessions) == 0


def test_deleting_a_parent_takes_a_damaged_child_the_catalog_does_not_list(
    tmp_path: Path,
) -> None:
    """A rebuilt catalog leaves out a session it cannot read (damage is reported by
    reads and verify, not by listing), so it knows nothing of that child's parent.
    Deleting the parent must still take the child: never a child without its parent."""
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(_child("parent"))
        store.fork("parent", 0, _child("kid"))
        store.append_event("kid", 1, journal.Event(msg={"type": "warning", "message": "x"}))
        kid_dir = store.session_dir("kid")
    finally:
        store.close()
    _damage_first_record(kid_dir)
    shutil.rmtree(root / "catalog")  # derived data: rebuilt from the sessions on open
    store = journal.open(root)
    try:
        listed = store.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
        assert [s.session_id for s in listed] == ["parent"]
        with pytest.raises(journal.CorruptionError):
            store.load("kid")
        assert store.delete_sessions(["parent"]) is True
        assert not os.path.exists(kid_dir)
        assert store.load("parent") is None
    finally:
        store.close()


def test_a_name_taken_then_freed_while_publishing_is_looked_up_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename that publishes a new session fails because another process created
    the id first, and that session is deleted again before anyone looks: the save
    must look the id up again (and create it), not fail (found by the tree stress
    test under load)."""
    store = journal.open(tmp_path / "s")
    real = fsio.ops.rename
    refused: list[str] = []

    def rename(src: str, dst: str) -> None:
        if not refused and f"{os.sep}sessions{os.sep}" in dst:
            refused.append(dst)
            raise OSError(errno.ENOTEMPTY, "Directory not empty (injected)", dst)
        real(src, dst)

    monkeypatch.setattr(fsio.ops, "rename", rename)
    try:
        store.save(Checkpoint.empty("x"))
        assert refused
        loaded = store.load("x")
        assert loaded is not None and loaded.sequence == 0
    finally:
        store.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_creating_many_sessions_keeps_at_most_max_open_sessions_open(tmp_path: Path) -> None:
    """Each first save warms its new session in the background (opened, its writer
    ready); those opens count against `max_open_sessions` like a caller's, so a
    store that creates many sessions keeps only that many open, not one set of
    descriptors per session it ever created."""

    def open_session_dirs(root: Path) -> set[str]:
        sessions = os.path.realpath(root / "sessions") + os.sep
        found = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith(sessions):
                    found.add(target[len(sessions) :].split(os.sep)[0])
        return found

    root = tmp_path / "s"
    store = journal.open(root, durability="os", max_open_sessions=4)
    try:
        for i in range(40):
            store.save(Checkpoint.empty(f"s{i}"))
            store.jobs.wait()  # the warm-up of s{i} has run
        held = open_session_dirs(root)
        assert 1 <= len(held) <= 4, sorted(held)
        assert store.load("s0") is not None  # a session closed on the way opens again
    finally:
        store.close()
    assert open_session_dirs(root) == set()

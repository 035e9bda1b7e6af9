"""fsio.sync_all: concurrent syncs of a new session's parts, errors, and forked children."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from helpers import exit_code_of_child

# reaches inside: these are tests of fsio.sync_all itself
import journal
from journal import Checkpoint, StorageError, fsio


class _Recording(fsio.FileOps):
    """Real operations, remembering which thread synced what."""

    def __init__(self) -> None:
        self.synced: list[tuple[str, str, str]] = []  # (kind, path, thread name)
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def _note(self, kind: str, path: str) -> None:
        with self._lock:
            self.synced.append((kind, path, threading.current_thread().name))
            self.threads.add(threading.current_thread().name)

    def sync_data(self, fd: int, path: str) -> None:
        self._note("data", path)
        super().sync_data(fd, path)

    def sync_file(self, fd: int, path: str) -> None:
        self._note("file", path)
        super().sync_file(fd, path)

    def sync_dir(self, path: str) -> None:
        self._note("dir", path)
        super().sync_dir(path)


def test_the_caller_syncs_one_part_and_the_pool_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = _Recording()
    monkeypatch.setattr(fsio, "ops", ops)
    (tmp_path / "d").mkdir()
    for name in ("seg", "ident"):
        (tmp_path / "d" / name).write_bytes(b"x" * 100)
    d = str(tmp_path / "d")
    fsio.sync_all(data_files=[f"{d}/seg"], files=[f"{d}/ident"], dirs=[d, str(tmp_path)])
    assert sorted((kind, path) for kind, path, _ in ops.synced) == sorted(
        [("data", f"{d}/seg"), ("file", f"{d}/ident"), ("dir", d), ("dir", str(tmp_path))]
    )
    me = threading.current_thread().name
    assert [kind for kind, _, thread in ops.synced if thread == me] == ["data"]
    assert len({thread for _, _, thread in ops.synced} - {me}) >= 1


class _Blocking(_Recording):
    """Syncs that wait for a go-ahead, to show who waits for them."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def sync_file(self, fd: int, path: str) -> None:
        assert self.go.wait(30), "never released"
        super().sync_file(fd, path)


def test_start_sync_returns_while_the_sync_runs_and_wait_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = _Blocking()
    monkeypatch.setattr(fsio, "ops", ops)
    (tmp_path / "ident").write_bytes(b"x")
    pending = fsio.start_sync([], [str(tmp_path / "ident")], [])
    assert ops.synced == []  # still blocked in a pool thread, and we are here
    waiter = threading.Thread(target=pending.wait)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive(), "wait() returned before the sync ran"
    ops.go.set()
    waiter.join(30)
    assert not waiter.is_alive()
    assert [(kind, path) for kind, path, _ in ops.synced] == [("file", str(tmp_path / "ident"))]


def test_a_failure_is_raised_after_the_others_are_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = _Recording()
    monkeypatch.setattr(fsio, "ops", ops)
    (tmp_path / "seg").write_bytes(b"x")
    with pytest.raises(StorageError, match="missing"):
        fsio.sync_all(
            data_files=[str(tmp_path / "seg")],
            files=[str(tmp_path / "missing")],
            dirs=[str(tmp_path)],
        )
    synced = [(kind, path) for kind, path, _ in ops.synced]
    assert ("data", str(tmp_path / "seg")) in synced
    assert ("dir", str(tmp_path)) in synced


def test_a_recorder_that_cannot_run_concurrently_gets_one_sync_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = _Recording()
    ops.concurrent = False
    monkeypatch.setattr(fsio, "ops", ops)
    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("a"))
    finally:
        store.close()
    assert ops.threads == {threading.current_thread().name}
    kinds = [kind for kind, _, _ in ops.synced]
    assert kinds.count("data") >= 1 and kinds.count("file") >= 1 and kinds.count("dir") >= 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_creates_sessions(tmp_path: Path) -> None:
    """The parent's sync threads do not exist in a child: it must make its own."""
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(Checkpoint.empty("parent-made"))  # the pool exists now
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                child = journal.open(root)
                child.save(Checkpoint.empty("child-made"))
                child.close()
            finally:
                os._exit(0 if journal.open(root, read_only=True).load("child-made") else 1)
        hung = "the forked child hung creating a session"
        assert exit_code_of_child(pid, seconds=60, hung=hung) == 0
        assert store.session_summary("child-made") is not None
        store.save(Checkpoint.empty("parent-again"))  # and the parent's pool still works
    finally:
        store.close()
    sys.stdout.flush()


_AT_EXIT = """
import atexit, os, sys
import journal
from journal import Checkpoint

root = sys.argv[1]
store = journal.open(root)
store.save(Checkpoint.empty("s1"))  # the pool of sync threads exists from here on


def at_exit() -> None:  # runs after the pool stopped taking work
    store.save(Checkpoint.empty("s2"))  # a new session: its parts are synced together
    assert store.delete_sessions(["s1"])
    print("intents left:", os.listdir(os.path.join(root, "txn")), flush=True)


atexit.register(at_exit)
"""


def test_sessions_are_created_and_deleted_at_interpreter_exit(tmp_path: Path) -> None:
    """atexit handlers run after the thread pool refuses work: the syncs run inline."""
    import subprocess

    root = tmp_path / "s"
    done = subprocess.run(
        [sys.executable, "-c", _AT_EXIT, str(root)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Error" not in done.stderr, done.stderr
    assert "intents left: []" in done.stdout
    store = journal.open(root, read_only=True)
    try:
        assert store.load("s2") is not None
        assert store.load("s1") is None
    finally:
        store.close()


def test_begun_returns_once_every_pool_sync_has_begun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`begun=True` is a scheduling hint only: when start_sync returns, each pool
    thread has entered its sync (it need not have finished)."""
    release = threading.Event()
    entered: list[str] = []

    class Slow(fsio.FileOps):
        def sync_data(self, fd: int, path: str) -> None:
            entered.append(path)
            assert release.wait(30)
            super().sync_data(fd, path)

    monkeypatch.setattr(fsio, "ops", Slow())
    paths = [str(tmp_path / name) for name in ("a", "b")]
    fds = []
    for path in paths:
        Path(path).write_bytes(b"x")
        fds.append(os.open(path, os.O_RDONLY))
    try:
        pairs = list(zip(fds, paths, strict=True))
        syncing = fsio.start_sync([], [], [], open_data_files=pairs, begun=True)
        assert sorted(entered) == sorted(paths)
        release.set()
        syncing.wait()
    finally:
        release.set()
        for fd in fds:
            os.close(fd)


def test_sync_dir_while_syncs_here_and_works_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops = _Recording()
    monkeypatch.setattr(fsio, "ops", ops)
    ran_in: list[str] = []
    fsio.sync_dir_while(str(tmp_path), lambda: ran_in.append(threading.current_thread().name))
    me = threading.current_thread().name
    assert ops.synced == [("dir", str(tmp_path), me)]
    assert len(ran_in) == 1 and ran_in[0] != me


@pytest.mark.parametrize("failing", ["work", "sync", "both"])
def test_sync_dir_while_raises_the_works_failure_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    class Failing(fsio.FileOps):
        def sync_dir(self, path: str) -> None:
            if failing in ("sync", "both"):
                raise OSError(5, "Input/output error")
            super().sync_dir(path)

    def work() -> None:
        if failing in ("work", "both"):
            raise journal.JournalError("the work failed")

    monkeypatch.setattr(fsio, "ops", Failing())
    with pytest.raises(journal.JournalError) as raised:
        fsio.sync_dir_while(str(tmp_path), work)
    if failing == "sync":
        assert isinstance(raised.value, StorageError) and "fsync of directory" in str(raised.value)
    else:
        assert str(raised.value) == "the work failed"

"""Writer locks: a timed-out wait names the holder; portalocker users exclude us too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# reaches inside: the lock file is held by hand; the holder line's write is failed
import journal
from journal import Checkpoint, Event, fsio
from journal.layout import LOCK_FILE


def _hold(lock_path: str, how: str) -> subprocess.Popen[str]:
    """A child process that takes the lock and keeps it until killed."""
    code = textwrap.dedent(
        f"""
        import sys, time
        path = {lock_path!r}
        if {how!r} == "journal":
            from journal.locks import FileLock
            FileLock(path, "test").acquire(5)
        else:
            import portalocker
            f = open(path, "a+")
            portalocker.lock(f, portalocker.LockFlags.EXCLUSIVE)
        print("held", flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


@pytest.mark.parametrize("how", ["journal", "portalocker"])
def test_lock_timeout_names_the_holder(tmp_path: Path, how: str) -> None:
    root = tmp_path / "s"
    store = journal.open(root, lock_timeout=0.3)
    try:
        store.save(Checkpoint.empty("a"))
        lock_path = os.path.join(store.session_dir("a"), LOCK_FILE)
        child = _hold(lock_path, how)
        try:
            started = time.monotonic()
            with pytest.raises(journal.LockTimeoutError) as info:
                store.append_event("a", 1, Event(msg={"type": "warning", "message": "x"}))
            assert time.monotonic() - started >= 0.3
            message = str(info.value)
            assert "timed out after 0.3s" in message and lock_path in message
            if how == "journal":  # our holders write who they are
                assert f"pid={child.pid}" in message and f"host={socket.gethostname()}" in message
                assert "since=" in message
        finally:
            child.kill()
            child.wait()
        # the holder is gone: the next call goes through, nothing was written meanwhile
        appended = store.append_event("a", 2, Event(msg={"type": "warning", "message": "y"}))
        assert appended.sequence == 1
    finally:
        store.close()


def test_concurrent_commits_share_fdatasyncs(tmp_path: Path) -> None:
    """Group commit: 4 threads appending to one session need far fewer syncs than commits,
    and no append returns before a sync that started after its write."""
    import threading

    # reaches inside: fails the write of the lock's holder line

    store = journal.open(tmp_path / "s")
    store.save(Checkpoint.empty("a"))
    lock = threading.Lock()
    syncs: list[tuple[float, float]] = []  # (started, finished)
    real = fsio.ops

    class SlowDisk(fsio.FileOps):
        def sync_data(self, fd: int, path: str) -> None:
            started = time.monotonic()
            time.sleep(0.002)  # a slow disk: commits pile up behind each sync
            real.sync_data(fd, path)
            with lock:
                syncs.append((started, time.monotonic()))

    written: list[tuple[float, float]] = []  # (commit written before, returned)
    fsio.ops = SlowDisk()
    try:

        def worker(k: int) -> None:
            for n in range(40):
                before = time.monotonic()
                store.append_event("a", n, Event(msg={"type": "warning", "message": f"{k}/{n}"}))
                with lock:
                    written.append((before, time.monotonic()))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        fsio.ops = real
        store.close()
    commits = len(written)
    assert commits == 160
    assert len(syncs) <= commits // 2, f"{len(syncs)} syncs for {commits} commits"
    # every append returned after some sync finished that began after the append began
    for began, returned in written:
        assert any(s >= began and f <= returned for s, f in syncs)

"""The write lock of one conversation, across the threads and processes of one host.

A conversation's writes (saves, deletes, forks from it) check its revision and
commit under this lock, so a check and its commit are one step even when a
delete takes the session away and a save creates it again in between. It is an
exclusive `flock` on the session's directory, taken after this process's thread
lock for the directory (so threads wait on a `threading.Lock`, not by
polling). The directory is checked again once locked: a session deleted and
created anew is never locked through its old directory. A session that does not
exist is not locked (`held` is False): creating one is atomic in the journal.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from journal import LockTimeoutError, StorageError

try:
    import fcntl as _fcntl_module

    _fcntl: Any = _fcntl_module
except ImportError:  # pragma: no cover - Windows: this process's lock only
    _fcntl = None

# Striped: a fixed number of thread locks, so their memory does not grow with the
# number of conversations. Two conversations that share a stripe wait for each
# other in this process; nothing holds two conversation locks at once.
_STRIPES = 64
_thread_locks = [threading.Lock() for _ in range(_STRIPES)]


def _thread_lock(path: str) -> threading.Lock:
    return _thread_locks[hash(path) % _STRIPES]


class ConversationLock:
    """`with ConversationLock(dir, timeout) as held:` (held: the directory exists)."""

    def __init__(self, path: str, timeout: float):
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None
        self._thread = _thread_lock(path)

    def __enter__(self) -> bool:
        deadline = time.monotonic() + self.timeout
        if not self._thread.acquire(timeout=max(self.timeout, 0.0)):
            raise LockTimeoutError(f"conversation lock {self.path} not free after {self.timeout} s")
        try:
            return self._lock_dir(deadline)
        except BaseException:
            self._thread.release()
            raise

    def _lock_dir(self, deadline: float) -> bool:
        while True:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise StorageError(f"cannot open session directory {self.path}: {exc}") from exc
            try:
                if _fcntl is not None:
                    self._flock(fd, deadline)
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self._fd = fd
                return True
            os.close(fd)  # replaced meanwhile: lock the new one (or none)

    def _flock(self, fd: int, deadline: float) -> None:
        delay = 0.0005
        while True:
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeoutError(
                        f"conversation lock {self.path} not free after {self.timeout} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.01)

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                os.close(self._fd)  # releases the flock
                self._fd = None
        finally:
            self._thread.release()

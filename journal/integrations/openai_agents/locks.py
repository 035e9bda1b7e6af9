"""The locks of a session: one per session in this process, and the clear lock across
processes (an `flock` on the session directory)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from journal import LockTimeoutError, StorageError

try:
    import fcntl as _fcntl_module

    _fcntl: Any = _fcntl_module
except ImportError:  # pragma: no cover - Windows
    _fcntl = None

# One lock per (store root, session id) in this process, shared by every
# JournalSession object (and every event loop) that works on that session.
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def session_lock(root: str, session_id: str) -> threading.Lock:
    """This process's lock of a session, which every operation on it holds."""
    with _locks_guard:
        lock = _locks.get((root, session_id))
        if lock is None:
            lock = _locks[(root, session_id)] = threading.Lock()
        return lock


class DirLock:
    """An exclusive `flock` on a session directory, held across one clear.

    Enters with False when the session does not exist. The directory is checked
    again after locking, so a session deleted and created anew is never locked
    through its old directory. Without `fcntl` (Windows) only this process's lock
    applies.
    """

    def __init__(self, path: str, timeout: float):
        self.path = path
        self.timeout = timeout
        self.fd: int | None = None

    def __enter__(self) -> bool:
        deadline = time.monotonic() + self.timeout
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
                self.fd = fd
                return True
            os.close(fd)  # replaced meanwhile: lock the new one

    def _flock(self, fd: int, deadline: float) -> None:
        while True:
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeoutError(
                        f"clear lock of {self.path} not free after {self.timeout} s"
                    ) from None
                time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the flock
            self.fd = None

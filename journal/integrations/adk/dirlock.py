"""The lock an ADK write holds across processes: an `flock` on a directory.

On a session directory: `append_event` reads the session's checkpoint and
commits the next one under it, and `delete_session` deletes under it, so an
append never re-creates a session a delete has just removed (a journal save to
a missing id creates one).
Two appends exclude each other too, though the journal's own sequence rule
already refuses the second of two writers that read the same checkpoint.
`scoped` takes it on an `app:`/`user:` scope's state directory to compare
and write stamped values. Each lock opens its own descriptor, so it excludes
threads of this process as well. Without `fcntl` (Windows) nothing is locked:
only the sequence rule orders appends, and two processes writing one
`app:`/`user:` key at once may leave the lower stamp.
"""

from __future__ import annotations

import os
import time
from typing import Any

from journal import LockTimeoutError, StorageError

try:
    import fcntl as _fcntl_module

    _fcntl: Any = _fcntl_module
except ImportError:  # pragma: no cover - Windows
    _fcntl = None


class DirLock:
    """An exclusive `flock` on a directory (a session's, a state scope's); enters
    with False if there is none.

    The directory is checked again once locked, so a session deleted (and maybe
    created anew) meanwhile is never locked through its old directory.
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
            os.close(fd)  # replaced meanwhile: lock the new one, or find none

    def _flock(self, fd: int, deadline: float) -> None:
        delay = 0.0005
        while True:
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeoutError(
                        f"ADK session lock of {self.path} not free after {self.timeout} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.01)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the flock
            self.fd = None

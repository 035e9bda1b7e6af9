"""`DirLock`: an exclusive `flock` on a session (or state scope) directory, which
the integrations hold across a read-then-write of one session across processes.

`with DirLock(path, timeout, "what") as exists:` enters with False when the
directory does not exist. The directory is checked again once locked, so a
session deleted (and maybe created anew) meanwhile is never locked through its
old directory. Each lock opens its own descriptor, so it excludes the threads of
this process too. Without `fcntl` (Windows) nothing is locked and the caller
relies on the journal's own rules (a checkpoint sequence that must advance,
`expected_latest`). No framework is imported here.
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
    """An exclusive `flock` on the directory `path` (see the module doc)."""

    def __init__(self, path: str, timeout: float, what: str = "session lock"):
        self.path = path
        self.timeout = timeout
        self.what = what
        self.fd: int | None = None

    def __enter__(self) -> bool:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise StorageError(f"cannot open directory {self.path}: {exc}") from exc
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
                        f"{self.what} of {self.path} not free after {self.timeout} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.01)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the flock
            self.fd = None

"""Cross-process writer locks (portalocker/flock) that name their holder.

On POSIX the lock is flock(2), called directly (portalocker makes the same call
there, after flag conversions that cost more than the lock itself on every
commit); elsewhere portalocker's implementation is used. Either way processes
using portalocker on the same files exclude each other.

A lock file holds one line "pid host since" written by the current holder, so
a waiter that times out can say who holds the lock. The lock is taken once per
commit (flock is a few microseconds); in-process threads are serialised by the
caller's own `threading.Lock` first, because flock does not exclude threads
that share the file description.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from datetime import datetime, timezone

import portalocker

from .errors import LockTimeoutError, StorageError

try:  # POSIX: call flock(2) directly, the very call portalocker makes there
    import fcntl

    _flock: Callable[[int, int], None] | None = fcntl.flock
    _LOCK_NOW, _UNLOCK = fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN
except ImportError:  # elsewhere (Windows): portalocker's implementation
    _flock = None
    _LOCK_NOW = _UNLOCK = 0

_HOLDER_WIDTH = 160
_HOST = socket.gethostname()
# Combined once: enum arithmetic on every commit costs more than the flock itself.
_EXCLUSIVE_NOW = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING


_line_cache: tuple[int, int, bytes] = (0, 0, b"")  # (pid, second, line)


def _holder_line() -> bytes:
    """This process's holder line for now (formatted once a second: every new
    session's lock writes one)."""
    global _line_cache
    pid, second = os.getpid(), int(time.time())
    cached = _line_cache
    if cached[0] == pid and cached[1] == second:
        return cached[2]
    since = datetime.fromtimestamp(second, timezone.utc).isoformat(timespec="seconds")
    text = f"pid={pid} host={_HOST} since={since}".encode()[: _HOLDER_WIDTH - 1]
    line = text.ljust(_HOLDER_WIDTH - 1) + b"\n"
    _line_cache = (pid, second, line)
    return line


class FileLock:
    """An exclusive lock on `path`, re-entrant only through the caller's own lock."""

    def __init__(self, path: str, what: str):
        self.path = path
        self.what = what
        self._fd: int | None = None
        self._line = b""  # the holder line this object wrote last, and when
        self._line_at = 0.0

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StorageError(f"cannot open lock file {self.path}: {exc.strerror}") from exc
        return self._fd

    def acquire(self, timeout: float) -> None:
        fd = self._open()
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while not self._try_lock(fd):
            if time.monotonic() >= deadline:
                holder = self.holder()
                raise LockTimeoutError(
                    f"timed out after {timeout:g}s waiting for the writer lock of {self.what}"
                    f" ({self.path}); held by {holder or 'an unknown process'}",
                    holder=holder,
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        # The holder line is a courtesy for error messages, never required. Writing it
        # dirties the lock file on every commit, so skip it while the line on file is
        # still ours and at most a second old (a cheap read, no dirty page).
        now = time.monotonic()
        with contextlib.suppress(OSError):
            if (
                self._line
                and now - self._line_at < 1.0
                and os.pread(fd, len(self._line), 0) == self._line
            ):
                return
            line = _holder_line()
            os.pwrite(fd, line, 0)
            self._line, self._line_at = line, now

    def release(self) -> None:
        if self._fd is not None:
            try:
                if _flock is not None:
                    _flock(self._fd, _UNLOCK)
                else:
                    portalocker.unlock(self._fd)
            except (OSError, portalocker.exceptions.LockException) as exc:
                raise StorageError(f"cannot release lock {self.path}: {exc}") from exc

    def try_acquire(self) -> bool:
        """Take the lock if free, without waiting."""
        return self._try_lock(self._open())

    def _try_lock(self, fd: int) -> bool:
        """One non-blocking attempt: True if we hold the lock now."""
        if _flock is None:
            try:
                portalocker.lock(fd, _EXCLUSIVE_NOW)
            except portalocker.exceptions.LockException:
                return False
            return True
        try:
            _flock(fd, _LOCK_NOW)
        except BlockingIOError:  # EWOULDBLOCK: another open file holds it
            return False
        except OSError as exc:
            raise StorageError(f"cannot lock {self.path}: {exc.strerror}") from exc
        return True

    def holder(self) -> str | None:
        try:
            with open(self.path, "rb") as f:
                text = f.read(_HOLDER_WIDTH).decode("utf-8", "replace").strip()
        except OSError:
            return None
        return text or None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

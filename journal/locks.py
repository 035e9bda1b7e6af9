"""Cross-process writer locks (portalocker/flock) that name their holder.

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
from datetime import datetime, timezone

import portalocker

from .errors import LockTimeoutError, StorageError

_HOLDER_WIDTH = 160
_HOST = socket.gethostname()
# Combined once: enum arithmetic on every commit costs more than the flock itself.
_EXCLUSIVE_NOW = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING


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
        while True:
            try:
                portalocker.lock(fd, _EXCLUSIVE_NOW)
                break
            except portalocker.exceptions.LockException as exc:
                if time.monotonic() >= deadline:
                    holder = self.holder()
                    raise LockTimeoutError(
                        f"timed out after {timeout:g}s waiting for the writer lock of {self.what}"
                        f" ({self.path}); held by {holder or 'an unknown process'}",
                        holder=holder,
                    ) from exc
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
            since = datetime.now(timezone.utc).isoformat(timespec="seconds")
            text = f"pid={os.getpid()} host={_HOST} since={since}".encode()[: _HOLDER_WIDTH - 1]
            line = text.ljust(_HOLDER_WIDTH - 1) + b"\n"
            os.pwrite(fd, line, 0)
            self._line, self._line_at = line, now

    def release(self) -> None:
        if self._fd is not None:
            try:
                portalocker.unlock(self._fd)
            except portalocker.exceptions.LockException as exc:
                raise StorageError(f"cannot release lock {self.path}: {exc}") from exc

    def try_acquire(self) -> bool:
        """Take the lock if free, without waiting."""
        fd = self._open()
        try:
            portalocker.lock(fd, _EXCLUSIVE_NOW)
        except portalocker.exceptions.LockException:
            return False
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

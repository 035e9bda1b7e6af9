"""Cross-process writer locks (portalocker/flock) that name their holder.

On POSIX the lock is flock(2), called directly (portalocker makes the same call
there, after flag conversions that cost more than the lock itself on every
commit); elsewhere portalocker's implementation is used. Either way processes
using portalocker on the same files exclude each other.

A lock file holds one line "pid host since lock" written by the current holder,
so a waiter that times out can say who holds the lock. `lock` is a token unique
to the `FileLock` object, so the line also tells a holder whether anyone else
held the lock since it last wrote the line (`acquire` returns that): a session
writer that finds its own line skips re-reading the log's end (see
`locking.SessionLocking`). The lock is taken once per commit (flock is a few
microseconds); in-process threads are serialised by the caller's own
`threading.Lock` first, because flock does not exclude threads that share the
file description.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime, timezone

from .errors import LockTimeoutError, StorageError

try:  # POSIX: call flock(2) directly, the very call portalocker makes there
    import fcntl

    _flock: Callable[[int, int], None] | None = fcntl.flock
    _LOCK_NOW, _UNLOCK = fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.LOCK_UN
    _RELEASE_ERRORS: tuple[type[Exception], ...] = (OSError,)
except ImportError:  # elsewhere (Windows): portalocker's implementation
    # Imported only here: on POSIX it is never called, and importing it (it imports
    # importlib.metadata, logging, json...) costs more than the rest of this module.
    import portalocker

    _flock = None
    _LOCK_NOW = _UNLOCK = 0
    # Combined once: enum arithmetic on every commit costs more than the lock itself.
    _EXCLUSIVE_NOW = portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
    _RELEASE_ERRORS = (OSError, portalocker.exceptions.LockException)

_HOLDER_WIDTH = 160


_prefix_cache: tuple[int, int, str] = (0, 0, "")  # (pid, second, "pid=.. host=.. since=..")
_host = ""  # the host name, asked on the first holder line (never at import)


def _holder_prefix() -> str:
    """This process's holder line up to its lock token, for now (formatted once a
    second: every new session's lock writes a line)."""
    global _prefix_cache, _host
    pid, second = os.getpid(), int(time.time())
    cached = _prefix_cache
    if cached[0] == pid and cached[1] == second:
        return cached[2]
    if not _host:
        if hasattr(os, "uname"):  # POSIX: gethostname(2) reads this very field
            _host = os.uname().nodename
        else:
            import socket

            _host = socket.gethostname()
    since = datetime.fromtimestamp(second, timezone.utc).isoformat(timespec="seconds")
    prefix = f"pid={pid} host={_host} since={since}"
    _prefix_cache = (pid, second, prefix)
    return prefix


# Bumped in a forked child: a lock object it inherited shares its descriptor's open
# file with the parent, and flock does not exclude the two; nor may the child take
# the parent's holder line (same token) for its own. Such an object drops both.
_generation = 0


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class FileLock:
    """An exclusive lock on `path`, re-entrant only through the caller's own lock."""

    def __init__(self, path: str, what: str):
        self.path = path
        self.what = what
        self._fd: int | None = None
        self._line = b""  # the holder line this object wrote last, and when
        self._line_at = 0.0
        self._token = os.urandom(6).hex()
        self._generation = _generation
        # Successful locks through this object (acquire and try_acquire): a caller
        # that remembers the count at its release knows whether this object was
        # locked by someone else in this process meanwhile (the line cannot tell).
        self.acquisitions = 0

    def open(self) -> None:
        """Open the lock file now, without locking it (`acquire` opens it otherwise)."""
        self._open()

    def _open(self) -> int:
        if self._generation != _generation:
            self._forget_inherited()
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StorageError(f"cannot open lock file {self.path}: {exc.strerror}") from exc
        return self._fd

    def _forget_inherited(self) -> None:
        """In a forked child: a descriptor and token of our own (the parent's lock, if it
        holds one, stays the parent's: closing our copy of the descriptor keeps it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._line, self._token = b"", os.urandom(6).hex()
        self._generation = _generation
        self.acquisitions += 1  # nothing remembered about the parent's locks holds here

    def acquire(self, timeout: float) -> bool:
        """Take the lock, waiting up to `timeout` seconds (`LockTimeoutError` names
        the holder). Returns whether the lock file still held this object's own
        holder line: if so, no other `FileLock`, in any process, took the lock
        since this one last did (every `acquire` writes its own line first)."""
        fd = self._fd
        if fd is None or self._generation != _generation:
            fd = self._open()
        if not self._try_lock(fd):
            self._wait_for_lock(fd, timeout)
        self.acquisitions += 1
        line = self._line
        try:
            ours = bool(line) and os.pread(fd, len(line), 0) == line
        except OSError:
            ours = False
        # Rewriting the line dirties the lock file, so it is skipped while the line
        # on file is ours and at most a second old (its "since" is that coarse).
        now = time.monotonic()
        if not ours or now - self._line_at >= 1.0:
            try:
                self._write_line(fd, now)
            except BaseException:
                self.release()
                raise
        return ours

    def still_linked(self) -> bool:
        """Does the lock file still have a name? (one fstat of the lock file, never of
        the file it guards: see `Log.writer_at`) False once its directory was
        removed, by hand or by a delete's trash."""
        fd = self._fd
        if fd is None:
            return False
        try:
            return os.fstat(fd).st_nlink > 0
        except OSError:
            return False

    def is_at_path(self) -> bool:
        """Is our descriptor still the file at `path`? (an fstat and a stat of the lock
        file: its directory renamed away leaves us locking a file nobody else uses)"""
        fd = self._fd
        if fd is None:
            return False
        try:
            return os.path.samestat(os.fstat(fd), os.stat(self.path))
        except OSError:
            return False

    def line_is_ours(self) -> bool:
        """Is this object's holder line still on file? (one pread, no lock taken): if
        so, no other `FileLock` took the lock since this one last wrote it."""
        line, fd = self._line, self._fd
        if not line or fd is None or self._generation != _generation:
            return False
        try:
            return os.pread(fd, len(line), 0) == line
        except OSError:
            return False

    def _wait_for_lock(self, fd: int, timeout: float) -> None:
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

    def _write_line(self, fd: int, now: float) -> None:
        text = f"{_holder_prefix()} lock={self._token}".encode()
        line = text[: _HOLDER_WIDTH - 1].ljust(_HOLDER_WIDTH - 1) + b"\n"
        try:
            os.pwrite(fd, line, 0)
        except OSError as exc:
            # Another holder's line left in place would tell its owner that nobody
            # else held the lock: blank the file instead (needs no space).
            self._line = b""
            try:
                os.ftruncate(fd, 0)
            except OSError:
                raise StorageError(
                    f"cannot record the holder of lock {self.path}: {exc.strerror}"
                ) from exc
            return
        self._line, self._line_at = line, now

    def release(self) -> None:
        if self._fd is not None:
            try:
                if _flock is not None:
                    _flock(self._fd, _UNLOCK)
                else:
                    portalocker.unlock(self._fd)
            except _RELEASE_ERRORS as exc:
                raise StorageError(f"cannot release lock {self.path}: {exc}") from exc

    def try_acquire(self, *, record: bool = False) -> bool:
        """Take the lock if free, without waiting. Only with `record` is the holder
        line written: callers that change what the lock guards must record it."""
        fd = self._open()
        if not self._try_lock(fd):
            return False
        self.acquisitions += 1
        if record:
            try:
                self._write_line(fd, time.monotonic())
            except BaseException:
                self.release()
                raise
        return True

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

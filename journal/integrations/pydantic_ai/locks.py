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

import threading
import time

from journal import LockTimeoutError

from ..dirlock import DirLock

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
        self._thread = _thread_lock(path)
        self._dir = DirLock(path, timeout, "conversation lock")

    def __enter__(self) -> bool:
        started = time.monotonic()
        if not self._thread.acquire(timeout=max(self.timeout, 0.0)):
            raise LockTimeoutError(f"conversation lock {self.path} not free after {self.timeout} s")
        try:
            self._dir.timeout = max(self.timeout - (time.monotonic() - started), 0.0)
            return self._dir.__enter__()
        except BaseException:
            self._thread.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._dir.__exit__(*exc)
        finally:
            self._thread.release()

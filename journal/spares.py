"""Spare session directories, built and synced in tmp/ before a new session needs one.

Creating a session (first save, fork) used to create two directories and three
files and sync both directories on its critical path; file creation alone costs
about 0.35 ms each on some disks. A spare has all of that done, durably, ahead of
time (`sessiondir.build_spare`): taking one leaves the identity to write in place
(its sync overlaps the first commit's writing), the first commit (its fdatasync
starts once it is written), and the rename that publishes it once both are
durable, followed by the sync of `sessions/` (`Store._stage`).

A spare is kept with its identity file and its first segment open for writing
(`Spare`): the new session writes both, and syncs both, through those
descriptors, so its critical path opens no file either.

A spare is garbage until that rename, like any half-built directory in tmp/:
a crash leaves it for `Store._clean_tmp`, which removes tmp/ entries older than
ten minutes. So a spare is used only while it is younger than five: another
process cannot be removing it under us.

Refills run in one background thread, woken after a spare is taken; it exits
after `IDLE_EXIT` seconds without a request (the next one starts it again).
With a file-operations recorder that cannot run concurrently
(`fsio.ops.concurrent` False, the power-loss tests), they run in the calling
thread instead, so every operation stays in one recorded order.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from . import fsio, sessiondir
from .errors import JournalError
from .layout import LOCK_FILE, SPARE_PREFIX
from .locks import FileLock
from .rootcheck import RootGuard
from .sessiondir import SessionIdentity

T = TypeVar("T")

MAX_AGE = 300.0  # seconds; tmp/ cleanup removes entries older than 600
MAX_JOBS = 4  # background jobs kept waiting (`run_soon`); older ones are dropped
IDLE_EXIT = 30.0  # seconds without a refill request before the refiller thread exits


class Spare:
    """A spare directory ready for use, with its identity file and its first segment
    open for writing (opened when it was built, off the critical path: the new
    session writes and syncs them through these descriptors, opening nothing).

    Whoever takes it owns the descriptors: `close` them once done (after the syncs
    through them have finished), or `discard` the whole spare.
    """

    __slots__ = (
        "built",
        "identity_fd",
        "identity_path",
        "lock",
        "path",
        "segment_fd",
        "segment_path",
    )

    def __init__(
        self, path: str, built: float, identity_fd: int, segment_fd: int, lock: FileLock
    ) -> None:
        self.path = path
        self.built = built
        self.identity_fd = identity_fd
        self.segment_fd = segment_fd
        self.lock = lock  # its LOCK file, open: what publishing it locks (`_Staged`)
        # made here, by the refiller: the new session's critical path joins no path
        self.identity_path = sessiondir.identity_file(path)
        self.segment_path = sessiondir.segment_files(path)[0]

    @classmethod
    def open(cls, path: str) -> Spare:
        """The spare `sessiondir.build_spare` laid out at `path`, its two files opened."""
        identity_fd = os.open(sessiondir.identity_file(path), os.O_RDWR)
        lock = FileLock(os.path.join(path, LOCK_FILE), "a session being published")
        try:
            segment_fd = os.open(sessiondir.segment_files(path)[0], os.O_WRONLY)
            try:
                lock.open()
            except BaseException:
                os.close(segment_fd)
                raise
        except BaseException:
            os.close(identity_fd)
            raise
        return cls(path, time.monotonic(), identity_fd, segment_fd, lock)

    def fill(self, identity: SessionIdentity) -> None:
        """Write the new session's identity into it (`sessiondir.fill_spare`)."""
        paths = (self.identity_path, self.segment_path)
        sessiondir.fill_spare(self.path, identity, self.identity_fd, paths)

    def close(self) -> None:
        """Close its descriptors (the directory stays)."""
        for fd in (self.identity_fd, self.segment_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.identity_fd = self.segment_fd = -1
        with contextlib.suppress(OSError):
            self.lock.close()

    def discard(self) -> None:
        """Close it and remove its directory."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


class SparePool:
    """This store's spare session directories (its own; other processes keep theirs)."""

    def __init__(self, tmp_dir: str, *, target: int = 2, guard: RootGuard | None = None) -> None:
        self.tmp_dir = tmp_dir
        # Spares are built by path (parents and all): only in the root the store
        # opened, never in a directory put at its path since (see `RootGuard`).
        self.guard = guard
        self.target = target
        self._ready: list[Spare] = []
        self._lock = threading.Lock()
        # One refiller thread, woken through `_wake` while refills keep coming
        # (it exits after IDLE_EXIT): starting a thread per refill cost the caller
        # up to 2.5 ms here (the new thread takes the GIL to build a spare before
        # `Thread.start` returns).
        self._wake = threading.Condition(self._lock)
        self._wanted = False  # a refill was asked for and has not begun
        self._busy = False  # the refiller is building spares now
        self._refiller: threading.Thread | None = None
        self._closed = False
        self._pid = os.getpid()
        # Jobs for the same thread (`run_soon`), the newest few: when sessions are
        # created faster than they are warmed, the oldest jobs are dropped.
        self._jobs: collections.deque[Callable[[], None]] = collections.deque(maxlen=MAX_JOBS)

    def take(self) -> Spare | None:
        """A ready spare directory (now the caller's, descriptors and all), or None."""
        if os.getpid() != self._pid:
            return None  # a forked child: these spares are its parent's to use
        if self.guard is not None and not self.guard.is_same():
            return None  # built in a root that is no longer at its path
        while True:
            with self._lock:
                if not self._ready:
                    return None
                spare = self._ready.pop(0)  # the oldest first: none grows too old
            if time.monotonic() - spare.built < MAX_AGE:
                return spare
            spare.discard()  # too old to be sure it is still ours

    def refill_soon(self) -> None:
        """Top the pool up: in the background thread, or here (see the module doc)."""
        if os.getpid() != self._pid:
            return
        if not fsio.ops.concurrent:
            self._refill()
            return
        with self._lock:
            if self._closed or len(self._ready) >= self.target:
                return
            self._wake_refiller()

    def run_soon(self, job: Callable[[], None]) -> None:
        """Run `job` in the background thread before its next refill (best effort:
        its errors are ignored; of more than `MAX_JOBS` waiting, the oldest are
        dropped). Skipped under a file-operations recorder that cannot run
        concurrently (the job is optional work, see the module doc)."""
        if os.getpid() != self._pid or not fsio.ops.concurrent:
            return
        with self._lock:
            if self._closed:
                return
            self._jobs.append(job)
            self._wake_refiller()

    def _wake_refiller(self) -> None:
        """(lock held) Have the background thread run soon, starting it if needed."""
        self._wanted = True
        if self._refiller is None:
            self._refiller = threading.Thread(
                target=self._serve, name="journal-spares", daemon=True
            )
            self._refiller.start()
        else:
            self._wake.notify()

    def _serve(self) -> None:
        while True:
            with self._lock:
                if not self._wanted and not self._closed:
                    self._wake.wait(IDLE_EXIT)
                if self._closed or not self._wanted:
                    # Closed, or idle for a while: exit (a store dropped without
                    # close() must not keep a thread forever); the next refill
                    # request starts a new one.
                    self._refiller = None
                    self._wake.notify_all()
                    return
                self._wanted, self._busy = False, True
                jobs = list(self._jobs)
                self._jobs.clear()
            try:
                for job in jobs:
                    with contextlib.suppress(Exception):  # optional work
                        job()
                # Best effort: whatever fails, a new session builds its directory itself.
                with contextlib.suppress(Exception):
                    self._refill()
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()  # `wait` callers

    def _refill(self) -> None:
        while True:
            with self._lock:
                if self._closed or len(self._ready) >= self.target:
                    return
            path = os.path.join(self.tmp_dir, f"{SPARE_PREFIX}{uuid.uuid4().hex}")
            if self.guard is not None and not self.guard.is_same():
                return
            try:
                sessiondir.build_spare(path)
                spare = Spare.open(path)
            except (OSError, JournalError):
                # Best effort: a new session then builds its directory itself.
                shutil.rmtree(path, ignore_errors=True)
                return
            with self._lock:
                if not self._closed:
                    self._ready.append(spare)
                    continue
            spare.discard()
            return

    def wait(self) -> None:
        """Until no refill is asked for or running (benchmarks that must not overlap it)."""
        if os.getpid() != self._pid:
            return  # a forked child: the refiller thread is its parent's
        with self._lock:
            while (self._wanted or self._busy) and self._refiller is not None:
                if not self._refiller.is_alive():
                    return
                self._wake.wait(0.1)

    def close(self) -> None:
        """Stop refilling and remove the unused spares (garbage, but tidy)."""
        with self._lock:
            self._closed = True
            refiller = self._refiller
            self._wake.notify_all()
        if os.getpid() != self._pid:
            return  # a forked child: not its spares to remove
        if refiller is not None:
            refiller.join()
        with self._lock:
            ready, self._ready = self._ready, []
        for spare in ready:
            spare.discard()


LOW_PRIORITY_NICE = 10  # not 19: at 19 a busy machine starved it for seconds (review)
LOW_PRIORITY_POLL = 0.05  # seconds between checks of `give_up` while it runs


def at_low_priority(fn: Callable[[], T], give_up: Callable[[], bool]) -> T | None:
    """`fn()`, computed in a new thread at a lower CPU priority, for a background job's
    CPU-heavy step (training a session's dictionary: about 10 ms). On a small machine
    that work otherwise takes a core from the threads the callers wait on: 4 threads
    appending to one session lost 30-40% of their rate while it ran. The step must
    release the GIL (zstd's trainer does). Linux only: there, a thread has its own
    nice value. Elsewhere the thread's id may be another process's pid, so `fn` runs
    at normal priority.

    Returns None, leaving the thread to finish unheard, as soon as `give_up()` is
    true (the store is closing: its close must not wait for optional work)."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOW_PRIORITY_NICE)
        try:
            out.append(fn())
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=run, name="journal-background-cpu", daemon=True)
    worker.start()
    while worker.is_alive():
        if give_up():
            return None
        worker.join(LOW_PRIORITY_POLL)
    if failed:
        raise failed[0]
    return out[0]

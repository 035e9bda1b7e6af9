"""Spare session directories, built and synced in tmp/ before a new session needs one.

Creating a session (first save, fork) creates two directories and three files and
syncs both directories; file creation alone costs about 0.35 ms each on some
disks. A spare has all of that done, durably, ahead of time
(`sessiondir.build_spare`): taking one leaves the identity to write in place (its
sync overlaps the first commit's writing), the first commit (its fdatasync starts
once it is written), and the rename that publishes it once both are durable,
followed by the sync of `sessions/` (`publish.Publisher.stage`).

A spare is kept with its identity file and its first segment open for writing
(`Spare`): the new session writes both, and syncs both, through those
descriptors, so its critical path opens no file either.

A spare is garbage until that rename, like any half-built directory in tmp/:
a crash leaves it for `upkeep.clean_tmp`, which removes tmp/ entries older than
ten minutes. So a spare is used only while it is younger than five: another
process cannot be removing it under us.

Refills run in the store's background thread (`jobs.JobRunner`), asked for after
a spare is taken.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid

from . import fsio, sessiondir
from .errors import JournalError
from .jobs import JobRunner
from .layout import LOCK_FILE, SPARE_PREFIX
from .locks import FileLock
from .rootcheck import RootGuard
from .sessiondir import SessionIdentity

MAX_AGE = 300.0  # seconds; tmp/ cleanup removes entries older than 600


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
        self.lock = lock  # its LOCK file, open: what publishing it locks (`publish.Staged`)
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
        fsio.remove_tree(self.path)


class SparePool:
    """This store's spare session directories (its own; other processes keep theirs),
    refilled by the store's background thread (`JobRunner.request`)."""

    def __init__(
        self, tmp_dir: str, jobs: JobRunner, *, target: int = 2, guard: RootGuard | None = None
    ) -> None:
        self.tmp_dir = tmp_dir
        self.jobs = jobs
        # Spares are built by path (parents and all): only in the root the store
        # opened, never in a directory put at its path since (see `RootGuard`).
        self.guard = guard
        self.target = target
        self._ready: list[Spare] = []
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()

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
        """Top the pool up, in the background (`JobRunner.request`)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            if self._closed or len(self._ready) >= self.target:
                return
        self.jobs.request(self._refill)

    def _refill(self) -> None:
        """Build spares until the pool is full (best effort: whatever fails, a new
        session builds its directory itself)."""
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
                fsio.remove_tree(path)
                return
            with self._lock:
                if not self._closed:
                    self._ready.append(spare)
                    continue
            spare.discard()
            return

    def wait(self) -> None:
        """Until the background thread that refills the pool is idle (benchmarks that
        must not overlap a refill)."""
        self.jobs.wait()

    def close(self) -> None:
        """Stop refilling and remove the unused spares (garbage, but tidy). A refill
        running meanwhile removes what it builds: close the `JobRunner` after this to
        wait for it."""
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        if os.getpid() != self._pid:
            return  # a forked child: not its spares to remove
        for spare in ready:
            spare.discard()

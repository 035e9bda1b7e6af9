"""The open end of a log: the newest segment while a process appends to it.

A `SegmentWriter` holds the segment's read-write descriptor and three positions:
where the data ends, how far the file is preallocated with zeros, and how far it
is synced. Committers append under the session's write lock and then wait for
their bytes to be durable on the writer's own lock; `sync_to` is group commit:
one thread syncs (the leader) while the others wait, and usually find their
bytes covered by its fdatasync. `GroupCommit` counts the commits on their way
to the write lock, so that a leader can wait briefly for them and cover them
with the same sync.

`Log` (log.py) opens writers, rolls full segments and closes them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from . import fsio
from .errors import StorageError
from .record import HEADER_SIZE
from .segment import SEGMENT_HEADER_SIZE, Segment

PREALLOC_MIN = 64 << 10  # the first preallocation step; steps double up to PREALLOC_MAX
PREALLOC_MAX = 4 << 20
GATHER_MAX = 0.002  # the longest a sync leader waits for announced commits (seconds)
_ZERO_HEADER = bytes(HEADER_SIZE)


class SegmentWriter:
    """The open newest segment of a log, as its writer appends and syncs it."""

    __slots__ = (
        "alloc_end",
        "cond",
        "data_end",
        "fd",
        "lock",
        "poisoned",
        "seg",
        "synced_end",
        "syncing",
        "waiters",
    )

    def __init__(
        self, fd: int, seg: Segment, *, data_end: int, alloc_end: int, synced_end: int = 0
    ) -> None:
        self.fd = fd
        self.seg = seg
        self.data_end = data_end  # log position after the last written byte
        self.alloc_end = alloc_end  # log position where the file ends (zeros beyond data_end)
        self.synced_end = synced_end
        self.syncing = False  # a leader is in its fdatasync
        self.poisoned = ""  # why this writer must not write again (a failed write or sync)
        # `with lock` where nothing waits (Condition.__enter__ is a Python-level call),
        # and `notify_all` only when someone waits (`waiters`, counted under the lock):
        # a lone writer's commit then pays neither.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.waiters = 0

    def wait(self, timeout: float | None = None) -> None:
        """`cond.wait`, counted (call it holding `lock`)."""
        self.waiters += 1
        try:
            self.cond.wait(timeout)
        finally:
            self.waiters -= 1

    def wake(self) -> None:
        """`cond.notify_all` if anyone waits (call it holding `lock`)."""
        if self.waiters:
            self.cond.notify_all()

    def wait_sync_done(self) -> None:
        """Wait until no leader is syncing (call it holding `lock`)."""
        while self.syncing:
            self.wait()

    def resume(self, seg: Segment, end: int) -> bool:
        """Go on appending at `end` of `seg` (the same path as this writer's), when the
        open file is still the file there (not one unlinked by recovery elsewhere)."""
        try:
            st = os.fstat(self.fd)
            same = st.st_nlink > 0 and os.path.samestat(st, os.stat(seg.path))
        except OSError as exc:
            raise StorageError(f"cannot stat {seg.path}: {exc.strerror}") from exc
        if not same:
            return False
        with self.lock:
            self.seg = seg
            self.data_end = end
            self.synced_end = min(self.synced_end, end)
            # Another process may have appended (and preallocated) since our last
            # commit, or cut a torn tail: a stale `alloc_end` below `end` would make
            # `append` "preallocate" zeros from it, over that process's committed
            # records. The file's size is the truth.
            self.alloc_end = seg.base + max(st.st_size - SEGMENT_HEADER_SIZE, 0)
        return True

    def untouched_at(self, end: int) -> bool:
        """Are the bytes at `end` still zeros of a file that still has a name? (one
        pread, one fstat: an unlinked file keeps reading zeros, and writing to it
        would lose the commit)"""
        try:
            probe = os.pread(self.fd, HEADER_SIZE, self.seg.offset(end))
            return probe == _ZERO_HEADER and os.fstat(self.fd).st_nlink > 0
        except OSError:
            return False

    def is_current(self) -> bool:
        """Is the open file still the file at its path? (one stat, one fstat)"""
        try:
            return os.path.samestat(os.fstat(self.fd), os.stat(self.seg.path))
        except OSError:
            return False

    def preallocate_step(self) -> None:
        """Write the first preallocation step of zeros after the data, and sync it."""
        fsio.pwrite(self.fd, bytes(PREALLOC_MIN), self.seg.offset(self.alloc_end), self.seg.path)
        self.alloc_end += PREALLOC_MIN
        fsio.sync_data(self.fd, self.seg.path)

    def trim(self, end: int) -> None:
        """Cut the file at log position `end` (no sync)."""
        fsio.truncate(self.fd, self.seg.offset(end), self.seg.path)
        self.alloc_end = end

    def append(self, data: bytes, *, preallocate: bool) -> int:
        """Write `data` at the data's end, first growing the zeros ahead of it when it
        does not fit (with `preallocate`); return the new end. On failure the bytes are
        zeroed again so no partial commit is left behind."""
        start = self.data_end
        end = start + len(data)
        if end > self.alloc_end and not preallocate:
            self.alloc_end = end  # the write below extends the file
        elif end > self.alloc_end:
            grow = min(max(self.alloc_end - self.seg.base, PREALLOC_MIN), PREALLOC_MAX)
            new_alloc = max(end, start + grow)
            zeros = bytes(new_alloc - self.alloc_end)
            fsio.pwrite(self.fd, zeros, self.seg.offset(self.alloc_end), self.seg.path)
            self.alloc_end = new_alloc
        off = self.seg.offset(start)
        try:
            fsio.pwrite(self.fd, data, off, self.seg.path)
        except StorageError:
            try:
                fsio.pwrite(self.fd, bytes(len(data)), off, self.seg.path)
            except StorageError as again:
                self.poisoned = str(again)
            raise
        # No lock: a syncing thread that reads the old end syncs less and another
        # round covers the rest; the new end is only set once the bytes are written.
        self.data_end = end
        return end

    def sync_to(
        self, end: int, group: GroupCommit, label: str, on_durable: Callable[[int], None]
    ) -> None:
        """Return once every byte before `end` is synced, leading a sync when no other
        thread is (see `Log.wait_durable`); `on_durable` hears of each synced end."""
        with self.lock:
            while self.synced_end < end:
                if self.poisoned:
                    raise StorageError(f"{label}: fdatasync failed earlier: {self.poisoned}")
                if self.syncing:
                    self.wait()
                    continue
                self.syncing = True
                group.gather(self)
                target = self.data_end
                self.lock.release()
                started = time.monotonic()
                try:
                    fsio.sync_data(self.fd, self.seg.path)
                except StorageError as exc:
                    self.lock.acquire()
                    self.poisoned = str(exc)
                    self.syncing = False
                    self.wake()
                    raise
                group.last_sync = time.monotonic() - started
                self.lock.acquire()
                self.syncing = False
                self.synced_end = max(self.synced_end, target)
                on_durable(target)
                self.wake()


class GroupCommit:
    """The durable commits of one log on their way to its write lock, and how long
    its last fdatasync took (how long a sync leader may wait for them)."""

    def __init__(self) -> None:
        self._arriving = 0
        self._lock = threading.Lock()
        self.last_sync = 0.0  # seconds; 0 before the first sync

    def announce(self) -> None:
        with self._lock:
            self._arriving += 1

    def arrived(self, writer: SegmentWriter | None) -> None:
        with self._lock:
            self._arriving -= 1
        # Only a sync leader waits for arrivals, and it marks `syncing` before it
        # looks at `_arriving`: a leader that saw this commit still arriving is
        # syncing now, so it is not missed.
        if writer is not None and writer.syncing:
            with writer.lock:
                writer.wake()

    def gather(self, writer: SegmentWriter) -> None:
        """(a sync leader, holding `writer.lock`) Wait for the announced commits to be
        written, for at most as long as the last sync took (`GATHER_MAX` at most)."""
        if self._arriving:
            deadline = time.monotonic() + min(self.last_sync, GATHER_MAX)
            while self._arriving:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                writer.wait(left)

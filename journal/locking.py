"""The write lock protocol of a session, and recovery under it.

A writer takes the thread lock, then the file lock (`LOCK`, across processes),
and checks that the session is still the one it opened and that no pending delete
dooms it. When nobody else held the file lock since this writer released it
("quiet"), the head is current and nothing is read; otherwise it catches up with
the log, and a first writer recovers: a torn tail is cut, an unfinished seal is
finished, damage refuses every write (docs/durability.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import (
    CorruptionError,
    JournalError,
    StorageError,
)
from .reads import SessionReads
from .scan import ScanState, Tail, TailReason
from .sessionstate import Head, KnownDamage, Recovery, SessionGone, T


class SessionLocking(SessionReads):
    """Taking and releasing the writer locks; recovery."""

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the session's write lock (threads, then processes) with the head current."""
        self._acquire_writer()
        try:
            yield
        except BaseException:
            self._writer_ready = False  # not quiet next time: see `_release_writer`
            raise
        finally:
            self._release_writer()

    def _acquire_writer(self) -> None:
        """`writing()` without a context manager (the append path calls it directly:
        three nested generator context managers cost more than the flock itself)."""
        self._writer_ready = False
        if self._private:
            self._write_lock.acquire()
            try:
                if not self.log.has_writer():
                    self.log.open_writer(self.head.covered)
            except BaseException:
                self._write_lock.release()
                raise
            self._writer_ready = True
            return
        quiet = self._acquire_locks(trust_quiet=True)
        try:
            # Fast paths, after recovery: nobody else held the lock since our last
            # commit (`quiet`: no read at all), or nobody appended since (one pread).
            # Either way the head is current and the writer in place.
            end = self.head.covered
            if quiet and not (
                self._recovered and self.log.writer_at(end) and self.flock.still_linked()
            ):
                self._check_published_and_not_doomed()  # say, the directory went away
                quiet = False
            if self.damage is not None or not (
                quiet or (self._recovered and self.log.untouched_since(end))
            ):
                state = self._catch_up(strict=not self._recovered)
                if self.damage is not None:
                    # Found by a read, anywhere in the log: writes wait for a person
                    # (`journal repair --accept-loss`), whatever the tail looks like.
                    raise KnownDamage.of(self.damage)
                if state.tail != Tail.CLEAN:
                    state = self._recover(state)
                self._recovered = True
                self.log.open_writer(self.head.covered)
        except BaseException:
            self._release_locks()
            raise
        self._writer_ready = True

    def _release_writer(self) -> None:
        if self._private:
            self._write_lock.release()
            return
        # What the next `_acquire_writer` may take for quiet: no lock through our
        # FileLock in between (a delete in this process locks it too, and so does a
        # reader classifying the tail), and our own holder line still on file. Only
        # after a section that ended well: a failed write or roll may have left the
        # log other than our bookkeeping says (a failed roll can leave a closed
        # descriptor), which the checks and a scan then see.
        self._quiet_mark = self.flock.acquisitions if self._writer_ready else -1
        self._release_locks()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The session's write locks, without preparing to write (no scan, no writer)."""
        self._acquire_locks()
        try:
            yield
        finally:
            self._release_locks()

    @contextmanager
    def held_for_delete(self, timeout: float) -> Iterator[None]:
        """Hold the session's write locks (this process's, then the file lock, waiting
        at most `timeout` seconds for it) without checking or reading anything: a
        delete holds them while it makes its intent durable, so no writer of this
        process or another commits to a session being deleted."""
        with self._write_lock:
            self.flock.acquire(timeout)
            try:
                yield
            finally:
                self.flock.release()

    def read_head(self, fn: Callable[[Head], T]) -> T:
        """`fn` of the head, called under the state lock (a consistent view of it)."""
        with self._state_lock:
            return fn(self.head)

    def _acquire_locks(self, *, trust_quiet: bool = False) -> bool:
        """Take the thread lock, then the file lock, and check that the session is
        still the one we opened (`SessionGone` if not).

        With `trust_quiet`, returns whether nobody else can have held the file lock
        since our last writer released it (see `_release_writer`); the checks are
        then skipped: whoever deletes a session, or moves a doomed one away, holds
        its lock first (FORMAT.md section 9), so they cannot have happened.
        """
        self._write_lock.acquire()
        try:
            try:
                ours = self.flock.acquire(self.options.lock_timeout)
            except StorageError:
                self._check_still_published()  # a delete moved the directory (lock file) away
                raise
            try:
                if trust_quiet and ours and self.flock.acquisitions == self._quiet_mark + 1:
                    return True
                self._check_published_and_not_doomed()
            except BaseException:
                self.flock.release()
                raise
        except BaseException:
            self._write_lock.release()
            raise
        return False

    def _check_published_and_not_doomed(self) -> None:
        """Under the lock: `SessionGone` if this session was deleted or a pending
        delete (of a deleter that died holding this lock) dooms it."""
        self._check_still_published()
        doomed = self.doomed
        if doomed is not None and doomed():
            raise SessionGone(f"session {self.id!r} is being deleted")

    def _release_locks(self) -> None:
        try:
            self.flock.release()
        finally:
            self._write_lock.release()

    @contextmanager
    def committing(self) -> Iterator[None]:
        """`writing()` for a commit, announced to group commit (`Log.announce`)."""
        if not self.options.durable:
            with self.writing():
                yield
            return
        self.log.announce()
        try:
            with self.writing():
                yield
        finally:
            self.log.arrived()

    def _recover(self, state: ScanState) -> ScanState:
        """Under the lock: nobody else is writing, so an unfinished tail is a crash."""
        if state.tail == Tail.UNCOMMITTED:
            state = self._catch_up(strict=True)
        if state.tail == Tail.CORRUPT:
            raise CorruptionError(
                f"session {self.id!r}: {state.detail}; committed data before it is readable,"
                " `journal repair` can cut the log there",
                path=state.path,
                offset=state.file_offset,
            )
        if state.tail == Tail.UNSEALED:
            self.log.finish_seal(state.end)
            self.log.list_segments()
            state = self._catch_up(strict=True)
        if state.tail == Tail.TORN:
            if state.reason == TailReason.HEADER_INCOMPLETE:
                self.log.remove_empty_newest()
            else:
                self.log.truncate_tail(state.end)
            self.recovery = Recovery(state.path, state.end, state.dropped, state.detail)
            state = self._catch_up(strict=True)
        return state

    def quiet_for_reads(self) -> bool:
        """Does what this object holds answer a read without looking at the log? (one
        pread and one fstat of LOCK, against the probes of `refresh` and the store's checks)

        Yes when this process wrote last and nobody took the lock since: our holder
        line is still in LOCK (every other writer, deleter or recovery writes its
        own first, FORMAT.md section 8), nothing here locked through our lock
        object since our writer released it (a delete in this process does), our
        head is where that writer left the log, and LOCK still has a name (the
        directory was not removed by hand). A commit that starts after this check is concurrent
        with the read, which may come before it.
        """
        mark = self._quiet_mark
        if mark < 0 or self.flock.acquisitions != mark or self.damage is not None:
            return False
        state = self.tail_state
        end = self.head.covered
        return (
            state.tail == Tail.CLEAN
            and state.end == end
            and self.log.writer_at(end)
            and self.flock.line_is_ours()
            and self.flock.still_linked()
        )

    def _trim_on_close(self) -> None:
        """Give back the preallocated tail if we wrote last (never waits for a lock)."""
        if self._private or self.deleted:
            return  # never preallocated; or its files are on their way to the trash
        if not self.log.has_writer() or not self._write_lock.acquire(blocking=False):
            return
        try:
            # Recorded: the cut changes the file, so another process's writer must
            # not take the lock for untouched since it last wrote (`acquire`).
            if not self.flock.try_acquire(record=True):
                return
            try:
                if self.log.untouched_since(self.head.covered):
                    self.log.trim_preallocation(self.head.covered)
            finally:
                self.flock.release()
        except JournalError:
            return  # a courtesy: the zeros stay, nothing is lost
        finally:
            self._write_lock.release()

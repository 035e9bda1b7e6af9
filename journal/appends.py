"""The append batching queue a `Session` owns: concurrent `append_event`s share a write.

Appends from several threads queue up; the first in line (the leader) takes the
session's write lock once and writes every queued event as its own one-record
commit in one `pwrite`, as LevelDB's writers do. Each event is still a separate
commit (a torn write keeps a prefix of them), each caller still gets its own
sequence or its own error, and durability is still group commit (`Log.wait_durable`).
Without contention the queue holds one append and this is a plain commit.

The queue knows nothing of records or heads: the session it serves (`BatchWriter`)
takes the write lock, commits a batch, and syncs.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Protocol

from .errors import JournalError
from .types import Event, JournalEvent

MAX_BATCH = 256  # appends one leader writes at most
GATHER_MAX = 0.001  # seconds a leader waits at most for the threads of its last batch


class PendingAppend:
    """One queued append_event: filled in by whichever thread commits it."""

    __slots__ = (
        "done",
        "end",
        "error",
        "event",
        "expected",
        "recorded_at_ms",
        "result",
        "shared_error",
        "taken",
    )

    def __init__(self, recorded_at_ms: int, event: Event, expected: int | None) -> None:
        self.recorded_at_ms = recorded_at_ms
        self.event = event
        self.expected = expected  # the latest sequence this append must follow, if any
        self.taken = False  # in a leader's batch: that leader finishes it
        self.shared_error = False  # `error` is the batch's, raised in several threads
        self.result: JournalEvent | None = None
        self.error: BaseException | None = None
        self.end = 0  # the log position after its commit
        self.done = False


class BatchWriter(Protocol):
    """What the queue needs of the session it serves."""

    durable: bool  # whether commits are synced before they are acknowledged

    def last_sync_seconds(self) -> float:
        """How long the log's last fdatasync took."""
        ...

    def write_batch(
        self, take: Callable[[PendingAppend], list[PendingAppend]], leader: PendingAppend
    ) -> None:
        """Under the write lock: commit the batch `take(leader)` returns, each append as
        its own commit, filling in each one's `end` and `result` or `error`."""
        ...

    def wait_durable(self, end: int) -> None:
        """Return once the log is durable up to `end` (at once in "os" mode)."""
        ...


class AppendQueue:
    """The queue of one session's appends, the leader first."""

    def __init__(self, writer: BatchWriter) -> None:
        self._writer = writer
        self._durable = writer.durable  # fixed for the session's life
        self._queue: list[PendingAppend] = []
        # `with` on the lock itself where nothing waits: Condition.__enter__ is a
        # Python-level call, on every append
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._last_batch = 1
        # The batch the current leader took: only the leader, at the front of the
        # queue, uses it, and the next leader begins after this one removed it.
        self._batch: list[PendingAppend] = []

    def __len__(self) -> int:
        return len(self._queue)

    def front_taken(self) -> bool:
        """Whether a leader has taken the append at the front of the queue."""
        with self._lock:
            return bool(self._queue) and self._queue[0].taken

    def append(self, req: PendingAppend) -> JournalEvent:
        """Queue `req`, lead its batch or wait for the leader, and return its event
        (or raise its error) once it is committed and, in fsync mode, durable."""
        queue, cv = self._queue, self._cv
        with self._lock:
            queue.append(req)
            if len(queue) > 1:
                cv.notify_all()  # a leader may be gathering (`_gather`)
            try:
                while not req.done and queue[0] is not req:
                    cv.wait()
            except BaseException:
                # Interrupted while queued (a signal handler raised): leave the queue,
                # unless a leader already took this append (then it is its to finish),
                # so that the next in line can lead instead of everyone waiting forever.
                if not req.taken and not req.done:
                    queue.remove(req)
                    cv.notify_all()
                raise
        if not req.done:
            self._lead(req)  # and synced it, in fsync mode
            if req.error is None:
                assert req.result is not None
                return req.result
        if req.error is not None:
            if req.shared_error:  # one exception for the whole batch: raise our own copy
                raise _own_copy(req.error) from req.error
            raise req.error
        assert req.result is not None
        self._writer.wait_durable(req.end)  # led by another thread, which syncs it too
        return req.result

    def _gather(self) -> None:
        """Before leading a durable batch, wait briefly for the threads of the last one.

        Threads released by one sync all prepare their next event at once, and the
        first to queue leads: without this it goes out alone and the others form the
        next batch, so batches alternate between one append and the rest. Waits at
        most as long as the last sync took (`GATHER_MAX` at most), and only when the
        last batch had company: a lone writer never waits.
        """
        want = self._last_batch
        if want < 2 or not self._durable:
            return
        with self._cv:
            deadline = time.monotonic() + min(self._writer.last_sync_seconds(), GATHER_MAX)
            while len(self._queue) < want:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)

    def _take(self, leader: PendingAppend) -> list[PendingAppend]:
        """The batch the leader commits, marked taken (called under the write lock)."""
        with self._lock:
            queue = self._queue
            batch = queue[:MAX_BATCH] if len(queue) > 1 else [leader]
            for req in batch:
                req.taken = True
        self._last_batch = len(batch)
        self._batch = batch
        return batch

    def _lead(self, leader: PendingAppend) -> None:
        """Commit (and, in fsync mode, sync) the queue's front as one batch.

        Always leaves the queue with the batch removed and every member done, with
        its result or an error, whatever happens here (see `finally`).
        """
        self._batch = [leader]
        try:
            if self._last_batch > 1:
                self._gather()
            self._writer.write_batch(self._take, leader)
            batch = self._batch
            # Still first in line, sync the batch (the session lock is free meanwhile):
            # appends that arrive during the sync queue up behind it and go out as
            # the next batch, one write and one sync for all of them.
            if self._durable:
                end = leader.end if len(batch) == 1 else max(r.end for r in batch)
                self._writer.wait_durable(end)
        except BaseException as exc:  # before the batch was taken, only the leader tried
            batch = self._batch
            _fail_batch(batch, leader, exc)
        finally:
            batch = self._batch
            with self._lock:
                del self._queue[: len(batch)]
                for req in batch:
                    req.done = True
                if len(batch) > 1 or self._queue:  # batch members, or the next leader
                    self._cv.notify_all()


def _own_copy(exc: BaseException) -> BaseException:
    """A copy of an exception that several threads raise (each gets its own traceback)."""
    try:
        return copy.copy(exc)
    except Exception:  # an exception type that cannot be rebuilt from its args
        return JournalError(f"{type(exc).__name__}: {exc}")


def _fail_batch(batch: list[PendingAppend], leader: PendingAppend, exc: BaseException) -> None:
    """Give every member of a failed batch (that has no error of its own) the failure.

    An interrupt of the leading thread (KeyboardInterrupt, SystemExit) is that
    thread's own; the others learn that their append was interrupted, and may or
    may not have been written, as a JournalError.
    """
    for req in batch:
        if req.error is not None:
            continue
        if req is leader or isinstance(exc, Exception):
            req.error = exc
            req.shared_error = req is not leader
        else:
            req.error = JournalError(
                f"the thread writing this append was interrupted ({type(exc).__name__});"
                " the event may or may not have been appended"
            )

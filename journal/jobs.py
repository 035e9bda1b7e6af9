"""A store's background work: one thread for optional jobs and for requested tasks.

Two kinds of work run there, in this order at each wake-up:
- jobs (`run_soon`): optional work a caller need not wait for (warming a session
  just created, training its dictionary). Best effort: errors are ignored, and of
  more than `MAX_JOBS` waiting, the oldest are dropped (sessions created faster
  than they are warmed);
- tasks (`request`): work that must not be dropped, asked for again and again
  (refilling the spare pool): a task asked for while it waits runs once.

The thread is started on the first request and exits after `IDLE_EXIT` seconds
without one (a store dropped without `close` keeps no thread forever); the next
request starts it again. With a file-operations recorder that cannot run
concurrently (`fsio.ops.concurrent` False, the power-loss tests), jobs are skipped
(optional work) and requested tasks run in the calling thread, so every operation
stays in one recorded order. A forked child never uses its parent's runner.

`at_low_priority` runs a job's CPU-heavy step at a lower priority.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from . import fsio

T = TypeVar("T")

MAX_JOBS = 4  # jobs kept waiting (`run_soon`); older ones are dropped
IDLE_EXIT = 30.0  # seconds without a request before the thread exits
LOW_PRIORITY_NICE = 10  # not 19: at 19 a busy machine starves the job for seconds
LOW_PRIORITY_POLL = 0.05  # seconds between checks of `give_up` while it runs


class JobRunner:
    """One store's background thread (other processes and stores have their own)."""

    def __init__(self, name: str = "journal-spares") -> None:
        self.name = name
        self._lock = threading.Lock()
        # One thread, woken through `_wake` while requests keep coming (it exits
        # after IDLE_EXIT): starting a thread per request costs the caller up to
        # 2.5 ms (the new thread takes the GIL before `Thread.start` returns).
        self._wake = threading.Condition(self._lock)
        self._wanted = False  # work was asked for and has not begun
        self._busy = False  # the thread is running work now
        self._thread: threading.Thread | None = None
        self._closed = False
        self._pid = os.getpid()
        self._jobs: collections.deque[Callable[[], None]] = collections.deque(maxlen=MAX_JOBS)
        self._tasks: list[Callable[[], None]] = []

    @property
    def thread(self) -> threading.Thread | None:
        """The background thread while it lives (None once it exited idle or closed)."""
        return self._thread

    def run_soon(self, job: Callable[[], None]) -> None:
        """Run `job` in the background thread, before the requested tasks (best
        effort, see the module doc)."""
        if os.getpid() != self._pid or not fsio.ops.concurrent:
            return
        with self._lock:
            if self._closed:
                return
            self._jobs.append(job)
            self._wake_thread()

    def request(self, task: Callable[[], None]) -> None:
        """Run `task` once soon: in the background thread, or here (see the module doc)."""
        if os.getpid() != self._pid:
            return
        if not fsio.ops.concurrent:
            task()
            return
        with self._lock:
            if self._closed:
                return
            if task not in self._tasks:
                self._tasks.append(task)
            self._wake_thread()

    def _wake_thread(self) -> None:
        """(lock held) Have the background thread run soon, starting it if needed."""
        self._wanted = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        else:
            self._wake.notify()

    def _serve(self) -> None:
        while True:
            with self._lock:
                if not self._wanted and not self._closed:
                    self._wake.wait(IDLE_EXIT)
                if self._closed or not self._wanted:
                    # Closed, or idle for a while: exit; the next request starts a
                    # new thread.
                    self._thread = None
                    self._wake.notify_all()
                    return
                self._wanted, self._busy = False, True
                jobs, tasks = list(self._jobs), self._tasks
                self._jobs.clear()
                self._tasks = []
            try:
                for work in (*jobs, *tasks):
                    with contextlib.suppress(Exception):  # best effort, see the module doc
                        work()
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()  # `wait` callers

    def wait(self) -> None:
        """Until no work is asked for or running (tests and benchmarks that must not
        overlap it)."""
        if os.getpid() != self._pid:
            return  # a forked child: the thread is its parent's
        with self._lock:
            while (self._wanted or self._busy) and self._thread is not None:
                if not self._thread.is_alive():
                    return
                self._wake.wait(0.1)

    def close(self) -> None:
        """Stop taking work and wait for the thread to finish what it is running
        (waiting jobs and tasks are dropped)."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._wake.notify_all()
        if os.getpid() != self._pid:
            return  # a forked child: not its thread
        if thread is not None:
            thread.join()


def at_low_priority(fn: Callable[[], T], give_up: Callable[[], bool]) -> T | None:
    """`fn()`, computed in a new thread at a lower CPU priority, for a background job's
    CPU-heavy step (training a session's dictionary). On a small machine that work
    otherwise takes a core from the threads the callers wait on (appends to one
    session lose a third of their rate while it runs). The step must release the GIL
    (zstd's trainer does). Linux only: there, a thread has its own nice value.
    Elsewhere the thread's id may be another process's pid, so `fn` runs at normal
    priority.

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

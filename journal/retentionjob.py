"""The background job that applies a store's recorded retention policy.

A writable store whose manifest records a policy (`journal.open(root,
retention=RetentionPolicy(...))`) runs it in a daemon thread: first
`min(interval, FIRST_RUN)` seconds after the open, then every `interval`
seconds, until `close`. Each run deletes what the policy lets go
(`retention.apply`, tree by tree) and then frees what integrations hid
(`Store.compact`, erase declarations) in the sessions updated since the previous
run began: a session nobody wrote since has nothing new to free.

Cost: a run reads the whole catalog page by page (O(sessions), measured in
docs/retention.md), locks the trees it deletes for a delete commit per batch,
and reads the log of each session updated since the previous run (rewriting the
segments of those with something to free); the first run, with no previous one
known, reads every session's log. Writers of other sessions go on meanwhile. Several processes
writing one store share the work: a run starts by stamping `ROOT/retention.last`
(its modification time), and a process skips its run while another's stamp is
younger than the interval. A failed run is retried at the next interval; its
error is kept in `last_error`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from .errors import JournalError
from .layout import RETENTION_STAMP_FILE
from .retention import PruneReport, RetentionPolicy, apply, updated_since

if TYPE_CHECKING:
    from .store import Store

FIRST_RUN = 60.0  # seconds after the open at most


class RetentionJob:
    """One store's retention thread (see the module doc)."""

    def __init__(self, store: Store, policy: RetentionPolicy) -> None:
        self.store = store
        self.policy = policy
        self.last_report: PruneReport | None = None
        self.last_error: BaseException | None = None
        self.runs = 0
        self._stop = threading.Event()
        self._pid = os.getpid()
        self._stamp = os.path.join(store.root, RETENTION_STAMP_FILE)
        self._thread = threading.Thread(target=self._loop, name="journal-retention", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        delay = min(self.policy.interval, FIRST_RUN)
        while not self._stop.wait(delay):
            delay = self.policy.interval
            if os.getpid() != self._pid:
                return  # a forked child: the parent runs the job
            since = self._claim()
            if since is None:
                continue
            try:
                self.run_once(since)
            except (JournalError, OSError) as exc:
                self.last_error = exc

    def _claim(self) -> float | None:
        """Stamp the run unless another process's stamp is younger than the
        interval (None: skip); the previous run's start (0: none known)."""
        now = time.time()
        previous = 0.0
        try:
            previous = os.stat(self._stamp).st_mtime
            if now - previous < self.policy.interval * 0.9:
                return None
        except FileNotFoundError:
            pass
        except OSError:
            return 0.0  # cannot tell: run (a prune twice is harmless)
        try:
            with open(self._stamp, "a"):
                pass
            os.utime(self._stamp, (now, now))
        except OSError:
            pass  # the stamp only saves other processes a run
        # A session updated in the second the previous run began is looked at again.
        return max(previous - 1.0, 0.0)

    def run_once(self, since: float = 0.0) -> PruneReport:
        """One run: delete what the policy lets go, then free what integrations hid
        in the sessions updated at or after `since` (Unix seconds; 0: every session)."""
        report = apply(self.store, self.policy, dry_run=False, stop=self._stop.is_set)
        for sid in updated_since(self.store, since):
            if self._stop.is_set():
                break
            try:
                freed = self.store.compact(sid)
            except JournalError as exc:
                self.last_error = exc  # a damaged or busy session: the others go on
                continue
            if freed.erased_events or freed.compacted:
                report.compacted += 1
                report.compacted_bytes += freed.freed
        self.runs += 1
        self.last_report = report
        self.last_error = None
        return report

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread() and os.getpid() == self._pid:
            self._thread.join(timeout=30)

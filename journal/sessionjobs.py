"""A store's optional background work on its sessions: warming a session just
created, and training a session's zstd dictionary (`jobs.JobRunner.run_soon`).

Neither is needed for correctness: a job dropped, failed or given up leaves a
session that opens on its next call and is asked to train again later.
"""

from __future__ import annotations

import functools

from . import dictionary
from .calls import guarded
from .jobs import JobRunner, at_low_priority
from .opened import OpenSessions


class SessionJobs:
    """The background jobs of one store's sessions (`serve` names the sessions)."""

    def __init__(self, jobs: JobRunner, *, read_only: bool) -> None:
        self.jobs = jobs
        self.read_only = read_only
        self._sessions: OpenSessions | None = None

    def serve(self, sessions: OpenSessions) -> None:
        """The store's open sessions (made after this object, which they call back)."""
        self._sessions = sessions

    def _open(self) -> OpenSessions | None:
        sessions = self._sessions
        if sessions is None or sessions.closed or self.read_only:
            return None
        return sessions

    def warm_soon(self, session_id: str) -> None:
        self.jobs.run_soon(functools.partial(self.warm, session_id))

    @guarded
    def warm(self, session_id: str) -> None:
        """Open a session just created here, and take and release its write lock, in
        the background: its first commit was written through a private object, and
        the next call on it (an append, typically) would find nothing open and pay
        the open, the lock's full checks, the writer's open and, without a spare,
        the first preallocation step, where a warm session costs tens of
        microseconds. Pinned, like any call, so a concurrent `close` leaves it to
        finish."""
        sessions = self._open()
        if sessions is None:
            return
        sess = sessions.get(session_id)
        if sess is not None and sess.exists:
            with sess.writing():
                sess.log.preallocate_ahead()

    def want_dictionary(self, session_id: str) -> None:
        """A writer of the session sampled enough payloads to train its dictionary."""
        self.jobs.run_soon(functools.partial(self.train_dictionary, session_id))

    @guarded
    def train_dictionary(self, session_id: str) -> None:
        """Train the session's zstd dictionary on what its writer sampled, and commit
        it (FORMAT.md section 3), in the background: training takes tens of
        milliseconds, which no caller's save should wait for. Later records of the
        session are compressed with it."""
        sessions = self._open()
        if sessions is None:
            return
        sess = sessions.get(session_id)
        if sess is None:
            return
        samples = sess.take_samples()
        if samples is None:
            return
        try:
            trained = at_low_priority(
                functools.partial(dictionary.train, samples), lambda: sessions.closed
            )
            if sessions.closed:  # (at_low_priority gave up, or finished as it closed)
                sess.training_failed()
                return
            if trained is None:  # no dictionary pays for itself on these samples
                sess.no_dictionary()
                return
            with sess.writing():
                sess.write_dictionary(trained)
        except BaseException:
            sess.training_failed()  # say, the lock was busy: the next ask tries again
            raise

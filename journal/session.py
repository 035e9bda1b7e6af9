"""One session: opening it (its identity, its log, its caches) and closing it.

The class is assembled in layers, one module each (see `sessionstate`): what it
holds, folding commits, catching up with the log, reads, the lock protocol, writes.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from . import dictionary
from .appends import AppendQueue
from .errors import (
    CorruptionError,
    UnfinishedSessionError,
)
from .index import (
    KIND_CHECKPOINTS,
    KIND_EVENTS,
    KIND_EXECUTIONS,
    KIND_TRANSCRIPTS,
    Index,
)
from .layout import IDENTITY_FILE, LOCK_FILE, LOG_DIR, LOSS_PENDING_FILE
from .locks import FileLock
from .log import KIND_SESSION, Log, ScanState
from .sessiondir import SessionIdentity, file_key, origin_of, read_identity
from .sessionstate import Head, SessionOptions
from .writes import SessionWrites


class Session(SessionWrites):
    """One open session directory."""

    def __init__(
        self,
        directory: str,
        session_id: str,
        options: SessionOptions,
        *,
        private: SessionIdentity | None = None,
    ):
        """Open the session in `directory`. `private`: the identity of a directory
        laid out by `build` or `fill_spare` (an empty log), not yet published, for
        its first commit; nothing is synced or locked (`Store._stage` syncs it,
        and nobody else knows the directory)."""
        if private is not None:
            options = dataclasses.replace(options, durable=False)
        self.dir = directory
        self.dir_name = os.path.basename(directory)
        self.id = session_id
        self.options = options
        self._private = private is not None
        # A private session's caller may ask to hear when its first commit is written
        # (to start syncing it while the rest of the call runs: `Store._stage`).
        self.on_written = None
        # Payloads this writer samples for the session's dictionary (none when the
        # session has one, or gave up on one, or is private). `on_samples` (set by
        # the store) hears that there are enough to train one, and again after every
        # further `SAMPLE_BYTES` written while none came of it (the background job
        # may have been dropped: `SparePool.run_soon`).
        self.sampler = dictionary.Sampler(options.dictionary and not private)
        self.on_samples = None
        self.identity_path = os.path.join(directory, IDENTITY_FILE)  # checked on every call
        # (a private directory is not published: nothing to tell its incarnation from)
        self._identity_key = file_key(self.identity_path) if private is None else None
        self.identity = self._read_identity() if private is None else private
        self.origin = origin_of(self._identity_key)
        if self.identity.session_id != session_id:
            raise CorruptionError(
                f"session directory belongs to {self.identity.session_id!r}, not {session_id!r}",
                path=os.path.join(directory, IDENTITY_FILE),
            )
        self.log = Log(
            os.path.join(directory, LOG_DIR),
            KIND_SESSION,
            segment_bytes=options.segment_bytes,
            label=f"session {session_id!r}",
            cache=options.read_cache,
            fresh=private is not None,
        )
        if private is not None:
            self.log.preallocate = self.log.sync_on_close = False
        self.flock = FileLock(os.path.join(directory, LOCK_FILE), f"session {session_id!r}")
        self._write_lock = threading.Lock()
        self._writer_ready = False  # the last `_acquire_writer` completed
        self._quiet_mark = -1  # flock acquisitions at our last writer's release
        # Set by the store: is this session doomed by a pending delete? (checked
        # under the lock when it cannot be taken for quiet, `_acquire_locks`)
        self.doomed = None
        self._context_cache = None
        self.appends = AppendQueue(self)
        self.users = 0  # calls using this object now (the store's cache never closes those)
        self.retired = False  # dropped from the store's cache: the last user closes it
        self.deleted = False  # deleted by this process: closing it trims nothing
        self.closed = False
        self._dead_epoch = None  # an epoch whose items `compact` dropped
        self._state_lock = threading.RLock()
        self._set_indexes(
            {
                k: Index(directory, k)
                for k in (KIND_EVENTS, KIND_CHECKPOINTS, KIND_TRANSCRIPTS, KIND_EXECUTIONS)
            }
        )
        self.head = Head()
        self._receipts = set()
        self._snapshot_covered = 0
        self._snapshot_size = 0
        self._recovered = False
        self.recovery = None
        # Damage a scan of the log ran into, and the end of the readable prefix before
        # it. Structures covering no more than `damage_end` lack what lies after it.
        self.damage = None
        self.damage_end = 0
        # (path, position) of the last unusable tail a reader classified, and the verdict
        self._tail_checked = None
        self.tail_state = ScanState()
        # The highest log position a cache file records as synced, and that file
        # (`_open_caches`): the log must reach it, or committed data was lost.
        self.durable_claim = (0, "")
        if private is not None:
            self._recovered = True  # an empty log we laid out: nothing to read or recover
            return
        self._open_caches()
        pending = os.path.join(directory, LOSS_PENDING_FILE)
        if self.damage is None and os.path.exists(pending):
            # `journal repair --accept-loss` stopped half way: the log may be cut
            # already while the caches that proved the loss are not gone yet.
            self.damage = CorruptionError(
                f"session {session_id!r}: accepting a loss did not finish;"
                " run `journal repair --accept-loss` again",
                path=pending,
            )
            self.damage_end = self.head.covered
        if self.head.commits == 0 and self.damage is None:
            # Every session is published with its first commit durable already
            # (`Store._stage`): without one, it is a creation that a power loss cut
            # short (the protocol of earlier versions renamed first) or damage,
            # which only a check under the lock tells apart (`sessiondir.has_commit`,
            # called by `Store._session`).
            self.close()
            raise UnfinishedSessionError(
                f"session {session_id!r} has no complete commit",
                path=directory,
                key=self._identity_key,
            )

    def _read_identity(self) -> SessionIdentity:
        return read_identity(self.dir)

    def close(self) -> None:
        """Release every file; a failing last sync (raised) still releases the rest."""
        if self.closed:
            return
        self.closed = True
        try:
            self._trim_on_close()
            self.log.close()
        finally:
            for idx in self.indexes.values():
                idx.close()
            self.flock.close()

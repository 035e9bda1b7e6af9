"""One session: opening it (its identity, its log, its caches) and closing it.

The class is assembled in layers, one module each (see `sessionstate`): what it
holds, folding commits, catching up with the log, reads, the lock protocol, writes.
"""

from __future__ import annotations

import os
import threading

import msgspec

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
from .log import KIND_SESSION, Log
from .scan import ScanState
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
        """Open the session in `directory` (attributes: `SessionState`). `private`:
        the identity of a directory laid out by `sessiondir.build` or `fill_spare`
        (an empty log), not yet published, for its first commit; nothing is synced
        or locked (`publish.py` syncs it, and nobody else knows the directory)."""
        if private is not None:
            options = msgspec.structs.replace(options, durable=False)
        self.dir = directory
        self.dir_name = os.path.basename(directory)
        self.id = session_id
        self.options = options
        self.durable = options.durable
        self._private = private is not None
        self._open_identity(private)
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
        self._state_lock = threading.RLock()
        self._writer_ready = False
        self._quiet_mark = -1
        # Hooks the store sets (`on_samples`: again after every further
        # `SAMPLE_BYTES` written while no dictionary came of it, since the
        # background job may have been dropped).
        self.on_written = self.on_samples = self.doomed = None
        self.sampler = dictionary.Sampler(options.dictionary and not private)
        self.appends = AppendQueue(self)
        self._context_cache = None
        self.users = 0
        self.retired = self.deleted = self.closed = False
        self._know_nothing()
        if private is not None:
            self._recovered = True  # an empty log we laid out: nothing to read or recover
            return
        self._open_caches()
        self._check_finished()

    def _open_identity(self, private: SessionIdentity | None) -> None:
        """Read the identity file (or take a private directory's) and check its id."""
        self.identity_path = os.path.join(self.dir, IDENTITY_FILE)
        # (a private directory is not published: nothing to tell its incarnation from)
        self._identity_key = file_key(self.identity_path) if private is None else None
        self.identity = self._read_identity() if private is None else private
        self.origin = origin_of(self._identity_key)
        if self.identity.session_id != self.id:
            raise CorruptionError(
                f"session directory belongs to {self.identity.session_id!r}, not {self.id!r}",
                path=self.identity_path,
            )

    def _know_nothing(self) -> None:
        """The state of a session before any cache or record of its log is read."""
        self._set_indexes(
            {
                k: Index(self.dir, k)
                for k in (KIND_EVENTS, KIND_CHECKPOINTS, KIND_TRANSCRIPTS, KIND_EXECUTIONS)
            }
        )
        self.head = Head()
        self._receipts = set()
        self._dead_epoch = None
        self._snapshot_covered = self._snapshot_size = 0
        self._recovered = False
        self.recovery = None
        self.damage = None
        self.damage_end = 0
        self._tail_checked = None
        self.tail_state = ScanState()
        self.durable_claim = (0, "")

    def _check_finished(self) -> None:
        """After the caches and the log are read: refuse writes while accepting a loss
        is unfinished, and refuse a session that has no commit at all."""
        pending = os.path.join(self.dir, LOSS_PENDING_FILE)
        if self.damage is None and os.path.exists(pending):
            # `journal repair --accept-loss` stopped half way: the log may be cut
            # already while the caches that proved the loss are not gone yet.
            self.damage = CorruptionError(
                f"session {self.id!r}: accepting a loss did not finish;"
                " run `journal repair --accept-loss` again",
                path=pending,
            )
            self.damage_end = self.head.covered
        if self.head.commits == 0 and self.damage is None:
            # Every session is published with its first commit durable already
            # (`publish.py`): without one, it is a creation that a power loss cut
            # short or damage, which only a check under the lock tells apart
            # (`sessiondir.has_commit`, called by the store when it opens one).
            self.close()
            raise UnfinishedSessionError(
                f"session {self.id!r} has no complete commit",
                path=self.dir,
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

"""The store's open sessions: a cache of `Session` objects, and their pinning.

Each open session holds a few file descriptors; the cache keeps the most recently
used ones open (at most `max_open`, least recently used first out). A session a
public call is using is pinned (`calls.pin`) until the outermost call returns, and
a session dropped from the cache meanwhile is closed by its last user: closing it
under a running call would let a reused descriptor number take its place (a lock
"acquired" on another file, a holder line written over a segment header).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence

from . import calls, fsio, sessiondir
from .errors import CorruptionError, JournalError, StorageError, UnfinishedSessionError
from .layout import LOCK_FILE, dir_name, session_path
from .locks import FileLock
from .session import Session
from .sessionstate import SessionOptions
from .tree import Tree


class OpenSessions:
    """Open `Session`s by id, for one store (`Store.open_sessions`)."""

    def __init__(
        self,
        root: str,
        options: SessionOptions,
        tree: Tree,
        *,
        max_open: int,
        read_only: bool,
        finish_deletes: Callable[[], None],
        on_samples: Callable[[str], None],
    ) -> None:
        """`finish_deletes()` rolls forward the deletes dead processes left (called
        before answering for a session a pending delete names); `on_samples(id)`
        hears that a session's writer sampled enough to train its dictionary."""
        self.root = root
        self.options = options
        self.tree = tree
        self.max_open = max_open
        self.read_only = read_only
        self._finish_deletes = finish_deletes
        self._on_samples = on_samples
        # Least recently used first.
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._release = self._unpin  # one bound method: what `calls.pin` groups by

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def peek(self, session_id: str) -> Session | None:
        """The cached Session for an id, neither pinned nor made most recently used
        (for looking at it: a caller that uses it calls `get` or `cached`)."""
        return self._sessions.get(session_id)

    def snapshot(self) -> list[Session]:
        """The open sessions now, least recently used first (neither pinned nor moved)."""
        with self._lock:
            return list(self._sessions.values())

    def get(self, session_id: str, *, held: bool = False) -> Session | None:
        """The open Session for an id (None if it has no directory), pinned.

        A new session's directory is only ever published with its first commit
        (`publish.Publisher`), so this never creates one. `held`: pinned as by
        `hold` instead of for the call, until the caller hands it to `release`
        (a walk over many sessions in one call, such as a reconciliation, would
        otherwise keep every one of them open until the call returns).
        """
        if self._closed:
            raise JournalError("store is closed")
        name = dir_name(session_id)
        if name in self.tree.pending_session_dirs():
            # Best effort: a delete that cannot be finished now (the disk failing)
            # is finished by a later call; its sessions are gone for readers either way.
            with contextlib.suppress(JournalError, OSError):
                self._finish_deletes()
            if name in self.tree.pending_session_dirs():
                return None  # being deleted by a live process: already gone for readers
        sess = self.cached(session_id, held=held)
        if sess is not None and sess.still_published():
            return sess
        if sess is not None:
            with self._lock:
                if self._sessions.get(session_id) is sess:
                    del self._sessions[session_id]
            if held:
                self.release([sess])
            self.retire([sess])
        return self._open(session_id, name, held)

    def _open(self, session_id: str, name: str, held: bool) -> Session | None:
        """Open a session not in the cache (or found there replaced), pinned."""
        path = session_path(self.root, session_id)
        for _ in range(8):
            if not fsio.is_dir(path):
                return None
            with self._lock:
                sess = self._sessions.get(session_id)
                if self._closed:
                    raise JournalError("store is closed")
                if sess is None:
                    try:
                        sess = Session(path, session_id, self.options)
                        sess.doomed = functools.partial(self._doomed, name)
                        sess.on_samples = functools.partial(self._on_samples, session_id)
                    except UnfinishedSessionError as exc:
                        unfinished = exc
                    except (CorruptionError, StorageError):
                        if fsio.is_dir(path):
                            raise
                        return None  # deleted while we opened it: files "missing"
                    else:
                        self._sessions[session_id] = sess
                if sess is not None:
                    self._pin(session_id, sess, held)
                    return sess
            if not self._settle_unfinished(path, unfinished.key):
                return None
        raise JournalError(f"session {session_id!r}: its directory keeps changing ({path})")

    def vanished(self, session_id: str) -> bool:
        """Whether a session is deleted or being deleted (its directory is gone or doomed)."""
        path = session_path(self.root, session_id)
        if os.path.basename(path) in self.tree.pending_session_dirs():
            return True
        # A delete moves the whole directory away; a directory that is still there
        # but lacks a file is damage, which the failed read reports.
        return not fsio.is_dir(path)

    def _doomed(self, name: str) -> bool:
        """Does a pending delete name this session directory? (one stat when unchanged)"""
        return name in self.tree.pending_session_dirs()

    def cached(self, session_id: str, *, held: bool = False) -> Session | None:
        """The open Session for an id if one is cached, unchecked (pinned like
        `get`'s). For writers: their checks under the session's lock find a deleted
        or doomed session (`SessionGone`, and the caller asks `get`)."""
        if self._closed:
            raise JournalError("store is closed")
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is not None:
                self._pin(session_id, sess, held)
        return sess

    def _settle_unfinished(self, path: str, key: tuple[int, int, int] | None) -> bool:
        """A session directory without a complete commit: absent (False) or worth
        opening again (True: it changed meanwhile). Raises `CorruptionError` if
        its log is damaged rather than unfinished.

        Decided under the directory's write lock, on the same incarnation
        (`key`), by a scan as recovery does it: a torn or empty first commit is a
        creation that never finished (FORMAT.md section 9), and a writable store
        moves the directory to the trash; whoever else moves it (another process
        doing the same, a delete) holds that lock too. A read-only store only
        tries the lock: if it is busy, the session is absent for now.
        """
        guard = FileLock(os.path.join(path, LOCK_FILE), f"session directory {path}")
        discarded = False
        try:
            try:
                if self.read_only:
                    if not guard.try_acquire():
                        return False
                else:
                    guard.acquire(self.options.lock_timeout)
            except StorageError:
                if not fsio.is_dir(path):
                    return False  # moved away meanwhile (its lock file with it)
                raise
            if sessiondir.identity_key(path) != key:
                return True  # not the directory found unfinished
            if sessiondir.has_commit(path):
                return True
            if not self.read_only:
                fsio.rename(path, os.path.join(self.tree.trash, f"unfinished-{uuid.uuid4().hex}"))
                discarded = True
        finally:
            guard.close()
        if discarded:
            fsio.sync_dir(os.path.dirname(path))
            self.tree.empty_trash_soon()
        return False

    def _pin(self, session_id: str, sess: Session, held: bool = False) -> None:
        """Mark a session in use by this thread's call (`held`: by the caller, as
        `hold` does) and most recently used (lock held)."""
        self._sessions[session_id] = self._sessions.pop(session_id, sess)
        if held:
            sess.users += 1
        else:
            calls.pin(sess, self._release)

    def _unpin(self, pinned: list[Session]) -> None:
        """Release a finished call's sessions; close the least recently used idle ones."""
        closing: list[Session] = []
        with self._lock:
            for sess in pinned:
                sess.users -= 1
                if sess.users == 0 and sess.retired:
                    closing.append(sess)
            excess = len(self._sessions) - self.max_open
            if excess > 0:
                for sid, sess in list(self._sessions.items()):
                    if excess <= 0:
                        break
                    if sess.users == 0:
                        del self._sessions[sid]
                        closing.append(sess)
                        excess -= 1
        if closing:
            _close_quietly(closing)

    def hold(self, sess: Session) -> None:
        """Pin a session for a holder outside any call (a `SessionReader`), until it
        hands the session to `release`."""
        with self._lock:
            sess.users += 1

    def release(self, pinned: list[Session]) -> None:
        """Unpin what `hold` pinned."""
        self._unpin(pinned)

    def retire(self, dropped: Sequence[Session | None]) -> None:
        """Close sessions just dropped from the cache, unless a call is using one:
        then the last such call closes it (`_unpin`)."""
        closing: list[Session] = []
        with self._lock:
            for sess in dropped:
                if sess is None:
                    continue
                if sess.users > 0:
                    sess.retired = True
                else:
                    closing.append(sess)
        _close_quietly(closing)

    def drop(self, session_ids: Iterable[str], *, deleted: bool = False) -> None:
        """Forget these sessions (a delete took them away; `deleted`: this process's,
        so closing them trims nothing) and close them once unused."""
        with self._lock:
            gone = [self._sessions.pop(sid, None) for sid in session_ids]
        if deleted:
            for sess in gone:
                if sess is not None:
                    sess.deleted = True
        self.retire(gone)

    def pin_all(self) -> list[Session]:
        """Every open session, pinned for this call (nobody closes them under it)."""
        with self._lock:
            sessions = list(self._sessions.items())
            for sid, sess in sessions:
                self._pin(sid, sess)
        return [sess for _, sess in sessions]

    def close(self) -> None:
        """Refuse further calls and close every session (those a call still uses
        when it ends)."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            self._closed = True
        self.retire(sessions)


def _close_quietly(sessions: Sequence[Session]) -> None:
    """Close sessions the cache dropped, each on its own: a failure here (the last
    sync of an "os"-mode writer: every "fsync"-mode commit was synced already) must
    not fail the unrelated call that happened to drop them, nor keep the others open."""
    for sess in sessions:
        with contextlib.suppress(JournalError, OSError):
            sess.close()

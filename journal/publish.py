"""Staging and publishing new session directories: first saves, forks, imports.

A new session is built in private, in tmp/, with its first commit written and
its syncs running; it is published by one rename into sessions/ once everything
in it is durable, and its name is made durable before the call returns (FORMAT.md
section 9). So a session directory is never seen without its first commit: not
after a kill, a power loss or a rejected first save.

A spare directory (spares.py) is used when one is ready: its files exist and are
open already, so the critical path writes and syncs, and opens nothing.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable
from typing import Generic, TypeVar

from . import fsio, sessiondir
from .errors import JournalError, StorageError
from .layout import LOCK_FILE, TMP_DIR, session_path
from .locks import FileLock
from .rootcheck import RootGuard
from .segment import SEGMENT_HEADER_SIZE
from .session import Session
from .sessiondir import SessionIdentity
from .sessionstate import SessionOptions
from .spares import Spare, SparePool

T = TypeVar("T")


class Publisher:
    """Builds and publishes one store's new session directories."""

    def __init__(
        self, root: str, options: SessionOptions, spares: SparePool, guard: RootGuard
    ) -> None:
        self.root = root
        self.options = options
        self.spares = spares
        # New directories are built by path: only in the root the store opened.
        self.guard = guard

    def create(
        self,
        identity: SessionIdentity,
        write: Callable[[Session], T],
        announce: Callable[[T], None],
    ) -> T | None:
        """Build a new session in private, let `write` make its first commit, then
        publish it and `announce` what `write` returned (its catalog entry). Returns
        what `write` returned, or None, having published nothing, when a directory
        of that name exists already.
        """
        staged = self.stage(identity, write)
        with staged:
            if not staged.publish(announce):
                return None
            return staged.result

    def stage(self, identity: SessionIdentity, write: Callable[[Session], T]) -> Staged[T]:
        """A new session built in private with its first commit written by `write`,
        its syncs running (see `Staged`); nothing is visible yet."""
        tmp, identity_sync, spare = self._new_session_dir(identity)
        syncs = [] if identity_sync is None else [identity_sync]
        sealing: list[fsio.Syncing] = []

        def seal() -> None:  # as soon as the first commit is written: it then runs
            # while the rest of the call does (the new session's head and summary,
            # for a fork the tree lock and the checks of its parent)
            sealing.append(sessiondir.start_seal(tmp, spare=identity_sync is not None))
            syncs.extend(sealing)

        try:
            first = Session(tmp, identity.session_id, self.options, private=identity)
            first.on_written = seal
            try:
                result = write(first)
            finally:
                first.close()  # syncs nothing: `seal` started them
            if not sealing:
                raise JournalError("a new session's first commit was not written")
            # No cache files: the first open rebuilds them from one commit, for less
            # than writing them here costs.
        except BaseException:
            self._discard(tmp, syncs, spare)
            raise
        path = session_path(self.root, identity.session_id)
        return Staged(self.spares, tmp, path, result, syncs, spare)

    def stage_fork(
        self, identity: SessionIdentity, encode: Callable[[], tuple[bytes, bytes]]
    ) -> Staged[tuple[int, bytes]]:
        """`stage` for a fork's child, whose first commit (`encode()`: the framed
        commit and its checkpoint header, see `Session.fork_commit`) is the whole of
        its log: written straight into the segment, with no Session object. Its
        result: the commit's length (the child's log end) and the header.

        In a spare, the identity and the commit are written, and fdatasynced, through
        the spare's open descriptors: the identity first, its sync handed to a pool
        thread at once, which then wakes while the commit is encoded; the commit's
        sync as soon as it is written (FORMAT.md section 9)."""
        spare = self.spares.take()
        if spare is not None:
            try:
                spare.fill(identity)
            except (OSError, JournalError):
                spare.discard()  # not usable: build one
                spare = None
        syncs: list[fsio.Syncing] = []
        tmp = spare.path if spare is not None else self._build_session_dir(identity)
        try:
            if spare is not None:
                syncs.append(_start_data_sync(spare.identity_fd, spare.identity_path))
            commit, header = encode()
            if spare is not None:
                fsio.pwrite(spare.segment_fd, commit, SEGMENT_HEADER_SIZE, spare.segment_path)
                syncs.append(_start_data_sync(spare.segment_fd, spare.segment_path, begun=True))
            else:
                _write_first_commit(tmp, commit)
                syncs.append(sessiondir.start_seal(tmp, spare=False))
        except BaseException:
            self._discard(tmp, syncs, spare)
            raise
        built = (len(commit), header)
        path = session_path(self.root, identity.session_id)
        return Staged(self.spares, tmp, path, built, syncs, spare)

    def _discard(self, tmp: str, syncs: list[fsio.Syncing], spare: Spare | None) -> None:
        """Remove a new session's private directory that will not be published, once
        the syncs started on it are done (their descriptors may be the spare's)."""
        for syncing in syncs:
            syncing.wait_quietly()
        if spare is not None:
            spare.close()
        fsio.remove_tree(tmp)
        self.spares.refill_soon()

    def _new_session_dir(
        self, identity: SessionIdentity
    ) -> tuple[str, fsio.Syncing | None, Spare | None]:
        """A private directory for a new session, for the caller to write its first
        commit into and publish (`stage`): a spare if one is ready, with the sync of its
        identity file under way (and the spare, whose descriptors the caller closes once
        that sync is done), else one built now (and None, None)."""
        spare = self.spares.take()
        if spare is not None:
            try:
                spare.fill(identity)
                return spare.path, _start_data_sync(spare.identity_fd, spare.identity_path), spare
            except (OSError, JournalError):
                spare.discard()  # not usable: build one
        return self._build_session_dir(identity), None, None

    def _build_session_dir(self, identity: SessionIdentity) -> str:
        """A new session's private directory built on the spot (no spare), unsynced."""
        tmp = os.path.join(self.root, TMP_DIR, f"new-{uuid.uuid4().hex}")
        # Built by path (its parents too): only in the root this store opened.
        self.guard.check(f"session {identity.session_id!r}")
        try:
            sessiondir.build(tmp, identity)
        except BaseException:
            fsio.remove_tree(tmp)
            raise
        return tmp


def _start_data_sync(fd: int, path: str, *, begun: bool = False) -> fsio.Syncing:
    """Start the fdatasync of a spare's file through its open descriptor (a spare's
    files keep their size: `sessiondir.build_spare`)."""
    return fsio.start_sync([], [], [], open_data_files=[(fd, path)], begun=begun)


def _write_first_commit(tmp: str, commit: bytes) -> None:
    """Write a commit at the start of a new directory's (only) segment."""
    segment = sessiondir.segment_files(tmp)[0]
    fd = os.open(segment, os.O_WRONLY)
    try:
        fsio.pwrite(fd, commit, SEGMENT_HEADER_SIZE, segment)
    finally:
        os.close(fd)


class Staged(Generic[T]):
    """A new session built in private (`Publisher.stage`): its first commit is written
    and the syncs that make the directory durable are running (its identity file and
    segment; for a directory built on the spot, also its entries). `publish` waits
    for them, gives the directory its name and makes that durable (FORMAT.md
    section 9). Used as a context manager: leaving it without a publish removes the
    directory, having changed nothing anyone can see.
    """

    def __init__(
        self,
        spares: SparePool,
        tmp: str,
        path: str,
        result: T,
        syncs: list[fsio.Syncing],
        spare: Spare | None = None,
    ) -> None:
        self.spares = spares  # refilled on leaving
        self.tmp = tmp
        self.path = path
        self.result = result
        self._syncs = syncs
        self._spare = spare  # whose descriptors the syncs use: closed on leaving
        self._published = False

    def publish(self, announce: Callable[[T], None], wait_for: fsio.Syncing | None = None) -> bool:
        """Publish the session once its syncs and `wait_for` are done, `announce` it,
        and return once its name is durable. False, publishing nothing, when a
        directory of that name exists already.

        `announce` (the catalog entry) runs after the rename, while `sessions/` is
        synced, and under the new session's lock: a delete takes that lock before
        it writes its own catalog record, so the entry can never land after that
        record and list a deleted session (as for a save: `Session.save`'s `on_commit`).
        """
        parent = os.path.dirname(self.path)
        # The new session's write lock is held until its name is durable: no other
        # writer commits into a session that a power loss could still take away.
        guard = (  # a spare's is open already
            self._spare.lock
            if self._spare is not None
            else FileLock(os.path.join(self.tmp, LOCK_FILE), "a session being published")
        )
        try:
            # Always free (nobody else knows tmp/); acquire() also writes the holder
            # line, which names us to a writer that waits for it meanwhile.
            guard.acquire(0)
            # Everything in the directory is durable before its name can be: a power
            # loss never publishes a session without its identity, its log or its
            # first commit.
            for syncing in self._syncs:
                syncing.wait()
            if wait_for is not None:
                wait_for.wait()
            if not rename_unless_taken(self.tmp, self.path):
                return False
            self._published = True
            # If the sync fails, the call fails but the session stays published: like
            # a commit whose sync failed, it may or may not survive a power loss.
            # The catalog entry is made in a pool thread meanwhile (see
            # `fsio.sync_dir_while`; the session's lock is held all the same).
            fsio.sync_dir_while(parent, lambda: announce(self.result))
            return True
        finally:
            guard.close()

    def __enter__(self) -> Staged[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._published:
            for syncing in self._syncs:
                syncing.wait_quietly()
        if self._spare is not None:
            self._spare.close()  # its syncs are done (waited for, by publish or above)
        if not self._published:
            fsio.remove_tree(self.tmp)
        self.spares.refill_soon()


def rename_unless_taken(src: str, dst: str) -> bool:
    """Rename a new session directory into place; False if `dst` exists already."""
    try:
        fsio.rename(src, dst)
    except StorageError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno in (errno.ENOTEMPTY, errno.EEXIST):
            # Taken when we renamed, maybe deleted again by now (asking `isdir`
            # afterwards can say no): the caller looks the id up again.
            return False
        if os.path.isdir(dst):
            return False
        raise
    return True


def install(src: str, dst: str) -> None:
    """Publish a complete session directory built elsewhere in the store (an import's,
    in tmp/) at `dst`: its entries durable first, then its name."""
    fsio.sync_dir(os.path.dirname(src))
    fsio.rename(src, dst)
    fsio.sync_dir(os.path.dirname(dst))

"""Operations on the session tree: fork (create a child) and atomic subtree deletion.

Both run under the store's tree lock (`ROOT/tree.lock`), so a fork cannot
attach a child to a session that is being deleted.

Fork builds the child directory completely in `ROOT/tmp/` (identity with the
parent link, first commit with the child checkpoint and its context as
transcript batch 0, fsynced) and publishes it with one rename: a child is
either wholly there or not at all.

Delete is made atomic by an intent file. The deleter locks every session of
the subtree, writes `ROOT/txn/delete-<id>` durably (the commit point: from then
on every reader treats those sessions as gone), renames each session directory
and each session-scoped state directory into `ROOT/trash/`, syncs, removes the
intent and finally the trash. A crash at any point is finished ("rolled
forward") by the next process that finds an intent whose owner is dead.

Emptying the trash is not part of the delete: once the intent is removed the
sessions are durably gone, and what is left in `trash/` is garbage that nothing
reads. It is removed by a background thread (file removal on a slow disk costs
more than the whole delete), which `close()` waits for; trash left by a process
that died is removed by the next delete or open.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import msgspec

from . import fsio
from .errors import JournalError, StorageError
from .layout import INTENT_PREFIX, SESSIONS_DIR, STATE_DIR, TRASH_DIR, TREE_LOCK, TXN_DIR
from .locks import FileLock
from .metafile import KIND_INTENT, read_meta, write_meta
from .rootcheck import mkdir_below

_FINE_RACY_NS = 50_000_000  # see pending_session_dirs
_COARSE_RACY_NS = 2_000_000_000


class DeleteIntent(msgspec.Struct):
    session_ids: list[str]
    session_dirs: list[str]  # names under sessions/
    state_dirs: list[str]  # names under state/


_decode_intent = msgspec.msgpack.Decoder(DeleteIntent).decode


class Tree:
    def __init__(self, root: str, lock_timeout: float):
        self.root = root
        self.txn = os.path.join(root, TXN_DIR)
        self.trash = os.path.join(root, TRASH_DIR)
        made = [mkdir_below(d) for d in (self.txn, self.trash)]
        if any(made):
            fsio.sync_dir(root)  # their entries durable before an intent relies on them
        self.lock = FileLock(os.path.join(root, TREE_LOCK), "the session tree")
        self.lock_timeout = lock_timeout
        # flock is per open file, not per thread: an RLock + depth make nesting safe
        self._mutex = threading.RLock()
        self._depth = 0
        self._pending_mtime = -1
        self._pending: set[str] = set()
        self._pending_states: set[str] = set()
        self._emptier: threading.Thread | None = None
        self._emptier_lock = threading.Lock()
        self._trash_dirty = False

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._mutex:
            if self._depth == 0:
                self.lock.acquire(self.lock_timeout)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.lock.release()

    # -------------------------------------------------------------- intents
    def pending_session_dirs(self) -> set[str]:
        """Session directory names under a pending delete (cheap: one stat when unchanged)."""
        try:
            mtime = os.stat(self.txn).st_mtime_ns
        except FileNotFoundError:
            return set()
        if mtime != self._pending_mtime:
            pending: set[str] = set()
            states: set[str] = set()
            for _, intent in self.intents():
                pending.update(intent.session_dirs)
                states.update(intent.state_dirs)
            self._pending_states = states
            # A directory's mtime can stay the same across changes made within one
            # clock tick. Like git's "racy" index entries, a listing taken within a
            # tick of the mtime is not trusted next time. Filesystems with whole-second
            # timestamps get two seconds; fine-grained ones stamp from the kernel's
            # coarse clock (a few ms per tick): 50 ms covers it many times over.
            window = _COARSE_RACY_NS if mtime % 1_000_000_000 == 0 else _FINE_RACY_NS
            racy = time.time_ns() - mtime < window
            self._pending, self._pending_mtime = pending, -1 if racy else mtime
        return self._pending

    def pending_state_dirs(self) -> set[str]:
        """State scope directory names under a pending delete (as `pending_session_dirs`)."""
        self.pending_session_dirs()
        return self._pending_states

    def intents(self) -> list[tuple[str, DeleteIntent]]:
        out = []
        for name in sorted(os.listdir(self.txn)):
            if not name.startswith(INTENT_PREFIX) or ".tmp." in name:
                continue
            path = os.path.join(self.txn, name)
            try:
                out.append((path, _decode_intent(read_meta(path, KIND_INTENT))))
            except (FileNotFoundError, JournalError, msgspec.DecodeError):
                continue  # an intent that never became durable never happened
        return out

    def write_intent(self, intent: DeleteIntent) -> tuple[str, FileLock]:
        """Write a delete's intent durably: the delete's commit point.

        A `StorageError` means nothing was deleted, unless its message says the
        delete is in doubt: the intent was renamed into place, its directory sync
        failed and so did taking it away again. Such an intent is finished by the
        next call (as a dead process's), and may not survive a power loss.
        """
        path = os.path.join(self.txn, f"{INTENT_PREFIX}{uuid.uuid4().hex}")
        try:
            write_meta(path, KIND_INTENT, msgspec.msgpack.encode(intent), durable=True)
        except StorageError as exc:
            if not os.path.exists(path):
                raise  # never in place: nothing happened
            try:  # in place, not known durable: take it back
                fsio.unlink(path)
                fsio.sync_dir(self.txn)
            except StorageError:
                raise StorageError(
                    f"delete in doubt: its intent {path} is in place but not known to be"
                    f" durable ({exc}); the next call finishes the delete, which a power"
                    " loss may undo"
                ) from exc
            self._pending_mtime = -1
            raise
        owner = FileLock(path + ".lock", "a delete in progress")
        owner.try_acquire()
        return path, owner

    def carry_out(
        self,
        path: str,
        intent: DeleteIntent,
        *,
        before_retiring: Callable[[], None] | None = None,
    ) -> None:
        """Move every named directory to the trash, run `before_retiring` (the
        catalog's delete records), then retire the intent (idempotent)."""
        tag = os.path.basename(path)[len(INTENT_PREFIX) :]
        touched: list[str] = []
        for sub, names in ((SESSIONS_DIR, intent.session_dirs), (STATE_DIR, intent.state_dirs)):
            parent = os.path.join(self.root, sub)
            for name in names:
                src = os.path.join(parent, name)
                if fsio.is_dir(src):
                    fsio.rename(src, os.path.join(self.trash, f"{tag}-{sub}-{name}"))
                    if parent not in touched:
                        touched.append(parent)
        if touched:
            # Both ends of every rename, concurrently: only retiring the intent
            # (below) must wait for them all.
            fsio.sync_all(data_files=[], files=[], dirs=[*touched, self.trash])
        if before_retiring is not None:
            before_retiring()
        fsio.unlink(path)
        fsio.sync_dir(self.txn)
        lock_path = path + ".lock"
        if os.path.exists(lock_path):
            os.unlink(lock_path)
        self._pending_mtime = -1

    def empty_trash(self) -> None:
        """Remove everything in `trash/` now (in the calling thread)."""
        for name in os.listdir(self.trash):
            fsio.remove_tree(os.path.join(self.trash, name))

    def empty_trash_soon(self) -> None:
        """Remove everything in `trash/` in a background thread (one at a time)."""
        with self._emptier_lock:
            self._trash_dirty = True
            if self._emptier is not None and self._emptier.is_alive():
                return  # it looks again before it exits
            self._emptier = threading.Thread(
                target=self._empty_until_clean, name="journal-trash", daemon=True
            )
            self._emptier.start()

    def _empty_until_clean(self) -> None:
        while True:
            with self._emptier_lock:
                if not self._trash_dirty:
                    self._emptier = None
                    return
                self._trash_dirty = False
            try:
                self.empty_trash()
            except OSError:
                return  # trash is garbage: the next delete or open tries again

    def wait_for_trash(self) -> None:
        with self._emptier_lock:
            emptier = self._emptier
        if emptier is not None:
            emptier.join()

    def orphaned_intents(self) -> list[tuple[str, DeleteIntent]]:
        """Intents whose deleting process is gone (its lock is free)."""
        out = []
        for path, intent in self.intents():
            probe = FileLock(path + ".lock", "a delete in progress")
            try:
                if probe.try_acquire():
                    out.append((path, intent))
            finally:
                probe.close()
        return out

    def close(self) -> None:
        self.wait_for_trash()
        self.lock.close()

"""Fork and delete: the operations that hold several of a store's parts together.

`TreeOps` serves `Store.fork`, `Store.fork_at` and `Store.delete_sessions` (which
check that the store is writable and translate failures, `calls.guarded`), and
the retention job's deletes. A fork is staged in tmp/ and published under the
tree lock once its parent is checked; a delete locks the whole subtree, commits
a delete intent (the commit point) and carries it out (tree.Tree).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from . import fsio, upkeep, validate
from .calls import coerce
from .errors import ContractViolationError, CorruptionError, JournalError, NotFoundError
from .layout import LOCK_FILE, dir_name
from .locks import FileLock
from .session import Session
from .sessiondir import SessionIdentity
from .tree import DeleteIntent
from .types import Checkpoint, SessionSummary

if TYPE_CHECKING:
    from .store import Store


class TreeOps:
    """Fork and delete over one store's parts (its public attributes)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def fork(
        self, parent_session_id: str, parent_sequence: int, checkpoint: Checkpoint
    ) -> SessionSummary:
        """Create a clean child session at an exact durable parent sequence."""
        validate.validate_session_id(parent_session_id, "fork parent session id")
        validate.validate_sequence(parent_sequence, "fork parent sequence")
        cp: Checkpoint = coerce(checkpoint, Checkpoint, "checkpoint")
        validate.validate_session_id(cp.session_id)
        validate.validate_fork_child(parent_session_id, cp)
        # The rest of the child's validation (validate_checkpoint: its version, its
        # types and integer ranges, the JSON walk of its metadata and context) runs
        # below, while the child's syncs do: nothing is visible before it passes, and
        # a child that fails it is removed unpublished.
        now = int(time.time())
        ident = SessionIdentity(cp.session_id, parent_session_id, parent_sequence, now)

        # The child's whole log, built from the arguments alone: no Session object is
        # opened for it (its first open reads this one commit, as after any fork).
        def encode() -> tuple[bytes, bytes]:
            try:
                return Session.fork_commit(cp, now, self.store.options.max_record_bytes)
            except Exception:
                validate.validate_checkpoint(cp)  # a value the encoder refuses: say which
                raise

        # The child is written, and its syncs started, before the tree lock is taken:
        # it depends on nothing but the arguments, and its syncs then run while the
        # parent is checked. It stays private (in tmp/) until published below, and is
        # removed, having changed nothing, when a check fails.
        with self.store.publisher.stage_fork(ident, encode) as staged:
            end, header = staged.result
            # While the syncs run: the child's validation, and its catalog entry.
            validate.validate_checkpoint(cp)
            summary = upkeep.fork_summary(ident, header, cp.first_user_message)

            def announce(_: tuple[int, bytes]) -> None:
                self.store.upkeep.catalog_publish(cp.session_id, summary, end, cp.sequence, None)

            with self.store.tree.locked():
                parent = self._fork_parent(parent_session_id, parent_sequence, cp.session_id)
                # The child must not outlive its fork point: make the parent's commits
                # written so far durable (a save on it may still be syncing them, here
                # or in another process; its older segments were synced when sealed)
                # before the child is published. The parent's directory entry becomes
                # durable with the child's: both are in sessions/, synced last. Skipped
                # when this process synced them already (its own durable saves, or the
                # sync of an earlier fork at the same parent position).
                parent_covered = parent.head.covered
                parent_sync: fsio.Syncing | None = None
                if parent.log.durable_to < parent_covered:
                    parent_sync = fsio.start_sync([parent.log.segments[-1].path], [], [])
                self.store.registry.note(os.path.basename(staged.path))
                if not staged.publish(announce, wait_for=parent_sync):
                    # another process created it since the check in `_fork_parent`
                    raise ContractViolationError(f"session {cp.session_id!r} already exists")
                if parent_sync is not None:
                    parent.log.note_durable(parent_covered)
                self.store.session_jobs.warm_soon(cp.session_id)
                return summary

    def _fork_parent(self, parent_id: str, parent_sequence: int, child_id: str) -> Session:
        """The fork's parent, checked (tree lock held): it exists and has reached the
        fork point, and the child does not exist yet."""
        parent = self.store.open_sessions.get(parent_id)
        if parent is not None:
            parent.refresh()
        if parent is None or not parent.exists:
            raise NotFoundError(f"fork parent does not exist: {parent_id!r}")
        if parent_sequence > parent.head.sequence:
            raise ContractViolationError(
                f"fork point is newer than the parent checkpoint ({parent_sequence} >"
                f" {parent.head.sequence}, parent {parent_id!r})"
            )
        if self.store.open_sessions.get(child_id) is not None:
            raise ContractViolationError(f"session {child_id!r} already exists")
        return parent

    def fork_at(
        self,
        parent_session_id: str,
        parent_sequence: int,
        child_session_id: str,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> SessionSummary:
        """`Store.fork_at` (which documents it): the child built from `checkpoint_at`."""
        validate.validate_session_id(child_session_id)
        source = self.store.checkpoint_at(parent_session_id, parent_sequence)
        if source is None:
            raise NotFoundError(
                f"session {parent_session_id!r} has no checkpoint at sequence {parent_sequence}"
            )
        child = Checkpoint.empty(child_session_id, owner_id=source.session_context.owner_id)
        child.session_context = msgspec.structs.replace(source.session_context, origin_label=None)
        child.context = source.context
        child.first_user_message = source.first_user_message
        child.model_route = source.model_route
        child.context_model_route = source.context_model_route
        child.metadata = dict(source.metadata if metadata is None else metadata)
        return self.fork(parent_session_id, parent_sequence, child)

    def delete_sessions(self, session_ids: Sequence[str]) -> bool:
        """Atomically delete sessions, all their descendants and their session-scoped state.

        Returns False, deleting nothing, when any selected session is absent.
        """
        ids = list(session_ids)
        for sid in ids:
            validate.validate_session_id(sid)
        if not ids:
            return True
        with self.store.tree.locked():
            self._settle()
            if not all(self._present(sid) for sid in ids):
                return False
            self._delete_locked(self._subtree(ids))
            return True

    def delete_trees(self, roots: Sequence[str], accept: Callable[[list[str]], bool]) -> list[str]:
        """Delete in ONE commit the subtree of each root that `accept(subtree)`
        accepts; the roots deleted. `accept` is asked with the tree lock and every
        subtree's session locks held and the catalog refreshed after taking them:
        a save's catalog upsert runs under its session's lock, so what `accept`
        reads of the catalog includes every commit made before the delete, and no
        commit can come between its answer and the delete. Roots the catalog does
        not list are skipped; no session is opened (the catalog knows the tree)."""
        with self.store.tree.locked():
            self._settle()
            catalog = self.store.catalog
            unlisted = self._unlisted_children()
            subtrees: list[list[str]] = []
            taken: set[str] = set()
            for root in roots:
                if root in taken or not catalog.lists(root):
                    continue
                subtree = self._subtree([root], unlisted)
                if taken.isdisjoint(subtree):
                    subtrees.append(subtree)
                    taken.update(subtree)
            chosen: list[list[str]] = []
            with contextlib.ExitStack() as held:
                dirs = self._hold_all(held, [sid for sub in subtrees for sid in sub])
                catalog.refresh()
                chosen = [sub for sub in subtrees if accept(sub)]
                closure = [sid for sub in chosen for sid in sub]
                if closure:
                    wanted = set(closure)
                    names = [os.path.basename(path) for path, sid in dirs if sid in wanted]
                    self._commit_delete(closure, names)
            if chosen:
                self._deleted(closure)
            return [sub[0] for sub in chosen]

    def _settle(self) -> None:
        """Bring the tree up to date before a delete is planned (tree lock held)."""
        # Best effort: a delete left unfinished by a failure is finished here when
        # it can be; its sessions count as absent either way.
        with contextlib.suppress(JournalError, OSError):
            self.store.upkeep.finish_orphaned_deletes()
        self.store.upkeep.reconcile_dead(force=True)
        self.store.catalog.refresh()

    def _hold_all(self, held: contextlib.ExitStack, ids: list[str]) -> list[tuple[str, str]]:
        """Take the write locks of these sessions, in directory order, until `held`
        closes; their (directory, id) pairs, in that order."""
        dirs = sorted(
            (self.store.session_dir(sid), sid)
            for sid in ids
            if fsio.is_dir(self.store.session_dir(sid))
        )
        for path, sid in dirs:
            self._hold_for_delete(held, path, sid)
        return dirs

    def _delete_locked(self, closure: list[str]) -> None:
        """Delete these sessions (a whole subtree or several), tree lock held."""
        with contextlib.ExitStack() as held:
            dirs = self._hold_all(held, closure)
            self._commit_delete(closure, [os.path.basename(path) for path, _ in dirs])
        self._deleted(closure)

    def _deleted(self, closure: list[str]) -> None:
        self.store.open_sessions.drop(closure, deleted=True)
        self.store.tree.empty_trash_soon()
        if self.store.replica is not None:
            self.store.replica.deleted(closure)

    def _present(self, session_id: str) -> bool:
        """Whether a session to delete is there (a damaged one is: deleting is how to
        get rid of it)."""
        try:
            sess = self.store.open_sessions.get(session_id)
            if sess is not None:
                sess.refresh()
            return sess is not None and sess.exists
        except CorruptionError:
            return fsio.is_dir(self.store.session_dir(session_id))

    def _unlisted_children(self) -> dict[str, list[str]]:
        """The parent links of session directories the catalog does not list."""
        unlisted: dict[str, list[str]] = {}
        self.store.upkeep.add_unlisted_children(unlisted)
        return unlisted

    def _subtree(self, ids: list[str], unlisted: dict[str, list[str]] | None = None) -> list[str]:
        """These sessions and all their descendants, breadth first (tree lock held).
        `unlisted`: `_unlisted_children()`, when the caller asks for several subtrees."""
        catalog = self.store.catalog
        if unlisted is None:
            unlisted = self._unlisted_children()
        closure: list[str] = []
        queue = list(dict.fromkeys(ids))
        seen = set(queue)
        while queue:
            sid = queue.pop(0)
            closure.append(sid)
            for child in sorted(catalog.child_ids(sid)) + unlisted.get(sid, []):
                if child not in seen:
                    seen.add(child)
                    queue.append(child)
        return closure

    def _hold_for_delete(self, held: contextlib.ExitStack, path: str, session_id: str) -> None:
        """Take a session's write locks until `held` closes. One open here is locked
        through its Session (its thread lock, then its file lock); the others only
        through their lock files: opening each descendant (indexes, snapshot, a scan)
        just to delete it would cost most of the delete."""
        sess = self.store.open_sessions.cached(session_id)  # pinned: nobody closes it under us
        if sess is not None and sess.still_published():
            held.enter_context(sess.held_for_delete(self.store.options.lock_timeout))
            return
        lock = FileLock(os.path.join(path, LOCK_FILE), f"session {session_id!r}")
        held.callback(lock.close)
        lock.acquire(self.store.options.lock_timeout)
        held.callback(lock.release)

    def _commit_delete(self, closure: list[str], dir_names: list[str]) -> None:
        """Make the delete of these sessions durable and carry it out (their locks held)."""
        for sid in closure:
            self.store.registry.note(dir_name(sid))
        intent = DeleteIntent(closure, dir_names, self.store.state.scopes_present(closure))
        # The commit point: once the intent is durable the sessions are gone for every
        # reader, and the delete is reported done. A failure after it (moving the
        # directories to the trash, a sync, retiring the intent) leaves the intent,
        # which any later call of any process finishes (its owner lock is free once
        # `owner` is closed). See docs/durability.md, "What an error means".
        intent_path, owner = self.store.tree.write_intent(intent)
        try:
            self.store.tree.carry_out(
                intent_path,
                intent,
                before_retiring=lambda: self.store.upkeep.catalog_forget(closure),
            )
        except (JournalError, OSError):
            pass  # finished later (see above); the delete is made
        finally:
            owner.close()
        self.store.state.forget_scopes(intent.state_dirs)

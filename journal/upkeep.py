"""Keeping the catalog true: recovery at open, reconciliation, re-announcing.

The catalog (catalog.py) is derived data: a cache of every session's summary,
appended after each commit without a sync. What makes it true again after a crash,
a power loss, a copied store or a failed append lives here:
- at open (`Upkeep.recover_at_open`): deletes a dead process left are rolled
  forward and half-built directories in tmp/ are removed. The catalog itself is
  not opened: a process that only reads and writes sessions never pays for it;
- on the catalog's first use that reads it (a listing, children, recent turns, a
  delete's subtree walk: `Upkeep.settled`), after a reboot or in a copied store
  every session is re-derived from its log, and dead processes' registrations
  are reconciled, before the answer. Appends (a commit's upsert) open the
  catalog without that re-check: what they append is compared with the logs by
  it all the same, and until it has run to the end `catalog/BOOT` is not
  recorded, so no later process takes it for done;
- dead processes' registrations name the sessions they wrote: those are
  re-derived (`reconcile_dead`, at most once a second, before listings);
- a commit whose catalog append failed is kept for later (`keep_for_later`) and
  re-derived before the next listing, or by the next open.
Also the summaries themselves: `summary_of` (a session's catalog entry, from its
head) and `fork_summary` (a fork child's, from its first commit).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

import msgspec

from . import fsio, sessiondir
from .catalog import Catalog
from .catalogrecords import OP_DELETE, OP_EXECUTION, OP_RESET, OP_UPSERT, CatalogRecord
from .errors import CorruptionError, JournalError, LockTimeoutError
from .index import KIND_EXECUTIONS
from .layout import (
    CATALOG_BROKEN_PREFIX,
    CATALOG_DIR,
    LOG_DIR,
    SESSIONS_DIR,
    TMP_DIR,
    dir_name,
)
from .opened import OpenSessions
from .registry import ProcessRegistry, check_boot, record_boot
from .session import Session
from .sessiondir import SessionIdentity
from .sessionstate import Head, SessionOptions
from .state import StateStore
from .tree import Tree
from .types import ExecutionRecord, ExecutionStats, SessionContext, SessionSummary

_encode_execution = msgspec.msgpack.Encoder().encode
TMP_MAX_AGE = 600.0  # seconds: older entries of tmp/ are a dead process's leftovers


def open_catalog(
    root: str,
    options: SessionOptions,
    *,
    read_only: bool,
    background: Callable[[Callable[[], None]], None] | None = None,
) -> Catalog:
    """The store's catalog, caught up; a damaged one is set aside and rebuilt.
    `background` runs its base rewrites (the store's job runner)."""

    def opened() -> Catalog:
        return Catalog(
            root,
            segment_bytes=16 << 20,
            lock_timeout=options.lock_timeout,
            read_only=read_only,
            read_cache=options.read_cache,
            background=background,
        )

    try:
        catalog = opened()
        catalog.refresh()
        return catalog
    except CorruptionError:
        # Derived data: set the damaged catalog aside and rebuild it from the sessions.
        broken = os.path.join(root, f"{CATALOG_BROKEN_PREFIX}{uuid.uuid4().hex[:8]}")
        fsio.rename(os.path.join(root, CATALOG_DIR), broken)
        catalog = opened()
        catalog.refresh()
        return catalog


def clean_tmp(root: str) -> None:
    """Remove half-built directories that a dead process left in tmp/ (older than
    `TMP_MAX_AGE`: a spare is used only while much younger, see spares.py)."""
    tmp = os.path.join(root, TMP_DIR)
    cutoff = time.time() - TMP_MAX_AGE
    for name in os.listdir(tmp):
        path = os.path.join(tmp, name)
        try:
            if os.stat(path).st_mtime < cutoff:
                fsio.remove_tree(path)
        except OSError:
            continue


class Upkeep:
    """One store's catalog upkeep (`Store.upkeep`)."""

    def __init__(
        self,
        root: str,
        *,
        open_catalog: Callable[[], Catalog],
        tree: Tree,
        registry: ProcessRegistry,
        state: StateStore,
        sessions: OpenSessions,
        read_only: bool,
    ) -> None:
        self.root = root
        self._open_catalog = open_catalog
        self._catalog: Catalog | None = None
        self._opening = threading.Lock()
        # Held while the first reading use re-checks the catalog (`settled`): a
        # second caller waits for the re-check instead of answering before it.
        self._settling = threading.Lock()
        self._settled = False
        self.tree = tree
        self.registry = registry
        self.state = state
        self.sessions = sessions
        self.read_only = read_only
        self._lock = threading.Lock()
        self._last_reconcile = 0.0  # when dead processes' registrations were last read
        # Directory names of sessions whose commit is durable but whose catalog
        # append failed (`catalog_publish`), each with a count of such failures:
        # re-derived before the next listing, or left to the next open (`close`),
        # so the catalog never stays behind for good.
        self._unannounced: dict[str, int] = {}
        self._announce_retry_at = 0.0  # 0 when a new failure came: try at once

    # ------------------------------------------------------------------ open
    @property
    def catalog(self) -> Catalog:
        """The store's catalog, opened on first use (`open_catalog`), not re-checked."""
        catalog = self._catalog
        if catalog is None:
            with self._opening:
                if self._catalog is None:
                    self._catalog = self._open_catalog()
                catalog = self._catalog
        return catalog

    @property
    def catalog_opened(self) -> bool:
        """Whether this store has opened its catalog yet."""
        return self._catalog is not None

    def settled(self) -> Catalog:
        """The catalog, once what an open owes it is done: the re-check of every
        session after a reboot, in a copied store or for a new catalog, and the
        dead processes' registrations (`settle`). For every use that reads it."""
        if not self._settled:
            with self._settling:
                if not self._settled:
                    self.settle()
                    self._settled = True
        return self.catalog

    def close_catalog(self) -> None:
        """Close the catalog if this store opened it."""
        if self._catalog is not None:
            self._catalog.close()

    def recover_at_open(self) -> None:
        """What a store does as it opens: finish dead processes' deletes and clean
        tmp/ (the catalog waits for its first use: `settled`)."""
        if not self.read_only:
            self.finish_orphaned_deletes()
            clean_tmp(self.root)
            if os.listdir(self.tree.trash):
                self.tree.empty_trash_soon()  # left by a process that exited meanwhile
            if not os.path.isdir(os.path.join(self.root, CATALOG_DIR, LOG_DIR)):
                # A new store, or a catalog set aside: create it now (an empty log),
                # so that live writers follow it; with no session to derive it from,
                # it is settled at once (nothing to re-check).
                with os.scandir(os.path.join(self.root, SESSIONS_DIR)) as it:
                    empty = next(it, None) is None
                if self.catalog.fresh and empty:
                    self.settled()

    def settle(self) -> None:
        """Re-derive the catalog where it may be wrong wholesale, then reconcile
        dead processes' registrations."""
        catalog = self.catalog
        changed, boot_line = check_boot(catalog.dir, self.root)
        settled = True
        if changed or catalog.fresh:
            # Every directory, and every session the catalog names (it may have none).
            names = os.listdir(os.path.join(self.root, SESSIONS_DIR))
            names.extend(catalog.listed_dir_names())
            try:
                unsettled = self.reconcile(names) if names else set()
            except (OSError, JournalError):  # the catalog busy or failing: next open
                unsettled = set(names)
            self.keep_for_later(unsettled)
            settled = not unsettled
        if settled and boot_line is not None and not self.read_only:
            # Only now: a re-check that was cut short (a kill, a busy lock) is done
            # again by the next open instead of being taken for done.
            record_boot(catalog.dir, boot_line)
        self._reconcile_registrations()

    # ------------------------------------------------------------ reconciling
    def reconcile_dead(self, *, force: bool = False) -> None:
        """Correct the catalog for sessions that a dead process wrote (throttled to 1/s),
        and for those whose catalog append failed here. Best effort: what cannot be
        settled now (the catalog busy or failing) is kept for a later call, and the
        listing goes on with the catalog as it is."""
        if not self._settled:
            self.settled()  # reconciles the registrations itself
            force = False
        self.announce_again()
        now = time.monotonic()
        if not force and now - self._last_reconcile < 1.0:
            return
        self._reconcile_registrations()

    def _reconcile_registrations(self) -> None:
        self._last_reconcile = time.monotonic()
        for path, names in self.registry.dead_registrations():
            try:
                unsettled = self.reconcile(names)
            except (OSError, JournalError):
                continue  # its file stays: tried again later
            if not self.read_only and not unsettled:
                self.registry.forget(path)

    def announce_again(self) -> None:
        """Re-derive the entries whose catalog append failed (`keep_for_later`).

        A name leaves the set only once settled, and only if no new failure for
        it came meanwhile (its generation is unchanged): a caller racing another
        one re-derives it too instead of listing without it. Names an attempt
        could not settle are tried again at most once a second (a new failure is
        tried at once), as dead processes' registrations are.
        """
        with self._lock:
            pending = dict(self._unannounced)
            if not pending or time.monotonic() < self._announce_retry_at:
                return
        try:
            unsettled = self.reconcile(sorted(pending))
        except (OSError, JournalError):
            unsettled = set(pending)  # all kept for the next call, or the next open
        with self._lock:
            for name, generation in pending.items():
                if name not in unsettled and self._unannounced.get(name) == generation:
                    del self._unannounced[name]
            # Left only with names this attempt could not settle: wait a second.
            # A failure that came meanwhile (another generation) is tried at once.
            fresh = any(pending.get(n) != g for n, g in self._unannounced.items())
            idle = not self._unannounced or fresh
            self._announce_retry_at = 0.0 if idle else time.monotonic() + 1.0

    def unannounced(self) -> list[str]:
        """The directory names whose catalog entries wait to be re-derived."""
        with self._lock:
            return list(self._unannounced)

    def reconcile(self, names: list[str]) -> set[str]:
        """Re-derive the catalog entries of these session directories from their logs.

        Returns the names it could not settle for a reason other than damage (an
        I/O error, a busy lock): a caller that must not lose them tries again.
        Damage is reported by reads and `verify`, not by listing.
        """
        unsettled: set[str] = set()
        catalog = self.catalog
        catalog.refresh()
        pending = self.tree.pending_session_dirs()
        records: list[CatalogRecord] = []
        for name in dict.fromkeys(names):
            if name in pending:
                unsettled.add(name)  # its delete is not finished: look again after it
                continue
            try:
                record = self._rederive(name, catalog.listed_id_of_dir(name))
            except (OSError, JournalError) as exc:
                # Only what passes by itself (a busy lock, a full descriptor table,
                # an interrupted call) is worth trying again. Damage, a format from
                # elsewhere, a vanished directory, and lasting I/O errors (EIO,
                # EACCES) are final answers: retrying them keeps BOOT unrecorded
                # and a procs/ file more at every open.
                if _transient(exc):
                    unsettled.add(name)
                continue
            if record is not None:
                records.append(record)
        self.catalog.append(records)
        return unsettled

    def _rederive(self, name: str, listed_id: str | None) -> CatalogRecord | None:
        """The catalog record that makes one directory's entry true (None: nothing
        to append; an entry ahead of the log is reset here, under the session's lock).
        `listed_id`: the listed session of that directory name, if any."""
        path = os.path.join(self.root, SESSIONS_DIR, name)
        if not os.path.isdir(path):
            return None if listed_id is None else CatalogRecord(OP_DELETE, listed_id, -1)
        sid = sessiondir.read_identity(path).session_id
        # Held for this derivation only: a re-check of every session must not keep
        # them all open until the call that runs it returns.
        sess = self.sessions.get(sid, held=True)
        if sess is None:  # discarded as unfinished, or being deleted
            return CatalogRecord(OP_DELETE, sid, -1) if self.catalog.lists(sid) else None
        try:
            return self._rederive_open(sess)
        finally:
            self.sessions.release([sess])

    def _rederive_open(self, sess: Session) -> CatalogRecord | None:
        """`_rederive` of a session that is there, open."""
        sid = sess.id
        sess.refresh()
        summary, covered = summary_of(sess)
        if self.catalog.ahead_of(sid, summary, covered):
            # The catalog is ahead of the log (a commit it shows is not there).
            if self.read_only:
                self._reset_in_memory(sess)
            else:
                self._reset_entry(sess)
            return None
        if summary is None:
            return None
        executions = sess.read_head(lambda head: head.executions)
        if self.catalog.agrees(sid, summary, covered, executions):
            return None
        return CatalogRecord(OP_UPSERT, sid, covered, summary, executions=_all_executions(sess))

    def _reset_entry(self, sess: Session) -> None:
        """Replace a session's catalog entry with what its log says, under its writer lock.

        The lock keeps a live writer from committing between the derivation and
        the catalog append: any upsert it appends later covers more of the log.
        """
        with sess.writing():
            self._reset_in_memory(sess)

    def _reset_in_memory(self, sess: Session) -> None:
        """Replace a session's catalog entry with what its log says (a read-only
        catalog applies it in memory only)."""
        summary, covered = summary_of(sess)
        if summary is None:
            record = CatalogRecord(OP_DELETE, sess.id, -1)
        else:
            executions = _all_executions(sess)
            record = CatalogRecord(OP_RESET, sess.id, covered, summary, executions=executions)
        self.catalog.append([record])

    def add_unlisted_children(self, children: dict[str, list[str]]) -> None:
        """Add the parent links of session directories the catalog does not list.

        The catalog leaves out a session it cannot read (damage is reported by
        reads and `verify`, not by listing), so it knows nothing of that child's
        parent; a delete of the parent must take it all the same. Its identity
        file still names the parent. Costs one listing of `sessions/` and a set
        difference with the directory names the catalog keeps (an identity read
        only for the rare unlisted directory). A directory whose identity is
        unreadable, or is not that session's directory (a stray copy under another
        name), is not placed in the tree and stays.
        """
        sessions = os.path.join(self.root, SESSIONS_DIR)
        unlisted = self.catalog.unlisted(os.listdir(sessions)) - self.tree.pending_session_dirs()
        for name in sorted(unlisted):
            try:
                ident = sessiondir.read_identity(os.path.join(sessions, name))
            except (OSError, JournalError):
                continue
            if dir_name(ident.session_id) != name:
                continue  # not that session's directory (a stray copy): not its child
            parent = ident.parent_session_id
            if parent is not None and ident.session_id not in children.get(parent, ()):
                children.setdefault(parent, []).append(ident.session_id)

    # ----------------------------------------------------------- publishing
    def catalog_upsert(self, sess: Session, sequence: int, rec: ExecutionRecord | None) -> None:
        """Publish a commit's summary (and a copy of its execution record) to the catalog."""
        self.catalog_publish(sess.id, *summary_of(sess), sequence, rec)

    def catalog_publish(
        self,
        session_id: str,
        summary: SessionSummary | None,
        covered: int,
        sequence: int,
        rec: ExecutionRecord | None,
    ) -> None:
        """Append a commit's catalog records; a failure is kept for later, never raised."""
        if summary is None:
            return
        records = [CatalogRecord(OP_UPSERT, session_id, covered, summary)]
        if rec is not None:
            key = (sequence, rec.started_at_ms)
            records = [
                CatalogRecord(OP_UPSERT, session_id, covered, summary, key),
                CatalogRecord(
                    OP_EXECUTION, session_id, covered, None, key, record=_encode_execution(rec)
                ),
            ]
        try:
            self.catalog.append(records)
        except (JournalError, OSError):
            # The catalog is a cache of the logs: the commit is made, and one that
            # cannot be listed yet is never the caller's error (a retry would be
            # refused by the sequence rule). The entry is re-derived from the log
            # before the next listing, or by the next open.
            self.keep_for_later([dir_name(session_id)])

    def catalog_forget(self, session_ids: Sequence[str]) -> None:
        """A delete's catalog records: appended once the directories are in the trash
        and before the intent is retired, so that no reader finds the sessions
        gone (no intent, no directory) while the catalog still lists them. The
        delete is done either way: a failure leaves it to be re-derived."""
        try:
            self.catalog.append([CatalogRecord(OP_DELETE, sid, -1) for sid in session_ids])
        except JournalError:
            self.keep_for_later(dir_name(sid) for sid in session_ids)

    def keep_for_later(self, names: Iterable[str]) -> None:
        """Session directories whose catalog entries must be re-derived later: by this
        process before its next listing, or, should it close or die first, by the
        next open, which reconciles every name in this process's registration."""
        names = list(names)
        with self._lock:
            for name in names:
                self._unannounced[name] = self._unannounced.get(name, 0) + 1
            self._announce_retry_at = 0.0
        if not self.read_only:
            for name in names:
                with contextlib.suppress(OSError, JournalError):
                    self.registry.note(name)

    # ---------------------------------------------------------------- deletes
    def finish_orphaned_deletes(self) -> None:
        """Roll forward deletes whose process died after its intent became durable
        (a read-only store only treats their sessions as absent)."""
        if self.read_only:
            return
        if not self.tree.orphaned_intents():
            return
        finished = False
        with self.tree.locked():
            # Checked again under the lock: the first look can take a live delete's
            # intent, not yet locked by its owner, for an orphan.
            for path, intent in self.tree.orphaned_intents():
                for sid in intent.session_ids:  # re-checked by the next open if we die
                    self.registry.note(dir_name(sid))
                forget = functools.partial(self.catalog_forget, intent.session_ids)
                self.tree.carry_out(path, intent, before_retiring=forget)
                self.state.forget_scopes(intent.state_dirs)
                self.sessions.drop(intent.session_ids)
                finished = True
        if finished:
            # In the background, as after any delete: emptying the trash here, under
            # the tree lock, holds up every fork and delete for as long as it takes.
            self.tree.empty_trash_soon()


# ----------------------------------------------------------------- summaries
class _SummaryFields(msgspec.Struct):
    """The catalog's fields of a checkpoint header (decoding skips everything else)."""

    session_context: SessionContext
    catalog_visible: bool = True
    execution_stats: ExecutionStats = msgspec.field(default_factory=ExecutionStats)


_decode_summary_fields = msgspec.msgpack.Decoder(_SummaryFields).decode


def summary_of(sess: Session) -> tuple[SessionSummary | None, int]:
    """A session's catalog entry from its head, and the log position it reflects
    (None before its first checkpoint)."""

    def summary(head: Head) -> tuple[SessionSummary | None, int]:
        if head.header is None:
            return None, head.covered
        header = _decode_summary_fields(bytes(head.header))
        return SessionSummary(
            session_id=sess.id,
            session_context=header.session_context,
            parent_session_id=sess.identity.parent_session_id,
            parent_sequence=sess.identity.parent_sequence,
            sequence=head.sequence,
            catalog_visible=header.catalog_visible,
            first_user_message=head.first_user_message,
            execution_stats=header.execution_stats,
            created_at=head.created_at,
            updated_at=head.updated_at,
        ), head.covered

    return sess.read_head(summary)


def fork_summary(
    identity: SessionIdentity, header: bytes, first_user_message: str | None
) -> SessionSummary:
    """A fork child's catalog entry, from its first commit as `Session.fork_commit`
    built it (what `summary_of` reads from the child's head once it is open).
    Its parts are decoded from the header, not taken from the caller's checkpoint,
    which the caller may change later."""
    fields = _decode_summary_fields(header)
    return SessionSummary(
        session_id=identity.session_id,
        session_context=fields.session_context,
        parent_session_id=identity.parent_session_id,
        parent_sequence=identity.parent_sequence,
        sequence=0,
        catalog_visible=fields.catalog_visible,
        first_user_message=first_user_message,
        execution_stats=fields.execution_stats,
        created_at=identity.created_at,
        updated_at=identity.created_at,
    )


def _all_executions(sess: Session) -> list[tuple[int, int]]:
    """(sequence, started_at_ms) of every execution record of a session (rebuilds only)."""
    out: list[tuple[int, int]] = []
    before: int | None = None
    while True:
        page, before = sess.sparse_page(KIND_EXECUTIONS, before, 1000)
        out.extend((p.sequence, p.record.started_at_ms) for p in page)
        if before is None:
            return out


_TRANSIENT_ERRNOS = frozenset(
    {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.EMFILE, errno.ENFILE, errno.ENOMEM}
)


def _transient(exc: BaseException) -> bool:
    """Whether a failure may pass by itself: a lock timeout, or an OS error (or a
    StorageError raised from one) whose errno says so."""
    if isinstance(exc, LockTimeoutError):
        return True
    for err in (exc, exc.__cause__):
        if isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNOS:
            return True
    return False

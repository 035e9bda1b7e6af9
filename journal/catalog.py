"""The session catalog: derived summaries of every session, for listing without opening them.

The catalog is an append-only log (`ROOT/catalog/log/`, same segment and record
format as a session log, record type CATALOG) of summary upserts and deletions.
Writers append one self-committing record after each commit, without fsync:
the catalog is derived data, never the source of truth.

A process never holds the whole catalog. It reads the catalog's base
(`catalog/base`, catalogbase.py: every listed session as of one log position,
in sorted tables read a block at a time) and keeps only the log's records after
that position in memory, as a delta over the base (catalogview.py); it catches
up by reading records appended since it last looked. Once the delta grows past
a bound (`DELTA_SESSIONS`, `DELTA_LOG_BYTES`), a new base is written by a
streaming merge of the old one and the delta, in the store's background thread,
to a temporary name, fsynced and renamed into place; every process then adopts
the newest base the next time its own delta is past the bound. A base that is
missing, damaged, of another version or not anchored in this log is ignored:
the log is read from its start instead, and a new base written.

Correctness after a crash comes from reconciliation, not from fsync (upkeep.py,
registry.py): sessions a dead process wrote are re-derived from their logs,
every session is re-checked after a reboot, and a missing or damaged catalog
is rebuilt from the session directories.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable

import msgspec

from . import fsio
from .cache import ReadCache
from .catalogbase import Base, BaseDamaged, BaseWriter
from .catalogrecords import (
    BaseMeta,
    CatalogRecord,
    ExecKey,
    SortKey,
    Span,
    copy_of,
    decode_meta,
    decode_record,
    encode,
)
from .catalogview import CatalogView
from .errors import CorruptionError, JournalError, StorageError
from .layout import (
    CATALOG_BASE_FILE,
    CATALOG_BASE_TMP_PREFIX,
    CATALOG_DIR,
    CATALOG_LOG_TMP_PREFIX,
    LOCK_FILE,
    LOG_DIR,
    SNAPSHOT_FILE,
)
from .locks import FileLock
from .log import KIND_CATALOG, Log
from .record import CATALOG, frame
from .rootcheck import mkdir_below
from .scan import ScanState, Tail
from .types import SessionSummary

_CHECKED_COPIES_KEPT = 1024
DELTA_SESSIONS = 4096  # a new base once the delta holds this many sessions ...
DELTA_LOG_BYTES = 1 << 20  # ... or the log grew this much past the base ...
DELTA_SHARE = 32  # ... or, in a large catalog, 1/32 of its sessions and log,
DELTA_LOG_MAX = 4 << 20  # but never more log than this (an open replays it)
ADOPT_EVERY = 1.0  # seconds between looks for a newer base while over the bound
BASE_TMP_MAX_AGE = 600.0  # seconds: an older temporary base is a dead writer's


class Catalog:
    def __init__(
        self,
        root: str,
        *,
        segment_bytes: int,
        lock_timeout: float,
        read_only: bool = False,
        read_cache: ReadCache | None = None,
        background: Callable[[Callable[[], None]], None] | None = None,
    ):
        self.dir = os.path.join(root, CATALOG_DIR)
        self.lock_timeout = lock_timeout
        # Read-only: corrections (reconciliation) are applied in memory, never written.
        self.read_only = read_only
        log_dir = os.path.join(self.dir, LOG_DIR)
        self.fresh = not os.path.isdir(log_dir)
        if self.fresh and not read_only:
            made = mkdir_below(self.dir)
            self._create_log(log_dir)  # syncs log/ itself, not its entry
            # Both entries durable before the catalog is relied on (FORMAT.md).
            fsio.sync_dir(self.dir)
            if made:
                fsio.sync_dir(root)
        self._segment_bytes, self._read_cache = segment_bytes, read_cache
        self.log: Log | None = None
        if not self.fresh or not read_only:
            self.log = self._open_log()
        self.flock = FileLock(os.path.join(self.dir, LOCK_FILE), "the catalog")
        self._lock = threading.RLock()
        # Runs a base rewrite off the caller's path (the store's job runner); None:
        # never rewritten by this object.
        self._background = background
        self._bases: list[Base] = []  # every base opened: closed with the catalog
        self._damaged: set[tuple[int, int]] = set()  # bases found damaged: never again
        self._merging = False
        self.base_path = os.path.join(self.dir, CATALOG_BASE_FILE)
        self._reset(self._open_base())

    def _create_log(self, log_dir: str) -> None:
        """Create the catalog's log whole, or adopt the one another process or thread
        made meanwhile: it is built under a temporary name and renamed into place,
        so no opener ever sees a log directory without its first segment."""
        tmp = os.path.join(
            self.dir, f"{CATALOG_LOG_TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        )
        Log.create(tmp, KIND_CATALOG)
        try:
            fsio.rename(tmp, log_dir)
        except StorageError:
            if not fsio.is_dir(log_dir):
                raise
            fsio.remove_tree(tmp)  # another opener's log is in place: use it

    def _open_log(self) -> Log:
        return Log(
            os.path.join(self.dir, LOG_DIR),
            KIND_CATALOG,
            segment_bytes=self._segment_bytes,
            label="catalog",
            cache=self._read_cache,
        )

    def _reset(self, base: tuple[Base, BaseMeta] | None) -> None:
        """Start over from a base (None: from the log's start), forgetting the delta."""
        if base is None:
            self.view = CatalogView(None)
            self.base_meta = BaseMeta(0, 0, 0, 0, 0)
        else:
            self.view = CatalogView(base[0])
            self.base_meta = base[1]
        self.covered = self.base_meta.covered
        self.anchor = (self.base_meta.anchor_pos, self.base_meta.anchor_crc)
        self._checked_copies: dict[tuple[int, int, ExecKey], bytes] = {}  # execution_copies
        self._retire_bases()
        self._quiet_mark = -1  # flock acquisitions at our last complete append
        self._looked_at = 0.0  # when we last looked for a newer base

    def _retire_bases(self) -> None:
        """Close the bases no longer read: all but the current one, unless a rewrite
        is merging from one (then at the next reset or the rewrite's end)."""
        if self._merging:
            return
        current = self.view.base
        for base in self._bases:
            if base is not current:
                base.close()
        self._bases = [] if current is None else [current]

    # ------------------------------------------------------------------ base
    def _open_base(self) -> tuple[Base, BaseMeta] | None:
        """The base at `base_path`, if it is whole, of this version and anchored in
        this log (else None: the log is read from its start)."""
        try:
            base = Base(self.base_path)
        except (FileNotFoundError, BaseDamaged):
            return None
        if base.identity in self._damaged:  # a read-only catalog leaves it in place
            base.close()
            return None
        opened = self._check_base(base)
        if opened is None:
            base.close()
        return opened

    def _check_base(self, base: Base) -> tuple[Base, BaseMeta] | None:
        try:
            meta = decode_meta(base.meta)
        except msgspec.DecodeError:
            return None
        if meta.covered:
            if self.log is None:
                return None
            try:
                size = meta.covered - meta.anchor_pos
                if not self.log.closes_commit(meta.anchor_pos, size, meta.anchor_crc):
                    return None
            except JournalError:
                return None
        self._bases.append(base)
        return base, meta

    def _discard_base(self) -> None:
        """(lock held) The base failed a check while in use: forget it, to read the
        log from its start (`_refresh`); a writable catalog writes a new base."""
        base = self.view.base
        if base is not None:
            self._damaged.add(base.identity)
        if not self.read_only:
            with contextlib.suppress(OSError, JournalError):
                if base is not None and _identity(self.base_path) == base.identity:
                    fsio.unlink(self.base_path)
        self._reset(None)
        self._request_rewrite()

    def _guarded(self, fn: Callable[[CatalogView], object]) -> object:
        """`fn(view)`; if the base fails a check meanwhile, again without the base."""
        with self._lock:
            try:
                return fn(self.view)
            except BaseDamaged:
                self._discard_base()
                self._refresh(False)
                return fn(self.view)

    def _delta_bounds(self) -> tuple[int, int]:
        meta = self.base_meta
        return (
            max(DELTA_SESSIONS, meta.sessions // DELTA_SHARE),
            min(max(DELTA_LOG_BYTES, meta.log_bytes // DELTA_SHARE), DELTA_LOG_MAX),
        )

    def _bound_delta(self) -> None:
        """(lock held, after applying records) Keep the delta small: adopt a newer
        base another process wrote, or have a new one written in the background."""
        sessions, log_bytes = self._delta_bounds()
        if len(self.view.delta) < sessions and self.covered - self.base_meta.covered < log_bytes:
            return
        now = time.monotonic()
        if now - self._looked_at < ADOPT_EVERY:
            return
        self._looked_at = now
        if self._adopt_newer():
            return
        self._request_rewrite()

    def _adopt_newer(self) -> bool:
        """Adopt the base at `base_path` if it is another than ours and usable."""
        base = self.view.base
        try:
            if base is not None and _identity(self.base_path) == base.identity:
                return False
        except OSError:
            return False
        opened = self._open_base()
        if opened is None:
            return False
        if opened[1].covered <= self.base_meta.covered:
            self._retire_bases()
            return False
        self._reset(opened)
        self._refresh(False)
        return True

    def _request_rewrite(self) -> None:
        if self.read_only or self.log is None or self._background is None or self._merging:
            return
        if not self.view.delta:
            return
        self._merging = True
        self._background(self.rewrite_base)

    def rewrite_base(self) -> None:
        """Write a new base: the current one merged with the delta (streamed: memory
        stays that of the delta), then adopt it. Best effort: a base that cannot be
        written (a full disk) leaves the old one, tried again later."""
        try:
            try:
                self._rewrite()
            except BaseDamaged:
                with self._lock:  # the old base is not merged: the log is read instead
                    self._discard_base()
                    self._refresh(False)
                self._rewrite()
        except (JournalError, OSError):
            pass
        finally:
            with self._lock:
                self._merging = False
                self._retire_bases()

    def _rewrite(self) -> None:
        with self._lock:
            if self.log is None:
                return
            frozen = self.view.frozen()
            merging = CatalogView(self.view.base)
            covered, anchor = self.covered, self.anchor
        self._remove_abandoned_temps()
        tmp = os.path.join(
            self.dir, f"{CATALOG_BASE_TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        )
        writer = BaseWriter(tmp)
        try:
            sessions = merging.write_merged(writer, frozen)
            writer.finish(encode(BaseMeta(covered, anchor[0], anchor[1], sessions, covered)))
        except BaseException:
            writer.abort()
            raise
        try:
            written = Base(tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with self._lock:
            # Two rewrites can overlap (the background job's and a caller's): the one
            # that began later covers more, so the other does not rename over it.
            if self.base_meta.covered >= covered:
                written.close()
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                return
            fsio.rename(tmp, self.base_path)
        written.path = self.base_path
        with self._lock:
            opened = self._check_base(written)
            if opened is None:
                written.close()
                return
            if opened[1].covered > self.base_meta.covered:
                self._reset(opened)
                self.refresh()
        # The whole-catalog snapshot of earlier versions: never read, so not kept.
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.dir, SNAPSHOT_FILE))

    def _remove_abandoned_temps(self) -> None:
        """Temporary bases and logs of writers that died before renaming them."""
        cutoff = time.time() - BASE_TMP_MAX_AGE
        with contextlib.suppress(OSError):
            for name in os.listdir(self.dir):
                if not name.startswith((CATALOG_BASE_TMP_PREFIX, CATALOG_LOG_TMP_PREFIX)):
                    continue
                path = os.path.join(self.dir, name)
                with contextlib.suppress(OSError, StorageError):
                    if os.stat(path).st_mtime < cutoff:
                        if name.startswith(CATALOG_LOG_TMP_PREFIX):
                            fsio.remove_tree(path)
                        else:
                            os.unlink(path)

    # ------------------------------------------------------------------ reading
    def refresh(self, *, strict: bool = False) -> ScanState:
        with self._lock:
            try:
                return self._refresh(strict)
            except BaseDamaged:
                self._discard_base()
                return self._refresh(strict)

    def _refresh(self, strict: bool) -> ScanState:
        state = ScanState()
        if self.log is None:
            return state
        if not strict and self.covered and self.log.quiet_since(self.covered):
            state.end = self.covered  # nothing appended since (one pread, no listing)
            return state
        for commit in self.log.committed(self.covered, state, strict=strict):
            for rec in commit:
                self._apply(decode_record(rec.payload, rec.pos), (rec.pos, rec.size))
            self.covered = commit[-1].pos + commit[-1].size
            self.anchor = (commit[-1].pos, commit[-1].crc)
        self._bound_delta()
        return state

    def _apply(self, r: CatalogRecord, span: Span | None = None) -> None:
        self.view.apply(r, span)

    def page(
        self, owner_id: str | None, cursor: SortKey | None, limit: int
    ) -> tuple[list[SessionSummary], SortKey | None]:
        out = self._guarded(lambda view: view.page(owner_id, cursor, limit))
        return out  # type: ignore[return-value]

    def recent_execution_keys(self, limit: int) -> tuple[list[tuple[ExecKey, Span | None]], bool]:
        """The `limit` newest execution keys, each with where its copy is (if known),
        and whether the catalog holds no more."""
        out = self._guarded(lambda view: view.recent_execution_keys(limit))
        return out  # type: ignore[return-value]

    def execution_copies(self, wanted: list[tuple[ExecKey, Span]]) -> list[bytes | None]:
        """The ExecutionRecord payloads stored at these spans; None where a copy fails
        its checks (damaged, or not the record of that key): read the session then."""
        if self.log is None or not wanted:
            return [None] * len(wanted)
        # Copies already checked for their key are kept by (log key space, position,
        # key): `recent_executions` asks for the same newest ones again and again.
        space, memo = self.log.cache_space, self._checked_copies
        out: list[bytes | None] = [None] * len(wanted)
        missing: list[int] = []
        for i, (key, span) in enumerate(wanted):
            body = memo.get((space, span[0], key)) if space else None
            if body is None:
                missing.append(i)
            out[i] = body
        if not missing:
            return out
        try:
            records = self.log.read_records([wanted[i][1] for i in missing])
        except JournalError:
            for i in missing:
                out[i] = self._execution_copy(*wanted[i])
            return out
        for i, rec in zip(missing, records, strict=True):
            key = wanted[i][0]
            body = out[i] = copy_of(key, rec.payload)
            if body is not None and space:
                if len(memo) >= _CHECKED_COPIES_KEPT:
                    memo.clear()
                memo[(space, rec.pos, key)] = body
        return out

    def _execution_copy(self, key: ExecKey, span: Span) -> bytes | None:
        assert self.log is not None
        try:
            return copy_of(key, self.log.read_record(*span).payload)
        except JournalError:
            return None

    def listed_dir_names(self) -> list[str]:
        """The directory names of every listed session (no order)."""
        return self._guarded(lambda view: list(view.listed_dir_names()))  # type: ignore[return-value]

    def listed(self) -> dict[str, SessionSummary]:
        """Every listed session's summary, by id (for offline tools: the whole catalog)."""
        return self._guarded(lambda view: {sid: e.summary for sid, e in view.listed()})  # type: ignore[return-value]

    def summary(self, session_id: str) -> SessionSummary | None:
        """The catalog's summary of one session (None: not listed)."""
        cur = self._guarded(lambda view: view.current(session_id))
        return None if cur is None else cur.summary  # type: ignore[attr-defined]

    def lists(self, session_id: str) -> bool:
        """Whether the catalog lists this session."""
        return self._guarded(lambda view: view.current(session_id) is not None)  # type: ignore[return-value]

    def listed_id_of_dir(self, name: str) -> str | None:
        """The listed session whose directory name is `name`, if any."""
        return self._guarded(lambda view: view.listed_id_of_dir(name))  # type: ignore[return-value]

    def ahead_of(self, session_id: str, summary: SessionSummary | None, covered: int) -> bool:
        """Whether the catalog shows a commit that a session's log (derived as
        `summary` up to log position `covered`) does not hold: it lists a session
        whose log has no checkpoint, or its entry covers more of the log."""
        cur = self._guarded(lambda view: view.current(session_id))
        if cur is None:
            return False
        return summary is None or cur.covered > covered  # type: ignore[attr-defined]

    def agrees(
        self, session_id: str, summary: SessionSummary, covered: int, executions: int
    ) -> bool:
        """Whether the entry is what a session's log says: this summary, up to this
        log position, with this many execution records."""
        cur = self._guarded(lambda view: view.current(session_id))
        return (
            cur is not None
            and cur.summary == summary  # type: ignore[attr-defined]
            and cur.covered == covered  # type: ignore[attr-defined]
            and len(cur.executions) == executions  # type: ignore[attr-defined]
        )

    def child_ids(self, parent_id: str) -> list[str]:
        """The listed sessions forked from `parent_id` (no order)."""
        return self._guarded(lambda view: view.child_ids(parent_id))  # type: ignore[return-value]

    def children_of(self) -> dict[str, list[str]]:
        """Every parent id and the listed sessions forked from it (the whole catalog)."""

        def walk(view: CatalogView) -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            for sid, e in view.listed():
                parent = e.summary.parent_session_id
                if parent is not None:
                    out.setdefault(parent, []).append(sid)
            return {parent: sorted(kids) for parent, kids in out.items()}

        return self._guarded(walk)  # type: ignore[return-value]

    def unlisted(self, names: Iterable[str]) -> set[str]:
        """The directory names among `names` of no listed session (one scan of the
        base's name table, merged with the sorted names)."""
        wanted = list(names)
        return self._guarded(lambda view: view.unlisted(wanted))  # type: ignore[return-value]

    def child_summaries(self, parent_id: str) -> list[SessionSummary]:
        """The listed sessions forked from `parent_id` (no order)."""
        return self._guarded(lambda view: view.child_summaries(parent_id))  # type: ignore[return-value]

    def delta_size(self) -> int:
        """How many sessions the in-memory delta holds (the rest is in the base)."""
        return len(self.view.delta)

    # ------------------------------------------------------------------ writing
    def append(self, records: Iterable[CatalogRecord]) -> None:
        try:
            self._append(list(records))
        except BaseDamaged:
            # Our records are applied by reading the log again, without the base.
            with self._lock:
                self._discard_base()
                self._refresh(False)

    def _append(self, records: list[CatalogRecord]) -> None:
        if self.read_only or self.log is None:
            with self._lock:
                for r in records:
                    self._apply(r)
                self._bound_delta()
            return
        frames = [frame(CATALOG, encode(r), commit=True) for r in records]
        if not frames:
            return
        with self._lock:
            ours = self.flock.acquire(self.lock_timeout)
            try:
                moved = not self.flock.is_at_path()
                if moved:
                    # Another process set a damaged catalog aside (a rename that takes no
                    # lock) and built a new one: lock the new catalog's file, not the old
                    # (that excluded nobody), and read the new log from its start, with
                    # nothing kept of the old one (its positions mean nothing in the new
                    # log: found by review), before writing.
                    self.flock.release()
                    self.flock.close()
                    self.flock.acquire(self.lock_timeout)
                    self._follow_new_catalog()
                # Fast path, as for sessions: our writer is where we last wrote and nobody
                # appended since. Nobody appended if nobody else held the lock since our
                # last append (our holder line, and no other lock here through this
                # object: see `Session._acquire_locks`), or else if the bytes there are
                # still zeros. With the lock file at its path, the catalog directory is
                # the one we wrote to. (The lock file is stat'ed, never the segment: see
                # `Log.writer_at`.)
                quiet = ours and self.flock.acquisitions == self._quiet_mark + 1
                end = self.covered
                self._quiet_mark = -1
                if moved or not (
                    self.log.writer_at(end) if quiet else self.log.untouched_since(end)
                ):
                    self._prepare_write()
                start = self.log.writer_end
                try:
                    self.log.write(b"".join(frames))
                except JournalError:
                    # A failed write may leave a torn tail, or a writer that could not
                    # zero it again (unusable from then on): drop the writer, so that
                    # the next append reads the log again, cuts what is torn under the
                    # lock and opens a new one.
                    with contextlib.suppress(JournalError, OSError):
                        self.log.close_writer()
                    raise
                # Apply our own records instead of reading them back.
                pos = start
                for r, data in zip(records, frames, strict=True):
                    self._apply(r, (pos, len(data)))
                    self.anchor = (pos, int.from_bytes(data[:4], "little"))
                    pos += len(data)
                self.covered = pos
                self._quiet_mark = self.flock.acquisitions
            finally:
                self.flock.release()
            self._bound_delta()

    def _follow_new_catalog(self) -> None:
        """Replace what this object holds by the catalog now at our path (lock held)."""
        old = self.log
        self.log = self._open_log()
        if old is not None:
            with contextlib.suppress(JournalError, OSError):
                old.close()
        self._reset(self._open_base())

    def _prepare_write(self) -> None:
        """Read what others appended, cut a dead writer's torn tail, open our writer."""
        assert self.log is not None
        state = self.refresh()
        if state.tail != Tail.CLEAN:
            # We hold the lock, so unfinished bytes are a dead writer's: cut them.
            state = self.refresh(strict=True)
            if state.tail == Tail.CORRUPT:
                raise CorruptionError(
                    f"catalog: {state.detail}", path=state.path, offset=state.file_offset
                )
            if state.tail == Tail.TORN:
                self.log.truncate_tail(state.end)
        self.log.open_writer(self.covered)

    def _trim_on_close(self, log: Log) -> None:
        """Give back the preallocated tail if this process wrote last (never waits)."""
        if not log.has_writer():
            return
        with self._lock:
            # Recorded: the cut changes the file (see `FileLock.acquire`).
            if not self.flock.try_acquire(record=True):
                return
            try:
                if log.untouched_since(self.covered):
                    log.trim_preallocation(self.covered)
            except JournalError:
                return  # a courtesy: the zeros stay
            finally:
                self.flock.release()

    def close(self) -> None:
        if self.log is not None:
            self._trim_on_close(self.log)
            # A cache: a failing last sync of its writer is not the caller's error
            # (what it loses is re-derived from the session logs).
            with contextlib.suppress(JournalError, OSError):
                self.log.close()
        self.flock.close()
        for base in self._bases:
            base.close()


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino

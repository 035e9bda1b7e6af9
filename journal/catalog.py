"""The session catalog: derived summaries of every session, for listing without opening them.

The catalog is an append-only log (`ROOT/catalog/log/`, same segment and record
format as a session log, record type CATALOG) of summary upserts and deletions.
Writers append one self-committing record after each commit, without fsync:
the catalog is derived data, never the source of truth. Each process keeps the
catalog in memory (summaries, an ordered key list per owner, and the execution
keys for `recent_executions`) and catches up by reading records appended since
it last looked.

Correctness after a crash comes from reconciliation, not from fsync:
- every Store that writes registers itself in `ROOT/procs/` with a file it keeps
  locked, listing the session directories it wrote to. A registration whose
  lock is free belongs to a dead process: the sessions it names are re-derived
  from their logs (cheap: a snapshot and a tail) and corrected in the catalog;
- after a reboot (the boot id changed) every session is re-checked, because
  unsynced catalog records may have been lost with the power;
- a missing or damaged catalog is rebuilt from the session directories.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import msgspec

from . import fsio
from .cache import ReadCache
from .errors import CorruptionError, JournalError, StorageError
from .layout import BOOT_FILE, CATALOG_DIR, LOCK_FILE, LOG_DIR, PROCS_DIR, SNAPSHOT_FILE, dir_name
from .locks import FileLock
from .log import KIND_CATALOG, Log
from .record import CATALOG, frame
from .rootcheck import mkdir_below
from .scan import ScanState, Tail
from .types import SessionSummary

OP_UPSERT = 1
OP_DELETE = 2
OP_RESET = 3
"""Reconciliation: the entry is replaced by this one whatever `covered` says.

An upsert only wins over a greater `covered`, which is right among writers of
one log, but the catalog can also be *ahead* of a session's log: a copy taken
while a writer ran (`cp -a` copies the catalog after the session), a power loss
in "os" mode (the catalog's unsynced bytes survived, the log's did not), a log
cut by `journal repair`. Only a record derived from the log as it is can undo
that; it is written under the session's writer lock, so no commit is missed.
"""
OP_EXECUTION = 4
"""A copy of one execution record (`record`), appended right after the upsert of the
commit that added it, so that `recent_executions` reads its answer from the catalog
log alone instead of opening up to `limit` sessions. Derived data like the rest:
an entry whose copy is unknown (rebuilt or reconciled entries) or fails its checks
is read from the session's own log instead."""


class CatalogRecord(msgspec.Struct, array_like=True):
    op: int
    session_id: str
    covered: int  # session log position the summary reflects (newer wins)
    summary: SessionSummary | None = None
    execution: tuple[int, int] | None = None  # (checkpoint sequence, started_at_ms)
    executions: list[tuple[int, int]] = msgspec.field(default_factory=list)  # full list on rebuild
    record: bytes = b""  # OP_EXECUTION: the ExecutionRecord payload (msgpack)
    where: list[tuple[int, int, int]] = msgspec.field(default_factory=list)  # snapshot only


_decode = msgspec.msgpack.Decoder(CatalogRecord).decode
_encode = msgspec.msgpack.Encoder().encode


class CatalogSnapshot(msgspec.Struct, array_like=True):
    """The whole in-memory catalog at a log position, so opening does not replay history."""

    covered: int
    anchor_pos: int  # the commit-closing record that ends at `covered` (validated on load)
    anchor_crc: int
    entries: list[CatalogRecord]  # one upsert per listed session, with all its executions


_decode_snapshot = msgspec.msgpack.Decoder(CatalogSnapshot).decode
_CHECKED_COPIES_KEPT = 1024
SNAPSHOT_MIN_GROWTH = 32 << 10  # a snapshot is rewritten after max(this, 2x its size)

SortKey = tuple[int, int, str]  # (updated_at, sequence, session_id), ascending
ExecKey = tuple[int, str, int]  # (started_at_ms, session_id, sequence), ascending
Span = tuple[int, int]  # (position, framed size) of a record in the catalog log


def sort_key(s: SessionSummary) -> SortKey:
    return (s.updated_at, s.sequence, s.session_id)


class Catalog:
    def __init__(
        self,
        root: str,
        *,
        segment_bytes: int,
        lock_timeout: float,
        read_only: bool = False,
        read_cache: ReadCache | None = None,
    ):
        self.dir = os.path.join(root, CATALOG_DIR)
        self.lock_timeout = lock_timeout
        # Read-only: corrections (reconciliation) are applied in memory, never written.
        self.read_only = read_only
        log_dir = os.path.join(self.dir, LOG_DIR)
        self.fresh = not os.path.isdir(log_dir)
        if self.fresh and not read_only:
            made = mkdir_below(self.dir)
            Log.create(log_dir, KIND_CATALOG)  # syncs log/ itself, not its entry
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
        self._reset()
        self._load_snapshot()

    def _open_log(self) -> Log:
        return Log(
            os.path.join(self.dir, LOG_DIR),
            KIND_CATALOG,
            segment_bytes=self._segment_bytes,
            label="catalog",
            cache=self._read_cache,
        )

    def _reset(self) -> None:
        """Forget everything read from the log (opening, or following a new catalog)."""
        self.covered = 0
        self.summaries: dict[str, SessionSummary] = {}
        self.children: dict[str, set[str]] = {}  # parent id -> listed sessions forked from it
        # The directory names of the listed sessions, built on first use (hashing
        # every id at each open cost 0.4 s at 40,000 sessions), then kept current.
        self._dir_names: set[str] | None = None
        self.positions: dict[str, int] = {}
        self.keys: list[SortKey] = []
        self.by_owner: dict[str, list[SortKey]] = {}
        self.execs: dict[str, list[tuple[int, int]]] = {}
        self.exec_seqs: dict[str, set[int]] = {}
        self.exec_keys: list[ExecKey] = []
        self.exec_copies: dict[tuple[str, int], Span] = {}  # (sid, seq) -> OP_EXECUTION record
        self._checked_copies: dict[tuple[int, int, ExecKey], bytes] = {}  # see execution_copies
        self.anchor = (0, 0)
        self._quiet_mark = -1  # flock acquisitions at our last complete append
        self._snapshot_covered = 0
        self._snapshot_size = 0

    # --------------------------------------------------------------- snapshot
    def _load_snapshot(self) -> None:
        from .metafile import KIND_CATALOG_SNAPSHOT, read_meta

        path = os.path.join(self.dir, SNAPSHOT_FILE)
        try:
            raw = read_meta(path, KIND_CATALOG_SNAPSHOT)
            snap = _decode_snapshot(raw)
        except (FileNotFoundError, JournalError, msgspec.DecodeError):
            return  # derived data: without a usable snapshot we replay the log
        if snap.covered:
            if self.log is None:
                return
            try:
                anchored = self.log.closes_commit(
                    snap.anchor_pos, snap.covered - snap.anchor_pos, snap.anchor_crc
                )
            except JournalError:
                return
            if not anchored:
                return
        for entry in snap.entries:
            if entry.summary is None:
                continue
            sid = entry.session_id
            self._set_summary(sid, entry.summary)
            self.positions[sid] = entry.covered
            self.execs[sid] = list(entry.executions)
            self.exec_seqs[sid] = {seq for seq, _ in entry.executions}
            for seq, pos, size in entry.where:
                self.exec_copies[(sid, seq)] = (pos, size)
        self.keys = sorted(sort_key(x) for x in self.summaries.values())
        for key in self.keys:
            owner = self.summaries[key[2]].session_context.owner_id
            self.by_owner.setdefault(owner, []).append(key)
        self.exec_keys = sorted(
            (started, sid, seq) for sid, execs in self.execs.items() for seq, started in execs
        )
        self.covered = snap.covered
        self.anchor = (snap.anchor_pos, snap.anchor_crc)
        self._snapshot_covered = snap.covered
        self._snapshot_size = len(raw)

    def _write_snapshot(self) -> None:
        """Cache the catalog (no fsync: a torn or stale snapshot is ignored on load)."""
        from .metafile import KIND_CATALOG_SNAPSHOT, write_meta

        entries = [
            CatalogRecord(
                OP_UPSERT,
                sid,
                self.positions[sid],
                summary,
                executions=self.execs.get(sid, []),
                where=[
                    (seq, *self.exec_copies[(sid, seq)])
                    for seq, _ in self.execs.get(sid, [])
                    if (sid, seq) in self.exec_copies
                ],
            )
            for sid, summary in self.summaries.items()
        ]
        raw = _encode(CatalogSnapshot(self.covered, self.anchor[0], self.anchor[1], entries))
        path = os.path.join(self.dir, SNAPSHOT_FILE)
        # A cache: one that cannot be written (a full disk) is left as it was and
        # tried again once the log grows further; it never fails the append.
        if write_meta(path, KIND_CATALOG_SNAPSHOT, raw, durable=False):
            self._snapshot_covered = self.covered
            self._snapshot_size = len(raw)

    # ------------------------------------------------------------------ reading
    def refresh(self, *, strict: bool = False) -> ScanState:
        with self._lock:
            state = ScanState()
            if self.log is None:
                return state
            for commit in self.log.committed(self.covered, state, strict=strict):
                for rec in commit:
                    self._apply(_decode_record(rec.payload, rec.pos), (rec.pos, rec.size))
                self.covered = commit[-1].pos + commit[-1].size
                self.anchor = (commit[-1].pos, commit[-1].crc)
            return state

    def _apply(self, r: CatalogRecord, span: Span | None = None) -> None:
        sid = r.session_id
        if r.op == OP_EXECUTION:
            # The copy is only trusted for an execution the catalog lists (the upsert
            # before it added the key); a stray copy of a deleted session is dropped.
            listed = r.execution is not None and r.execution[0] in self.exec_seqs.get(sid, ())
            if listed and span is not None and r.execution is not None:
                self.exec_copies[(sid, r.execution[0])] = span
            return
        if r.op == OP_DELETE:
            self._remove(sid)
            return
        if r.op == OP_RESET:
            self._remove(sid)
        if r.summary is not None and r.covered >= self.positions.get(sid, -1):
            self._remove_keys(sid)
            self._set_summary(sid, r.summary)
            self.positions[sid] = r.covered
            key = sort_key(r.summary)
            bisect.insort(self.keys, key)
            bisect.insort(self.by_owner.setdefault(r.summary.session_context.owner_id, []), key)
        if sid not in self.summaries:
            return  # executions of a session we do not list (deleted) are not kept
        execs = self.execs.setdefault(sid, [])
        known = self.exec_seqs.setdefault(sid, set())
        added = list(r.executions)
        if r.execution is not None:
            added.append(r.execution)
        for seq, started in added:
            if seq not in known:
                known.add(seq)
                execs.append((seq, started))
                bisect.insort(self.exec_keys, (started, sid, seq))

    def _remove_keys(self, sid: str) -> None:
        old = self.summaries.get(sid)
        if old is None:
            return
        key = sort_key(old)
        _remove_sorted(self.keys, key)
        owner_keys = self.by_owner.get(old.session_context.owner_id)
        if owner_keys is not None:
            _remove_sorted(owner_keys, key)
            if not owner_keys:
                del self.by_owner[old.session_context.owner_id]

    def _set_summary(self, sid: str, summary: SessionSummary) -> None:
        old = self.summaries.get(sid)
        if old is not None and old.parent_session_id != summary.parent_session_id:
            self._unlink_child(sid, old.parent_session_id)  # another incarnation of the id
        if old is None and self._dir_names is not None:
            self._dir_names.add(dir_name(sid))
        self.summaries[sid] = summary
        if summary.parent_session_id is not None:
            self.children.setdefault(summary.parent_session_id, set()).add(sid)

    def _unlink_child(self, sid: str, parent: str | None) -> None:
        if parent is None or parent not in self.children:
            return
        siblings = self.children[parent]
        siblings.discard(sid)
        if not siblings:
            del self.children[parent]

    def _remove(self, sid: str) -> None:
        self._remove_keys(sid)
        old = self.summaries.pop(sid, None)
        if old is not None:
            if self._dir_names is not None:
                self._dir_names.discard(dir_name(sid))
            self._unlink_child(sid, old.parent_session_id)
        self.positions.pop(sid, None)
        self.exec_seqs.pop(sid, None)
        for seq, started in self.execs.pop(sid, []):
            _remove_sorted(self.exec_keys, (started, sid, seq))
            self.exec_copies.pop((sid, seq), None)

    def page(
        self, owner_id: str | None, cursor: SortKey | None, limit: int
    ) -> tuple[list[SessionSummary], SortKey | None]:
        with self._lock:
            keys = self.keys if owner_id is None else self.by_owner.get(owner_id, [])
            hi = len(keys) if cursor is None else bisect.bisect_left(keys, cursor)
            lo = max(0, hi - limit)
            chosen = keys[lo:hi][::-1]
            out = [self.summaries[k[2]] for k in chosen]
            nxt = chosen[-1] if lo > 0 and chosen else None
            return out, nxt

    def recent_execution_keys(self, limit: int) -> list[tuple[ExecKey, Span | None]]:
        """The `limit` newest execution keys, each with where its copy is (if known)."""
        with self._lock:
            keys = self.exec_keys[-limit:][::-1]
            return [(k, self.exec_copies.get((k[1], k[2]))) for k in keys]

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
            body = out[i] = _copy_of(key, rec.payload)
            if body is not None and space:
                if len(memo) >= _CHECKED_COPIES_KEPT:
                    memo.clear()
                memo[(space, rec.pos, key)] = body
        return out

    def _execution_copy(self, key: ExecKey, span: Span) -> bytes | None:
        assert self.log is not None
        try:
            return _copy_of(key, self.log.read_record(*span).payload)
        except JournalError:
            return None

    def listed_ids(self) -> list[str]:
        """The ids of every listed session (no order)."""
        with self._lock:
            return list(self.summaries)

    def listed(self) -> dict[str, SessionSummary]:
        """Every listed session's summary, by id (a copy)."""
        with self._lock:
            return dict(self.summaries)

    def lists(self, session_id: str) -> bool:
        """Whether the catalog lists this session."""
        return session_id in self.summaries

    def ids_by_dir_name(self) -> dict[str, str]:
        """The listed sessions' ids by their directory names."""
        with self._lock:
            return {dir_name(sid): sid for sid in self.summaries}

    def ahead_of(self, session_id: str, summary: SessionSummary | None, covered: int) -> bool:
        """Whether the catalog shows a commit that a session's log (derived as
        `summary` up to log position `covered`) does not hold: it lists a session
        whose log has no checkpoint, or its entry covers more of the log."""
        with self._lock:
            position = self.positions.get(session_id)
            listed = session_id in self.summaries
        return (summary is None and listed) or (position is not None and position > covered)

    def agrees(
        self, session_id: str, summary: SessionSummary, covered: int, executions: int
    ) -> bool:
        """Whether the entry is what a session's log says: this summary, up to this
        log position, with this many execution records."""
        with self._lock:
            return (
                self.summaries.get(session_id) == summary
                and self.positions.get(session_id) == covered
                and len(self.execs.get(session_id, [])) == executions
            )

    def execution_count(self) -> int:
        """How many execution keys the catalog holds, over every session."""
        return len(self.exec_keys)

    def children_of(self) -> dict[str, list[str]]:
        """Every parent id and the listed sessions forked from it."""
        with self._lock:
            return {parent: sorted(kids) for parent, kids in self.children.items()}

    def unlisted(self, names: Iterable[str]) -> set[str]:
        """The directory names among `names` of no listed session."""
        with self._lock:
            if self._dir_names is None:
                self._dir_names = {dir_name(sid) for sid in self.summaries}
            return set(names) - self._dir_names

    def child_summaries(self, parent_id: str) -> list[SessionSummary]:
        """The listed sessions forked from `parent_id` (no order)."""
        with self._lock:
            return [self.summaries[sid] for sid in self.children.get(parent_id, ())]

    # ------------------------------------------------------------------ writing
    def append(self, records: Iterable[CatalogRecord]) -> None:
        records = list(records)
        if self.read_only or self.log is None:
            with self._lock:
                for r in records:
                    self._apply(r)
            return
        frames = [frame(CATALOG, _encode(r), commit=True) for r in records]
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
                if self._snapshot_due():
                    self._write_snapshot()
            finally:
                self.flock.release()

    def _follow_new_catalog(self) -> None:
        """Replace what this object holds by the catalog now at our path (lock held)."""
        old = self.log
        self.log = self._open_log()
        if old is not None:
            with contextlib.suppress(JournalError, OSError):
                old.close()
        self._reset()
        self._load_snapshot()

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

    def _snapshot_due(self) -> bool:
        """While writing: rewrite the snapshot only once the log grew well past it."""
        grown = self.covered - self._snapshot_covered
        return grown >= max(SNAPSHOT_MIN_GROWTH, 2 * self._snapshot_size)

    def _snapshot_worth_it(self) -> bool:
        """Opening or closing: a tail of more than 4 KiB and an eighth of the snapshot
        is worth one snapshot write (no sync) for every later open not replaying it."""
        grown = self.covered - self._snapshot_covered
        return grown >= max(4 << 10, self._snapshot_size // 8)

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
                    # A clean close leaves a snapshot that reaches the end, unless the
                    # tail is small next to it: later opens replay nothing.
                    if self._snapshot_worth_it():
                        self._write_snapshot()
                    log.trim_preallocation(self.covered)
            except JournalError:
                return  # a courtesy: the zeros stay, the tail is replayed
            finally:
                self.flock.release()

    def snapshot_if_behind(self) -> None:
        """After opening: if this open replayed a long tail, save the next one the work.

        Writers snapshot as the log grows, but a process that stopped just short
        of the threshold leaves every later open replaying its tail. Skipped when
        another process holds the catalog lock (it is writing; it will snapshot).
        """
        if self.read_only or self.log is None:
            return
        with self._lock:
            if not self._snapshot_worth_it() or not self.flock.try_acquire():
                return
            try:
                state = self.refresh()
                if state.tail == Tail.CLEAN and self._snapshot_worth_it():
                    self._write_snapshot()
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


class ProcessRegistry:
    """`ROOT/procs/<token>`: held locked while this Store lives; lists sessions it wrote."""

    def __init__(self, root: str):
        self.dir = os.path.join(root, PROCS_DIR)
        if mkdir_below(self.dir):
            fsio.sync_dir(root)  # its entry durable before a registration relies on it
        self._pid = os.getpid()
        self.path = os.path.join(self.dir, f"{self._pid}-{uuid.uuid4().hex[:12]}")
        self._lock = FileLock(self.path, "process registration")
        self._fd: int | None = None
        self._noted: set[str] = set()
        self._mutex = threading.Lock()

    def note(self, session_dir_name: str) -> None:
        """Record (once) that this process writes to a session, before its first write."""
        if session_dir_name in self._noted:
            return
        with self._mutex:
            if session_dir_name in self._noted:
                return
            if self._fd is None:
                self._register()
            assert self._fd is not None
            os.write(self._fd, session_dir_name.encode() + b"\n")
            self._noted.add(session_dir_name)

    def _register(self) -> None:
        """Publish the registration file already locked.

        Created under its final name and locked afterwards, it could be found
        unlocked in between by another process, taken for a dead process's,
        reconciled and removed: later notes would go to a deleted file, and a
        crash of this process would then leave its sessions unreconciled. So the
        file is created and locked under a hidden temporary name (which probes
        skip) and renamed into place with the lock held.
        """
        tmp = os.path.join(self.dir, f".{os.path.basename(self.path)}.tmp")
        lock = FileLock(tmp, "process registration")
        if not lock.try_acquire():
            lock.close()
            raise StorageError(f"cannot lock new process registration {tmp}")
        try:
            fsio.rename(tmp, self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            lock.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        lock.path = self.path
        self._lock.close()
        self._lock = lock

    def dead_registrations(self) -> list[tuple[str, list[str]]]:
        """(path, session dir names) of registrations whose process is gone."""
        out = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        for name in names:
            path = os.path.join(self.dir, name)
            if path == self.path:
                continue
            if name.startswith("."):
                self._remove_abandoned(path)
                continue
            lock = FileLock(path, "process registration")
            try:
                if not lock.try_acquire():
                    continue
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
                sessions = [ln.strip() for ln in text.splitlines() if ln.strip()]
                out.append((path, sessions))
            except OSError:
                continue
            finally:
                lock.close()
        return out

    @staticmethod
    def _remove_abandoned(path: str) -> None:
        """A temporary registration of a process that died before publishing it.

        Only old ones are touched: a young one may be in the middle of being
        published, and taking its lock then would make that registration fail.
        """
        try:
            if time.time() - os.stat(path).st_mtime < 60:
                return
        except OSError:
            return
        lock = FileLock(path, "process registration")
        try:
            if lock.try_acquire():
                with contextlib.suppress(OSError):
                    os.unlink(path)
        except JournalError:
            pass
        finally:
            lock.close()

    def forget(self, path: str) -> None:
        with contextlib.suppress(JournalError):
            fsio.unlink(path)

    def close(self, *, keep: bool = False) -> None:
        """Release the registration; `keep` leaves the file for the next open to
        reconcile, as a dead process's (some catalog entries may be missing)."""
        registered = self._fd is not None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        # A clean exit leaves nothing to reconcile: remove the file while still
        # holding its lock, so no probe takes it for a dead process's meanwhile.
        # Not from a forked child closing a store it inherited: the registration
        # is the parent's (found by review).
        if registered and not keep and os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self._lock.close()


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def machine_and_place(root: str, boot: str | None = None) -> str:
    """The boot id (`boot`, else read now) and the store directory's identity
    (device and inode), as one line."""
    try:
        st = os.stat(root)
        place = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        place = ""
    return f"{boot_id() if boot is None else boot} {place}"


def check_boot(catalog_dir: str, root: str) -> tuple[bool, str | None]:
    """(changed, line): whether the catalog may disagree with the sessions
    wholesale, and the BOOT line to record once the re-check that calls for is
    done (`record_boot`; None when BOOT holds it already).

    Changed after a reboot (unsynced catalog records may have been lost, or have
    outlived the session bytes they describe) and when the store directory is
    not the one the catalog was last used in: a copy (`cp -a`) or a restored
    backup, whose catalog was copied at another moment than its sessions. Both
    call for re-checking every session. Without a boot id (no
    /proc/sys/kernel/random/boot_id: not Linux) a reboot cannot be told from a
    restart, so every open counts as one: slower opens, but a power loss is never
    mistaken for a clean restart. A missing BOOT counts as changed too.
    """
    boot = boot_id()
    current = machine_and_place(root, boot).strip()
    try:
        with open(os.path.join(catalog_dir, BOOT_FILE)) as f:
            seen: str | None = f.read().strip()
    except FileNotFoundError:
        seen = None
    # No BOOT beside a catalog: it was never made durable (it is written without a
    # sync), so a power loss may have passed since: re-check, as after a reboot.
    changed = seen != current or not boot
    return changed, None if seen == current else current


def record_boot(catalog_dir: str, line: str) -> None:
    """Remember this boot and place (the line `check_boot` gave)."""
    fsio.write_file(os.path.join(catalog_dir, BOOT_FILE), line.encode(), durable=False)


def _decode_record(payload: bytes, pos: int) -> CatalogRecord:
    try:
        return _decode(payload)
    except msgspec.DecodeError as exc:
        raise CorruptionError(
            f"catalog record does not decode: {exc}", path=CATALOG_DIR, offset=pos
        ) from exc


def _copy_of(key: ExecKey, payload: bytes) -> bytes | None:
    try:
        r = _decode(payload)
    except msgspec.DecodeError:
        return None
    if r.op != OP_EXECUTION or r.session_id != key[1] or r.execution != (key[2], key[0]):
        return None
    return r.record


def _remove_sorted(keys: list[Any], key: Any) -> None:
    i = bisect.bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        del keys[i]

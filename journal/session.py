"""One session: its directory, its log, the head state derived from it, and its caches.

The log is the only source of truth. Everything else here is derived from it:
- `Head`: what the latest commit left behind (latest checkpoint header and full
  context, event counter, journal rules, receipts, timestamps). Kept in memory
  and in the `snapshot` file, so opening a session costs O(tail), not O(history).
- four `Index` files mapping event / checkpoint / transcript / execution
  sequences to log positions, so pages cost O(page).

A commit is built from the head, written with one `write` while holding the
session's lock (thread lock + cross-process flock), applied to the head, and
then made durable with a shared fdatasync (group commit) after the lock is
released. Readers never take the lock: they read committed records past what
they know ("refresh") and never see bytes that a commit record does not close.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from . import dictionary, eventrules, payloads
from .appends import AppendQueue, PendingAppend
from .cache import ReadCache
from .context import msgpack_array_header, plan_context
from .errors import (
    ContractViolationError,
    CorruptionError,
    JournalError,
    NotFoundError,
    StorageError,
    UnfinishedSessionError,
)
from .eventrules import EventRules
from .index import (
    KIND_CHECKPOINTS,
    KIND_EVENTS,
    KIND_EXECUTIONS,
    KIND_TRANSCRIPTS,
    REMOVED,
    Index,
    IndexDoubtError,
)
from .layout import IDENTITY_FILE, LOCK_FILE, LOG_DIR, LOSS_PENDING_FILE, SNAPSHOT_FILE
from .locks import FileLock
from .log import KIND_SESSION, Log, ScanState
from .metafile import (
    KIND_SNAPSHOT,
    read_meta,
    write_meta,
)
from .payloads import (
    COMMIT_FORK,
    COMMIT_SAVE,
    CheckpointPayload,
    CommitPayload,
    EventPayload,
    ExecutionPayload,
    TranscriptPayload,
)
from .record import (
    CHECKPOINT,
    COMMIT,
    DICT,
    EVENT,
    EXECUTION,
    FLAG_COMMIT,
    LOSS,
    PAD,
    SEAL,
    TRANSCRIPT,
    Record,
    frame,
)
from .sessiondir import SessionIdentity, file_key, origin_of, read_identity
from .types import (
    Checkpoint,
    Event,
    ExecutionRecord,
    JournalEvent,
    TimestampedEvent,
    TranscriptBatch,
)
from .validate import check_json_value

T = TypeVar("T")


class Head(msgspec.Struct):
    """State derived from the log up to `covered` (also the snapshot's payload)."""

    covered: int = 0  # log position after the last applied commit
    anchor_pos: int = 0  # position and crc of that commit's closing record
    anchor_crc: int = 0
    sequence: int = -1  # latest checkpoint sequence; -1: no checkpoint yet
    checkpoint_pos: int = -1
    checkpoint_size: int = 0
    # latest checkpoint without its context (bytes: msgspec cannot decode `Raw | None`)
    header: bytes | None = None
    epoch: int = 0
    context: list[msgspec.Raw] = msgspec.field(default_factory=list)
    ctx_pos: int = -1  # newest checkpoint record that carries context items (this epoch)
    event_counter: int = 0
    rules: EventRules = msgspec.field(default_factory=EventRules)
    receipts: list[str] = msgspec.field(default_factory=list)
    created_at: int = 0
    updated_at: int = 0
    first_user_message: str | None = None
    transcripts: int = 0
    executions: int = 0
    commits: int = 0
    dict_pos: int = -1  # log position of the session's DICT record, or -1
    # Log position known synced when this snapshot was written (at most `covered`):
    # a log that no longer reaches it has lost committed data (FORMAT.md section 5).
    durable: int = 0
    # The session directory this snapshot was written in (`origin_of`): `durable` is
    # evidence only there, not in a copy made at another moment than its log.
    origin: int = 0
    # The highest checkpoint sequence known saved before an accepted loss (LOSS
    # records): a save must go past it. -1: none.
    sequence_floor: int = -1
    losses: list[int] = msgspec.field(default_factory=list)  # positions of LOSS records


class _FirstUserMessage(msgspec.Struct):
    first_user_message: str | None = None


_decode_fum = msgspec.msgpack.Decoder(_FirstUserMessage).decode
_decode_head = msgspec.msgpack.Decoder(Head).decode
_decode_checkpoint = msgspec.msgpack.Decoder(Checkpoint).decode
_decode_any = msgspec.msgpack.Decoder().decode
_encode = msgspec.msgpack.Encoder().encode


@dataclass
class SessionOptions:
    durable: bool = True
    segment_bytes: int = 64 << 20
    lock_timeout: float = 10.0
    max_record_bytes: int = 64 << 20
    snapshot_bytes: int = 1 << 20  # write a snapshot after this much new log
    index_flush_entries: int = 4096
    read_cache: ReadCache | None = None  # shared by a store's sessions
    # Train a zstd dictionary per session and compress with it (`dictionary.py`);
    # False: neither (records that use one stay readable).
    dictionary: bool = True


@dataclass
class Recovery:
    """What opening for write had to drop (a torn tail), for reports."""

    path: str
    from_pos: int
    dropped_bytes: int
    detail: str


class SessionGone(NotFoundError):
    """The session this object opened was deleted (maybe created again since), or a
    pending delete dooms it: found under its lock, before anything was written.
    The store opens the id afresh and tries again."""


class Session:
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
        self.on_written: Callable[[], None] | None = None
        # Payloads this writer samples for the session's dictionary (none when the
        # session has one, or gave up on one, or is private). `on_samples` (set by
        # the store) hears that there are enough to train one, and again after every
        # further `SAMPLE_BYTES` written while none came of it (the background job
        # may have been dropped: `SparePool.run_soon`).
        self.sampler = dictionary.Sampler(options.dictionary and not private)
        self.on_samples: Callable[[], None] | None = None
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
        self.doomed: Callable[[], bool] | None = None
        self._context_cache: tuple[list[msgspec.Raw], int, bytearray] | None = None
        self.appends = AppendQueue(self)
        self.users = 0  # calls using this object now (the store's cache never closes those)
        self.retired = False  # dropped from the store's cache: the last user closes it
        self.deleted = False  # deleted by this process: closing it trims nothing
        self.closed = False
        self._dead_epoch: int | None = None  # an epoch whose items `compact` dropped
        self._state_lock = threading.RLock()
        self._set_indexes(
            {
                k: Index(directory, k)
                for k in (KIND_EVENTS, KIND_CHECKPOINTS, KIND_TRANSCRIPTS, KIND_EXECUTIONS)
            }
        )
        self.head = Head()
        self._receipts: set[str] = set()
        self._snapshot_covered = 0
        self._snapshot_size = 0
        self._recovered = False
        self.recovery: Recovery | None = None
        # Damage a scan of the log ran into, and the end of the readable prefix before
        # it. Structures covering no more than `damage_end` lack what lies after it.
        self.damage: CorruptionError | None = None
        self.damage_end = 0
        # (path, position) of the last unusable tail a reader classified, and the verdict
        self._tail_checked: tuple[tuple[str, int], CorruptionError | None] | None = None
        self.tail_state = ScanState()
        # The highest log position a cache file records as synced, and that file
        # (`_open_caches`): the log must reach it, or committed data was lost.
        self.durable_claim: tuple[int, str] = (0, "")
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

    # ---------------------------------------------------------------- identity
    def _read_identity(self) -> SessionIdentity:
        return read_identity(self.dir)

    # ------------------------------------------------------------ cache loading
    def _open_caches(self) -> None:
        """Adopt snapshot and indexes when they match the log, then read the tail.

        Each cache also names the log position its writer knew to be synced; the
        highest such claim, even of a cache not adopted, is the evidence that
        `_catch_up` holds the log to (`durable_claim`).
        """
        head = self._load_snapshot()
        for idx in self.indexes.values():
            if idx.load():
                if idx.file_origin == self.origin:
                    self._claim_durable(idx.file_durable, idx.path)
                if not self._anchor_ok(idx.file_covered, idx.file_anchor):
                    idx.reset()
        if head is not None:
            self.head = head
            self._receipts = set(head.receipts)
            self._snapshot_covered = head.covered
            if head.dict_pos >= 0:
                self.sampler.stop()
        # Damage is remembered, not raised: the committed prefix before it stays readable.
        self._catch_up(strict=False, tolerate=True, cold=True)

    def _load_snapshot(self) -> Head | None:
        path = os.path.join(self.dir, SNAPSHOT_FILE)
        try:
            raw = read_meta(path, KIND_SNAPSHOT)
            head = _decode_head(raw)
        except FileNotFoundError:
            return None
        except (JournalError, msgspec.DecodeError):
            return None  # a damaged cache is rebuilt from the log, never an error
        if head.durable <= head.covered and head.origin == self.origin:
            self._claim_durable(head.durable, path)
        if not self._anchor_ok(head.covered, (head.anchor_pos, head.anchor_crc)):
            return None
        if head.dict_pos >= head.covered:
            return None  # not a snapshot this code wrote
        if head.dict_pos >= 0:
            # Loaded now (a read of about 8 KiB): the records after it need it, and a
            # snapshot that names no dictionary record there is not used at all.
            try:
                self.log.load_dictionary(head.dict_pos)
            except JournalError:
                return None
        self._snapshot_size = len(raw)
        return head

    def _claim_durable(self, position: int, path: str) -> None:
        if position > self.durable_claim[0]:
            self.durable_claim = (position, path)

    def _anchor_ok(self, covered: int, anchor: tuple[int, int]) -> bool:
        """Does the log still end a commit at `covered` with the same closing record?"""
        if covered == 0:
            return True
        pos, crc = anchor
        if pos >= covered:
            return False
        try:
            return self.log.closes_commit(pos, covered - pos, crc)
        except JournalError:
            return False

    def _catch_up(self, *, strict: bool, tolerate: bool = False, cold: bool = False) -> ScanState:
        """Apply every committed record past what the head and indexes know.

        Damage the scan runs into is remembered in `damage` and raised, unless
        `tolerate` (readers): then what was read before it stays in use, and each
        read that needs more raises it (`_need`). A scan that ends before a
        position the head or an index already reflects (adopted from a cache whose
        anchor checked out) also means damage: those commits existed. A `cold`
        scan (opening the session) also checks a clean-looking end that is not the
        end of the file (see `_check_stable_tail`).
        """
        with self._state_lock:
            covered = [self.head.covered] + [i.covered for i in self.indexes.values()]
            state = ScanState()
            try:
                start = min(covered)
                for commit in self.log.committed(start, state, strict=strict):
                    self._apply(commit, None)
                if (
                    tolerate
                    and not strict
                    and (state.tail != "clean" or (cold and self._data_after(state)))
                ):
                    state = self._check_stable_tail(state)
            except CorruptionError as exc:
                self.damage, self.damage_end = exc, state.end
                self.log.forget_cached()  # the log is not what the cached records came from
                if not tolerate:
                    raise
                state.tail = "damaged"
                return state
            ahead = max([self.head.covered] + [i.covered for i in self.indexes.values()])
            claimed, claimed_by = self.durable_claim
            missing = None
            if state.end < claimed and state.tail != "damaged":
                missing = (
                    f"committed data is missing: the log ends at position {state.end}, but"
                    f" {os.path.basename(claimed_by)} records it durable up to position"
                    f" {claimed} (a segment removed or truncated); `journal salvage` copies"
                    " what is left, `journal repair --accept-loss` makes the session"
                    " writable again"
                )
            elif state.end < ahead:
                missing = (
                    f"the log cannot be read up to position {ahead}, which was committed"
                    f" ({state.detail or 'data is missing'})"
                )
            if missing is not None:
                err = CorruptionError(
                    f"session {self.id!r}: {missing}",
                    path=state.path or self.log.dir,
                    offset=state.stop_offset if state.path else None,
                )
                self.damage, self.damage_end = err, state.end
                self.log.forget_cached()
                if not tolerate:
                    raise err
            elif self.damage is not None and start <= self.damage_end < state.end:
                self.damage = None  # the log reads past the damage again (e.g. repaired)
            self.tail_state = state
            return state

    def _data_after(self, state: ScanState) -> bool:
        """Is there data soon after the zeros where a scan stopped? (cheap: 64 KiB at most)

        Zeros before the end of the newest segment are normally preallocated space.
        A zeroed commit followed by more commits looks the same to a reader; this
        probe catches it unless more than 64 KiB were zeroed (recovery, which scans
        the whole tail, catches that too).
        """
        return not state.at_eof and not self.log.zeros_after(state.stop_pos, 64 << 10)

    def _check_stable_tail(self, state: ScanState) -> ScanState:
        """A reader stopped at bytes it cannot use: are they damage or a commit in progress?

        Readers cannot tell a damaged record from one being written, so they stop
        there. But if no writer is active (no thread here holds the write lock, no
        process holds the flock), nothing is being written: classify the bytes as
        recovery would, so that damage followed by committed data in the newest
        segment is reported to readers (CorruptionError) instead of silently
        hiding every commit after it. A crash's torn tail stays as it is (the next
        writer cuts it). The answer is remembered until the tail changes. At open
        this also runs when the scan stopped at zeros with data soon after them
        (`_data_after`): a zeroed commit, which looks like the end of the log.
        """
        where = (state.path, state.stop_pos)
        if self._tail_checked is not None and self._tail_checked[0] == where:
            verdict = self._tail_checked[1]
            if verdict is not None:
                raise _KnownDamage.of(verdict)
            return state
        if not self._write_lock.acquire(blocking=False):
            return state
        try:
            if not self.flock.try_acquire():
                return state
            try:
                checked = ScanState()
                for commit in self.log.committed(state.end, checked, strict=True):
                    self._apply(commit, None)  # a commit finished before we got the lock
            finally:
                self.flock.release()
        finally:
            self._write_lock.release()
        verdict = None
        if checked.tail == "corrupt":
            verdict = CorruptionError(
                f"session {self.id!r}: {checked.detail}",
                path=checked.path,
                offset=checked.file_offset,
            )
        self._tail_checked = ((checked.path, checked.stop_pos), verdict)
        if verdict is not None:
            raise verdict
        return checked

    def _bounded(self, covered: int) -> bool:
        """Does a structure covering `covered` lack commits hidden behind known damage?"""
        return self.damage is not None and covered <= self.damage_end

    def _need(self, answerable: bool) -> None:
        """Raise the known damage unless the prefix before it answers the read."""
        damage = self.damage
        if not answerable and damage is not None:
            raise _KnownDamage.of(damage)

    def _index_bound(self, kind: int) -> int | None:
        """The highest key an index bounded by damage can answer for (None: no bound)."""
        idx = self.indexes[kind]
        if not self._bounded(idx.covered):
            return None
        if kind == KIND_EVENTS:
            return idx.count
        cps = self.indexes[KIND_CHECKPOINTS]
        ref = cps if self._bounded(cps.covered) else idx
        # keys of later commits are checkpoint sequences above the prefix's last one
        return ref.key_at(ref.count - 1) if ref.count else -1

    def _rebuild_indexes(self) -> None:
        """Rebuild the indexes from the whole log; keep the old ones if the log is damaged.

        The old index files are only dropped once the rebuild has read the whole
        log: if the log itself is damaged, the old indexes may be perfectly good
        for everything before and after the damage (and for other processes).
        """
        with self._state_lock:
            # An index that looks wrong may be the next incarnation's (the session was
            # deleted and created again by another process): rebuilding from its log
            # and discarding its index files would destroy its caches (found by review).
            self._check_still_published()
            self.log.forget_cached()  # an index pointed at the wrong bytes: trust nothing read
            old = self.indexes
            self._set_indexes({k: Index(self.dir, k) for k in old})
            try:
                self._catch_up(strict=False)
                self._check_still_published()
            except (CorruptionError, SessionGone):
                self._set_indexes(old)
                raise
            for idx in old.values():
                idx.discard_file()

    def _set_indexes(self, indexes: dict[int, Index]) -> None:
        self.indexes = indexes
        self._index_list = tuple(indexes.values())  # for `after_commit`, on every commit

    # ----------------------------------------------------------------- applying
    def _apply(self, commit: list[Record], built: list[Any] | None) -> None:
        """Fold one committed record group into the head and the indexes.

        `built` holds the payload objects when the writer just encoded them
        (saves a decode); otherwise payloads are decoded from the records. Each
        structure takes the commit only if it does not reflect it yet.
        """
        head = self.head
        first = commit[0].pos
        commit_end = commit[-1].pos + commit[-1].size
        to_head = first >= head.covered
        fresh = {k: first >= idx.covered for k, idx in self.indexes.items()}
        if not to_head and not any(fresh.values()):
            return
        for k, rec in enumerate(commit):
            obj = built[k] if built is not None else None
            rtype = rec.rtype
            kind = _INDEX_OF.get(rtype)
            if kind is None:
                if rtype == DICT:
                    self._apply_dictionary(commit, rec, to_head)
                    continue
                if rtype == LOSS:
                    self._apply_loss(rec, to_head)
                    continue
                if rtype not in (COMMIT, PAD, SEAL):
                    raise CorruptionError(
                        f"unexpected record type {rtype} in a session log",
                        path=self.log.label,
                        offset=rec.pos,
                    )
                continue
            p: Any = obj if obj is not None else _decode_payload(_DECODERS[rtype], rec, self)
            if fresh[kind]:
                idx = self.indexes[kind]
                idx.append(
                    p.sequence, rec.pos, rec.size, REMOVED if rtype == EVENT and p.transient else 0
                )
                if rtype == EVENT:
                    for r in p.removes:
                        if 0 < r <= idx.count:
                            idx.mark_removed(r - 1)
            if not to_head:
                continue
            if rtype == EVENT:
                if p.sequence != head.event_counter + 1:
                    raise CorruptionError(
                        f"event sequence {p.sequence} follows {head.event_counter}",
                        path=self.log.label,
                        offset=rec.pos,
                    )
                head.event_counter = p.sequence
                if built is None:
                    eventrules.replay(
                        head.rules, p.sequence, p.recorded_at_ms, p.event, p.transient
                    )
            elif rtype == CHECKPOINT:
                self._apply_checkpoint(p, rec)
            elif rtype == TRANSCRIPT:
                head.transcripts += 1
            else:
                head.executions += 1
        for k, idx in self.indexes.items():
            if fresh[k]:
                idx.covered = commit_end
        if to_head:
            last = commit[-1]
            head.covered = commit_end
            head.anchor_pos, head.anchor_crc = last.pos, last.crc
            head.commits += 1

    def _apply_dictionary(self, commit: list[Record], rec: Record, to_head: bool) -> None:
        """A DICT record (read by a scan, which adopted it: `Log.committed`)."""
        if not dictionary.well_placed(commit):
            raise CorruptionError(dictionary.MISPLACED, path=self.log.label, offset=rec.pos)
        if to_head:
            self.head.dict_pos = rec.pos
        self.sampler.stop()

    def _apply_loss(self, rec: Record, to_head: bool) -> None:
        """A LOSS record: the numbers handed out before the loss stay used.

        The event index gets an entry, marked removed, for each event sequence lost,
        so entry `i` still describes sequence `i + 1`; pages skip them.
        """
        if rec.flags != FLAG_COMMIT:
            raise CorruptionError(
                "a loss record must be a commit of its own", path=self.log.label, offset=rec.pos
            )
        p = _decode_payload(payloads.loss_decoder, rec, self)
        events = self.indexes[KIND_EVENTS]
        if rec.pos >= events.covered:
            for seq in range(events.count + 1, p.events_through + 1):
                events.append(seq, rec.pos, rec.size, REMOVED)
        if not to_head:
            return
        head = self.head
        head.event_counter = max(head.event_counter, p.events_through)
        head.sequence_floor = max(head.sequence_floor, p.checkpoints_through)
        head.losses.append(rec.pos)

    def _apply_checkpoint(self, p: CheckpointPayload, rec: Record) -> None:
        head = self.head
        stub = compacted_stub(p.header)
        if stub is not None and stub.get("items_dropped"):
            # `compact` dropped this dead epoch's items: nothing in it can be rebuilt,
            # and nothing needs to be (a later epoch replaced it before any retained
            # checkpoint). Keep counting so the epoch's later records still check.
            self._dead_epoch = p.epoch
        if self._dead_epoch == p.epoch:
            head.context = [msgspec.Raw(b"\xc0")] * (p.base + len(p.items))
        elif head.sequence >= 0 and p.epoch == head.epoch and p.base != len(head.context):
            raise CorruptionError(
                f"checkpoint {p.sequence} extends {p.base} context items,"
                f" {len(head.context)} stored",
                path=self.log.label,
                offset=rec.pos,
            )
        if p.base == 0:
            head.context = list(p.items)
        elif p.items:
            head.context.extend(p.items)
        if p.items:
            head.ctx_pos = rec.pos
        elif p.base == 0:
            head.ctx_pos = -1
        if head.sequence < 0:
            head.created_at = p.updated_at
        head.epoch = p.epoch
        head.sequence = p.sequence
        head.checkpoint_pos, head.checkpoint_size = rec.pos, rec.size
        head.header = bytes(p.header)
        head.updated_at = p.updated_at
        if head.first_user_message is None:
            head.first_user_message = _decode_fum(p.header).first_user_message
        for r in p.receipts:
            if r not in self._receipts:
                self._receipts.add(r)
                head.receipts.append(r)

    # ------------------------------------------------------------------ writing
    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the session's write lock (threads, then processes) with the head current."""
        self._acquire_writer()
        try:
            yield
        except BaseException:
            self._writer_ready = False  # not quiet next time: see `_release_writer`
            raise
        finally:
            self._release_writer()

    def _acquire_writer(self) -> None:
        """`writing()` without a context manager (the append path calls it directly:
        three nested generator context managers cost more than the flock itself)."""
        self._writer_ready = False
        if self._private:
            self._write_lock.acquire()
            try:
                if not self.log.has_writer():
                    self.log.open_writer(self.head.covered)
            except BaseException:
                self._write_lock.release()
                raise
            self._writer_ready = True
            return
        quiet = self._acquire_locks(trust_quiet=True)
        try:
            # Fast paths, after recovery: nobody else held the lock since our last
            # commit (`quiet`: no read at all), or nobody appended since (one pread).
            # Either way the head is current and the writer in place.
            end = self.head.covered
            if quiet and not (
                self._recovered and self.log.writer_at(end) and self.flock.still_linked()
            ):
                self._check_published_and_not_doomed()  # say, the directory went away
                quiet = False
            if self.damage is not None or not (
                quiet or (self._recovered and self.log.untouched_since(end))
            ):
                state = self._catch_up(strict=not self._recovered)
                if self.damage is not None:
                    # Found by a read, anywhere in the log: writes wait for a person
                    # (`journal repair --accept-loss`), whatever the tail looks like.
                    raise _KnownDamage.of(self.damage)
                if state.tail != "clean":
                    state = self._recover(state)
                self._recovered = True
                self.log.open_writer(self.head.covered)
        except BaseException:
            self._release_locks()
            raise
        self._writer_ready = True

    def _release_writer(self) -> None:
        if self._private:
            self._write_lock.release()
            return
        # What the next `_acquire_writer` may take for quiet: no lock through our
        # FileLock in between (a delete in this process locks it too, and so does a
        # reader classifying the tail), and our own holder line still on file. Only
        # after a section that ended well: a failed write or roll may have left the
        # log other than our bookkeeping says, which the checks and a scan then see
        # (found by review: a failed roll left a closed descriptor trusted).
        self._quiet_mark = self.flock.acquisitions if self._writer_ready else -1
        self._release_locks()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The session's write locks, without preparing to write (no scan, no writer)."""
        self._acquire_locks()
        try:
            yield
        finally:
            self._release_locks()

    @contextmanager
    def held_for_delete(self, timeout: float) -> Iterator[None]:
        """Hold the session's write locks (this process's, then the file lock, waiting
        at most `timeout` seconds for it) without checking or reading anything: a
        delete holds them while it makes its intent durable, so no writer of this
        process or another commits to a session being deleted."""
        with self._write_lock:
            self.flock.acquire(timeout)
            try:
                yield
            finally:
                self.flock.release()

    def read_head(self, fn: Callable[[Head], T]) -> T:
        """`fn` of the head, called under the state lock (a consistent view of it)."""
        with self._state_lock:
            return fn(self.head)

    def _acquire_locks(self, *, trust_quiet: bool = False) -> bool:
        """Take the thread lock, then the file lock, and check that the session is
        still the one we opened (`SessionGone` if not).

        With `trust_quiet`, returns whether nobody else can have held the file lock
        since our last writer released it (see `_release_writer`); the checks are
        then skipped: whoever deletes a session, or moves a doomed one away, holds
        its lock first (FORMAT.md section 9), so they cannot have happened.
        """
        self._write_lock.acquire()
        try:
            try:
                ours = self.flock.acquire(self.options.lock_timeout)
            except StorageError:
                self._check_still_published()  # a delete moved the directory (lock file) away
                raise
            try:
                if trust_quiet and ours and self.flock.acquisitions == self._quiet_mark + 1:
                    return True
                self._check_published_and_not_doomed()
            except BaseException:
                self.flock.release()
                raise
        except BaseException:
            self._write_lock.release()
            raise
        return False

    def _check_published_and_not_doomed(self) -> None:
        """Under the lock: `SessionGone` if this session was deleted or a pending
        delete (of a deleter that died holding this lock) dooms it."""
        self._check_still_published()
        doomed = self.doomed
        if doomed is not None and doomed():
            raise SessionGone(f"session {self.id!r} is being deleted")

    def _release_locks(self) -> None:
        try:
            self.flock.release()
        finally:
            self._write_lock.release()

    @contextmanager
    def committing(self) -> Iterator[None]:
        """`writing()` for a commit, announced to group commit (`Log.announce`)."""
        if not self.options.durable:
            with self.writing():
                yield
            return
        self.log.announce()
        try:
            with self.writing():
                yield
        finally:
            self.log.arrived()

    def still_published(self) -> bool:
        """Is the session this object opened still the one at its path?

        Not just "does the path exist": the session may have been deleted and
        created again under the same id (its directory name), by another process.
        This object's lock file and descriptors belong to the old one; writing
        through them wrote into the new log from a stale position, or into an
        unlinked file (found by review). The identity file is written once per
        session, so its inode and change time identify the incarnation.
        """
        return file_key(self.identity_path) == self._identity_key

    def _check_still_published(self) -> None:
        if not self.still_published():
            raise SessionGone(f"session {self.id!r} was deleted")

    def _recover(self, state: ScanState) -> ScanState:
        """Under the lock: nobody else is writing, so an unfinished tail is a crash."""
        if state.tail in ("uncommitted",):
            state = self._catch_up(strict=True)
        if state.tail == "corrupt":
            raise CorruptionError(
                f"session {self.id!r}: {state.detail}; committed data before it is readable,"
                " `journal repair` can cut the log there",
                path=state.path,
                offset=state.file_offset,
            )
        if state.tail == "unsealed":
            self.log.finish_seal(state.end)
            self.log.list_segments()
            state = self._catch_up(strict=True)
        if state.tail == "torn":
            if state.detail == "segment header incomplete":
                self.log.remove_empty_newest()
            else:
                self.log.truncate_tail(state.end)
            self.recovery = Recovery(state.path, state.end, state.dropped, state.detail)
            state = self._catch_up(strict=True)
        return state

    def commit(self, records: list[tuple[int, Any]], kind: int, cp_seq: int) -> int:
        """Frame, write and apply one commit (caller holds `writing()`); return its end."""
        start = self.log.writer_end
        frames: list[bytes] = []
        recs: list[Record] = []
        objs: list[Any] = []
        pos = start
        first_event = last_event = 0
        zdict = self.log.dictionary if self.options.dictionary else None
        for rtype, obj in records:
            payload = _encode(obj)
            if len(payload) > self.options.max_record_bytes:
                raise_too_large(rtype, len(payload), self.options.max_record_bytes)
            if self.sampler.samples is not None:
                self._sample(payload)
            data = frame(rtype, payload, commit=False, dictionary=zdict)
            frames.append(data)
            recs.append(Record(pos, len(data), rtype, 0, b""))
            objs.append(obj)
            pos += len(data)
            if rtype == EVENT:
                last_event = obj.sequence
                first_event = first_event or obj.sequence
        closing = CommitPayload(kind, cp_seq, first_event, last_event, int(time.time() * 1000))
        data = frame(COMMIT, _encode(closing), commit=True, compress=False)
        frames.append(data)
        recs.append(Record(pos, len(data), COMMIT, 0x02, b"", int.from_bytes(data[:4], "little")))
        objs.append(closing)
        end = self.log.write(b"".join(frames))
        if self.on_written is not None:
            self.on_written()
        with self._state_lock:
            self._apply(recs, objs)
            self._extend_view(start, end)
        return end

    def _sample(self, payload: bytes) -> None:
        """Keep `payload` for training the session's dictionary (writer's lock held)."""
        if self.sampler.add(payload) and self.on_samples is not None:
            self.sampler.asked()
            # Optional work: a failure to queue it must not fail the caller's commit.
            with contextlib.suppress(Exception):
                self.on_samples()

    def take_samples(self) -> list[bytes] | None:
        """The samples for a training job, once there are enough and no other job has
        them (else None). The job ends with `write_dictionary` or `no_dictionary`,
        or `training_failed`."""
        with self._state_lock:
            return self.sampler.take()

    def training_failed(self) -> None:
        """The job that took the samples stopped early (an error): a later one may try."""
        with self._state_lock:
            self.sampler.failed()

    def no_dictionary(self) -> None:
        """Training found no dictionary worth keeping: stop sampling (this object)."""
        with self._state_lock:
            self.sampler.stop()

    def write_dictionary(self, data: bytes) -> bool:
        """Commit `data` as the session's dictionary (caller holds `writing()`); False
        when the session has one already (another writer's). Not synced on its own:
        the records that use it come after it, so the sync that makes any of them
        durable makes it durable too, and a crash that loses it loses them."""
        if self.log.dictionary is not None:  # (set whenever head.dict_pos is)
            self.no_dictionary()
            return False
        start = self.log.writer_end
        zdict = dictionary.SessionDictionary(data, start, path=self.log.label)
        data = frame(DICT, zdict.payload(), commit=True, compress=False)
        end = self.log.write(data)
        with self._state_lock:
            crc = int.from_bytes(data[:4], "little")
            rec = Record(start, len(data), DICT, FLAG_COMMIT, b"", crc)
            self.log.use_dictionary(zdict)
            self._apply([rec], [None])
            self._extend_view(start, end)
        return True

    def _extend_view(self, start: int, end: int) -> None:
        """Our own commits, written at `start`, end at `end`: when the last scan had
        read cleanly up to `start`, readers here need not scan them again (`refresh`
        then costs a probe at `end`, as after a scan). Caller holds `_state_lock`."""
        state = self.tail_state
        if state.tail == "clean" and state.end == start:
            # In place (a new ScanState per commit cost more than the check): for a
            # clean state, readers use only `tail` and `end` (`refresh`).
            state.end = end

    def after_commit(self) -> None:
        """Cache upkeep, still under the lock: flush indexes, write a snapshot now and then.

        It runs after the commit point: a cache that cannot be written (a full disk)
        never fails the call that committed. Unflushed entries stay in memory and
        are flushed later; the next open rebuilds whatever a file lacks.
        """
        try:
            grown = self.head.covered - self._snapshot_covered
            if grown >= self.options.snapshot_bytes and grown >= self._snapshot_size:
                self._write_caches()
                return
            a, b, c, d = self._index_list  # this runs on every commit: no loop
            if a.pending + b.pending + c.pending + d.pending >= self.options.index_flush_entries:
                # Under the state lock: readers in other threads walk the same Index
                # objects (and their file descriptors), which a flush replaces.
                with self._state_lock:
                    self._flush_indexes()
        except (StorageError, OSError):
            return

    def caches_current(self) -> bool:
        """Do the index and snapshot files already reflect everything committed here?"""
        with self._state_lock:
            covered = self.head.covered
            durable = min(self._durable_known(), covered)
            return (
                self._snapshot_covered == covered
                and self.head.durable >= durable
                and self.head.origin == self.origin
                and not (self.log.has_writer() and self.log.durable_to < covered)
                and all(
                    i.pending == 0
                    and i.file_covered == covered
                    and i.file_durable >= durable
                    and i.file_origin == self.origin
                    and not i.doubt
                    for i in self.indexes.values()
                )
            )

    def flush_caches(self) -> None:
        """Make what this writer wrote durable (a no-op in "fsync" mode), then write
        the caches, so that they record the whole log as durable: a cache that
        names a durable position the log no longer reaches proves a loss."""
        if self.log.has_writer():
            self.log.wait_durable(self.head.covered)
            if self._durable_known() < self.head.covered and self._caches_foreign():
                # A copy's first caches of its own: its files were copied without a
                # sync, so sync them all once, and the caches can say so.
                self.log.sync_segments()
        self._write_caches()

    def _caches_foreign(self) -> bool:
        """Were the cache files written in another directory (this one is a copy)?"""
        return self.head.origin != self.origin or any(
            i.file_origin != self.origin for i in self.indexes.values()
        )

    def _durable_known(self) -> int:
        """The furthest log position known synced: by this writer, or by a cache's
        claim that the log was found to reach when it was opened."""
        return max(self.log.durable_to, self.durable_claim[0])

    def _write_caches(self) -> None:
        with self._state_lock:
            self._flush_indexes()
            self.head.durable = min(self._durable_known(), self.head.covered)
            self.head.origin = self.origin
            raw = _encode(self.head)
            write_meta(os.path.join(self.dir, SNAPSHOT_FILE), KIND_SNAPSHOT, raw, durable=False)
            self._snapshot_covered = self.head.covered
            self._snapshot_size = len(raw)

    def _flush_indexes(self) -> None:
        anchor = (self.head.anchor_pos, self.head.anchor_crc)
        durable = self._durable_known()
        for idx in self.indexes.values():
            idx.flush(self.head.covered, anchor, durable, self.origin)

    def _joined_context(self) -> bytearray:
        """`b"".join(head.context)`, kept between saves (writers hold the lock).

        The head's context list only grows in place within an epoch and is
        replaced by a new list otherwise, so the cache holds the list itself (not
        its id, which a new list could reuse) and how many items it joined. A
        bytearray, extended in place: a new bytes object per save copied the whole
        context each time.
        """
        context = self.head.context
        cached = self._context_cache
        if cached is not None and cached[0] is context and cached[1] <= len(context):
            joined = cached[2]
            if cached[1] < len(context):
                joined += b"".join(context[cached[1] :])
        else:
            joined = bytearray(b"".join(context))
        self._context_cache = (context, len(context), joined)
        return joined

    def wait_durable(self, end: int) -> None:
        if self.options.durable:
            self.log.wait_durable(end)

    # ------------------------------------------------------------------ saving
    @staticmethod
    def fork_commit(checkpoint: Checkpoint, now: int, max_record_bytes: int) -> tuple[bytes, bytes]:
        """The first commit of a fork's child, framed: its whole log after the segment
        header (FORMAT.md section 3: commit kind 2, its records not compressed), and
        the checkpoint header in it. Built without a `Session`: the child's log is
        empty and nobody else knows it, so there is no head to plan against. The
        transcript batch 0 is the context, each item encoded once for both.
        """
        header = _encode(msgspec.structs.replace(checkpoint, context=[]))
        items = [msgspec.Raw(_encode(item)) for item in checkpoint.context]
        seq = checkpoint.sequence
        receipts: list[str] = list(dict.fromkeys(m.id for m in checkpoint.pending_messages))
        records: list[tuple[int, Any]] = [
            (
                CHECKPOINT,
                CheckpointPayload(
                    seq, now, checkpoint.context_epoch, 0, -1, msgspec.Raw(header), items, receipts
                ),
            )
        ]
        if items:
            records.append((TRANSCRIPT, TranscriptPayload(seq, now, items)))
        frames: list[bytes] = []
        for rtype, obj in records:
            payload = _encode(obj)
            if len(payload) > max_record_bytes:
                raise_too_large(rtype, len(payload), max_record_bytes)
            frames.append(frame(rtype, payload, commit=False, compress=False))
        closing = CommitPayload(COMMIT_FORK, seq, 0, 0, int(time.time() * 1000))
        frames.append(frame(COMMIT, _encode(closing), commit=True, compress=False))
        return b"".join(frames), header

    def save(
        self,
        checkpoint: Checkpoint,
        transcript_delta: list[Any],
        execution: ExecutionRecord | None,
        events: list[TimestampedEvent],
        *,
        now: int,
        on_commit: Callable[[], None] | None = None,
        checked_from: int = 0,
    ) -> list[JournalEvent]:
        """The body of `save_with_events` (validated input).

        `checked_from`: the store checked the context as JSON from this index on only
        (the stored prefix, as it saw it before taking the lock); whatever turns out
        to be new before it is checked here, under the lock, before anything is
        written (the session may have been deleted and created again, or given a
        shorter context of the same epoch, meanwhile: found by review).

        `on_commit` runs right after the commit, still under the session's write
        lock: the catalog upsert goes there, so that it cannot land after the
        catalog's delete record of a delete that began after this commit (a delete
        takes every session lock first). A fork's first commit is `fork_commit`.
        """
        header = msgspec.Raw(_encode(msgspec.structs.replace(checkpoint, context=[])))
        transcript_items = [msgspec.Raw(_encode(item)) for item in transcript_delta]
        with self.committing():
            head = self.head
            if head.sequence >= 0 and checkpoint.sequence <= head.sequence:
                raise ContractViolationError(
                    f"checkpoint sequence did not advance (session {self.id!r}: stored "
                    f"{head.sequence}, got {checkpoint.sequence})"
                )
            if checkpoint.sequence <= head.sequence_floor:
                raise ContractViolationError(
                    f"checkpoint sequence {checkpoint.sequence} of session {self.id!r} was"
                    f" used before a loss that `journal repair --accept-loss` accepted:"
                    f" the next checkpoint must come after {head.sequence_floor}"
                )
            stored = head.context if head.sequence >= 0 else None
            base, tail = plan_context(
                stored,
                head.epoch,
                checkpoint.context,
                checkpoint.context_epoch,
                joined=self._joined_context() if stored is not None else None,
            )
            for index in range(base, min(checked_from, len(checkpoint.context))):
                check_json_value(checkpoint.context[index], f"checkpoint.context[{index}]")
            seq = checkpoint.sequence
            receipts = []
            seen = set()
            for msg in checkpoint.pending_messages:
                if msg.id not in self._receipts and msg.id not in seen:
                    seen.add(msg.id)
                    receipts.append(msg.id)
            prev_ctx = head.ctx_pos if base else -1
            records: list[tuple[int, Any]] = [
                (
                    CHECKPOINT,
                    CheckpointPayload(
                        seq,
                        now,
                        checkpoint.context_epoch,
                        base,
                        prev_ctx,
                        header,
                        [msgspec.Raw(t) for t in tail],
                        receipts,
                    ),
                )
            ]
            if transcript_items:
                records.append((TRANSCRIPT, TranscriptPayload(seq, now, transcript_items)))
            if execution is not None:
                records.append((EXECUTION, ExecutionPayload(seq, execution)))
            journal: list[JournalEvent] = []
            # Rules are planned in place and undone if the commit fails; under the
            # state lock, so that a reader thread cannot replay this commit's events
            # into them from the log before it is applied (see `_commit_appends`).
            with self._state_lock:
                rules = head.rules
                changes: eventrules.Undo = []
                counter = head.event_counter
                try:
                    for te in events:
                        counter += 1
                        removes, transient, metrics = eventrules.plan(
                            rules, counter, te.recorded_at_ms, te.event, changes
                        )
                        kept, ref = _store_output_once(te.event, transcript_delta, seq)
                        records.append(
                            (
                                EVENT,
                                EventPayload(
                                    counter,
                                    te.recorded_at_ms,
                                    kept,
                                    metrics,
                                    removes,
                                    transient,
                                    ref,
                                ),
                            )
                        )
                        journal.append(
                            JournalEvent(
                                sequence=counter,
                                recorded_at_ms=te.recorded_at_ms,
                                event=te.event,
                                stream_metrics=metrics,
                            )
                        )
                    end = self.commit(records, COMMIT_SAVE, seq)
                except BaseException:
                    eventrules.undo(rules, changes)
                    raise
            self.after_commit()
            if on_commit is not None:
                try:
                    on_commit()
                except BaseException:
                    # The commit is visible already: make it durable before the call
                    # fails, as any commit is (found by review: it stayed unsynced).
                    # A failing sync poisons the log, so later writes report it.
                    with contextlib.suppress(JournalError):
                        self.wait_durable(end)
                    raise
        self.wait_durable(end)
        return journal

    def append_event(
        self, recorded_at_ms: int, event: Event, expected_latest: int | None = None
    ) -> JournalEvent:
        """Append one event as its own commit; concurrent appends share a write
        (`appends.AppendQueue`)."""
        return self.appends.append(PendingAppend(recorded_at_ms, event, expected_latest))

    @property
    def durable(self) -> bool:
        return self.options.durable

    def last_sync_seconds(self) -> float:
        return self.log.last_sync

    def write_batch(self, take: Callable[[], list[PendingAppend]]) -> None:
        """Take the write lock, commit the appends `take()` returns, release it
        (`appends.BatchWriter`). `committing()` spelled out: its three nested
        context managers cost more than the flock they take."""
        durable = self.options.durable
        if durable:
            self.log.announce()
        try:
            self._acquire_writer()
            try:
                self._commit_appends(take())
                self.after_commit()
            except BaseException:
                self._writer_ready = False  # not quiet next time: see `_release_writer`
                raise
            finally:
                self._release_writer()
        finally:
            if durable:
                self.log.arrived()

    def _commit_appends(self, batch: list[PendingAppend]) -> None:
        """Write the batch's events as consecutive one-record commits (lock held).

        Planned, written and applied under the state lock: the rules are updated
        in place as each event is planned, so a reader thread must not apply the
        same commits from the log meanwhile (`_catch_up` replays rules too).
        """
        head = self.head
        if head.sequence < 0:
            raise NotFoundError(
                f"event journal session does not exist: {self.id!r} (save a checkpoint first)"
            )
        limit = self.options.max_record_bytes
        zdict = self.log.dictionary if self.options.dictionary else None
        with self._state_lock:
            rules = head.rules
            seq = head.event_counter
            changes: eventrules.Undo = []
            staged: list[tuple[PendingAppend, EventPayload, bytes]] = []
            for req in batch:
                if req.expected is not None and req.expected != seq:
                    req.error = ContractViolationError(
                        f"event journal of session {self.id!r}: the latest sequence is {seq},"
                        f" not the expected {req.expected}; nothing was appended"
                    )
                    continue
                mark = len(changes)
                try:
                    removes, transient, metrics = eventrules.plan(
                        rules, seq + 1, req.recorded_at_ms, req.event, changes
                    )
                    payload = EventPayload(
                        seq + 1, req.recorded_at_ms, req.event, metrics, removes, transient
                    )
                    raw = _encode(payload)
                    size = len(raw)
                    if size > limit:
                        raise_too_large(EVENT, size, limit)
                    if self.sampler.samples is not None:
                        self._sample(raw)
                    data = frame(EVENT, raw, commit=True, dictionary=zdict)
                except Exception as exc:  # this caller's input: the others go on
                    eventrules.undo(rules, changes, mark)
                    req.error = exc
                    continue
                except BaseException:
                    # interrupted (a signal handler raising): nothing was written, so
                    # nothing planned may stay (found by review)
                    eventrules.undo(rules, changes)
                    raise
                staged.append((req, payload, data))
                seq += 1
            if not staged:
                return
            start = self.log.writer_end
            joined = staged[0][2] if len(staged) == 1 else b"".join(d for _, _, d in staged)
            try:
                self.log.write(joined)
            except BaseException:
                eventrules.undo(rules, changes)  # nothing was written
                raise
            end = self._apply_own_events(staged, start)
            state = self.tail_state  # `_extend_view`, inline
            if state.tail == "clean" and state.end == start:
                state.end = end

    def _apply_own_events(
        self, staged: list[tuple[PendingAppend, EventPayload, bytes]], start: int
    ) -> int:
        """`_apply` of the one-event commits this writer just wrote from `start` (state
        lock held); fills in each append's end and result, returns the end.

        The writer's head and indexes all end at `start` (it holds the write lock and
        caught up before writing): the general `_apply`, which decides per
        structure whether it already reflects a commit, is only needed otherwise.
        """
        head = self.head
        indexes = self.indexes
        events, checkpoints = indexes[KIND_EVENTS], indexes[KIND_CHECKPOINTS]
        transcripts, executions = indexes[KIND_TRANSCRIPTS], indexes[KIND_EXECUTIONS]
        current = (
            head.covered
            == events.covered
            == checkpoints.covered
            == transcripts.covered
            == executions.covered
            == start
        )
        pos = last = start
        counter = head.event_counter
        for req, payload, data in staged:
            size = len(data)
            if not current:
                crc = int.from_bytes(data[:4], "little")
                self._apply([Record(pos, size, EVENT, FLAG_COMMIT, b"", crc)], [payload])
            else:
                sequence = payload.sequence
                if sequence != counter + 1:
                    raise CorruptionError(
                        f"event sequence {sequence} follows {counter}",
                        path=self.log.label,
                        offset=pos,
                    )
                counter = sequence
                events.append(sequence, pos, size, REMOVED if payload.transient else 0)
                if payload.removes:
                    count = events.count
                    for r in payload.removes:
                        if 0 < r <= count:
                            events.mark_removed(r - 1)
            last = pos
            pos += size
            req.end = pos
            req.result = JournalEvent(
                sequence=payload.sequence,
                recorded_at_ms=payload.recorded_at_ms,
                event=payload.event,
                stream_metrics=payload.stream_metrics,
            )
        if current:
            events.covered = checkpoints.covered = transcripts.covered = pos
            executions.covered = head.covered = pos
            head.event_counter = counter
            head.anchor_pos = last
            head.anchor_crc = int.from_bytes(staged[-1][2][:4], "little")
            head.commits += len(staged)
        return pos

    # ------------------------------------------------------------------ reading
    def refresh(self) -> None:
        """Pick up commits other processes appended (readers never lock).

        Fast path: when the last scan ended cleanly at the position everything
        here reflects and nothing has been written there since, there is nothing
        to pick up (`Log.quiet_since`), and a read costs no scan.
        """
        state = self.tail_state
        if (
            state.tail == "clean"
            and self.damage is None
            and state.end == self.head.covered
            and all(i.covered == state.end for i in self.indexes.values())
            and self.log.quiet_since(state.end)
        ):
            return
        self._catch_up(strict=False, tolerate=True)

    def quiet_for_reads(self) -> bool:
        """Does what this object holds answer a read without looking at the log? (one
        pread and one fstat of LOCK, against the probes of `refresh` and the store's checks)

        Yes when this process wrote last and nobody took the lock since: our holder
        line is still in LOCK (every other writer, deleter or recovery writes its
        own first, FORMAT.md section 8), nothing here locked through our lock
        object since our writer released it (a delete in this process does), our
        head is where that writer left the log, and LOCK still has a name (the
        directory was not removed by hand). A commit that starts after this check is concurrent
        with the read, which may come before it.
        """
        mark = self._quiet_mark
        if mark < 0 or self.flock.acquisitions != mark or self.damage is not None:
            return False
        state = self.tail_state
        end = self.head.covered
        return (
            state.tail == "clean"
            and state.end == end
            and self.log.writer_at(end)
            and self.flock.line_is_ours()
            and self.flock.still_linked()
        )

    @property
    def exists(self) -> bool:
        if self.head.sequence < 0:
            self._need(not self._bounded(self.head.covered))
        return self.head.sequence >= 0

    def load(self) -> Checkpoint | None:
        return self._load(None)

    def load_prefix(self, items: int) -> Checkpoint | None:
        """`load`, with only the first `items` items of the context decoded (all of
        them if it has fewer): for a reader that needs an older checkpoint's part
        of the newest context, without decoding the rest."""
        return self._load(items)

    def _load(self, items: int | None) -> Checkpoint | None:
        """The latest checkpoint, with its whole context or its first `items` items."""
        with self._state_lock:
            self._need(not self._bounded(self.head.covered))
            head = self.head
            if head.header is None:
                return None
            header = bytes(head.header)
            part = head.context if items is None else head.context[:items]
            # One decode of the items joined as one array: a C loop, where a decode
            # call per item cost about 40% more for a context of 150 items.
            context = msgpack_array_header(len(part)) + b"".join(part)
        cp = _decode_checkpoint(header)
        cp.context = _decode_any(context)
        return cp

    def receipt(self, submission_id: str) -> bool:
        if submission_id in self._receipts:
            return True
        self._need(not self._bounded(self.head.covered))
        return False

    def _read(self, entries: list[tuple[int, int, int, int]]) -> list[Record]:
        return self.log.read_records([(e[1], e[2]) for e in entries])

    def _with_index_retry(self, fn: Any) -> Any:
        try:
            return fn()
        except _KnownDamage:
            raise  # already located by a scan of the log: rebuilding would find it again
        except (IndexDoubtError, CorruptionError):
            pass
        # An index pointing at the wrong bytes is a cache problem: rebuild and retry.
        # If the log itself is damaged, the rebuild stops there and raises the precise
        # error (the old indexes stay in use for reads that do not touch the damage).
        self._rebuild_indexes()
        try:
            return fn()
        except IndexDoubtError as exc:  # internal: never reaches a caller raw
            raise CorruptionError(f"session {self.id!r}: {exc}", path=self.dir) from exc

    def event_page(
        self, before: int | None, limit: int
    ) -> tuple[int, list[JournalEvent], int | None]:
        def run() -> tuple[int, list[JournalEvent], int | None]:
            with self._state_lock:
                bound = self._index_bound(KIND_EVENTS)
                self._need(bound is None or (before is not None and before - 1 <= bound))
                latest = self.head.event_counter
                entries, more = self.indexes[KIND_EVENTS].newest_before(before, limit)
            events = self._events_of(self._read(entries), entries)
            nxt = events[-1].sequence if more and events else None
            return latest, events, nxt

        result: tuple[int, list[JournalEvent], int | None] = self._with_index_retry(run)
        return result

    def events_after(self, after: int, limit: int) -> list[JournalEvent]:
        def run() -> list[JournalEvent]:
            with self._state_lock:
                entries = self.indexes[KIND_EVENTS].oldest_after(after, limit)
                # fewer than asked for: the rest may lie behind the damage
                self._need(len(entries) == limit or self._index_bound(KIND_EVENTS) is None)
            return self._events_of(self._read(entries), entries)

        result: list[JournalEvent] = self._with_index_retry(run)
        return result

    def _events_of(
        self, records: list[Record], entries: list[tuple[int, int, int, int]]
    ) -> list[JournalEvent]:
        """`_event_of` for a page, as one loop (a page decodes tens of records)."""
        decode = payloads.event_decoder.decode
        out: list[JournalEvent] = []
        try:
            for rec, entry in zip(records, entries, strict=True):
                if rec.rtype != EVENT:
                    return self._events_carefully(records, entries)  # raises the doubt
                p = decode(rec.payload)
                if p.sequence != entry[0] or p.output_ref is not None:
                    out.append(self._event_of(rec, entry[0]))  # raises, or restores output
                    continue
                out.append(
                    JournalEvent(
                        sequence=p.sequence,
                        recorded_at_ms=p.recorded_at_ms,
                        event=p.event,
                        stream_metrics=p.stream_metrics,
                    )
                )
        except msgspec.DecodeError:
            return self._events_carefully(records, entries)  # raises the precise error
        return out

    def _events_carefully(
        self, records: list[Record], entries: list[tuple[int, int, int, int]]
    ) -> list[JournalEvent]:
        return [self._event_of(r, e[0]) for r, e in zip(records, entries, strict=True)]

    def _event_of(self, rec: Record, seq: int) -> JournalEvent:
        if rec.rtype != EVENT:
            raise IndexDoubtError(f"index entry for event {seq} points at a {rec.rtype} record")
        p = _decode_payload(payloads.event_decoder, rec, self)
        if p.sequence != seq:
            raise IndexDoubtError(f"index entry for event {seq} points at event {p.sequence}")
        event = p.event if p.output_ref is None else self._restore_output(p, rec)
        return JournalEvent(
            sequence=p.sequence,
            recorded_at_ms=p.recorded_at_ms,
            event=event,
            stream_metrics=p.stream_metrics,
        )

    def _restore_output(self, p: EventPayload, rec: Record) -> Event:
        """Put back a large tool output that is stored once, in the transcript."""
        assert p.output_ref is not None
        batch_seq, index = p.output_ref
        with self._state_lock:
            entry = self.indexes[KIND_TRANSCRIPTS].find(batch_seq)
        item: Any = None
        if entry is not None:
            batch = _decode_payload(
                payloads.transcript_decoder, self.log.read_record(entry[1], entry[2]), self
            )
            if batch.sequence == batch_seq and 0 <= index < len(batch.items):
                item = _decode_any(bytes(batch.items[index]))
        if not isinstance(item, dict) or "output" not in item:
            raise CorruptionError(
                f"event {p.sequence} stores its tool output as transcript batch {batch_seq}"
                f" item {index}, which is missing",
                path=self.log.label,
                offset=rec.pos,
            )
        return Event(
            submission_id=p.event.submission_id, msg={**p.event.msg, "output": item["output"]}
        )

    def sparse_page(
        self, kind: int, before: int | None, limit: int, decoder: Any = None
    ) -> tuple[list[Any], int | None]:
        rtype, default = {
            KIND_TRANSCRIPTS: (TRANSCRIPT, payloads.transcript_decoder),
            KIND_EXECUTIONS: (EXECUTION, payloads.execution_decoder),
            KIND_CHECKPOINTS: (CHECKPOINT, payloads.checkpoint_decoder),
        }[kind]
        decoder = decoder or default

        def run() -> tuple[list[Any], int | None]:
            with self._state_lock:
                bound = self._index_bound(kind)
                self._need(bound is None or (before is not None and before - 1 <= bound))
                entries, more = self.indexes[kind].newest_before(before, limit)
            out = []
            for rec, e in zip(self._read(entries), entries, strict=True):
                if rec.rtype != rtype:
                    raise IndexDoubtError(f"index entry {e[0]} points at a {rec.rtype} record")
                p = _decode_payload(decoder, rec, self)
                if p.sequence != e[0]:
                    raise IndexDoubtError(f"index entry {e[0]} points at {p.sequence}")
                out.append(p)
            nxt = out[-1].sequence if more and out else None
            return out, nxt

        result: tuple[list[Any], int | None] = self._with_index_retry(run)
        return result

    def transcript_page(
        self, before: int | None, limit: int
    ) -> tuple[list[TranscriptBatch], int | None]:
        # One decode per batch, items included (not one per item).
        found, nxt = self.sparse_page(
            KIND_TRANSCRIPTS, before, limit, payloads.transcript_items_decoder
        )
        return [
            TranscriptBatch(sequence=p.sequence, created_at=p.created_at, items=p.items)
            for p in found
        ], nxt

    def execution_page(
        self, before: int | None, limit: int
    ) -> tuple[list[ExecutionRecord], int | None]:
        items, nxt = self.sparse_page(KIND_EXECUTIONS, before, limit)
        return [p.record for p in items], nxt

    def checkpoint_at(self, sequence: int) -> Checkpoint | None:
        """The checkpoint exactly as saved at `sequence` (None if no save had it)."""

        def run() -> Checkpoint | None:
            with self._state_lock:
                bound = self._index_bound(KIND_CHECKPOINTS)
                self._need(bound is None or sequence <= bound)
                entry = self.indexes[KIND_CHECKPOINTS].find(sequence)
            if entry is None:
                return None
            rec = self.log.read_record(entry[1], entry[2])
            if rec.rtype != CHECKPOINT:
                raise IndexDoubtError(f"checkpoint index entry {sequence} points elsewhere")
            p = _decode_payload(payloads.checkpoint_decoder, rec, self)
            if p.sequence != sequence:
                raise IndexDoubtError(f"checkpoint index entry {sequence} points at {p.sequence}")
            if compacted_stub(p.header) is not None:
                raise NotFoundError(
                    f"checkpoint {sequence} of session {self.id!r} was compacted away"
                    " (`journal compact` keeps only the newest checkpoints)"
                )
            return self._materialise(p)

        result: Checkpoint | None = self._with_index_retry(run)
        return result

    def _materialise(self, p: CheckpointPayload) -> Checkpoint:
        """Rebuild a historical checkpoint's context by walking its epoch's item chain."""
        chunks: list[list[msgspec.Raw]] = [p.items]
        base, prev = p.base, p.prev_ctx
        while base > 0:
            if prev < 0:
                raise CorruptionError(
                    f"checkpoint {p.sequence}: context chain ends with {base} items missing",
                    path=self.log.label,
                )
            rec = self.log.read_record_at(prev)
            q = _decode_payload(payloads.checkpoint_decoder, rec, self)
            take = base - q.base
            if rec.rtype != CHECKPOINT or take <= 0 or take > len(q.items):
                raise CorruptionError(
                    f"checkpoint {p.sequence}: context chain is inconsistent at position {prev}",
                    path=self.log.label,
                    offset=prev,
                )
            chunks.append(q.items[:take])
            base, prev = q.base, q.prev_ctx
        cp = _decode_checkpoint(bytes(p.header))
        items = [i for chunk in reversed(chunks) for i in chunk]
        cp.context = _decode_any(msgpack_array_header(len(items)) + b"".join(items))
        return cp

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

    def _trim_on_close(self) -> None:
        """Give back the preallocated tail if we wrote last (never waits for a lock)."""
        if self._private or self.deleted:
            return  # never preallocated; or its files are on their way to the trash
        if not self.log.has_writer() or not self._write_lock.acquire(blocking=False):
            return
        try:
            # Recorded: the cut changes the file, so another process's writer must
            # not take the lock for untouched since it last wrote (`acquire`).
            if not self.flock.try_acquire(record=True):
                return
            try:
                if self.log.untouched_since(self.head.covered):
                    self.log.trim_preallocation(self.head.covered)
            finally:
                self.flock.release()
        except JournalError:
            return  # a courtesy: the zeros stay, nothing is lost
        finally:
            self._write_lock.release()


_INDEX_OF = {
    EVENT: KIND_EVENTS,
    CHECKPOINT: KIND_CHECKPOINTS,
    TRANSCRIPT: KIND_TRANSCRIPTS,
    EXECUTION: KIND_EXECUTIONS,
}
_DECODERS = payloads.DECODERS


class _KnownDamage(CorruptionError):
    """Damage a scan already found, raised again for a read that needs what lies behind it.

    A fresh exception each time: re-raising one object grows its traceback.
    """

    @classmethod
    def of(cls, damage: CorruptionError) -> _KnownDamage:
        err = cls(damage.message, path=damage.path, offset=damage.offset)
        err.args = damage.args
        return err


LARGE_TOOL_OUTPUT = 4096  # bytes of text above which a tool output is stored once


def _store_output_once(
    event: Event, transcript: list[Any], batch_seq: int
) -> tuple[Event, list[int] | None]:
    """mobius's "large tool outputs stored once": a `tool_call_end` whose text output
    is over 4 KiB and equals a `function_call_output` item of the same save keeps a
    reference to that transcript item instead of a second copy."""
    msg = event.msg
    output = msg.get("output")
    if msg.get("type") != "tool_call_end" or not isinstance(output, str):
        return event, None
    # (a str of at most 1024 characters cannot exceed 4 KiB of UTF-8: skip the encode)
    if len(output) <= LARGE_TOOL_OUTPUT // 4:
        return event, None
    if len(output.encode("utf-8", "surrogatepass")) <= LARGE_TOOL_OUTPUT:
        return event, None
    for index, item in enumerate(transcript):
        if (
            isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and item.get("call_id") == msg.get("call_id")
            and item.get("output") == output
        ):
            stripped = {k: v for k, v in msg.items() if k != "output"}
            return Event(submission_id=event.submission_id, msg=stripped), [batch_seq, index]
    return event, None


def compacted_stub(header: bytes | msgspec.Raw) -> dict[str, Any] | None:
    """The marker map of a checkpoint header that `compact` replaced, else None."""
    header = bytes(header)
    if len(header) > 256 or not header or header[0] & 0xF0 != 0x80:
        return None  # real headers are large maps; stubs are small fixmaps
    try:
        value = msgspec.msgpack.decode(header)
    except msgspec.DecodeError:
        return None
    if isinstance(value, dict) and value.get("compacted") is True:
        return value
    return None


def raise_too_large(rtype: int, size: int, limit: int) -> None:
    from .errors import InvalidInputError
    from .record import TYPE_NAMES

    raise InvalidInputError(
        f"{TYPE_NAMES.get(rtype, rtype)} record of {size} bytes exceeds the limit of {limit} bytes"
    )


def _decode_payload(decoder: Any, rec: Record, session: Session) -> Any:
    try:
        return decoder.decode(rec.payload)
    except msgspec.DecodeError as exc:
        raise CorruptionError(
            f"record payload does not decode: {exc}", path=session.log.label, offset=rec.pos
        ) from exc

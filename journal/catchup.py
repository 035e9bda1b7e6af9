"""What a session knows of its log: the caches it adopts, the tail it reads, the damage
it remembers, and the caches it writes back.

Opening adopts the snapshot and the indexes when they match the log (their anchor
record is still there), then reads the log past them (`_catch_up`). Each cache also
names the log position its writer knew to be synced: a log that no longer reaches
the highest such claim has lost committed data (FORMAT.md section 5). Damage a
scan runs into is remembered (`damage`), and every read that needs what lies
behind it raises it.
"""

from __future__ import annotations

import os

import msgspec

from .errors import (
    CorruptionError,
    JournalError,
    StorageError,
)
from .fold import SessionFold
from .index import (
    KIND_CHECKPOINTS,
    KIND_EVENTS,
    Index,
)
from .layout import SNAPSHOT_FILE
from .metafile import (
    KIND_SNAPSHOT,
    read_meta,
    write_meta,
)
from .scan import ScanState, Tail
from .sessionstate import Head, KnownDamage, SessionGone

_decode_head = msgspec.msgpack.Decoder(Head).decode
_encode = msgspec.msgpack.Encoder().encode


class SessionCatchUp(SessionFold):
    """Caches, catching up with the log, and remembered damage."""

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
                    and (state.tail != Tail.CLEAN or (cold and self._data_after(state)))
                ):
                    state = self._check_stable_tail(state)
            except CorruptionError as exc:
                self.damage, self.damage_end = exc, state.end
                self.log.forget_cached()  # the log is not what the cached records came from
                if not tolerate:
                    raise
                state.tail = Tail.DAMAGED
                return state
            ahead = max([self.head.covered] + [i.covered for i in self.indexes.values()])
            claimed, claimed_by = self.durable_claim
            missing = None
            if state.end < claimed and state.tail != Tail.DAMAGED:
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
                raise KnownDamage.of(verdict)
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
        if checked.tail == Tail.CORRUPT:
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
            raise KnownDamage.of(damage)

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
            # and discarding its index files would destroy its caches.
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

    def _extend_view(self, start: int, end: int) -> None:
        """Our own commits, written at `start`, end at `end`: when the last scan had
        read cleanly up to `start`, readers here need not scan them again (`refresh`
        then costs a probe at `end`, as after a scan). Caller holds `_state_lock`."""
        state = self.tail_state
        if state.tail == Tail.CLEAN and state.end == start:
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

    def refresh(self) -> None:
        """Pick up commits other processes appended (readers never lock).

        Fast path: when the last scan ended cleanly at the position everything
        here reflects and nothing has been written there since, there is nothing
        to pick up (`Log.quiet_since`), and a read costs no scan.
        """
        state = self.tail_state
        if (
            state.tail == Tail.CLEAN
            and self.damage is None
            and state.end == self.head.covered
            and all(i.covered == state.end for i in self.indexes.values())
            and self.log.quiet_since(state.end)
        ):
            return
        self._catch_up(strict=False, tolerate=True)

"""`compact`: free the bytes of superseded checkpoints and of erased records.

What may go: the header (the checkpoint without its context) of every
checkpoint older than the newest `keep` ones, the context items of epochs that
no retained checkpoint builds on, and what erase declarations name
(`erase.py`): events become stubs of the same sequence, checkpoints lose their
headers. What always stays: every event sequence, the transcript and execution
records, receipts, the first user message, every commit, and the positions that
anything outside a segment refers to.

A segment is rewritten record by record, in the same order. Records that are
referred to by position from outside their segment stay where they are
(*pinned*: the newest checkpoint and the one its context chain starts from, a
checkpoint that a `prev_ctx` of another segment names, DICT, LOSS and SEAL
records); between two pinned records the others are packed together, a
checkpoint's `prev_ctx` following its target (a checkpoint that its new
encoding would not let fit pins its target instead), and one PAD record takes up the
bytes they no longer need, just before the last record of the stretch (a
commit-closing record, so the PAD stays inside a commit). Its zero payload is
left as a hole: the segment keeps its length and frees the file-system blocks
the hole covers. Each rewritten segment is written to a temporary file, synced
and renamed over the old one, so a crash leaves each segment old or new, and
both agree with every other segment (no pinned record moved). Index files and
the snapshot are removed (positions inside a segment changed) and rebuilt from
the log; other processes' readers that still hold the old positions find a
record that does not match and rebuild theirs.

Only sealed segments are rewritten: when the newest segment holds anything to
free, it is sealed first (`Log.seal_newest`; a sealed segment may be short), so
a session that never filled a segment is compacted too. All of it runs under
the session's writer lock: a writer in another process waits, then finds the
SEAL where its data ended and catches up with the log (FORMAT.md section 11).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec
import zstandard

from . import fsio, payloads
from .erase import Declarations, encoded_stub, erasable_event, padded
from .errors import CorruptionError, InvalidInputError
from .fold import compacted_stub
from .index import INDEX_FILES
from .layout import SNAPSHOT_FILE
from .record import (
    CHECKPOINT,
    COMMIT,
    DICT,
    EVENT,
    FLAG_DICT,
    FLAG_ZSTD,
    HEADER_SIZE,
    LOSS,
    PAD,
    SEAL,
    Record,
    frame,
    pad_frame,
)
from .scan import ScanState, Tail
from .segment import SEGMENT_HEADER_SIZE, Segment
from .session import Session
from .sessionstate import SessionOptions

if TYPE_CHECKING:
    from .store import Store

STUB_MARK = "compacted"
_PIN_TRIES = 8  # layouts of one segment, each with more checkpoints pinned


@dataclass
class CompactReport:
    session_id: str
    keep: int  # 0: no checkpoint is dropped for being old (only erasure)
    retained: list[int] = field(default_factory=list)
    compacted: list[int] = field(default_factory=list)  # checkpoint sequences stubbed
    erased_events: list[int] = field(default_factory=list)  # event sequences made stubs
    declarations: int = 0  # erase declarations found in the log
    segments_rewritten: int = 0
    segments_skipped: int = 0  # left as they were: their records did not pack (rare)
    rolled: bool = False  # the newest segment was sealed first
    bytes_before: int = 0  # allocated bytes of the whole log (du)
    bytes_after: int = 0  # ... afterwards (a dry run: the estimate)
    bytes_zeroed: int = 0  # record bytes turned into PAD (a dry run: would be)
    sealed_segments: int = 0
    already_compacted: int = 0
    pinned_kept: int = 0  # headers kept because their record is referred to by position
    dry_run: bool = False

    @property
    def freed(self) -> int:
        """Bytes of disk given back (du), or a dry run's estimate."""
        return max(self.bytes_before - self.bytes_after, 0)

    def why_nothing(self) -> str:
        """Why nothing is (or would be) dropped, or "" when something is."""
        if self.compacted or self.erased_events:
            return ""
        parts = []
        if self.keep and len(self.retained) < self.keep + 1 and not self.already_compacted:
            parts.append(
                f"the session has {len(self.retained)} checkpoint(s) and compact keeps the"
                f" newest {self.keep}"
            )
        if self.already_compacted:
            parts.append(f"{self.already_compacted} are compacted already")
        if self.pinned_kept:
            parts.append(f"{self.pinned_kept} checkpoint header(s) are referred to by position")
        if not parts:
            parts.append(
                "no checkpoint is older than the newest kept ones and no erase"
                " declaration names a record still present"
            )
        return "; ".join(parts)


def stub_header(first_user_message: str | None, items_dropped: bool) -> msgspec.Raw:
    marker = {STUB_MARK: True, "items_dropped": items_dropped, "first_user_message": None}
    raw = msgspec.msgpack.encode({**marker, "first_user_message": first_user_message})
    if len(raw) > 250:  # keep stubs tiny: a long first message stays in the catalog only
        raw = msgspec.msgpack.encode(marker)
    return msgspec.Raw(raw)


def is_stub(header: bytes) -> bool:
    """Whether a checkpoint header was compacted away."""
    return compacted_stub(header) is not None


def compact_session(
    directory: str,
    session_id: str,
    *,
    keep: int | None = None,
    erase: bool = True,
    dry_run: bool = False,
    lock_timeout: float = 10.0,
    progress: Callable[[str], None] | None = None,
) -> CompactReport:
    """Compact the session in `directory` (`Store.session_dir(session_id)`).

    `keep`: also drop the headers of all but the newest `keep` checkpoints (None:
    none for being old); `erase`: apply the log's erase declarations. Holds the
    session's writer lock throughout (waiting up to `lock_timeout` for it)."""
    if keep is not None and keep < 1:
        raise InvalidInputError("compact must keep at least 1 checkpoint")
    report = CompactReport(session_id, keep or 0, dry_run=dry_run)
    sess = Session(directory, session_id, SessionOptions(lock_timeout=lock_timeout))
    try:
        with sess.writing():
            report.bytes_before = sum(_allocated(seg.path) for seg in sess.log.segments)
            plan = _Plan.of(sess, keep, erase)
            if plan.touches(sess.log.segments[-1]) and not dry_run:
                report.rolled = sess.log.seal_newest()
                if report.rolled:
                    plan = _Plan.of(sess, keep, erase)
            plan.fill(report)
            _apply(sess, plan, report, dry_run, progress)
    finally:
        sess.close()
    return report


def compact_store_session(
    store: Store,
    session_id: str,
    *,
    keep: int | None = None,
    erase: bool = True,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
) -> CompactReport:
    """`compact_session` of a session of an open store (what `Store.compact`, the
    retention job and the integrations call). The store then closes what it holds
    open of the session, so that its next read opens the rewritten files (and the
    old ones, no longer held, give their blocks back)."""
    report = compact_session(
        store.session_dir(session_id),
        session_id,
        keep=keep,
        erase=erase,
        dry_run=dry_run,
        lock_timeout=store.options.lock_timeout,
        progress=progress,
    )
    if report.segments_rewritten or report.rolled:
        store.open_sessions.drop([session_id])
    return report


def _apply(
    sess: Session,
    plan: _Plan,
    report: CompactReport,
    dry_run: bool,
    progress: Callable[[str], None] | None,
) -> None:
    segments = sess.log.segments if dry_run else sess.log.segments[:-1]
    report.sealed_segments = len(sess.log.segments) - 1
    block = _block_size(sess.log.dir)
    work = [seg for seg in segments if plan.touches(seg)]
    estimate = report.bytes_before
    dropped_caches = False
    for n, seg in enumerate(work, 1):
        if progress:
            progress(f"compact: segment {n} of {len(work)}")
        with open(seg.path, "rb") as src:
            data = src.read()
        laid = plan.lay_out(seg, data)
        if laid is None:
            report.segments_skipped += 1
            continue
        pieces, pads = laid
        report.bytes_zeroed += sum(size for _, size in pads)
        if dry_run:
            estimate -= _whole_blocks(pads, block)
            continue
        if not dropped_caches:
            # Before the first rename: caches naming old positions of a rewritten
            # segment must not outlive a crash in the middle.
            _drop_caches(sess.dir)
            dropped_caches = True
        _rewrite(seg.path, len(data), pieces, pads)
        report.segments_rewritten += 1
    if report.segments_rewritten:
        fsio.sync_dir(sess.log.dir)
        _drop_caches(sess.dir)  # and any a reader wrote meanwhile from what it read before
    if dry_run:
        report.bytes_after = max(estimate, 0)
    else:
        report.bytes_after = sum(_allocated(seg.path) for seg in sess.log.segments)


def _drop_caches(directory: str) -> None:
    for name in [*INDEX_FILES.values(), SNAPSHOT_FILE]:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            fsio.unlink(path)


# One segment's new bytes: (file offset, bytes) pieces, and (file offset, size) PAD
# records of which only the header is written (their zero payload stays a hole).
_Layout = tuple[list[tuple[int, bytes]], list[tuple[int, int]]]


class _FirstUserMessage(msgspec.Struct):
    first_user_message: str | None = None


@dataclass
class _Plan:
    """What a compaction of one log changes: from a scan of its committed records."""

    records: list[Record]
    segments: list[Segment]
    events: dict[int, payloads.EventPayload]  # by position: the stubs to write
    checkpoints: dict[int, payloads.CheckpointPayload]  # by position: decoded, all of them
    stubs: dict[int, payloads.CheckpointPayload]  # by position: stubs to write
    pinned: set[int]
    dictionary: payloads.DictionaryPayload | None
    codec: object
    retained: list[int] = field(default_factory=list)
    compacted: list[int] = field(default_factory=list)
    erased: list[int] = field(default_factory=list)
    already: int = 0
    pinned_kept: int = 0
    declarations: int = 0

    @staticmethod
    def of(sess: Session, keep: int | None, erase: bool) -> _Plan:
        log = sess.log
        state = ScanState()
        records = [rec for commit in log.committed(0, state, strict=True) for rec in commit]
        if state.tail not in (Tail.CLEAN,):
            raise CorruptionError(
                f"session {sess.id!r}: compact needs a clean log ({state.tail}: {state.detail})",
                path=state.path or log.dir,
            )
        segs = list(log.segments)

        def seg_of(pos: int) -> int:
            return log.segment_for(pos)[0]

        plan = _Plan(records, segs, {}, {}, {}, set(), None, log.dictionary)
        decls = Declarations()
        events: list[tuple[int, payloads.EventPayload]] = []
        ctx_of: dict[int, int] = {}  # epoch -> newest item-carrying checkpoint position
        head_ctx = -1
        for rec in records:
            if rec.rtype in (DICT, LOSS, SEAL):
                plan.pinned.add(rec.pos)
            elif rec.rtype == CHECKPOINT:
                p = payloads.checkpoint_decoder.decode(rec.payload)
                plan.checkpoints[rec.pos] = p
                if p.prev_ctx >= 0 and seg_of(p.prev_ctx) != seg_of(rec.pos):
                    plan.pinned.add(p.prev_ctx)
                if p.items:
                    ctx_of[p.epoch] = rec.pos
                elif p.base == 0:
                    ctx_of.pop(p.epoch, None)
                head_ctx = ctx_of.get(p.epoch, -1)
            elif rec.rtype == EVENT and erase:
                ev = payloads.event_decoder.decode(rec.payload)
                decl = ev.event.msg.get("journal_erase")
                if decl is not None:
                    decls.add(ev.sequence, decl)
                events.append((rec.pos, ev))
        cps = list(plan.checkpoints.items())
        if cps:
            plan.pinned.add(cps[-1][0])  # the head
        if head_ctx >= 0:
            plan.pinned.add(head_ctx)
        plan.declarations = decls.count
        for pos, ev in events:
            if decls.names_event(ev.sequence, ev.event.msg.get("type")) and erasable_event(ev):
                plan.events[pos] = ev
                plan.erased.append(ev.sequence)
        plan._plan_checkpoints(cps, keep, decls.checkpoints if erase else set())
        return plan

    def _plan_checkpoints(
        self,
        cps: list[tuple[int, payloads.CheckpointPayload]],
        keep: int | None,
        declared: set[int],
    ) -> None:
        old: list[tuple[int, payloads.CheckpointPayload]] = []
        oldest_epoch = -1
        if keep is not None and len(cps) > keep:
            old = cps[:-keep]
            oldest_epoch = cps[-keep][1].epoch
            self.retained = [p.sequence for _, p in cps[-keep:]]
        else:
            self.retained = [p.sequence for _, p in cps] if keep is not None else []
        old_pos = {pos for pos, _ in old}
        for pos, p in cps[:-1]:
            if pos not in old_pos and p.sequence not in declared:
                continue
            if is_stub(bytes(p.header)):
                self.already += 1
                continue
            if pos in self.pinned:
                self.pinned_kept += 1
                continue
            fum = msgspec.msgpack.decode(bytes(p.header), type=_FirstUserMessage)
            dropped = pos in old_pos and p.epoch < oldest_epoch
            self.stubs[pos] = payloads.CheckpointPayload(
                p.sequence,
                p.updated_at,
                p.epoch,
                p.base,
                p.prev_ctx,
                stub_header(fum.first_user_message, dropped),
                [] if dropped else p.items,
                p.receipts,
            )
            self.compacted.append(p.sequence)

    def touches(self, seg: Segment) -> bool:
        end = self._end_of(seg)
        return any(seg.base <= pos < end for pos in (*self.events, *self.stubs))

    def _end_of(self, seg: Segment) -> int:
        i = self.segments.index(seg) if seg in self.segments else len(self.segments) - 1
        return self.segments[i + 1].base if i + 1 < len(self.segments) else 1 << 62

    def fill(self, report: CompactReport) -> None:
        report.retained = self.retained
        report.compacted = sorted(self.compacted)
        report.erased_events = sorted(self.erased)
        report.already_compacted = self.already
        report.pinned_kept = self.pinned_kept
        report.declarations = self.declarations

    # ------------------------------------------------------------ layout
    def lay_out(self, seg: Segment, data: bytes) -> _Layout | None:
        """The new bytes of `seg` (its file read as `data`), or None when its records
        do not pack (the segment is then left as it is).

        A stretch fails to pack when a checkpoint re-encoded for a moved `prev_ctx`
        target grew and nothing after it gives the bytes back; pinning that target
        too spares it the re-encoding, so the layout is tried again with it pinned."""
        for _ in range(_PIN_TRIES):
            blame: list[int] = []
            laid = self._lay_out(seg, data, blame)
            if laid is not None:
                return laid
            more = {self.checkpoints[b].prev_ctx for b in blame} - self.pinned - {-1}
            if not more:
                return None
            self.pinned |= more
        return None

    def _lay_out(self, seg: Segment, data: bytes, blame: list[int]) -> _Layout | None:
        limit = seg.base + len(data) - SEGMENT_HEADER_SIZE
        recs = [r for r in self.records if seg.base <= r.pos < limit]
        end = recs[-1].pos + recs[-1].size if recs else seg.base  # (the newest: zeros after)
        pieces: list[tuple[int, bytes]] = []
        pads: list[tuple[int, int]] = []
        moved: dict[int, int] = {}  # checkpoint positions: old -> new
        stretch: list[Record] = []
        cursor = seg.base  # where the next record goes
        last_pin: Record | None = None
        for rec in [*recs, None]:
            if rec is not None and rec.pos not in self.pinned:
                stretch.append(rec)
                continue
            stop = end if rec is None else rec.pos
            if stretch:
                ok = self._pack(seg, data, stretch, cursor, stop, moved, pieces, pads)
            else:
                ok = cursor == stop  # a pinned record before it that changed size: no room
            if not ok:
                # what moved the bytes: checkpoints re-encoded here or just before
                grown = [r for r in stretch if r.rtype == CHECKPOINT]
                if last_pin is not None and last_pin.rtype == CHECKPOINT:
                    grown.append(last_pin)
                blame.extend(r.pos for r in grown)
                return None
            if rec is None:
                break
            stretch = []
            b = self._bytes_of(seg, data, rec, moved, 0)
            pieces.append((seg.offset(rec.pos), b))
            cursor = rec.pos + len(b)
            last_pin = rec
        return pieces, pads

    def _pack(
        self,
        seg: Segment,
        data: bytes,
        stretch: list[Record],
        start: int,
        end: int,
        moved: dict[int, int],
        pieces: list[tuple[int, bytes]],
        pads: list[tuple[int, int]],
    ) -> bool:
        """Lay out the records of `stretch` packed from `start` to `end`, with one PAD
        before its last record taking up what they no longer need."""
        stub_at = max((i for i, r in enumerate(stretch) if self._paddable(r)), default=-1)
        extra = 0
        for _ in range(4):
            trial: dict[int, int] = dict(moved)
            out: list[bytes] = []
            cur = start
            for i, rec in enumerate(stretch):
                b = self._bytes_of(seg, data, rec, trial, extra if i == stub_at else 0)
                if rec.rtype == CHECKPOINT:
                    trial[rec.pos] = cur
                out.append(b)
                cur += len(b)
            gap = end - cur
            if gap == 0 or gap >= HEADER_SIZE:
                break
            if gap < 0 or stub_at < 0:
                return False
            extra += gap  # too small for a PAD: the last paddable record takes it
        else:
            return False
        at = max((i for i, b in enumerate(out) if b), default=-1)  # where the PAD goes
        if gap and not (at >= 0 and stretch[at].commits and stretch[at].rtype != CHECKPOINT):
            return False  # the PAD would end up outside a commit
        moved.update(trial)
        cur = start
        for i, b in enumerate(out):
            if gap and i == at:
                pads.append((seg.offset(cur), gap))
                cur += gap
            if b:
                pieces.append((seg.offset(cur), b))
            cur += len(b)
        return True

    def _paddable(self, rec: Record) -> bool:
        """Can `rec` be written with a trailing element that readers ignore (`erase.padded`)?"""
        return rec.pos in self.events or (
            rec.rtype in (EVENT, COMMIT) and not rec.flags & FLAG_ZSTD
        )

    def _bytes_of(
        self, seg: Segment, data: bytes, rec: Record, moved: dict[int, int], extra: int
    ) -> bytes:
        """The frame `rec` is written as: its stub, its checkpoint with `prev_ctx`
        following a moved target, or its bytes as they are (PAD records: dropped);
        with `extra` bytes of padding (`_paddable` records only)."""
        if rec.rtype == PAD:
            return b""
        if rec.pos in self.events:
            payload = encoded_stub(self.events[rec.pos], extra)
            return frame(EVENT, payload, commit=rec.commits, compress=False)
        if extra:
            return frame(rec.rtype, padded(rec.payload, extra), commit=rec.commits, compress=False)
        if rec.rtype == CHECKPOINT:
            p = self.stubs.get(rec.pos) or self.checkpoints[rec.pos]
            target = moved.get(p.prev_ctx, p.prev_ctx)
            if rec.pos in self.stubs or target != p.prev_ctx:
                p = msgspec.structs.replace(p, prev_ctx=target)
                return self._smallest(payloads.encode(p), rec.flags, rec.size)
        off = seg.offset(rec.pos)
        return data[off : off + rec.size]

    def _smallest(self, payload: bytes, flags: int, size: int) -> bytes:
        """The smallest CHECKPOINT frame of `payload` among the encodings a record
        with `flags` may use, trying more zstd levels while it is larger than `size`
        (the record it replaces): a re-encoded record should not grow."""
        best = frame(CHECKPOINT, payload, commit=False, compress=False)
        if not flags & FLAG_ZSTD:
            return best
        if flags & FLAG_DICT and self.codec is not None:
            d = frame(CHECKPOINT, payload, commit=False, dictionary=self.codec)  # type: ignore[arg-type]
            best = min(best, d, key=len)
        for level in (1, 3, 2, 4, 5, 6, 7, 8, 9, 12, 15, 19):
            if len(best) <= size and level > 1:
                break
            packed = zstandard.ZstdCompressor(level=level).compress(payload)
            best = min(best, _frame_stored(CHECKPOINT, FLAG_ZSTD, packed), key=len)
        return best


def _frame_stored(rtype: int, flags: int, stored: bytes) -> bytes:
    """A record frame of already-`stored` (compressed) payload bytes."""
    head = struct.pack("<IBB", len(stored), rtype, flags)
    return struct.pack("<I", zlib.crc32(stored, zlib.crc32(head))) + head + stored


def _rewrite(
    path: str, length: int, pieces: list[tuple[int, bytes]], pads: list[tuple[int, int]]
) -> None:
    """Write the segment anew beside `path` (header, pieces, PAD headers; the rest a
    hole), sync it and rename it over `path`."""
    tmp = f"{path}.compact"
    with open(path, "rb") as src:
        header = src.read(SEGMENT_HEADER_SIZE)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fsio.pwrite(fd, header, 0, tmp)
        for off, b in pieces:
            if b:
                fsio.pwrite(fd, b, off, tmp)
        for off, size in pads:
            # only the PAD's header is written: its zero payload stays a hole
            fsio.pwrite(fd, pad_frame(size)[:HEADER_SIZE], off, tmp)
        fsio.truncate(fd, length, tmp)
        fsio.sync_file(fd, tmp)
    finally:
        os.close(fd)
    fsio.replace(tmp, path)


def _block_size(directory: str) -> int:
    try:
        return os.statvfs(directory).f_bsize or 4096
    except (OSError, AttributeError):
        return 4096


def _whole_blocks(pads: list[tuple[int, int]], block: int) -> int:
    """Bytes of the file-system blocks that the PAD payloads cover whole."""
    total = 0
    for off, size in pads:
        first, last = -(-(off + HEADER_SIZE) // block), (off + size) // block
        total += max(last - first, 0) * block
    return total


def _allocated(path: str) -> int:
    st = os.stat(path)
    return getattr(st, "st_blocks", 0) * 512 or st.st_size


__all__ = ["PAD", "CompactReport", "compact_session", "compact_store_session", "is_stub"]

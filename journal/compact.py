"""`compact`: shrink sealed segments by dropping superseded checkpoint data.

What may go: the header (the checkpoint without its context) of every
checkpoint older than the newest `keep` ones, and the context items of epochs
that no retained checkpoint builds on (a later epoch replaced them). What always
stays: event, transcript and execution records (the journals), receipts, the
first user message, every record position, and every commit record.

Log positions are referenced everywhere (indexes, snapshots, `prev_ctx`
chains), so records never move. A compacted checkpoint record is rewritten as a
smaller stub followed by a PAD record covering the rest of its bytes; the PAD's
payload is zeros, written as a hole, so the file keeps its length; a hole frees
disk space only for the file-system blocks it covers whole, so headers smaller
than a block or sharing blocks with kept records free little or nothing (the
report gives both figures: bytes zeroed and bytes freed on disk). Each sealed
segment is rewritten to a temporary file, synced, and renamed over the old
one, so a crash leaves every segment either old or new.
The newest segment is never touched. Indexes are dropped afterwards (record
sizes changed) and rebuilt from the log on next use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from . import fsio, payloads
from .fold import compacted_stub
from .index import INDEX_FILES
from .record import CHECKPOINT, HEADER_SIZE, PAD, frame, pad_frame
from .scan import ScanState
from .segment import SEGMENT_HEADER_SIZE
from .session import Session
from .sessionstate import SessionOptions

STUB_MARK = "compacted"


@dataclass
class CompactReport:
    session_id: str
    keep: int
    retained: list[int] = field(default_factory=list)
    compacted: list[int] = field(default_factory=list)  # checkpoint sequences stubbed
    segments_rewritten: int = 0
    bytes_before: int = 0  # allocated bytes of the sealed segments
    bytes_after: int = 0  # ... afterwards (a dry run: the estimate)
    bytes_zeroed: int = 0  # record bytes turned into PAD (a dry run: would be)
    sealed_segments: int = 0
    in_newest_segment: int = 0  # older checkpoints left alone: the newest segment is live
    already_compacted: int = 0
    dry_run: bool = False

    def why_nothing(self) -> str:
        """Why nothing is (or would be) dropped, or "" when something is."""
        if self.compacted:
            return ""
        if len(self.retained) < self.keep or not (self.in_newest_segment or self.already_compacted):
            return (
                f"the session has {len(self.retained)} checkpoint(s) and compact keeps the"
                f" newest {self.keep}"
            )
        parts = []
        if self.in_newest_segment:
            parts.append(
                f"{self.in_newest_segment} older checkpoint(s) are in the newest segment,"
                " which compact never touches (only sealed segments are rewritten)"
            )
        if self.already_compacted:
            parts.append(f"{self.already_compacted} are compacted already")
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
    keep: int,
    dry_run: bool = False,
    lock_timeout: float = 10.0,
    progress: Callable[[str], None] | None = None,
) -> CompactReport:
    if keep < 1:
        from .errors import InvalidInputError

        raise InvalidInputError("compact must keep at least 1 checkpoint")
    report = CompactReport(session_id, keep, dry_run=dry_run)
    sess = Session(directory, session_id, SessionOptions(lock_timeout=lock_timeout))
    try:
        with sess.writing():
            plan = _plan(sess, keep, report)
            sealed = sess.log.segments[:-1]
            report.sealed_segments = len(sealed)
            block = _block_size(sess.log.dir)
            for n, seg in enumerate(sealed, 1):
                if progress:
                    progress(f"compact: segment {n} of {len(sealed)}")
                report.bytes_before += _allocated(seg.path)
                victims = [p for p in plan if seg.base <= p[0] < seg.base + _data_len(seg.path)]
                report.bytes_zeroed += sum(
                    size - len(stub) - HEADER_SIZE * (size > len(stub)) for _, size, stub in victims
                )
                if not victims or dry_run:
                    freed = _whole_blocks(seg.base, victims, block) if dry_run else 0
                    report.bytes_after += max(_allocated(seg.path) - freed, 0)
                    continue
                _rewrite(seg.path, seg.base, victims)
                report.segments_rewritten += 1
                report.bytes_after += _allocated(seg.path)
            if report.segments_rewritten:
                fsio.sync_dir(sess.log.dir)
                for name in INDEX_FILES.values():
                    path = os.path.join(directory, name)
                    if os.path.exists(path):
                        fsio.unlink(path)
    finally:
        sess.close()
    return report


def _plan(sess: Session, keep: int, report: CompactReport) -> list[tuple[int, int, bytes]]:
    """(position, old size, new stub frame) of each checkpoint record to compact."""
    records: list[tuple[int, int, payloads.CheckpointPayload]] = []
    state = ScanState()
    for commit in sess.log.committed(0, state, strict=False):
        for rec in commit:
            if rec.rtype == CHECKPOINT:
                records.append((rec.pos, rec.size, payloads.checkpoint_decoder.decode(rec.payload)))
    if len(records) <= keep:
        report.retained = [p.sequence for _, _, p in records]
        return []
    retained = records[-keep:]
    report.retained = [p.sequence for _, _, p in retained]
    oldest_epoch = retained[0][2].epoch
    sealed_end = sess.log.segments[-1].base
    plan = []
    for pos, size, p in records[:-keep]:
        if pos + size > sealed_end:
            report.in_newest_segment += 1
            continue
        if is_stub(bytes(p.header)):
            report.already_compacted += 1
            continue
        fum = msgspec.msgpack.decode(bytes(p.header), type=_FirstUserMessage).first_user_message
        dropped = p.epoch < oldest_epoch
        stub = payloads.CheckpointPayload(
            p.sequence,
            p.updated_at,
            p.epoch,
            p.base,
            p.prev_ctx,
            stub_header(fum, dropped),
            [] if dropped else p.items,
            p.receipts,
        )
        data = frame(CHECKPOINT, payloads.encode(stub), commit=False)
        if size - len(data) >= HEADER_SIZE or size == len(data):
            plan.append((pos, size, data))
            report.compacted.append(p.sequence)
    return plan


class _FirstUserMessage(msgspec.Struct):
    first_user_message: str | None = None


def _rewrite(path: str, base: int, victims: list[tuple[int, int, bytes]]) -> None:
    tmp = f"{path}.compact"
    with open(path, "rb") as src:
        data = src.read()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        cursor = 0
        for pos, size, stub in sorted(victims):
            off = SEGMENT_HEADER_SIZE + pos - base
            fsio.pwrite(fd, data[cursor:off], cursor, tmp)
            fsio.pwrite(fd, stub, off, tmp)
            rest = size - len(stub)
            if rest:
                pad = pad_frame(rest)
                # only the PAD's header is written: its zero payload stays a hole
                fsio.pwrite(fd, pad[:HEADER_SIZE], off + len(stub), tmp)
            cursor = off + size
        fsio.pwrite(fd, data[cursor:], cursor, tmp)
        fsio.truncate(fd, len(data), tmp)
        fsio.sync_file(fd, tmp)
    finally:
        os.close(fd)
    fsio.replace(tmp, path)


def _block_size(directory: str) -> int:
    try:
        return os.statvfs(directory).f_bsize or 4096
    except (OSError, AttributeError):
        return 4096


def _whole_blocks(base: int, victims: list[tuple[int, int, bytes]], block: int) -> int:
    """Bytes of the file-system blocks that the PAD payloads of `victims` cover whole."""
    total = 0
    for pos, size, stub in victims:
        start = SEGMENT_HEADER_SIZE + pos - base + len(stub) + HEADER_SIZE
        end = SEGMENT_HEADER_SIZE + pos - base + size
        first, last = -(-start // block), end // block
        total += max(last - first, 0) * block
    return total


def _allocated(path: str) -> int:
    st = os.stat(path)
    return getattr(st, "st_blocks", 0) * 512 or st.st_size


def _data_len(path: str) -> int:
    return os.path.getsize(path) - SEGMENT_HEADER_SIZE


__all__ = ["PAD", "CompactReport", "compact_session", "is_stub"]

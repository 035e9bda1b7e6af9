"""Accepting a loss: the one way to make a damaged session writable again.

A damaged session refuses writes until a person decides (FORMAT.md section 5).
`accept_loss` is that decision. Under the session's lock it:

1. finds the last verifiable commit (the cut) and gathers the evidence of how far
   the session had got: the caches' durable marks and counts, and every record
   still readable after the cut (`salvage.scan`);
2. writes the LOSS record it is about to append to `loss.pending`, durably: until
   it is gone, the session refuses writes, so a crash part way through never leaves
   a session that looks healthy with its evidence gone;
3. keeps every byte it cuts: the tail of the segment the cut falls in, copied, and
   every later segment, moved whole, into `repair/<time>-loss/`;
4. cuts the log there and appends the LOSS record, synced;
5. removes the caches (they describe the log before the cut), then `loss.pending`,
   and rebuilds the caches from the log.

The LOSS record names what was lost and the highest event and checkpoint sequences
known to have been handed out; numbering continues after them, so no sequence is
ever handed out twice. A second run after a crash finishes the first.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import msgspec

from . import fsio
from .errors import CorruptionError, JournalError, UnfinishedSessionError
from .index import INDEX_FILES, KIND_EVENTS, read_evidence
from .layout import CUT_DIR, LOSS_PENDING_FILE, SNAPSHOT_FILE
from .log import Log
from .metafile import KIND_SNAPSHOT, read_meta
from .payloads import (
    LossPayload,
    LostRange,
    checkpoint_decoder,
    encode,
    event_decoder,
    loss_decoder,
)
from .record import CHECKPOINT, EVENT, EXECUTION, LOSS, OK, TRANSCRIPT, Record, frame, parse_at
from .salvage import scan
from .scan import ScanState, Tail
from .segment import SEAL_RECORD, SEAL_SIZE, SEGMENT_HEADER_SIZE
from .session import Session
from .sessiondir import open_log
from .sessionstate import Head, SessionOptions

_SEQUENCED = (CHECKPOINT, TRANSCRIPT, EXECUTION)  # records keyed by a checkpoint sequence


@dataclass
class LossReport:
    session_id: str
    refused: str = ""
    payload: LossPayload | None = None
    kept: list[str] = field(default_factory=list)  # files that now hold the cut bytes
    rewritten: list[str] = field(default_factory=list)  # files changed or removed


@dataclass
class _Kept:
    """What the log holds up to the cut."""

    events: int = 0
    checkpoint: int = -1
    floor_events: int = 0
    floor_checkpoints: int = -1


def accept_loss(directory: str, session_id: str, *, lock_timeout: float = 0.0) -> LossReport:
    """Cut the damaged session at its last verifiable commit and record the loss.

    Refuses (`report.refused`) a session that is not damaged, or whose damage leaves
    no commit before it. Raises `LockTimeoutError` while another process holds the
    session.
    """
    report = LossReport(session_id)
    options = SessionOptions(lock_timeout=lock_timeout)
    try:
        sess = Session(directory, session_id, options)
    except UnfinishedSessionError as exc:
        report.refused = f"{exc}: a session whose creation never finished; nothing to accept"
        return report
    try:
        sess.flock.acquire(lock_timeout)
        try:
            _accept(sess, directory, report)
        finally:
            sess.flock.release()
    finally:
        sess.close()
    if report.refused:
        return report
    rebuilt = Session(directory, session_id, options)
    try:
        with rebuilt.writing():
            rebuilt.flush_caches()
    finally:
        rebuilt.close()
    report.rewritten.extend(name for name in [*INDEX_FILES.values(), SNAPSHOT_FILE])
    return report


def _accept(sess: Session, directory: str, report: LossReport) -> None:
    log = sess.log
    pending_path = os.path.join(directory, LOSS_PENDING_FILE)
    pending = _read_pending(pending_path)
    state = ScanState()
    kept = _Kept()
    error: CorruptionError | None = None
    try:
        for commit in log.committed(0, state, strict=True):
            _count(commit, kept)
    except CorruptionError as exc:
        error = exc
    claim = sess.durable_claim[0]
    if pending is not None and _ends_with(log, state.end, pending):
        _finish(sess, directory, pending_path, report)
        report.payload = loss_decoder.decode(_payload_of(pending))
        return
    damaged = (
        error is not None
        or state.tail == Tail.CORRUPT
        or claim > state.end
        or sess.damage is not None
        or pending is not None
    )
    if not damaged:
        report.refused = (
            f"session {sess.id!r} is not damaged: nothing to accept"
            " (`journal repair` cuts an unfinished tail)"
        )
        return
    reason = str(error or sess.damage or f"the log ends at position {state.end}")
    cut = state.end
    if cut >= SEAL_SIZE and _is_seal_at(log, cut - SEAL_SIZE):
        cut -= SEAL_SIZE  # a seal whose next segment is gone: the segment is the newest again
    if cut == 0:
        report.refused = (
            f"session {sess.id!r}: nothing before the damage is readable ({reason});"
            " `journal delete` removes the session"
        )
        return
    payload = _plan(sess, directory, cut, kept, reason, pending)
    keep = _plan_keep(log, directory, cut, payload)
    data = frame(LOSS, encode(payload), commit=True, compress=False)
    fsio.write_file(pending_path, data, durable=True)
    _keep_and_cut(log, directory, cut, keep, payload, report)
    log.open_writer(cut)
    end = log.write(data)
    log.wait_durable(end)
    log.close_writer()
    report.rewritten.append(os.path.relpath(log.segments[-1].path, directory))
    _finish(sess, directory, pending_path, report)
    report.payload = payload


def _count(commit: list[Record], kept: _Kept) -> None:
    for rec in commit:
        if rec.rtype == EVENT:
            kept.events = max(kept.events, event_decoder.decode(rec.payload).sequence)
        elif rec.rtype == CHECKPOINT:
            kept.checkpoint = max(kept.checkpoint, checkpoint_decoder.decode(rec.payload).sequence)
        elif rec.rtype == LOSS:
            p = loss_decoder.decode(rec.payload)
            kept.floor_events = max(kept.floor_events, p.events_through)
            kept.floor_checkpoints = max(kept.floor_checkpoints, p.checkpoints_through)


def _plan(
    sess: Session,
    directory: str,
    cut: int,
    kept: _Kept,
    reason: str,
    pending: bytes | None,
) -> LossPayload:
    """The LOSS record to append at `cut`: what the evidence says was handed out."""
    events = max(kept.events, kept.floor_events)
    checkpoints = max(kept.checkpoint, kept.floor_checkpoints)
    lost_to = sess.durable_claim[0]
    for kind, name in INDEX_FILES.items():
        evidence = read_evidence(os.path.join(directory, name), kind)
        if evidence is None:
            continue
        if evidence.origin == sess.origin:
            lost_to = max(lost_to, evidence.durable)
        if kind == KIND_EVENTS:
            events = max(events, evidence.entries)
        else:
            checkpoints = max(checkpoints, evidence.last_key)
    try:
        head = msgspec.msgpack.decode(
            read_meta(os.path.join(directory, SNAPSHOT_FILE), KIND_SNAPSHOT), type=Head
        )
        events = max(events, head.event_counter)
        checkpoints = max(checkpoints, head.sequence, head.sequence_floor)
        if head.origin == sess.origin:
            lost_to = max(lost_to, head.durable)
    except (JournalError, msgspec.DecodeError, OSError):
        pass
    for commit in scan(sess.log.dir, after=cut - 1).commits:
        for rec in commit:
            lost_to = max(lost_to, rec.pos + rec.size)
            if rec.rtype == EVENT:
                events = max(events, event_decoder.decode(rec.payload).sequence)
            elif rec.rtype in _SEQUENCED:
                checkpoints = max(checkpoints, _sequence_of(rec))
    ranges: list[LostRange] = []
    if pending is not None:  # an earlier run, cut short: what it knew still holds
        before = loss_decoder.decode(_payload_of(pending))
        events = max(events, before.events_through)
        checkpoints = max(checkpoints, before.checkpoints_through)
        lost_to = max(lost_to, before.lost_to)
        ranges.extend(before.ranges)
    return LossPayload(
        accepted_at=int(time.time()),
        cut_at=cut,
        lost_to=lost_to if lost_to > cut else -1,
        events_kept=kept.events,
        events_through=events,
        checkpoint_kept=kept.checkpoint,
        checkpoints_through=checkpoints,
        reason=reason,
        ranges=ranges,
    )


def _sequence_of(rec: Record) -> int:
    # CHECKPOINT, TRANSCRIPT and EXECUTION payloads all start with the sequence
    decoded = msgspec.msgpack.decode(rec.payload)
    return int(decoded[0]) if isinstance(decoded, list) and decoded else -1


@dataclass
class _Keep:
    """Where the bytes after the cut go: the tail of the segment the cut falls in,
    copied (`tail`, to `tail_to`), and every later segment, moved whole (`moves`)."""

    keep_dir: str
    tail: bytes = b""
    tail_to: str = ""
    moves: list[tuple[str, str]] = field(default_factory=list)


def _plan_keep(log: Log, directory: str, cut: int, payload: LossPayload) -> _Keep:
    """Decide where every byte after `cut` is kept, and name it in `payload.ranges`
    (before the LOSS record is framed, so the record says where they are)."""
    earlier, payload.ranges = payload.ranges, []  # an interrupted run's, still true
    segs = log.list_segments()
    at = max(i for i, s in enumerate(segs) if s.base <= cut)
    keep = _Keep(os.path.join(directory, CUT_DIR, time.strftime("%Y%m%dT%H%M%S") + "-loss"))
    seg = segs[at]
    start = SEGMENT_HEADER_SIZE + cut - seg.base
    with open(seg.path, "rb") as f:
        f.seek(start)
        keep.tail = f.read().rstrip(b"\x00")
    if keep.tail:
        keep.tail_to = os.path.join(keep.keep_dir, os.path.basename(seg.path) + ".tail")
        end = start + len(keep.tail)
        payload.ranges.append(_range(seg.path, start, end, keep.tail_to, directory))
    for later in segs[at + 1 :]:
        kept_as = os.path.join(keep.keep_dir, os.path.basename(later.path))
        size = os.path.getsize(later.path)
        payload.ranges.append(_range(later.path, 0, size, kept_as, directory))
        keep.moves.append((later.path, kept_as))
    planned = {(r.segment, r.start, r.end) for r in payload.ranges}
    payload.ranges[:0] = [r for r in earlier if (r.segment, r.start, r.end) not in planned]
    return keep


def _keep_and_cut(
    log: Log, directory: str, cut: int, keep: _Keep, payload: LossPayload, report: LossReport
) -> None:
    """Keep every byte after `cut` aside (durably), then cut the log there."""
    os.makedirs(keep.keep_dir, exist_ok=True)
    if keep.tail:
        fsio.write_file(keep.tail_to, keep.tail, durable=True)
    for src, dst in keep.moves:
        fsio.rename(src, dst)
    fsio.sync_dir(keep.keep_dir)
    fsio.sync_dir(os.path.dirname(keep.keep_dir))
    if keep.moves:
        fsio.sync_dir(log.dir)
    log.list_segments()
    log.truncate_tail(cut)
    report.kept.extend(r.kept_as for r in payload.ranges)
    report.rewritten.extend(os.path.relpath(p, directory) for p, _ in keep.moves)


def _range(path: str, start: int, end: int, kept_as: str, directory: str) -> LostRange:
    return LostRange(os.path.basename(path), start, end, os.path.relpath(kept_as, directory))


def _finish(sess: Session, directory: str, pending_path: str, report: LossReport) -> None:
    """The LOSS record is durable: drop the caches that described the cut log, then
    the pending note, each removal synced before the next step relies on it."""
    for name in [*INDEX_FILES.values(), SNAPSHOT_FILE]:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            fsio.unlink(path)
    fsio.sync_dir(directory)
    fsio.unlink(pending_path)
    fsio.sync_dir(directory)


def _read_pending(path: str) -> bytes | None:
    """The LOSS frame an unfinished run was writing (None: none, or unreadable)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    outcome, rtype, _, _, end = parse_at(data, 0)
    if outcome != OK or rtype != LOSS or end != len(data):
        raise CorruptionError(
            "the note of a loss being accepted is damaged; remove it and run"
            " `journal repair --accept-loss` again",
            path=path,
        )
    return data


def _payload_of(data: bytes) -> bytes:
    return data[10:]


def _ends_with(log: Log, end: int, data: bytes) -> bool:
    """Is `data` (a LOSS frame) the last commit before `end`?"""
    if end < len(data):
        return False
    try:
        return log.pread(end - len(data), len(data)) == data
    except JournalError:
        return False


def _is_seal_at(log: Log, pos: int) -> bool:
    try:
        return log.pread(pos, SEAL_SIZE) == SEAL_RECORD
    except JournalError:
        return False


def loss_notes(directory: str) -> list[LossPayload]:
    """The LOSS records of a session's log, oldest first (read-only; stops quietly at
    damage, which `verify` reports)."""
    log = open_log(directory)
    notes: list[LossPayload] = []
    try:
        for commit in log.committed(0, ScanState(), strict=False):
            notes.extend(loss_decoder.decode(r.payload) for r in commit if r.rtype == LOSS)
    except JournalError:
        pass
    finally:
        log.close()
    return notes

"""Reading the committed prefix of a log, and classifying what follows it.

`Scanner.committed` yields a log's complete commits in order and, once exhausted,
leaves in a `ScanState` where the committed prefix ends and what the bytes after
it are (`Tail`, with a `TailReason`). Damage inside a sealed segment raises
`CorruptionError`: only the newest segment's end can hold a crash's leftovers,
and whether to cut them, wait for a live writer or report damage is the caller's
decision (session recovery, verify, repair).

A scan reads the log's files through the `LogFiles` interface (`Log` implements
it): the segment list, fresh descriptors, and the session's dictionary.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Generator, Iterator
from typing import NamedTuple, Protocol

import msgspec

from .errors import CorruptionError, StorageError
from .record import (
    DICT,
    END,
    FLAG_COMMIT,
    FLAG_DICT,
    FLAG_ZSTD,
    HEADER_SIZE,
    OK,
    SEAL,
    SHORT,
    TYPE_NAMES,
    Record,
    next_frame,
    parse_at,
)
from .segment import (
    SEAL_RECORD,
    SEAL_SIZE,
    SEGMENT_HEADER_SIZE,
    Segment,
    check_segment_header,
    file_size,
    read_at,
    segment_name,
)

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """`enum.StrEnum` of Python 3.11: members are their values as strings."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(self, spec)


class Tail(StrEnum):
    """What follows the committed prefix of a log.

    A `StrEnum`: a verdict compares equal to its value ("torn" == Tail.TORN).
    """

    CLEAN = "clean"  # nothing: the log ends after its last commit
    # (a plain refresh) records without their commit, or a frame not yet valid: a
    # writer may be in the middle of a commit; a strict scan tells torn from corrupt
    UNCOMMITTED = "uncommitted"
    TORN = "torn"  # an unfinished final commit, as a crash leaves it: recovery cuts it
    # a roll stopped between creating the next segment and sealing this one:
    # nothing is lost, recovery writes the SEAL (`Log.finish_seal`)
    UNSEALED = "unsealed"
    CORRUPT = "corrupt"  # damage a crash cannot explain, with committed data after it
    # Never set by a scan: a reader that tolerates damage records that its scan
    # raised `CorruptionError`.
    DAMAGED = "damaged"


class TailReason(enum.Enum):
    """Why a scan gave its `Tail` verdict (`ScanState.detail` says it in words)."""

    NONE = enum.auto()  # CLEAN, UNCOMMITTED
    HEADER_INCOMPLETE = enum.auto()  # TORN: the newest segment's header is cut off
    NO_COMMIT_AT_END = enum.auto()  # TORN: intact records, then zeros, no commit record
    CUT_OFF = enum.auto()  # TORN: a record runs past the end of the file
    BAD_FINAL_RECORD = enum.auto()  # TORN: the last frame fails its checks, zeros after it
    ROLL_UNFINISHED = enum.auto()  # UNSEALED
    ZEROS_THEN_DATA = enum.auto()  # CORRUPT: zeroed bytes with data after them
    DAMAGED_LENGTH = enum.auto()  # CORRUPT: a length reaching past intact records
    BAD_RECORD = enum.auto()  # CORRUPT: a frame failing its checks, data after it


class ScanState(msgspec.Struct):
    """Where a scan stopped and why (filled in by `Scanner.committed`).

    A msgspec Struct rather than a dataclass, as the other small records here: a
    dataclass costs each process a code generation at import."""

    end: int = 0  # position just after the last complete commit
    tail: Tail = Tail.CLEAN
    tail_pos: int = 0  # where the unusable bytes start
    detail: str = ""
    reason: TailReason = TailReason.NONE
    path: str = ""
    file_offset: int = 0
    dropped: int = 0  # bytes after `end` in the newest segment (torn/uncommitted tails)
    stop_pos: int = 0  # where the first unreadable record starts (newest segment)
    stop_offset: int = 0  # ... as an offset in `path`
    at_eof: bool = True  # the scan stopped at the end of the newest segment's file


class LogFiles(Protocol):
    """The files of one log as a scan reads them (`log.Log`)."""

    label: str  # names the log in messages
    kind: int  # its segments' header kind
    seals: bool  # sealed segments end with a SEAL record
    segments: list[Segment]

    def segment_for(self, pos: int) -> tuple[int, Segment]: ...

    def list_segments(self) -> list[Segment]: ...

    def scan_fd(self, path: str) -> int:
        """A read-only descriptor of the file at `path` now."""
        ...

    def open_stored(self, pos: int, flags: int, stored: bytes, path: str, offset: int) -> bytes:
        """The payload of the compressed record at `pos`."""
        ...

    def adopt_dictionary(self, payload: bytes, pos: int, path: str, offset: int) -> None:
        """The scan read the DICT record at `pos`: records after it may use it."""
        ...


_READ_CHUNK = 1 << 20
_FIRST_READ = 4096  # a refresh usually finds nothing new: read little first
_RETRIES = 5  # looks again at bytes a live writer was changing
_COMPRESSED = FLAG_ZSTD | FLAG_DICT


class _Cursor(msgspec.Struct):
    """How far a scan has come: segment, position, and the open commit's records."""

    idx: int
    pos: int
    pending: list[Record] = msgspec.field(default_factory=list)
    retries: int = 0
    sealed: bool = False  # the last commit read in this segment is its SEAL


class _Stop(NamedTuple):
    """Where and why reading one segment's records stopped."""

    outcome: int  # `parse_at`'s, at the stop
    rtype: int
    frame_size: int  # of the frame at the stop (header and stored payload)
    at_eof: bool  # the stop is the end of the file
    seen: bytes  # the bytes at the stop, up to 4 KiB


class Scanner:
    """Scans one log (each `Log` has one)."""

    def __init__(self, log: LogFiles):
        self._log = log
        self._checked_unsealed = ("", -1)  # (segment, end) found not to end with a SEAL

    def committed(self, start: int, state: ScanState, *, strict: bool) -> Iterator[list[Record]]:
        """Yield each complete commit (a list of records) from position `start` on.

        `state` is filled in when the generator is exhausted. With `strict`, the
        whole zero tail of the newest segment is checked (recovery, verify); a
        plain refresh stops at the first zero header. Damage in a sealed segment
        raises `CorruptionError`; damage at the end of the newest segment is
        classified in `state.tail` for the caller to decide.
        """
        log = self._log
        state.end = start
        c = _Cursor(log.segment_for(start)[0], start)
        while c.idx < len(log.segments):
            seg = log.segments[c.idx]
            newest = c.idx == len(log.segments) - 1
            fd = self._descriptor(seg, newest)
            if fd is None:
                continue  # recovery elsewhere removed an empty newest segment: listed again
            try:
                seg_end = seg.base + file_size(fd) - SEGMENT_HEADER_SIZE
            except OSError as exc:
                raise StorageError(f"cannot stat {seg.path}: {exc.strerror}") from exc
            if c.pos == seg.base and not self._header_read(fd, seg, newest, state):
                return
            if c.pos == start:
                self._check_start(fd, seg, seg_end, c)
            stop = yield from self._records(fd, seg, seg_end, c, state)
            if newest:
                again = self._newest_tail(fd, seg, seg_end, c, stop, state, strict=strict)
            else:
                again = self._past_sealed(seg, seg_end, c, stop, state)
            if not again:
                return

    def _descriptor(self, seg: Segment, newest: bool) -> int | None:
        """A fresh descriptor of `seg`; None when it is a newest segment that recovery
        elsewhere removed (a crashed roll's), the segments listed again."""
        try:
            return self._log.scan_fd(seg.path)
        except CorruptionError:
            if not newest or os.path.exists(seg.path):
                raise
            self._log.list_segments()
            return None

    def _header_read(self, fd: int, seg: Segment, newest: bool, state: ScanState) -> bool:
        """Check the segment's header; False when the newest segment's is cut off (torn)."""
        head = read_at(fd, SEGMENT_HEADER_SIZE, 0, seg.path)
        if len(head) < SEGMENT_HEADER_SIZE:
            if newest:
                state.tail, state.tail_pos, state.path = Tail.TORN, seg.base, seg.path
                state.reason = TailReason.HEADER_INCOMPLETE
                state.detail = "segment header incomplete"
                return False
            raise CorruptionError(f"{self._log.label}: segment header truncated", path=seg.path)
        check_segment_header(head, seg.path, self._log.kind, seg.base)
        return True

    def _check_start(self, fd: int, seg: Segment, seg_end: int, c: _Cursor) -> None:
        """Checks of the segment a scan starts in, at the position it starts from."""
        pos = c.pos
        if pos > seg_end and pos > seg.base:
            # This reader had read up to `pos`: the file was cut under it (a
            # truncation, or `journal repair` in another process). Appending
            # at the old end would leave a hole; reopen after a repair.
            raise CorruptionError(
                f"{self._log.label}: the log ends at position {seg_end}, before position"
                f" {pos}, which was committed and read here: the segment was cut"
                " (reopen the store after `journal repair`)",
                path=seg.path,
                offset=max(seg.offset(seg_end), 0),
            )
        if pos == seg_end and pos - seg.base >= SEAL_SIZE and self._log.seals:
            # A scan that starts at the end of a file must know whether the file
            # ends with its SEAL (then its successor must exist).
            c.sealed = self._ends_with_seal(fd, seg, pos)

    def _records(
        self, fd: int, seg: Segment, seg_end: int, c: _Cursor, state: ScanState
    ) -> Generator[list[Record], None, _Stop]:
        """Yield the commits of `seg` from `c.pos` on; return where reading stopped."""
        log = self._log
        pos, pending, sealed = c.pos, c.pending, c.sealed
        buf = b""
        buf_pos = pos
        while True:
            off = pos - buf_pos
            outcome, rtype, flags, pstart, pend = parse_at(buf, off)
            if outcome == OK:
                payload = buf[pstart:pend]
                if flags & _COMPRESSED:
                    where = SEGMENT_HEADER_SIZE + pos - seg.base
                    payload = log.open_stored(pos, flags, payload, seg.path, where)
                elif rtype == DICT and flags == FLAG_COMMIT:  # else: the session rejects it
                    log.adopt_dictionary(payload, pos, seg.path, seg.offset(pos))
                rec = Record(pos, pend - off, rtype, flags, payload, _crc_at(buf, off))
                if sealed or (rtype == SEAL and (pending or flags != FLAG_COMMIT)):
                    raise CorruptionError(
                        f"{log.label}: a seal record must end its segment alone"
                        f" (record at position {pos})",
                        path=seg.path,
                        offset=seg.offset(pos),
                    )
                pos += rec.size
                pending.append(rec)
                if flags & FLAG_COMMIT:
                    sealed = rtype == SEAL
                    yield pending
                    pending = []
                    state.end = pos
                continue
            have_end = buf_pos + len(buf)
            lacking = off + HEADER_SIZE > len(buf) or outcome == SHORT
            if lacking and have_end < seg_end:
                want = min(_READ_CHUNK, max(_FIRST_READ, len(buf) * 2))
                if outcome == SHORT:
                    want = max(want, pend - off)
                chunk = read_at(fd, min(want, seg_end - have_end), seg.offset(have_end), seg.path)
                if chunk:
                    buf = buf[off:] + chunk
                    buf_pos = pos
                    continue
            break
        c.pos, c.pending, c.sealed = pos, pending, sealed
        return _Stop(outcome, rtype, pend - off, pos == seg_end, bytes(buf[off : off + 4096]))

    def _past_sealed(
        self, seg: Segment, seg_end: int, c: _Cursor, stop: _Stop, state: ScanState
    ) -> bool:
        """At the end of the records of a segment that is not the newest: go on to the
        next (True), read it again (True), or stop at an unfinished roll (False)."""
        log = self._log
        nxt = log.segments[c.idx + 1]
        rolling = log.seals and not c.sealed and nxt.base == state.end + SEAL_SIZE
        if (
            rolling
            and c.idx + 2 == len(log.segments)
            and seg_end - state.end <= SEAL_SIZE
            and _just_created(nxt)
        ):
            # A roll interrupted between creating the next segment and writing the
            # SEAL (perhaps torn) that names it: nothing was committed after
            # `state.end` (see the roll in log.py).
            state.tail, state.path = Tail.UNSEALED, seg.path
            state.reason = TailReason.ROLL_UNFINISHED
            state.tail_pos = state.stop_pos = state.end
            state.file_offset = state.stop_offset = seg.offset(state.end)
            state.detail = f"the roll to {os.path.basename(nxt.path)} did not finish"
            return False
        if rolling and c.retries < _RETRIES:
            # The file's size was read before the writer appended the SEAL that its
            # next segment (holding data now) proves was written: read it again.
            c.retries += 1
            return True
        if stop.outcome == END and stop.at_eof and not c.pending:
            c.idx += 1
            c.sealed = False
            if nxt.base != c.pos:
                # Positions are dense across segments: a gap means segments are missing.
                raise CorruptionError(
                    f"{log.label}: log positions {c.pos}..{nxt.base} are missing"
                    " (a segment file is missing)",
                    path=nxt.path,
                    offset=0,
                )
            return True
        raise CorruptionError(
            f"{log.label}: damaged or missing data in a sealed segment at position {c.pos}",
            path=seg.path,
            offset=seg.offset(c.pos),
        )

    def _newest_tail(
        self,
        fd: int,
        seg: Segment,
        seg_end: int,
        c: _Cursor,
        stop: _Stop,
        state: ScanState,
        *,
        strict: bool,
    ) -> bool:
        """Classify what follows the last commit of the newest segment into `state`;
        True when the scan must look again (the log changed under it)."""
        pos = c.pos
        state.path = seg.path
        state.tail_pos = state.end
        state.file_offset = seg.offset(state.end)
        state.stop_pos = pos
        state.stop_offset = seg.offset(pos)
        state.at_eof = stop.at_eof
        if stop.outcome == END and stop.at_eof and not c.pending:
            if self._newer_segment_appeared():
                return True  # this segment again, as a sealed one: its end is checked
            if c.sealed:
                raise CorruptionError(
                    f"{self._log.label}: segment {segment_name(pos)} is missing:"
                    f" {os.path.basename(seg.path)} is sealed, and its seal names a next"
                    f" segment starting at log position {pos}; everything committed"
                    " from there on is lost",
                    path=seg.path,
                    offset=seg.offset(pos - SEAL_SIZE),
                )
            state.tail = Tail.CLEAN
            return False
        # A reader (verify) racing a live writer may have read bytes the writer
        # was still filling: if the bytes at `pos` changed since, look again.
        if (
            strict
            and not (stop.outcome == END and stop.at_eof)
            and stop.seen
            and c.retries < _RETRIES
            and _written_since(fd, seg, pos, stop.seen)
        ):
            c.retries += 1
            return True
        if stop.outcome == END:
            return self._zeros_tail(fd, seg, seg_end, c, stop, state, strict=strict)
        if stop.outcome == SHORT:
            _short_tail(fd, seg, seg_end, pos, state)
            return False
        _bad_tail(fd, seg, seg_end, pos, stop, state, strict=strict)
        return False

    def _zeros_tail(
        self,
        fd: int,
        seg: Segment,
        seg_end: int,
        c: _Cursor,
        stop: _Stop,
        state: ScanState,
        *,
        strict: bool,
    ) -> bool:
        """The scan stopped at zeros (or the end of the file with records pending)."""
        pos = c.pos
        if not strict:
            state.tail = Tail.UNCOMMITTED if c.pending else Tail.CLEAN
            return False
        if _all_zero(fd, seg, pos, seg_end):
            if c.pending:
                state.tail, state.reason = Tail.TORN, TailReason.NO_COMMIT_AT_END
                state.detail = "records without a commit at the end"
            else:
                state.tail, state.reason, state.detail = Tail.CLEAN, TailReason.NONE, ""
            state.dropped = pos - state.end
            return False
        if c.retries < _RETRIES and _written_since(fd, seg, pos, stop.seen):
            # The data after the zeros is a live writer's: it wrote at `pos`
            # after the check above and before the look further on.
            c.retries += 1
            return True
        state.tail, state.reason = Tail.CORRUPT, TailReason.ZEROS_THEN_DATA
        state.detail = f"zeroed bytes at position {pos} followed by data"
        state.file_offset = state.stop_offset  # where the zeros start
        return False

    def _ends_with_seal(self, fd: int, seg: Segment, end: int) -> bool:
        if self._checked_unsealed == (seg.path, end):
            return False
        if read_at(fd, SEAL_SIZE, seg.offset(end - SEAL_SIZE), seg.path) == SEAL_RECORD:
            return True
        self._checked_unsealed = (seg.path, end)
        return False

    def _newer_segment_appeared(self) -> bool:
        before = len(self._log.segments)
        self._log.list_segments()
        return len(self._log.segments) > before


def _short_tail(fd: int, seg: Segment, seg_end: int, pos: int, state: ScanState) -> None:
    """The newest segment ends inside the frame at `pos`."""
    if _record_after(fd, seg, pos, seg_end):
        # A length field claiming more than the file holds, with intact records
        # behind it, is damage, not a write cut off by a crash (a torn write
        # leaves nothing valid after it). Cutting here would silently drop those
        # committed records.
        state.tail, state.reason = Tail.CORRUPT, TailReason.DAMAGED_LENGTH
        state.detail = f"record at position {pos} has a damaged length"
        state.tail_pos = pos
        state.file_offset = state.stop_offset
        return
    state.tail, state.reason = Tail.TORN, TailReason.CUT_OFF
    state.detail = f"record at position {pos} is cut off by the end of the file"
    state.dropped = seg_end - state.end


def _bad_tail(
    fd: int, seg: Segment, seg_end: int, pos: int, stop: _Stop, state: ScanState, *, strict: bool
) -> None:
    """The frame at `pos` is complete but fails its checks."""
    if not strict:
        state.tail = Tail.UNCOMMITTED
        return
    frame_end = pos + stop.frame_size
    # (a damaged length can make one frame swallow the records after it)
    if _all_zero(fd, seg, frame_end, seg_end) and not _record_after(fd, seg, pos, frame_end):
        state.tail, state.reason = Tail.TORN, TailReason.BAD_FINAL_RECORD
        state.detail = f"final record at position {pos} fails its checksum and nothing follows it"
        state.dropped = frame_end - state.end
        return
    state.tail, state.reason = Tail.CORRUPT, TailReason.BAD_RECORD
    state.detail = (
        f"record at position {pos} fails its checksum ({TYPE_NAMES.get(stop.rtype, stop.rtype)})"
    )
    state.tail_pos = pos
    state.file_offset = seg.offset(pos)


def _record_after(fd: int, seg: Segment, start: int, end: int) -> bool:
    """Does a valid record start anywhere in (start, end)?"""
    off = seg.offset(start + 1)
    data = read_at(fd, max(0, seg.offset(end) - off), off, seg.path)
    if not data.strip(b"\0"):
        return False
    return next_frame(data, 0) is not None


def _written_since(fd: int, seg: Segment, pos: int, seen: bytes) -> bool:
    """Do the bytes at `pos` differ from what a scan saw there a moment ago?"""
    return read_at(fd, len(seen), seg.offset(pos), seg.path) != seen


def _all_zero(fd: int, seg: Segment, start: int, end: int) -> bool:
    off = seg.offset(start)
    stop = seg.offset(end)
    while off < stop:
        chunk = read_at(fd, min(_READ_CHUNK, stop - off), off, seg.path)
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            return False
        off += len(chunk)
    return True


def _just_created(seg: Segment) -> bool:
    """Is `seg` a roll's new file: its header (perhaps cut short) and nothing else?"""
    try:
        return os.stat(seg.path).st_size <= SEGMENT_HEADER_SIZE
    except OSError:
        return False


def _crc_at(buf: bytes | memoryview, off: int) -> int:
    return int.from_bytes(bytes(buf[off : off + 4]), "little")

"""A segmented, checksummed, append-only log in one directory.

Segments are files named by the log position of their first record
(`00000000000000000000.seg`), so names sort by position. Each starts with a
32-byte header (magic, version, kind, base position, header CRC). Positions are
dense across segments: a record at file offset `o` of the segment with base `b`
is at log position `b + o - 32`.

The newest segment is preallocated with zeros in growing steps: overwriting
already-allocated space makes each commit's fdatasync flush only data, not the
file size. Zeroed space parses as "no record" (type 0 is invalid). When a
segment reaches its size limit it is sealed: truncated to its last record,
synced, and never written again. Commits never span segments.

Writers hold the log's lock (see `session.py`); `write` only hands bytes to the
OS and `wait_durable` implements group commit: concurrent committers share one
fdatasync.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from . import fsio
from .cache import ReadCache
from .dictionary import SessionDictionary, from_record
from .errors import CorruptionError, FormatVersionError, JournalError, StorageError
from .record import (
    DICT,
    END,
    FLAG_COMMIT,
    FLAG_DICT,
    FLAG_ZSTD,
    HEADER,
    HEADER_SIZE,
    OK,
    SEAL,
    SHORT,
    TYPE_NAMES,
    Record,
    frame,
    frame_at,
    next_frame,
    open_payload,
    parse_at,
)

SEGMENT_MAGIC = b"JRNLSEG\x00"
SEGMENT_VERSION = 1
SEGMENT_HEADER = struct.Struct("<8sHHIQI4x")  # magic, version, kind, reserved, base, crc
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size  # 32
SEGMENT_SUFFIX = ".seg"
SEAL_RECORD = frame(SEAL, b"", commit=True, compress=False)
SEAL_SIZE = len(SEAL_RECORD)  # 10

KIND_SESSION = 1
KIND_CATALOG = 3

_READ_CHUNK = 1 << 20
_FIRST_READ = 4096  # a refresh usually finds nothing new: read little first
# Records closer than _GAP are read together: copying a 16 KiB gap costs about
# what another pread does, while wider gaps (turn records between 50 KiB saves)
# made pages copy megabytes to use kilobytes.
_GAP = 16 << 10
_SPAN = 4 << 20
_ZERO_HEADER = bytes(HEADER_SIZE)
_GATHER_MAX = 0.002  # the longest a sync leader waits for announced commits (seconds)
_unpack_header = HEADER.unpack_from
_NOT_COMMIT = ~FLAG_COMMIT
_COMPRESSED = FLAG_ZSTD | FLAG_DICT
_DICT_FLAGS = (FLAG_ZSTD | FLAG_DICT, FLAG_ZSTD | FLAG_DICT | FLAG_COMMIT)
_PREALLOC_MIN = 64 << 10
_PREALLOC_MAX = 4 << 20


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


def encode_segment_header(kind: int, base: int) -> bytes:
    head = SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, kind, 0, base, 0)
    crc = zlib.crc32(head[:24])
    return SEGMENT_HEADER.pack(SEGMENT_MAGIC, SEGMENT_VERSION, kind, 0, base, crc)


def check_segment_header(data: bytes, path: str, kind: int, base: int) -> None:
    magic, version, got_kind, _, got_base, crc = SEGMENT_HEADER.unpack_from(data)
    if magic != SEGMENT_MAGIC:
        raise CorruptionError("not a journal segment (bad magic)", path=path, offset=0)
    if zlib.crc32(data[:24]) != crc:
        raise CorruptionError("segment header checksum mismatch", path=path, offset=0)
    if version != SEGMENT_VERSION:
        raise FormatVersionError(f"segment format version {version} is not supported: {path}")
    if got_kind != kind or got_base != base:
        raise CorruptionError(
            f"segment header says kind {got_kind} base {got_base},"
            f" expected kind {kind} base {base}",
            path=path,
            offset=0,
        )


@dataclass
class Segment:
    base: int
    path: str


@dataclass
class ScanState:
    """Where a scan stopped and why (filled in by `Log.committed`)."""

    end: int = 0  # position just after the last complete commit
    tail: str = "clean"  # clean | torn | corrupt | uncommitted
    tail_pos: int = 0  # where the unusable bytes start
    detail: str = ""
    path: str = ""
    file_offset: int = 0
    dropped: int = 0  # bytes after `end` in the newest segment (torn/uncommitted tails)
    stop_pos: int = 0  # where the first unreadable record starts (newest segment)
    stop_offset: int = 0  # ... as an offset in `path`
    at_eof: bool = True  # the scan stopped at the end of the newest segment's file


@dataclass
class _Writer:
    fd: int
    seg: Segment
    data_end: int  # log position after the last written byte
    alloc_end: int  # log position where the file ends (zeros beyond data_end)
    synced_end: int = 0
    syncing: bool = False
    poisoned: str = ""
    # `with lock` where nothing waits (Condition.__enter__ is a Python-level call),
    # and `notify_all` only when someone waits (`waiters`, counted under the lock):
    # a lone writer's commit then pays neither.
    lock: threading.RLock = field(default_factory=threading.RLock)
    cond: threading.Condition = field(init=False)
    waiters: int = 0

    def __post_init__(self) -> None:
        self.cond = threading.Condition(self.lock)

    def wait(self, timeout: float | None = None) -> None:
        """`cond.wait`, counted (call it holding `lock`)."""
        self.waiters += 1
        try:
            self.cond.wait(timeout)
        finally:
            self.waiters -= 1

    def wake(self) -> None:
        """`cond.notify_all` if anyone waits (call it holding `lock`)."""
        if self.waiters:
            self.cond.notify_all()


class Log:
    def __init__(
        self,
        directory: str,
        kind: int,
        *,
        segment_bytes: int,
        label: str,
        cache: ReadCache | None = None,
        fresh: bool = False,
    ):
        """`fresh`: a log just laid out (`create`) and not listed: one empty segment."""
        self.dir = directory
        self.kind = kind
        self.segment_bytes = segment_bytes
        # Session logs end every sealed segment with a SEAL record (FORMAT.md
        # section 3), so that a missing newest segment is seen. The catalog is
        # derived from the sessions and rebuilt when damaged: it needs none.
        self.seals = kind == KIND_SESSION
        self._checked_unsealed = ("", -1)  # (segment, end) found not to end with a SEAL
        self.label = label
        self.segments: list[Segment] = []
        self._fds: dict[str, int] = {}
        # Files opened by path so far, and when each cached one was: a read that
        # opened one after its session's checks may have opened another
        # incarnation's file (`Store._read`, `forget_opened_since`).
        self.opened = 0
        self._opened_at: dict[str, int] = {}
        self._retired: list[int] = []  # replaced descriptors, closed with the log
        self._fd_lock = threading.Lock()
        self._writer: _Writer | None = None
        # Group commit: committers between "about to commit" and "written" (see
        # `announce`), and how long the last fdatasync took (how long a leader may
        # wait for them).
        self._arriving = 0
        self._arrive_lock = threading.Lock()
        self._last_sync = 0.0
        # Every byte before this log position is known to be on stable storage: synced
        # by this object's writer, or by a caller that synced the files and said so
        # (`note_durable`). Only ever an under-estimate: 0 whenever in doubt.
        self.durable_to = 0
        # Verified records of pages read again (see journal/cache.py), keyed in a
        # space of this log's own that `forget_cached` replaces.
        self._cache = cache
        self._space = cache.new_space() if cache is not None else 0
        # False for a log built in private (a new session in tmp/): it gets no
        # zeros ahead of its data, and closing it does not sync: whoever publishes
        # it syncs everything at once (`Session.start_seal`).
        self.preallocate = True
        self.sync_on_close = True
        # The session's zstd dictionary (FORMAT.md section 3), once a scan read its
        # DICT record or the snapshot named it (`load_dictionary`).
        self.dictionary: SessionDictionary | None = None
        self._dictionary_lock = threading.Lock()
        if fresh:
            self.segments = [Segment(0, os.path.join(directory, segment_name(0)))]
        else:
            self.list_segments()

    @property
    def cache_space(self) -> int:
        """The key space of this log's cached records now (0: no cache); it changes
        whenever `forget_cached` runs, so keys built on it expire with the records."""
        return self._space

    def forget_cached(self) -> None:
        """Stop serving cached records: this log is no longer what they were read from."""
        self.durable_to = 0  # nor what was synced, perhaps
        if self._cache is not None:
            self._space = self._cache.new_space()

    def load_dictionary(self, pos: int) -> None:
        """Adopt the DICT record at `pos` (a snapshot's `dict_pos`); `CorruptionError`
        when there is none there."""
        rec = self.read_record_at(pos)  # DICT records are never compressed
        _, seg = self._segment_for(pos)
        where = SEGMENT_HEADER_SIZE + pos - seg.base
        if rec.rtype != DICT or rec.flags != FLAG_COMMIT:
            raise CorruptionError(
                f"{self.label}: no dictionary record at position {pos}",
                path=seg.path,
                offset=where,
            )
        self._adopt_dictionary(rec.payload, pos, seg.path, where)

    def use_dictionary(self, d: SessionDictionary) -> None:
        """The writer just wrote `d`'s DICT record (at `d.pos`)."""
        self.dictionary = d

    def _adopt_dictionary(self, payload: bytes, pos: int, path: str, offset: int) -> None:
        """A scan (or `load_dictionary`) read the DICT record at `pos`: records after it
        may use it. Under a lock: reader threads scan the same log."""
        with self._dictionary_lock:
            d = self.dictionary
            if d is not None:
                if d.pos == pos:
                    return
                raise CorruptionError(
                    f"{self.label}: a second dictionary record (the first is at position"
                    f" {d.pos})",
                    path=path,
                    offset=offset,
                )
            self.dictionary = from_record(payload, pos, path=path, offset=offset)

    def _dictionary_for(self, pos: int, path: str, offset: int) -> SessionDictionary:
        """The dictionary a record at `pos` was compressed with."""
        d = self.dictionary
        if d is None or d.pos >= pos:
            raise CorruptionError(
                f"{self.label}: record at position {pos} is compressed with the session's"
                " dictionary, but no dictionary record precedes it",
                path=path,
                offset=offset,
            )
        return d

    def _open(self, pos: int, flags: int, stored: bytes, path: str, offset: int) -> bytes:
        """`open_payload` of the record at `pos`, with the dictionary when it needs one."""
        d = self._dictionary_for(pos, path, offset) if flags & FLAG_DICT else None
        return open_payload(flags, stored, path=path, offset=offset, dictionary=d)

    def forget_opened_since(self, opened: int) -> None:
        """Stop using the files opened after `self.opened` was `opened` (and the
        records read meanwhile): they may belong to another incarnation."""
        with self._fd_lock:
            for path, at in list(self._opened_at.items()):
                if at >= opened:
                    del self._opened_at[path]
                    fd = self._fds.pop(path, None)
                    if fd is not None:
                        self._retired.append(fd)  # another thread may still read through it
            self.forget_cached()

    # ----------------------------------------------------------------- layout
    @staticmethod
    def create(directory: str, kind: int, *, durable: bool = True) -> None:
        """Create a log directory with an empty first segment, durably (not the parent).

        `durable=False` is for a directory still being built in private (see
        `Session.build`): whoever publishes it syncs it first.
        """
        try:
            os.mkdir(directory)  # never its parents: they exist unless the root was replaced
        except FileExistsError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot create {directory}: {exc.strerror}") from exc
        path = os.path.join(directory, segment_name(0))
        _create_segment_file(path, kind, 0, durable=durable)
        if durable:
            fsio.sync_dir(directory)

    def list_segments(self) -> list[Segment]:
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.endswith(SEGMENT_SUFFIX))
        except FileNotFoundError as exc:
            raise CorruptionError(
                f"log directory of {self.label} is missing", path=self.dir
            ) from exc
        except OSError as exc:
            raise StorageError(f"cannot list {self.dir}: {exc.strerror}") from exc
        segs: list[Segment] = []
        for name in names:
            stem = name[: -len(SEGMENT_SUFFIX)]
            if len(stem) != 20 or not stem.isdigit():
                continue
            segs.append(Segment(int(stem), os.path.join(self.dir, name)))
        if not segs:
            raise CorruptionError(f"log of {self.label} has no segment", path=self.dir)
        if segs[0].base != 0:
            raise CorruptionError(
                f"log of {self.label} starts at position {segs[0].base}:"
                " earlier segments are missing",
                path=segs[0].path,
            )
        self.segments = segs
        return segs

    def _fd(self, path: str, *, fresh: bool = False) -> int:
        """A cached read-only descriptor of a segment.

        With `fresh` (scans), first make sure it is still the file at `path`: a
        segment left empty by a roll that crashed is unlinked by recovery, and the
        next roll creates a new file under the same name. A descriptor of the old
        file made scans here see an empty newest segment again and "recover" it
        by unlinking the new one, with its committed records (found by
        tests/test_crash.py::test_crashed_roll_seen_by_another_store).
        """
        with self._fd_lock:
            fd = self._fds.get(path)
            if fd is not None and fresh:
                try:
                    same = os.path.samestat(os.fstat(fd), os.stat(path))
                except FileNotFoundError:
                    same = False
                except OSError as exc:
                    raise StorageError(f"cannot stat {path}: {exc.strerror}") from exc
                if not same:
                    self.forget_cached()  # records read from the old file are not these
                    del self._fds[path]
                    self._retired.append(fd)  # another thread may still read through it
                    fd = None
            if fd is None:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError as exc:
                    raise CorruptionError(f"segment of {self.label} is missing", path=path) from exc
                except OSError as exc:
                    raise StorageError(f"cannot open {path}: {exc.strerror}") from exc
                self._fds[path] = fd
                self._opened_at[path] = self.opened
                self.opened += 1
            return fd

    def _segment_for(self, pos: int) -> tuple[int, Segment]:
        segs = self.segments
        lo, hi = 0, len(segs) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if segs[mid].base <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo, segs[lo]

    # ---------------------------------------------------------------- reading
    def pread(self, pos: int, size: int) -> bytes:
        """Bytes [pos, pos+size) of one segment (records never span segments)."""
        _, seg = self._segment_for(pos)
        fd = self._fd(seg.path)
        off = SEGMENT_HEADER_SIZE + pos - seg.base
        try:
            data = os.pread(fd, size, off)
        except OSError as exc:
            raise StorageError(f"read failed on {seg.path} at {off}: {exc.strerror}") from exc
        if len(data) != size:
            raise CorruptionError(
                f"{self.label}: record at position {pos} runs past the end of its segment",
                path=seg.path,
                offset=off,
            )
        return data

    def read_record(self, pos: int, size: int) -> Record:
        """Read and check the record at `pos` whose framed size is `size`."""
        return self._record_in(self.pread(pos, size), 0, pos, size)

    def _record_in(self, data: bytes, off: int, pos: int, size: int) -> Record:
        """The record of framed `size` at log position `pos`, found at `data[off:]`."""
        frame = frame_at(data, off, size)
        if frame is None:
            _, seg = self._segment_for(pos)
            raise CorruptionError(
                f"{self.label}: bad record at position {pos}",
                path=seg.path,
                offset=SEGMENT_HEADER_SIZE + pos - seg.base,
            )
        rtype, flags, crc = frame
        stored = data[off + HEADER_SIZE : off + size]
        if flags & _COMPRESSED:
            _, seg = self._segment_for(pos)
            stored = self._open(pos, flags, stored, seg.path, SEGMENT_HEADER_SIZE + pos - seg.base)
        return Record(pos, size, rtype, flags, stored, crc)

    def closes_commit(self, pos: int, size: int, crc: int) -> bool:
        """Is the record at `pos` of framed `size` intact, closing a commit, with checksum
        `crc`? (A cache's anchor check: the frame only, its payload not decompressed.)"""
        try:
            frame = frame_at(self.pread(pos, size), 0, size)
        except CorruptionError:
            return False
        return frame is not None and bool(frame[1] & FLAG_COMMIT) and frame[2] == crc

    def read_record_at(self, pos: int) -> Record:
        """Read the record at `pos` when only its position is known (two reads)."""
        head = self.pread(pos, HEADER_SIZE)
        length = int.from_bytes(head[4:8], "little")
        return self.read_record(pos, HEADER_SIZE + length)

    def read_records(self, spans: list[tuple[int, int]]) -> list[Record]:
        """Read many (pos, size) records: from the cache, else from disk (`_read_spans`)."""
        cache = self._cache
        if cache is None:
            return self._read_spans(spans)
        space = self._space << 48
        get = cache.get
        out: list[Record] = []
        missing: list[int] = []
        for i, (pos, size) in enumerate(spans):
            rec = get(space | pos)
            if rec is None or rec.size != size:
                missing.append(i)
            out.append(rec)
        if missing:
            offer = cache.offer
            for i, rec in zip(missing, self._read_spans([spans[i] for i in missing]), strict=True):
                out[i] = rec
                offer(space | rec.pos, rec, len(rec.payload))
        return out

    def _read_spans(self, spans: list[tuple[int, int]]) -> list[Record]:
        """Read many (pos, size) records, coalescing nearby ones into one read each."""
        order = sorted(range(len(spans)), key=lambda i: spans[i][0])
        out: list[Record | None] = [None] * len(spans)
        k = 0
        while k < len(order):
            first = spans[order[k]][0]
            _, seg = self._segment_for(first)
            seg_limit = self._segment_limit(seg)
            j = k
            last_end = first + spans[order[k]][1]
            while j + 1 < len(order):
                nxt_pos, nxt_size = spans[order[j + 1]]
                if nxt_pos - last_end > _GAP or nxt_pos + nxt_size - first > _SPAN:
                    break
                if nxt_pos + nxt_size > seg_limit:
                    break
                j += 1
                last_end = max(last_end, nxt_pos + nxt_size)
            block = self.pread(first, last_end - first)
            view = memoryview(block)
            # `frame_at` inlined, with locals: pages check tens of records per call
            unpack, crc32, known, hsize = _unpack_header, zlib.crc32, TYPE_NAMES, HEADER_SIZE
            for t in range(k, j + 1):
                i = order[t]
                pos, size = spans[i]
                off = pos - first
                crc, length, rtype, flags = unpack(block, off)
                if (
                    (flags & _NOT_COMMIT and flags not in _DICT_FLAGS)
                    or length + hsize != size
                    or rtype not in known
                    or crc32(view[off + 4 : off + size]) != crc
                ):
                    # plain-compressed, or anything wrong: the careful path
                    out[i] = self._record_in(block, off, pos, size)
                    continue
                payload = block[off + hsize : off + size]
                if flags & FLAG_DICT:  # most compressed records, once a session has one
                    where = SEGMENT_HEADER_SIZE + pos - seg.base
                    payload = self._open(pos, flags, payload, seg.path, where)
                out[i] = Record(pos, size, rtype, flags, payload, crc)
            k = j + 1
        return [r for r in out if r is not None]

    def _segment_limit(self, seg: Segment) -> int:
        i = self.segments.index(seg)
        if i + 1 < len(self.segments):
            return self.segments[i + 1].base
        return 1 << 62

    def committed(self, start: int, state: ScanState, *, strict: bool) -> Iterator[list[Record]]:
        """Yield each complete commit (a list of records) from position `start` on.

        `state` is filled in when the generator is exhausted. With `strict`, the
        whole zero tail of the newest segment is checked (recovery, verify); a
        plain refresh stops at the first zero header. Damage in a sealed segment
        raises `CorruptionError`; damage at the end of the newest segment is
        classified in `state.tail` for the caller to decide.
        """
        state.end = start
        idx, _ = self._segment_for(start)
        pending: list[Record] = []
        pos = start
        retries = 0
        sealed = False  # the last commit read in this segment is its SEAL
        while idx < len(self.segments):
            seg = self.segments[idx]
            newest = idx == len(self.segments) - 1
            try:
                fd = self._fd(seg.path, fresh=True)
            except CorruptionError:
                if not newest or os.path.exists(seg.path):
                    raise
                # recovery elsewhere removed an empty newest segment (a crashed roll)
                self.list_segments()
                continue
            try:
                file_size = _size_of(fd)
            except OSError as exc:
                raise StorageError(f"cannot stat {seg.path}: {exc.strerror}") from exc
            if pos == seg.base:
                head = _pread(fd, SEGMENT_HEADER_SIZE, 0, seg.path)
                if len(head) < SEGMENT_HEADER_SIZE:
                    if newest:
                        state.tail, state.tail_pos, state.path = "torn", pos, seg.path
                        state.detail = "segment header incomplete"
                        return
                    raise CorruptionError(f"{self.label}: segment header truncated", path=seg.path)
                check_segment_header(head, seg.path, self.kind, seg.base)
            seg_end = seg.base + file_size - SEGMENT_HEADER_SIZE
            if pos == start and pos > seg_end and pos > seg.base:
                # This reader had read up to `start`: the file was cut under it (a
                # truncation, or `journal repair` in another process). Appending
                # at the old end would leave a hole; reopen after a repair.
                raise CorruptionError(
                    f"{self.label}: the log ends at position {seg_end}, before position"
                    f" {start}, which was committed and read here: the segment was cut"
                    " (reopen the store after `journal repair`)",
                    path=seg.path,
                    offset=max(file_size, 0),
                )
            if pos == start and pos == seg_end and pos - seg.base >= SEAL_SIZE and self.seals:
                # A scan that starts at the end of a file must know whether the file
                # ends with its SEAL (then its successor must exist).
                sealed = self._ends_with_seal(fd, seg, pos)
            buf = b""
            buf_pos = pos
            while True:
                off = pos - buf_pos
                res = parse_at(buf, off)
                outcome, rtype, flags, pstart, pend = res
                if outcome == OK:
                    payload = buf[pstart:pend]
                    if flags & _COMPRESSED:
                        payload = self._open(
                            pos, flags, payload, seg.path, SEGMENT_HEADER_SIZE + pos - seg.base
                        )
                    elif rtype == DICT and flags == FLAG_COMMIT:  # else: `_apply` rejects it
                        self._adopt_dictionary(
                            payload, pos, seg.path, SEGMENT_HEADER_SIZE + pos - seg.base
                        )
                    rec = Record(pos, pend - off, rtype, flags, payload, _crc_at(buf, off))
                    if sealed or (rtype == SEAL and (pending or flags != FLAG_COMMIT)):
                        raise CorruptionError(
                            f"{self.label}: a seal record must end its segment alone"
                            f" (record at position {pos})",
                            path=seg.path,
                            offset=SEGMENT_HEADER_SIZE + pos - seg.base,
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
                    chunk = _pread(
                        fd,
                        min(want, seg_end - have_end),
                        SEGMENT_HEADER_SIZE + have_end - seg.base,
                        seg.path,
                    )
                    if chunk:
                        buf = buf[off:] + chunk
                        buf_pos = pos
                        continue
                break
            off = pos - buf_pos
            at_eof = pos == seg_end
            seen_at_pos = bytes(buf[off : off + 4096])
            if not newest:
                nxt = self.segments[idx + 1]
                if (
                    self.seals
                    and not sealed
                    and idx + 2 == len(self.segments)
                    and nxt.base == state.end + SEAL_SIZE
                    and seg_end - state.end <= SEAL_SIZE
                    and _just_created(nxt)
                ):
                    # A roll interrupted between creating the next segment and
                    # writing the SEAL (perhaps torn) that names it: nothing was
                    # committed after `state.end` (`_roll`).
                    state.tail, state.path = "unsealed", seg.path
                    state.tail_pos = state.stop_pos = state.end
                    state.file_offset = SEGMENT_HEADER_SIZE + state.end - seg.base
                    state.stop_offset = state.file_offset
                    state.detail = f"the roll to {os.path.basename(nxt.path)} did not finish"
                    return
                if (
                    self.seals
                    and not sealed
                    and nxt.base == state.end + SEAL_SIZE
                    and retries < 5
                ):
                    # The file's size was read before the writer appended the SEAL
                    # that its next segment (holding data now) proves was written:
                    # read this segment again.
                    retries += 1
                    continue
                if outcome == END and at_eof and not pending:
                    idx += 1
                    sealed = False
                    if nxt.base != pos:
                        # Positions are dense across segments: a gap means segments
                        # are missing (without this check the scan read the next
                        # segment at a negative offset and failed with EINVAL).
                        raise CorruptionError(
                            f"{self.label}: log positions {pos}..{nxt.base} are missing"
                            " (a segment file is missing)",
                            path=nxt.path,
                            offset=0,
                        )
                    continue
                raise CorruptionError(
                    f"{self.label}: damaged or missing data in a sealed segment at position {pos}",
                    path=seg.path,
                    offset=SEGMENT_HEADER_SIZE + pos - seg.base,
                )
            # newest segment: classify the tail
            state.path = seg.path
            state.tail_pos = state.end
            state.file_offset = SEGMENT_HEADER_SIZE + state.end - seg.base
            state.stop_pos = pos
            state.stop_offset = SEGMENT_HEADER_SIZE + pos - seg.base
            state.at_eof = at_eof
            if outcome == END and at_eof and not pending:
                if self._newer_segment_appeared():
                    continue  # this segment again, as a sealed one: its end is checked
                if sealed:
                    raise CorruptionError(
                        f"{self.label}: segment {segment_name(pos)} is missing:"
                        f" {os.path.basename(seg.path)} is sealed, and its seal names a next"
                        f" segment starting at log position {pos}; everything committed"
                        " from there on is lost",
                        path=seg.path,
                        offset=SEGMENT_HEADER_SIZE + pos - SEAL_SIZE - seg.base,
                    )
                state.tail = "clean"
                return
            # A reader (verify) racing a live writer may have read bytes the writer
            # was still filling: if the bytes at `pos` changed since, look again.
            if (
                strict
                and not (outcome == END and at_eof)
                and seen_at_pos
                and retries < 5
                and self._written_since(fd, seg, pos, seen_at_pos)
            ):
                retries += 1
                continue
            if outcome == END:
                if not strict:
                    state.tail = "uncommitted" if pending else "clean"
                    return
                if self._all_zero(fd, seg, pos, seg_end):
                    state.tail = "torn" if pending else "clean"
                    state.detail = "records without a commit at the end" if pending else ""
                    state.dropped = pos - state.end
                    return
                if retries < 5 and self._written_since(fd, seg, pos, seen_at_pos):
                    # The data after the zeros is a live writer's: it wrote at `pos`
                    # after the check above and before the look further on.
                    retries += 1
                    continue
                state.tail = "corrupt"
                state.detail = f"zeroed bytes at position {pos} followed by data"
                state.file_offset = state.stop_offset  # where the zeros start
                return
            if outcome == SHORT:
                if self._record_after(fd, seg, pos, seg_end):
                    # A length field claiming more than the file holds, with intact
                    # records behind it, is damage, not a write cut off by a crash
                    # (a torn write leaves nothing valid after it). Cutting here
                    # would silently drop those committed records.
                    state.tail = "corrupt"
                    state.detail = f"record at position {pos} has a damaged length"
                    state.tail_pos = pos
                    state.file_offset = state.stop_offset
                    return
                state.tail = "torn"
                state.detail = f"record at position {pos} is cut off by the end of the file"
                state.dropped = seg_end - state.end
                return
            # BAD: a complete frame that fails its checks
            frame_end = pos + (pend - off)
            if not strict:
                state.tail = "uncommitted"
                return
            if self._all_zero(fd, seg, frame_end, seg_end) and not self._record_after(
                fd, seg, pos, frame_end
            ):
                # (a damaged length can make one frame swallow the records after it)
                state.tail = "torn"
                state.detail = (
                    f"final record at position {pos} fails its checksum and nothing follows it"
                )
                state.dropped = frame_end - state.end
                return
            state.tail = "corrupt"
            state.detail = (
                f"record at position {pos} fails its checksum ({TYPE_NAMES.get(rtype, rtype)})"
            )
            state.tail_pos = pos
            state.file_offset = SEGMENT_HEADER_SIZE + pos - seg.base
            return
        return

    def _ends_with_seal(self, fd: int, seg: Segment, end: int) -> bool:
        if self._checked_unsealed == (seg.path, end):
            return False
        sealed = _pread(fd, SEAL_SIZE, SEGMENT_HEADER_SIZE + end - SEAL_SIZE - seg.base, seg.path)
        if sealed == SEAL_RECORD:
            return True
        self._checked_unsealed = (seg.path, end)
        return False

    def _newer_segment_appeared(self) -> bool:
        before = len(self.segments)
        self.list_segments()
        return len(self.segments) > before

    def zeros_after(self, pos: int, size: int) -> bool:
        """Are the `size` bytes from position `pos` of the newest segment zero (or absent)?"""
        seg = self.segments[-1]
        off = SEGMENT_HEADER_SIZE + pos - seg.base
        return not _pread(self._fd(seg.path), size, off, seg.path).strip(b"\0")

    def _record_after(self, fd: int, seg: Segment, start: int, end: int) -> bool:
        """Does a valid record start anywhere in (start, end)? (recovery only)"""
        off = SEGMENT_HEADER_SIZE + start + 1 - seg.base
        stop = SEGMENT_HEADER_SIZE + end - seg.base
        data = _pread(fd, max(0, stop - off), off, seg.path)
        if not data.strip(b"\0"):
            return False
        return next_frame(data, 0) is not None

    def _written_since(self, fd: int, seg: Segment, pos: int, seen: bytes) -> bool:
        """Do the bytes at `pos` differ from what a scan saw there a moment ago?"""
        now = _pread(fd, len(seen), SEGMENT_HEADER_SIZE + pos - seg.base, seg.path)
        return now != seen

    def _all_zero(self, fd: int, seg: Segment, start: int, end: int) -> bool:
        off = SEGMENT_HEADER_SIZE + start - seg.base
        stop = SEGMENT_HEADER_SIZE + end - seg.base
        while off < stop:
            chunk = _pread(fd, min(_READ_CHUNK, stop - off), off, seg.path)
            if not chunk:
                break
            if chunk.count(0) != len(chunk):
                return False
            off += len(chunk)
        return True

    # ---------------------------------------------------------------- writing
    def untouched_since(self, end: int) -> bool:
        """Whether our open writer is at `end` and nobody appended after it (one pread).

        Another process can only append after `end` by writing a record there, or by
        sealing this segment (truncating it to `end`) and starting a new one; either
        way the bytes at `end` are no longer the preallocated zeros.
        """
        w = self._writer
        # Compared by path: a re-listing of the directory makes new Segment objects
        # for the same files (comparing identity sent every later write down the
        # slow path once any scan had re-listed the segments).
        if w is None or w.poisoned or w.data_end != end or w.seg.path != self.segments[-1].path:
            return False
        off = SEGMENT_HEADER_SIZE + end - w.seg.base
        try:
            probe = os.pread(w.fd, HEADER_SIZE, off)
            # ... and the descriptor is still the file at that path (an unlinked file
            # keeps reading zeros; writing to it would lose the commit)
            return probe == _ZERO_HEADER and os.fstat(w.fd).st_nlink > 0
        except OSError:
            return False

    def writer_at(self, end: int) -> bool:
        """Whether our open writer is at `end` (no syscall): for a writer that knows
        nobody else held the lock since it wrote there, so the bytes at `end` need
        no probe (`untouched_since` reads them).

        No `fstat` of the segment here or on any other path taken per commit or
        per read: on Linux 6.13 and later (multigrain timestamps) a stat of a file
        makes its next write take a fine-grained timestamp and dirty the inode,
        and the fdatasync after that write took about 50 us longer (measured:
        130 -> 175 us on this machine's disk). The callers check the lock file's
        links instead (`FileLock.still_linked`).
        """
        w = self._writer
        return not (
            w is None or w.poisoned or w.data_end != end or w.seg.path != self.segments[-1].path
        )

    def writer_is_current(self) -> bool:
        """Is our writer's file still the file at its path? (one stat, one fstat)

        `untouched_since` cannot tell a file renamed away with its directory (a
        damaged catalog set aside by another process) from the live one: both
        still have links and zeros at our end.
        """
        w = self._writer
        if w is None:
            return False
        try:
            return os.path.samestat(os.fstat(w.fd), os.stat(w.seg.path))
        except OSError:
            return False

    def has_writer(self) -> bool:
        return self._writer is not None

    def preallocate_ahead(self) -> None:
        """(write lock held) Give the writer's segment its first preallocation step
        now, durably, if it has none: zeros after the data, fdatasynced, so that the
        next commits overwrite allocated space (see the module doc) and none of them
        pays for the step and the new file size in its own sync. For a session just
        created without a spare (`Store._warm`, in the background)."""
        w = self._writer
        if w is None or w.poisoned or not self.preallocate or w.alloc_end > w.data_end:
            return
        if w.data_end - w.seg.base >= self.segment_bytes:
            return  # the next write rolls
        zeros = bytes(_PREALLOC_MIN)
        fsio.pwrite(w.fd, zeros, SEGMENT_HEADER_SIZE + w.alloc_end - w.seg.base, w.seg.path)
        w.alloc_end += _PREALLOC_MIN
        fsio.sync_data(w.fd, w.seg.path)

    def trim_preallocation(self, end: int) -> None:
        """Cut the preallocated zeros after `end`, where our writer's data ends.

        For a clean close (the caller holds the writer locks and has checked
        `untouched_since(end)`): a closed session takes only the space of its data,
        so many small sessions stay small on disk. The next writer preallocates
        again. No sync: if the cut is lost, the zeros are simply still there.
        """
        w = self._writer
        if w is None or w.poisoned or w.data_end != end or w.alloc_end <= end:
            return
        fsio.truncate(w.fd, SEGMENT_HEADER_SIZE + end - w.seg.base, w.seg.path)
        w.alloc_end = end

    def quiet_since(self, end: int) -> bool:
        """Whether nothing was appended at `end` since a scan stopped there (one pread;
        and one stat of a name that does not exist when the file ends there).

        For readers' refresh: a scan that ended cleanly at `end` in the newest
        segment sees the same log while the bytes at `end` are still zeros in that
        same file, or the file ends exactly at `end` (trimmed at a clean close)
        and no next segment was started. Any append writes a record header there;
        a roll seals the segment at `end` and creates the segment named by `end`.

        The file cannot have lost its name meanwhile: recovery unlinks only a
        newest segment whose header is incomplete (a crashed roll), which a clean
        scan never ends in, and a deleted session is found by the store's check
        of the identity file before the read. So no `fstat` (see `writer_at`:
        a reader polling a session would slow every commit of its writer).
        """
        if not self.segments:
            return False
        seg = self.segments[-1]
        if end < seg.base:
            return False
        try:
            fd = self._fd(seg.path)
            probe = os.pread(fd, HEADER_SIZE, SEGMENT_HEADER_SIZE + end - seg.base)
            if probe == b"":
                # The file ends exactly here (trimmed by a clean close, or sealed by a
                # roll): quiet unless a roll started the next segment, which is named
                # by this very position.
                return not os.path.exists(os.path.join(self.dir, segment_name(end)))
            return probe == _ZERO_HEADER
        except (OSError, JournalError):
            return False

    def open_writer(self, end: int) -> None:
        """Prepare to append at `end` (the end of the last commit, after recovery)."""
        seg = self.segments[-1]
        w = self._writer
        if w is not None and w.seg.path == seg.path:
            try:
                st = os.fstat(w.fd)
                # still the file at that path (not one unlinked by recovery elsewhere)
                same = st.st_nlink > 0 and os.path.samestat(st, os.stat(seg.path))
            except OSError as exc:
                raise StorageError(f"cannot stat {seg.path}: {exc.strerror}") from exc
            if same:
                with w.lock:
                    w.seg = seg
                    w.data_end = end
                    w.synced_end = min(w.synced_end, end)
                    # Another process may have appended (and preallocated) since our
                    # last commit, or cut a torn tail. A stale `alloc_end` below `end`
                    # made `write` "preallocate" zeros from it, over that process's
                    # committed records (found by tests/test_concurrency.py): take the
                    # file's size.
                    w.alloc_end = seg.base + max(st.st_size - SEGMENT_HEADER_SIZE, 0)
                return
        self.close_writer()
        try:
            fd = os.open(seg.path, os.O_RDWR)
            size = _size_of(fd)
        except OSError as exc:
            raise StorageError(f"cannot open {seg.path} for writing: {exc.strerror}") from exc
        alloc_end = seg.base + max(size - SEGMENT_HEADER_SIZE, 0)
        self._writer = _Writer(fd=fd, seg=seg, data_end=end, alloc_end=alloc_end, synced_end=end)

    @property
    def writer_end(self) -> int:
        """Where the next `write` starts: a full segment is sealed and the next one
        begun first, since the SEAL record moves that position on."""
        w = self._writer
        assert w is not None
        if w.data_end - w.seg.base >= self.segment_bytes and not w.poisoned:
            self._roll()
            w = self._writer
            assert w is not None
        return w.data_end

    def truncate_tail(self, end: int) -> None:
        """Cut the newest segment back to `end` durably (recovery of a torn tail)."""
        self.forget_cached()  # positions past `end` will hold other records
        if self.dictionary is not None and self.dictionary.pos >= end:
            self.dictionary = None  # `repair` cut it off
        seg = self.segments[-1]
        if end < seg.base:
            raise CorruptionError(
                f"{self.label}: cannot truncate into a sealed segment", path=seg.path
            )
        self.close_writer()
        fd = _open_segment(seg.path)
        try:
            fsio.truncate(fd, SEGMENT_HEADER_SIZE + end - seg.base, seg.path)
            fsio.sync_file(fd, seg.path)
        finally:
            os.close(fd)

    def sync_segments(self) -> None:
        """(under the session lock) Sync every segment and the log directory, and note
        the log durable to its end: for a copied log, whose files nobody synced here."""
        for seg in self.list_segments():
            fsio.sync_path(seg.path, data_only=True)
        fsio.sync_dir(self.dir)
        w = self._writer
        if w is not None:
            with w.lock:
                w.synced_end = max(w.synced_end, w.data_end)
                self.note_durable(w.data_end)

    def finish_seal(self, end: int) -> None:
        """Complete a roll a crash interrupted (tail "unsealed"): the segment whose
        data ends at `end` gets its SEAL record, durably (under the session lock)."""
        self.forget_cached()
        self.close_writer()
        i, seg = self._segment_for(end - 1 if end > 0 else 0)
        if i + 2 != len(self.segments) or self.segments[i + 1].base != end + SEAL_SIZE:
            raise CorruptionError(
                f"{self.label}: no interrupted roll at position {end}", path=seg.path
            )
        nxt = self.segments[i + 1]
        if not os.path.exists(nxt.path) or os.path.getsize(nxt.path) < SEGMENT_HEADER_SIZE:
            # the crash came while its header was written: write it again first
            _create_segment_file(nxt.path, self.kind, nxt.base, replace=True)
            fsio.sync_dir(self.dir)
        fd = _open_segment(seg.path)
        try:
            fsio.truncate(fd, SEGMENT_HEADER_SIZE + end - seg.base, seg.path)
            _write_seal(fd, seg, end)
        finally:
            os.close(fd)

    def remove_empty_newest(self) -> None:
        """Drop a newest segment whose header never got written (crash during a roll)."""
        seg = self.segments[-1]
        if len(self.segments) > 1:
            fsio.unlink(seg.path)
            fsio.sync_dir(self.dir)
            self.list_segments()
        else:
            _create_segment_file(seg.path, self.kind, 0, replace=True)

    def write(self, data: bytes) -> int:
        """Append `data` (whole commits) at the writer's end; return the new end.

        Not durable until `wait_durable(end)`. On failure the bytes are zeroed
        again so no partial commit is left behind.
        """
        w = self._writer
        assert w is not None, "open_writer first"
        if w.poisoned:
            raise StorageError(
                f"{self.label}: log is unusable after an earlier failure: {w.poisoned}"
            )
        if w.data_end - w.seg.base >= self.segment_bytes:
            self._roll()
            w = self._writer
            assert w is not None
        start = w.data_end
        end = start + len(data)
        if end > w.alloc_end and not self.preallocate:
            w.alloc_end = end  # the write below extends the file
        elif end > w.alloc_end:
            grow = min(max(w.alloc_end - w.seg.base, _PREALLOC_MIN), _PREALLOC_MAX)
            new_alloc = max(end, start + grow)
            zeros = bytes(new_alloc - w.alloc_end)
            fsio.pwrite(w.fd, zeros, SEGMENT_HEADER_SIZE + w.alloc_end - w.seg.base, w.seg.path)
            w.alloc_end = new_alloc
        off = SEGMENT_HEADER_SIZE + start - w.seg.base
        try:
            fsio.pwrite(w.fd, data, off, w.seg.path)
        except StorageError:
            try:
                fsio.pwrite(w.fd, bytes(len(data)), off, w.seg.path)
            except StorageError as again:
                w.poisoned = str(again)
            raise
        # No lock: a syncing thread that reads the old end syncs less and another
        # round covers the rest; the new end is only set once the bytes are written.
        w.data_end = end
        return end

    @property
    def last_sync(self) -> float:
        """How long the last fdatasync of this log took (seconds; 0 before the first)."""
        return self._last_sync

    def announce(self) -> None:
        """A durable commit is on its way (before it waits for the session's write lock)."""
        with self._arrive_lock:
            self._arriving += 1

    def arrived(self) -> None:
        """That commit is written (or failed): a gathering sync leader need not wait for it."""
        with self._arrive_lock:
            self._arriving -= 1
        w = self._writer
        # Only a sync leader waits for arrivals, and it marks `syncing` before it
        # looks at `_arriving`: a leader that saw this commit still arriving is
        # syncing now, so it is not missed.
        if w is not None and w.syncing:
            with w.lock:
                w.wake()

    def wait_durable(self, end: int) -> None:
        """Return once every byte before `end` is on stable storage (group commit).

        One thread at a time syncs (the leader); the others wait and usually find
        their bytes covered. Before syncing, the leader waits for commits already
        announced by other threads (`announce`) to be written, for at most as long
        as the last fdatasync took (2 ms at most): one sync then covers them all,
        instead of the next sync starting the moment this one ends with only one
        of them ready. A lone writer never waits.
        """
        w = self._writer
        if w is None:
            return  # closed meanwhile (recovery or close): close_writer synced its bytes
        with w.lock:
            while w.synced_end < end:
                if w.poisoned:
                    raise StorageError(f"{self.label}: fdatasync failed earlier: {w.poisoned}")
                if w.syncing:
                    w.wait()
                    continue
                w.syncing = True
                if self._arriving:
                    deadline = time.monotonic() + min(self._last_sync, _GATHER_MAX)
                    while self._arriving:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        w.wait(left)
                target = w.data_end
                w.lock.release()
                started = time.monotonic()
                try:
                    fsio.sync_data(w.fd, w.seg.path)
                except StorageError as exc:
                    w.lock.acquire()
                    w.poisoned = str(exc)
                    w.syncing = False
                    w.wake()
                    raise
                self._last_sync = time.monotonic() - started
                w.lock.acquire()
                w.syncing = False
                w.synced_end = max(w.synced_end, target)
                self.note_durable(target)
                w.wake()

    def note_durable(self, end: int) -> None:
        """Every byte of this log before `end` has been synced (see `durable_to`)."""
        if end > self.durable_to:
            self.durable_to = end

    def _roll(self) -> None:
        w = self._writer
        assert w is not None
        with w.lock:
            while w.syncing:
                w.wait()
            size = SEGMENT_HEADER_SIZE + w.data_end - w.seg.base
            fsio.truncate(w.fd, size, w.seg.path)
            fsio.sync_file(w.fd, w.seg.path)
            w.synced_end = w.data_end
            self.note_durable(w.data_end)
        # The next segment is made durable before the SEAL that names it: a SEAL
        # then always means that its successor existed, so a log ending with one
        # has lost a segment. A crash between the two leaves an unsealed segment
        # followed by an empty one, which `committed` reports as "unsealed" and
        # `finish_seal` completes.
        seal_at = w.data_end
        base = seal_at + SEAL_SIZE if self.seals else seal_at
        path = os.path.join(self.dir, segment_name(base))
        # From here on the old writer is done: a failure below must leave no writer
        # (the next commit then recovers), not one whose descriptor is closed, whose
        # number the process may reuse for another file (found by review).
        self._writer = None
        try:
            _create_segment_file(path, self.kind, base)
            fsio.sync_dir(self.dir)
            if self.seals:
                _write_seal(w.fd, w.seg, seal_at)
                self.note_durable(base)
        finally:
            os.close(w.fd)
        self.list_segments()
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise StorageError(f"cannot open {path} for writing: {exc.strerror}") from exc
        self._writer = _Writer(
            fd=fd, seg=self.segments[-1], data_end=base, alloc_end=base, synced_end=base
        )

    def close_writer(self) -> None:
        w = self._writer
        if w is None:
            return
        with w.lock:
            while w.syncing:
                w.wait()
            try:
                # Group commit syncs after the lock is released, so threads may still be
                # about to wait for commits written before now. Sync them here: they then
                # find their bytes durable, instead of syncing a closed descriptor (or
                # asserting on a missing writer) when recovery closes the writer.
                if w.synced_end < w.data_end and not w.poisoned and self.sync_on_close:
                    fsio.sync_data(w.fd, w.seg.path)
                    w.synced_end = w.data_end
                    self.note_durable(w.data_end)
            except StorageError as exc:
                w.poisoned = str(exc)
                raise
            finally:
                # Only now: a thread that finds no writer in `wait_durable` returns at
                # once, so its bytes must already be synced (found by review).
                self._writer = None
                w.wake()
                os.close(w.fd)

    def close(self) -> None:
        """Close every descriptor, even when the writer's last sync fails (then raise it)."""
        try:
            self.close_writer()
        finally:
            with self._fd_lock:
                for fd in [*self._fds.values(), *self._retired]:
                    os.close(fd)
                self._fds.clear()
                self._opened_at.clear()
                self._retired.clear()


def _create_segment_file(
    path: str, kind: int, base: int, *, replace: bool = False, durable: bool = True
) -> None:
    flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot create segment {path}: {exc.strerror}") from exc
    try:
        fsio.pwrite(fd, encode_segment_header(kind, base), 0, path)
        if durable:
            fsio.sync_file(fd, path)
    except BaseException:
        # Not left behind half made (a new segment without its header): the next
        # roll creates it again instead of failing on its name (found by review).
        if not replace:
            with contextlib.suppress(StorageError):
                fsio.unlink(path)
        raise
    finally:
        os.close(fd)


def _open_segment(path: str) -> int:
    """A read-write descriptor of a segment file (the caller closes it)."""
    try:
        return os.open(path, os.O_RDWR)
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc.strerror}") from exc


def _write_seal(fd: int, seg: Segment, pos: int) -> None:
    """Append the SEAL record at log position `pos` of `seg` and sync it."""
    fsio.pwrite(fd, SEAL_RECORD, SEGMENT_HEADER_SIZE + pos - seg.base, seg.path)
    fsio.sync_file(fd, seg.path)


def _just_created(seg: Segment) -> bool:
    """Is `seg` a roll's new file: its header (perhaps cut short) and nothing else?"""
    try:
        return os.stat(seg.path).st_size <= SEGMENT_HEADER_SIZE
    except OSError:
        return False


def _size_of(fd: int) -> int:
    """A file's size without a stat: `lseek` reads the size only, while a stat also
    queries the timestamps, which on Linux 6.13+ makes the file's next write dirty its
    inode and that write's fdatasync slower (see `Log.writer_at`)."""
    return os.lseek(fd, 0, os.SEEK_END)


def _pread(fd: int, size: int, offset: int, path: str) -> bytes:
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        raise StorageError(f"read failed on {path} at offset {offset}: {exc.strerror}") from exc


def _crc_at(buf: bytes | memoryview, off: int) -> int:
    return int.from_bytes(bytes(buf[off : off + 4]), "little")

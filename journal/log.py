"""A segmented, checksummed, append-only log in one directory.

A log is a list of segment files (`segment.py`), positions dense across them.
The newest segment is preallocated with zeros in growing steps: overwriting
already-allocated space makes each commit's fdatasync flush only data, not the
file size. Zeroed space parses as "no record" (type 0 is invalid). When a
segment reaches its size limit it is sealed: truncated to its last record,
synced, and never written again. Commits never span segments.

`Log` reads records by position, scans the committed prefix (through its
`scan.Scanner`), and writes. Writers hold the log's lock (see `session.py`);
`write` only hands bytes to the OS and `wait_durable` implements group commit:
concurrent committers share one fdatasync.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Iterator

from . import fsio
from .cache import ReadCache
from .dictionary import SessionDictionary, from_record
from .errors import CorruptionError, JournalError, StorageError
from .record import (
    DICT,
    FLAG_COMMIT,
    FLAG_DICT,
    FLAG_ZSTD,
    FLAGS_OF,
    HEADER,
    HEADER_SIZE,
    Record,
    frame_at,
    open_payload,
)
from .scan import Scanner, ScanState
from .segment import (
    SEAL_SIZE,
    SEGMENT_HEADER_SIZE,
    SEGMENT_SUFFIX,
    Segment,
    create_segment_file,
    file_size,
    open_for_writing,
    read_at,
    segment_name,
    write_seal,
)
from .writer import GroupCommit, SegmentWriter

# The kind in a log's segment headers (FORMAT.md section 3).
KIND_SESSION = 1
KIND_CATALOG = 3

# Records closer than _GAP are read together: copying a 16 KiB gap costs about
# what another pread does, while wider gaps (turn records between 50 KiB saves)
# would make pages copy megabytes to use kilobytes.
_GAP = 16 << 10
_SPAN = 4 << 20
_ZERO_HEADER = bytes(HEADER_SIZE)
_unpack_header = HEADER.unpack_from
_NOT_COMMIT = ~FLAG_COMMIT
_COMPRESSED = FLAG_ZSTD | FLAG_DICT
_DICT_FLAGS = (FLAG_ZSTD | FLAG_DICT, FLAG_ZSTD | FLAG_DICT | FLAG_COMMIT)


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
        self.label = label
        self.segments: list[Segment] = []
        self._fds: dict[str, int] = {}
        # Files opened by path so far, and when each cached one was: a read that
        # opened one after its session's checks may have opened another
        # incarnation's file (`reader.read_session`, `forget_opened_since`).
        self.opened = 0
        self._opened_at: dict[str, int] = {}
        self._retired: list[int] = []  # replaced descriptors, closed with the log
        self._fd_lock = threading.Lock()
        self._writer: SegmentWriter | None = None
        self._group = GroupCommit()  # the commits announced to this log's writer
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
        # it syncs everything at once (`sessiondir.start_seal`).
        self.preallocate = True
        self.sync_on_close = True
        # The session's zstd dictionary (FORMAT.md section 3), once a scan read its
        # DICT record or the snapshot named it (`load_dictionary`).
        self.dictionary: SessionDictionary | None = None
        self._dictionary_lock = threading.Lock()
        self._scanner = Scanner(self)
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
        _, seg = self.segment_for(pos)
        where = SEGMENT_HEADER_SIZE + pos - seg.base
        if rec.rtype != DICT or rec.flags != FLAG_COMMIT:
            raise CorruptionError(
                f"{self.label}: no dictionary record at position {pos}",
                path=seg.path,
                offset=where,
            )
        self.adopt_dictionary(rec.payload, pos, seg.path, where)

    def use_dictionary(self, d: SessionDictionary) -> None:
        """The writer just wrote `d`'s DICT record (at `d.pos`)."""
        self.dictionary = d

    def adopt_dictionary(self, payload: bytes, pos: int, path: str, offset: int) -> None:
        """A scan (or `load_dictionary`) read the DICT record at `pos`: records after it
        may use it. Under a lock: reader threads scan the same log."""
        with self._dictionary_lock:
            d = self.dictionary
            if d is not None:
                if d.pos == pos:
                    return
                raise CorruptionError(
                    f"{self.label}: a second dictionary record (the first is at position {d.pos})",
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

    def open_stored(self, pos: int, flags: int, stored: bytes, path: str, offset: int) -> bytes:
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
        `sessiondir.build`): whoever publishes it syncs it first.
        """
        try:
            os.mkdir(directory)  # never its parents: they exist unless the root was replaced
        except FileExistsError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot create {directory}: {exc.strerror}") from exc
        path = os.path.join(directory, segment_name(0))
        create_segment_file(path, kind, 0, durable=durable)
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
        file would make a scan see an empty newest segment again and "recover" it
        by unlinking the new one, with its committed records.
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

    def scan_fd(self, path: str) -> int:
        """A read-only descriptor of the segment file at `path` now (`_fd` with `fresh`)."""
        return self._fd(path, fresh=True)

    def segment_for(self, pos: int) -> tuple[int, Segment]:
        """The segment holding log position `pos`, and its index in `segments`."""
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
        _, seg = self.segment_for(pos)
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
            _, seg = self.segment_for(pos)
            raise CorruptionError(
                f"{self.label}: bad record at position {pos}",
                path=seg.path,
                offset=SEGMENT_HEADER_SIZE + pos - seg.base,
            )
        rtype, flags, crc = frame
        stored = data[off + HEADER_SIZE : off + size]
        if flags & _COMPRESSED:
            _, seg = self.segment_for(pos)
            stored = self.open_stored(
                pos, flags, stored, seg.path, SEGMENT_HEADER_SIZE + pos - seg.base
            )
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
            _, seg = self.segment_for(first)
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
            unpack, crc32, flags_of, hsize = _unpack_header, zlib.crc32, FLAGS_OF, HEADER_SIZE
            for t in range(k, j + 1):
                i = order[t]
                pos, size = spans[i]
                off = pos - first
                crc, length, rtype, flags = unpack(block, off)
                if (
                    (flags & _NOT_COMMIT and flags not in _DICT_FLAGS)
                    or length + hsize != size
                    or flags not in flags_of[rtype]
                    or crc32(view[off + 4 : off + size]) != crc
                ):
                    # plain-compressed, or anything wrong: the careful path
                    out[i] = self._record_in(block, off, pos, size)
                    continue
                payload = block[off + hsize : off + size]
                if flags & FLAG_DICT:  # most compressed records, once a session has one
                    where = SEGMENT_HEADER_SIZE + pos - seg.base
                    payload = self.open_stored(pos, flags, payload, seg.path, where)
                out[i] = Record(pos, size, rtype, flags, payload, crc)
            k = j + 1
        return [r for r in out if r is not None]

    def _segment_limit(self, seg: Segment) -> int:
        i = self.segments.index(seg)
        if i + 1 < len(self.segments):
            return self.segments[i + 1].base
        return 1 << 62

    def committed(self, start: int, state: ScanState, *, strict: bool) -> Iterator[list[Record]]:
        """Yield each complete commit from position `start` on, then fill in `state`
        (`scan.Scanner.committed`)."""
        return self._scanner.committed(start, state, strict=strict)

    def zeros_after(self, pos: int, size: int) -> bool:
        """Are the `size` bytes from position `pos` of the newest segment zero (or absent)?"""
        seg = self.segments[-1]
        off = SEGMENT_HEADER_SIZE + pos - seg.base
        return not read_at(self._fd(seg.path), size, off, seg.path).strip(b"\0")

    # ---------------------------------------------------------------- writing
    def untouched_since(self, end: int) -> bool:
        """Whether our open writer is at `end` and nobody appended after it (one pread).

        Another process can only append after `end` by writing a record there, or by
        sealing this segment (truncating it to `end`) and starting a new one; either
        way the bytes at `end` are no longer the preallocated zeros.
        """
        w = self._writer
        return w is not None and self.writer_at(end) and w.untouched_at(end)

    def writer_at(self, end: int) -> bool:
        """Whether our open writer is at `end` (no syscall): for a writer that knows
        nobody else held the lock since it wrote there, so the bytes at `end` need
        no probe (`untouched_since` reads them).

        No `fstat` of the segment here or on any other path taken per commit or
        per read: on Linux 6.13 and later (multigrain timestamps) a stat of a file
        makes its next write take a fine-grained timestamp and dirty the inode,
        which makes the fdatasync after that write slower. The callers check the
        lock file's links instead (`FileLock.still_linked`).
        """
        w = self._writer
        # Compared by path: a re-listing of the directory makes new Segment objects
        # for the same files.
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
        return w is not None and w.is_current()

    def has_writer(self) -> bool:
        return self._writer is not None

    def preallocate_ahead(self) -> None:
        """(write lock held) Give the writer's segment its first preallocation step
        now, durably, if it has none: zeros after the data, fdatasynced, so that the
        next commits overwrite allocated space (see the module doc) and none of them
        pays for the step and the new file size in its own sync. For a session just
        created without a spare (the store warms it in the background)."""
        w = self._writer
        if w is None or w.poisoned or not self.preallocate or w.alloc_end > w.data_end:
            return
        if w.data_end - w.seg.base >= self.segment_bytes:
            return  # the next write rolls
        w.preallocate_step()

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
        w.trim(end)

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
        if w is not None and w.seg.path == seg.path and w.resume(seg, end):
            return
        self.close_writer()
        try:
            fd = os.open(seg.path, os.O_RDWR)
            size = file_size(fd)
        except OSError as exc:
            raise StorageError(f"cannot open {seg.path} for writing: {exc.strerror}") from exc
        alloc_end = seg.base + max(size - SEGMENT_HEADER_SIZE, 0)
        self._writer = SegmentWriter(fd, seg, data_end=end, alloc_end=alloc_end, synced_end=end)

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
        fd = open_for_writing(seg.path)
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
        i, seg = self.segment_for(end - 1 if end > 0 else 0)
        if i + 2 != len(self.segments) or self.segments[i + 1].base != end + SEAL_SIZE:
            raise CorruptionError(
                f"{self.label}: no interrupted roll at position {end}", path=seg.path
            )
        nxt = self.segments[i + 1]
        if not os.path.exists(nxt.path) or os.path.getsize(nxt.path) < SEGMENT_HEADER_SIZE:
            # the crash came while its header was written: write it again first
            create_segment_file(nxt.path, self.kind, nxt.base, replace=True)
            fsio.sync_dir(self.dir)
        fd = open_for_writing(seg.path)
        try:
            fsio.truncate(fd, SEGMENT_HEADER_SIZE + end - seg.base, seg.path)
            write_seal(fd, seg, end)
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
            create_segment_file(seg.path, self.kind, 0, replace=True)

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
        return w.append(data, preallocate=self.preallocate)

    @property
    def last_sync(self) -> float:
        """How long the last fdatasync of this log took (seconds; 0 before the first)."""
        return self._group.last_sync

    def announce(self) -> None:
        """A durable commit is on its way (before it waits for the session's write lock)."""
        self._group.announce()

    def arrived(self) -> None:
        """That commit is written (or failed): a gathering sync leader need not wait for it."""
        self._group.arrived(self._writer)

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
        w.sync_to(end, self._group, self.label, self.note_durable)

    def note_durable(self, end: int) -> None:
        """Every byte of this log before `end` has been synced (see `durable_to`)."""
        if end > self.durable_to:
            self.durable_to = end

    def seal_newest(self) -> bool:
        """(write lock held, writer open) Seal the newest segment now, however short,
        and start the next one, as a full segment is sealed (`_roll`): `compact`
        rewrites only sealed segments. False when the newest segment holds no data."""
        w = self._writer
        assert w is not None, "open_writer first"
        if w.poisoned:
            raise StorageError(
                f"{self.label}: log is unusable after an earlier failure: {w.poisoned}"
            )
        if w.data_end == w.seg.base:
            return False
        self._roll()
        return True

    def _roll(self) -> None:
        w = self._writer
        assert w is not None
        with w.lock:
            w.wait_sync_done()
            fsio.truncate(w.fd, w.seg.offset(w.data_end), w.seg.path)
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
        # number the process may reuse for another file.
        self._writer = None
        try:
            create_segment_file(path, self.kind, base)
            fsio.sync_dir(self.dir)
            if self.seals:
                write_seal(w.fd, w.seg, seal_at)
                self.note_durable(base)
        finally:
            os.close(w.fd)
        self.list_segments()
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise StorageError(f"cannot open {path} for writing: {exc.strerror}") from exc
        self._writer = SegmentWriter(
            fd, self.segments[-1], data_end=base, alloc_end=base, synced_end=base
        )

    def close_writer(self) -> None:
        w = self._writer
        if w is None:
            return
        with w.lock:
            w.wait_sync_done()
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
                # once, so its bytes must already be synced.
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

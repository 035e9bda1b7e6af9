"""Index files: derived maps from a key (event or checkpoint sequence) to a log position.

Indexes are caches. They are written without fsync, checked against the log
when opened and whenever a record read through them does not match, and rebuilt
from the log on any doubt. The newest entries live in memory (`pending`) and
are flushed in batches, so an append costs no extra system call.

Two shapes share one file layout (FORMAT.md, "Index files"):
- dense (events): entry i describes event sequence i + 1, so lookups are
  arithmetic; 16-byte entries `pos u64, size u32, flags u32` (bit 0 of flags:
  removed; bits 8..31: check, see below);
- sparse (checkpoints, transcript batches, executions): entries sorted by key,
  24 bytes `key u64, pos u64, size u32, check u32`; lookups binary-search.

Every entry carries a check (CRC-32 of its slot number and fields; 24 bits of it
in a dense entry) verified whenever the entry is read from the file. The header
CRC covers only the header, and a record read through a damaged entry is not
always caught by the record's own checks: a flipped "removed" bit would hide an
event and a damaged sparse key would hide a checkpoint, silently. A failed
check raises `IndexDoubtError`, and the caller rebuilds from the log.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from typing import NamedTuple

from . import fsio
from .errors import StorageError

INDEX_MAGIC = b"JRNLIDX\x00"
# 3: the header records how far the log was durable (files of versions 1 and 2 are rebuilt)
INDEX_VERSION = 3
# magic, version, kind, covered, count, anchor_pos, anchor_crc, durable, origin, crc
INDEX_HEADER = struct.Struct("<8sHHQQQIQII")
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 56
_HEADER_CRC_END = 52
DENSE = struct.Struct("<QII")
SPARSE = struct.Struct("<QQII")

KIND_EVENTS = 1
KIND_CHECKPOINTS = 2
KIND_TRANSCRIPTS = 3
KIND_EXECUTIONS = 4
INDEX_FILES = {
    KIND_EVENTS: "events.idx",
    KIND_CHECKPOINTS: "checkpoints.idx",
    KIND_TRANSCRIPTS: "transcripts.idx",
    KIND_EXECUTIONS: "executions.idx",
}

REMOVED = 1
_FLAG_BITS = 0xFF  # dense flags live in the low byte; the upper 24 bits are the check
_BLOCK = 256  # entries read per pread when walking backwards
_PROBES_KEPT = 256  # checked single entries kept per index (binary-search probes)
_CHECKED = struct.Struct("<QQQII")


def entry_check(i: int, key: int, pos: int, size: int, flags: int) -> int:
    """CRC-32 of an entry's slot and fields (a dense entry keeps the upper 24 bits)."""
    return zlib.crc32(_CHECKED.pack(i, key, pos, size, flags & _FLAG_BITS))


def pack_dense(i: int, pos: int, size: int, flags: int) -> bytes:
    check = entry_check(i, i + 1, pos, size, flags) & 0xFFFFFF00
    return DENSE.pack(pos, size, check | (flags & _FLAG_BITS))


def pack_sparse(i: int, key: int, pos: int, size: int) -> bytes:
    return SPARSE.pack(key, pos, size, entry_check(i, key, pos, size, 0))


def encode_index_header(
    kind: int, covered: int, count: int, anchor: tuple[int, int], durable: int, origin: int
) -> bytes:
    fields = (INDEX_MAGIC, INDEX_VERSION, kind, covered, count, anchor[0], anchor[1], durable)
    raw = INDEX_HEADER.pack(*fields, origin, 0)
    return INDEX_HEADER.pack(*fields, origin, zlib.crc32(raw[:_HEADER_CRC_END]))


class FileEvidence(NamedTuple):
    """What a sound index header says about the log, whether or not its anchor holds."""

    durable: int  # the log position its writer knew to be synced
    origin: int  # the session directory it was written in (`session.origin_of`)
    entries: int  # for the events index, the highest event sequence it covered
    last_key: int  # the key of its last entry (-1: none, or the entry does not check)


def read_evidence(path: str, kind: int) -> FileEvidence | None:
    """Read an index file's header (and last entry) without adopting it (None: unsound).

    A position recorded as durable that the log no longer reaches, or a count beyond
    what the log holds, tells how much committed data was lost (FORMAT.md section 5).
    """
    try:
        with open(path, "rb") as f:
            head = f.read(INDEX_HEADER_SIZE)
            if len(head) != INDEX_HEADER_SIZE:
                return None
            fields = INDEX_HEADER.unpack(head)
            magic, version, got_kind, covered, count, _, _, durable, origin, crc = fields
            if (
                magic != INDEX_MAGIC
                or version != INDEX_VERSION
                or got_kind != kind
                or zlib.crc32(head[:_HEADER_CRC_END]) != crc
                or durable > covered
            ):
                return None
            last_key = -1
            if count and kind != KIND_EVENTS:
                f.seek(INDEX_HEADER_SIZE + (count - 1) * SPARSE.size)
                raw = f.read(SPARSE.size)
                if len(raw) == SPARSE.size:
                    key, pos, size, check = SPARSE.unpack(raw)
                    if entry_check(count - 1, key, pos, size, 0) == check:
                        last_key = key
    except OSError:
        return None
    return FileEvidence(durable, origin, count, last_key)


class Index:
    """One index file plus its unflushed in-memory tail."""

    def __init__(self, directory: str, kind: int):
        self.kind = kind
        self.dense = kind == KIND_EVENTS
        self.entry = DENSE if self.dense else SPARSE
        self.path = os.path.join(directory, INDEX_FILES[kind])
        self._fd: int | None = None
        self.flushed = 0  # entries in the file that we trust
        self.file_covered = 0  # log position the flushed entries reflect
        self.file_anchor = (0, 0)  # (position, crc) of the commit record ending at file_covered
        self.file_durable = 0  # log position the file's writer knew to be synced
        self.file_origin = 0  # the session directory the file was written in
        self.covered = 0  # log position that flushed + pending entries reflect
        # pending tail, as parallel arrays (compact even for long-lived readers)
        self._keys = array("Q")
        self._pos = array("Q")
        self._size = array("I")
        self._flags = array("I")
        self._dirty_flags: dict[int, tuple[int, int, int]] = {}  # i -> (flags, pos, size)
        # entries and flag changes not in the file yet (len(_pos) + len(_dirty_flags)),
        # kept as a number: writers look at it after every commit
        self.pending = 0
        self.doubt = ""  # why the flushed entries cannot be trusted ("" if they can)
        # The flushed entries the last read checked: (first slot, entries as in the file).
        # A page read again (or the newest page after appends) reuses them unchecked;
        # one range only, so memory stays proportional to a page.
        self._checked: tuple[int, list[tuple[int, int, int, int]]] = (0, [])
        # Single entries a binary search probed (sparse indexes), checked, as in the file.
        self._probed: dict[int, tuple[int, int, int, int]] = {}

    # ------------------------------------------------------------------ state
    @property
    def count(self) -> int:
        return self.flushed + len(self._pos)

    def reset(self) -> None:
        self.flushed = 0
        self.file_covered = 0
        self.file_anchor = (0, 0)
        self.file_durable = 0
        self.file_origin = 0
        self.covered = 0
        self._keys, self._pos = array("Q"), array("Q")
        self._size, self._flags = array("I"), array("I")
        self._dirty_flags.clear()
        self.pending = 0
        self.doubt = ""
        self._checked = (0, [])
        self._probed = {}

    def load(self) -> bool:
        """Adopt the file's flushed entries if its header is sound; else start empty."""
        self.reset()
        self._close()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot open index {self.path}: {exc.strerror}") from exc
        self._fd = fd
        head = os.pread(fd, INDEX_HEADER_SIZE, 0)
        if len(head) != INDEX_HEADER_SIZE:
            return False
        magic, version, kind, covered, count, apos, acrc, durable, origin, crc = (
            INDEX_HEADER.unpack(head)
        )
        if (
            magic != INDEX_MAGIC
            or version != INDEX_VERSION
            or kind != self.kind
            or zlib.crc32(head[:_HEADER_CRC_END]) != crc
            or durable > covered
            or os.fstat(fd).st_size < INDEX_HEADER_SIZE + count * self.entry.size
        ):
            return False
        self.flushed = count
        self.file_covered = covered
        self.file_anchor = (apos, acrc)
        self.file_durable = durable
        self.file_origin = origin
        self.covered = covered
        return True

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close()

    # ---------------------------------------------------------------- updates
    def append(self, key: int, pos: int, size: int, flags: int = 0) -> None:
        self._keys.append(key)
        self._pos.append(pos)
        self._size.append(size)
        self._flags.append(flags)
        self.pending += 1

    def mark_removed(self, i: int) -> None:
        if i >= self.flushed:
            self._flags[i - self.flushed] |= REMOVED
        else:
            try:
                _, pos, size, flags = self.get(i)
            except IndexDoubtError as exc:
                # Called while a commit is applied: failing here would fail the
                # commit (raw, as IndexDoubtError). Remember it; the next read
                # through this index raises it and the index is rebuilt.
                self.doubt = str(exc)
                return
            if i not in self._dirty_flags:
                self.pending += 1
            self._dirty_flags[i] = (flags | REMOVED, pos, size)

    def truncate_to(self, count: int) -> None:
        """Forget entries from `count` on (used when a rebuilt tail starts earlier)."""
        if count < self.flushed:
            self.reset()
            return
        keep = count - self.flushed
        del self._keys[keep:], self._pos[keep:], self._size[keep:], self._flags[keep:]
        self.pending = len(self._pos) + len(self._dirty_flags)

    # ---------------------------------------------------------------- lookups
    def get(self, i: int) -> tuple[int, int, int, int]:
        """Entry i as (key, pos, size, flags)."""
        if i >= self.flushed:
            j = i - self.flushed
            return self._keys[j], self._pos[j], self._size[j], self._flags[j]
        return self.read_block(i, i + 1)[0]

    def read_block(self, lo: int, hi: int) -> list[tuple[int, int, int, int]]:
        """Entries [lo, hi) in order."""
        out: list[tuple[int, int, int, int]] = []
        if self.doubt:
            raise IndexDoubtError(self.doubt)
        if lo < self.flushed:
            stop = min(hi, self.flushed)
            first, checked = self._checked
            if first <= lo and stop <= first + len(checked):
                out = checked[lo - first : stop - first]
            elif stop - lo == 1 and lo in self._probed:
                out = [self._probed[lo]]
            else:
                out = self._read_flushed(lo, stop)
                if stop - lo > 1:  # a page
                    self._checked = (lo, out[:])
                else:  # a probe of a binary search: a page read again repeats them
                    if len(self._probed) >= _PROBES_KEPT:
                        self._probed.clear()
                    self._probed[lo] = out[0]
            if self._dirty_flags:
                dirty = self._dirty_flags
                out = [
                    (e[0], e[1], e[2], dirty[lo + k][0]) if lo + k in dirty else e
                    for k, e in enumerate(out)
                ]
            lo = stop
        for i in range(max(lo, self.flushed), hi):
            j = i - self.flushed
            out.append((self._keys[j], self._pos[j], self._size[j], self._flags[j]))
        return out

    def _read_flushed(self, lo: int, stop: int) -> list[tuple[int, int, int, int]]:
        """Flushed entries [lo, stop) from the file, each checked, flags as in the file."""
        assert self._fd is not None
        esz = self.entry.size
        data = os.pread(self._fd, (stop - lo) * esz, INDEX_HEADER_SIZE + lo * esz)
        if len(data) != (stop - lo) * esz:
            raise IndexDoubtError(f"index {self.path} is shorter than its header says")
        out: list[tuple[int, int, int, int]] = []
        for k in range(stop - lo):
            i = lo + k
            if self.dense:
                pos, size, word = DENSE.unpack_from(data, k * esz)
                key, flags = i + 1, word & _FLAG_BITS
                ok = word & 0xFFFFFF00 == entry_check(i, key, pos, size, flags) & 0xFFFFFF00
            else:
                key, pos, size, check = SPARSE.unpack_from(data, k * esz)
                flags = 0
                ok = check == entry_check(i, key, pos, size, 0)
            if not ok:
                raise IndexDoubtError(f"index {self.path}: entry {i} fails its check")
            out.append((key, pos, size, flags))
        return out

    def key_at(self, i: int) -> int:
        return i + 1 if self.dense else self.get(i)[0]

    def lower_bound(self, key: int) -> int:
        """First entry index whose key is >= `key` (count if none)."""
        if self.dense:
            return min(max(key - 1, 0), self.count)
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.key_at(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def newest_before(
        self, before: int | None, limit: int
    ) -> tuple[list[tuple[int, int, int, int]], bool]:
        """Up to `limit` live entries with key < `before`, newest first; and whether more exist."""
        hi = self.count if before is None else self.lower_bound(before)
        out: list[tuple[int, int, int, int]] = []
        # Read (and check) only what the page needs: limit + 1 entries tell whether
        # more exist; removed (transient) entries make later blocks grow.
        block = limit + 1
        while hi > 0:
            lo = max(0, hi - block)
            for entry in reversed(self.read_block(lo, hi)):
                if entry[3] & REMOVED:
                    continue
                if len(out) == limit:
                    return out, True
                out.append(entry)
            hi = lo
            block = min(block * 2, _BLOCK * 16)
        return out, False

    def oldest_after(self, after: int, limit: int) -> list[tuple[int, int, int, int]]:
        """Up to `limit` live entries with key > `after`, oldest first."""
        lo = self.lower_bound(after + 1)
        out: list[tuple[int, int, int, int]] = []
        # As `newest_before`: read (and check) what the page needs, not a whole block
        # (a point read checked 256 entries); removed entries make later reads grow.
        block = min(limit, _BLOCK)
        while lo < self.count and len(out) < limit:
            hi = min(self.count, lo + block)
            for entry in self.read_block(lo, hi):
                if not entry[3] & REMOVED:
                    out.append(entry)
                    if len(out) == limit:
                        break
            lo = hi
            block = min(block * 2, _BLOCK * 16)
        return out

    def find(self, key: int) -> tuple[int, int, int, int] | None:
        i = self.lower_bound(key)
        if i < self.count:
            entry = self.get(i)
            if entry[0] == key:
                return entry
        return None

    # ------------------------------------------------------------ persistence
    def flush(self, covered: int, anchor: tuple[int, int], durable: int, origin: int) -> None:
        """Write pending entries and flag changes, then the header (no fsync: a cache).

        `durable` is the log position up to which the log is known synced (at most
        `covered`): only a position already durable is ever recorded as such.
        """
        durable = min(durable, covered)
        if self.doubt or (
            not self._pos
            and not self._dirty_flags
            and covered == self.file_covered
            and durable <= self.file_durable
            and origin == self.file_origin
        ):
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            esz = self.entry.size
            if self.flushed == 0:
                fsio.truncate(fd, INDEX_HEADER_SIZE, self.path)
            parts = []
            base = self.flushed
            for j in range(len(self._pos)):
                if self.dense:
                    parts.append(pack_dense(base + j, self._pos[j], self._size[j], self._flags[j]))
                else:
                    parts.append(pack_sparse(base + j, self._keys[j], self._pos[j], self._size[j]))
            if parts:
                fsio.pwrite(fd, b"".join(parts), INDEX_HEADER_SIZE + self.flushed * esz, self.path)
            for i, (flags, pos, size) in self._dirty_flags.items():
                # only the dense index carries flags; the check covers them, so rewrite the entry
                fsio.pwrite(
                    fd, pack_dense(i, pos, size, flags), INDEX_HEADER_SIZE + i * esz, self.path
                )
            count = self.count
            header = encode_index_header(self.kind, covered, count, anchor, durable, origin)
            fsio.pwrite(fd, header, 0, self.path)
        finally:
            os.close(fd)
        self.flushed = count
        self.file_covered = covered
        self.file_anchor = anchor
        self.file_durable = durable
        self.file_origin = origin
        self._keys, self._pos = array("Q"), array("Q")
        self._size, self._flags = array("I"), array("I")
        self._dirty_flags.clear()
        self.pending = 0
        self._checked, self._probed = (0, []), {}  # flags in the file changed
        self._close()
        self._fd = os.open(self.path, os.O_RDONLY)

    def discard_file(self) -> None:
        """Start over: the file is not trusted (rebuild follows)."""
        self._close()
        if os.path.exists(self.path):
            fsio.unlink(self.path)
        self.reset()


class IndexDoubtError(Exception):
    """Internal: an index entry does not match the log; the caller rebuilds."""

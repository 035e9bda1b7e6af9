"""One segment file of a log: its name, its header, and the SEAL record that ends it.

Segments are files named by the log position of their first record
(`00000000000000000000.seg`), so names sort by position. Each starts with a
32-byte header (magic, version, kind, base position, header CRC; FORMAT.md
section 3). Positions are dense across segments: a record at file offset `o`
of the segment with base `b` is at log position `b + o - 32`.

Both the log (`log.py`) and its scan (`scan.py`) read segments through the
helpers here, so neither needs the other's internals.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib

import msgspec

from . import fsio
from .errors import CorruptionError, FormatVersionError, StorageError
from .record import SEAL, frame

SEGMENT_MAGIC = b"JRNLSEG\x00"
SEGMENT_VERSION = 1
SEGMENT_HEADER = struct.Struct("<8sHHIQI4x")  # magic, version, kind, reserved, base, crc
SEGMENT_HEADER_SIZE = SEGMENT_HEADER.size  # 32
SEGMENT_SUFFIX = ".seg"
SEAL_RECORD = frame(SEAL, b"", commit=True, compress=False)
SEAL_SIZE = len(SEAL_RECORD)  # 10


class Segment(msgspec.Struct):
    base: int  # log position of its first record
    path: str

    def offset(self, pos: int) -> int:
        """The file offset of log position `pos` in this segment."""
        return SEGMENT_HEADER_SIZE + pos - self.base


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


def create_segment_file(
    path: str, kind: int, base: int, *, replace: bool = False, durable: bool = True
) -> None:
    """Create the segment file `path` holding only its header (synced if `durable`)."""
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
        # roll creates it again instead of failing on its name.
        if not replace:
            with contextlib.suppress(StorageError):
                fsio.unlink(path)
        raise
    finally:
        os.close(fd)


def open_for_writing(path: str) -> int:
    """A read-write descriptor of a segment file (the caller closes it)."""
    try:
        return os.open(path, os.O_RDWR)
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc.strerror}") from exc


def write_seal(fd: int, seg: Segment, pos: int) -> None:
    """Append the SEAL record at log position `pos` of `seg` and sync it."""
    fsio.pwrite(fd, SEAL_RECORD, seg.offset(pos), seg.path)
    fsio.sync_file(fd, seg.path)


def file_size(fd: int) -> int:
    """A file's size without a stat: `lseek` reads the size only, while a stat also
    queries the timestamps, which on Linux 6.13+ makes the file's next write dirty its
    inode and that write's fdatasync slower (see `Log.writer_at`)."""
    return os.lseek(fd, 0, os.SEEK_END)


def read_at(fd: int, size: int, offset: int, path: str) -> bytes:
    """Up to `size` bytes of `path` (open as `fd`) from file offset `offset`."""
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        raise StorageError(f"read failed on {path} at offset {offset}: {exc.strerror}") from exc

"""Record framing: the bytes of one log record, and scanning a buffer of them.

A record is a 10-byte header followed by the payload (see FORMAT.md):

    offset size field
    0      4    crc32    zlib CRC-32 of bytes 4..(10 + length): length, type, flags, payload
    4      4    length   payload length in bytes (little-endian u32)
    8      1    type     record type (1..); 0 is invalid so zeroed space never parses
    9      1    flags    bit 0: payload is zstd-compressed; bit 1: record closes a commit;
                         bit 2: compressed with the session's dictionary (bit 0 set too)

Records between two commit-closing records (the latter included) form one
commit: readers and recovery accept them together or not at all.
"""

from __future__ import annotations

import re
import struct
import threading
import zlib
from typing import TYPE_CHECKING, Any

import msgspec
import zstandard

from .errors import CorruptionError

if TYPE_CHECKING:
    from .dictionary import SessionDictionary

HEADER = struct.Struct("<IIBB")
_LENGTH_TYPE_FLAGS = struct.Struct("<IBB")
_CRC = struct.Struct("<I")
HEADER_SIZE = HEADER.size  # 10

# Record types. 0 is never written: preallocated (zeroed) space reads as "no record".
CHECKPOINT = 1
TRANSCRIPT = 2
EXECUTION = 3
EVENT = 4
COMMIT = 5
CATALOG = 6
PAD = 7  # filler left by `compact` where a record shrank; every reader skips it
DICT = 8  # the session's zstd dictionary (`dictionary.py`), its own commit
# The last record of a sealed session segment: a commit of its own, empty, saying that
# the next segment exists and starts right after it (FORMAT.md section 3).
SEAL = 9
# A note that `journal repair --accept-loss` appended: what was lost, and the numbers
# never to be handed out again (`payloads.LossPayload`). A commit of its own.
LOSS = 10
TYPE_NAMES = {
    CHECKPOINT: "checkpoint",
    TRANSCRIPT: "transcript",
    EXECUTION: "execution",
    EVENT: "event",
    COMMIT: "commit",
    CATALOG: "catalog",
    PAD: "pad",
    DICT: "dictionary",
    SEAL: "seal",
    LOSS: "loss",
}

FLAG_ZSTD = 0x01
FLAG_COMMIT = 0x02
FLAG_DICT = 0x04  # with FLAG_ZSTD: the frame needs the session's dictionary
KNOWN_FLAGS = FLAG_ZSTD | FLAG_COMMIT | FLAG_DICT
_DICT_ZSTD = FLAG_DICT | FLAG_ZSTD

# Payloads at least this large are compressed when that saves at least 1/8.
COMPRESS_MIN = 2048
# With the session's dictionary, smaller ones are too (and only those are sampled).
DICT_COMPRESS_MIN = 64
MAX_PAYLOAD = 0xFFFF_FFFF

_local = threading.local()


def _compressor() -> Any:
    c = getattr(_local, "cctx", None)
    if c is None:
        c = zstandard.ZstdCompressor(level=1)
        _local.cctx = c
    return c


def _decompressor() -> Any:
    d = getattr(_local, "dctx", None)
    if d is None:
        d = zstandard.ZstdDecompressor()
        _local.dctx = d
    return d


def pad_frame(size: int) -> bytes:
    """A PAD record of exactly `size` bytes (header included) with a zero payload."""
    if size < HEADER_SIZE:
        raise ValueError(f"a PAD record needs at least {HEADER_SIZE} bytes, not {size}")
    return frame(PAD, bytes(size - HEADER_SIZE), commit=False, compress=False)


def frame(
    rtype: int,
    payload: bytes,
    *,
    commit: bool,
    compress: bool = True,
    dictionary: SessionDictionary | None = None,
) -> bytes:
    """Return the bytes of one record carrying `payload` (compressed when worthwhile:
    with the session's `dictionary` from `DICT_COMPRESS_MIN` bytes, else from
    `COMPRESS_MIN`)."""
    flags = FLAG_COMMIT if commit else 0
    if compress and dictionary is not None and len(payload) >= DICT_COMPRESS_MIN:
        packed = dictionary.compress(payload)
        if len(packed) <= len(payload) - (len(payload) >> 3):
            payload = packed
            flags |= _DICT_ZSTD
    elif compress and len(payload) >= COMPRESS_MIN:
        packed = _compressor().compress(payload)
        if len(packed) <= len(payload) - (len(payload) >> 3):
            payload = packed
            flags |= FLAG_ZSTD
    # The CRC is taken over header and payload without joining them first: one copy
    # of the payload (the join) instead of two.
    head = _LENGTH_TYPE_FLAGS.pack(len(payload), rtype, flags)
    return b"".join((_CRC.pack(zlib.crc32(payload, zlib.crc32(head))), head, payload))


class Record(msgspec.Struct, frozen=True, gc=False):
    """One decoded record: where it is, what it is, and its (decompressed) payload.

    A msgspec Struct (built in C) rather than a NamedTuple or a frozen dataclass:
    pages build one per entry, and those cost 3-4x more to construct.
    """

    pos: int  # log position of the record's first header byte
    size: int  # header + stored payload bytes
    rtype: int
    flags: int
    payload: bytes
    crc: int = 0  # the frame's stored checksum (identifies the record in cache anchors)

    @property
    def commits(self) -> bool:
        return bool(self.flags & FLAG_COMMIT)


def open_payload(
    flags: int,
    stored: bytes,
    *,
    path: str,
    offset: int,
    dictionary: SessionDictionary | None = None,
) -> bytes:
    """The payload of a record as written: `stored` decompressed when its flags say so."""
    if not flags & _DICT_ZSTD:
        return stored
    if flags & FLAG_DICT:  # (with FLAG_ZSTD: `parse_at` and `frame_at` reject it alone)
        if dictionary is None:
            raise CorruptionError(
                "record is compressed with the session's dictionary,"
                " but no dictionary record precedes it",
                path=path,
                offset=offset,
            )
        return dictionary.decompress(stored, path=path, offset=offset)
    try:
        return bytes(_decompressor().decompress(stored))
    except zstandard.ZstdError as exc:
        raise CorruptionError(
            f"zstd payload does not decompress: {exc}", path=path, offset=offset
        ) from exc


def frame_at(buf: bytes, off: int, size: int) -> tuple[int, int, int] | None:
    """Check the frame of known total `size` at `off` (read through an index entry).

    Returns (rtype, flags, crc), or None when the bytes there are not exactly one
    intact frame of that size. Cheaper than `parse_at`: the size is known, so no
    end-of-buffer or zero-header classification is needed.
    """
    if off + size > len(buf) or size < HEADER_SIZE:
        return None
    crc, length, rtype, flags = HEADER.unpack_from(buf, off)
    if (
        length + HEADER_SIZE != size
        or rtype not in TYPE_NAMES
        or flags & ~KNOWN_FLAGS
        or flags & _DICT_ZSTD == FLAG_DICT
        or zlib.crc32(memoryview(buf)[off + 4 : off + size]) != crc
    ):
        return None
    return rtype, flags, crc


# Outcomes of parsing at one offset.
OK = 0
END = 1  # zeroed space or exactly the end of the buffer: no record here
SHORT = 2  # a record starts here but the buffer ends inside it
BAD = 3  # a complete frame whose checksum, type or flags are wrong


def parse_at(buf: bytes | memoryview, off: int) -> tuple[int, int, int, int, int]:
    """Parse the frame at `off`: (outcome, rtype, flags, payload_start, payload_end)."""
    n = len(buf)
    if off == n:
        return END, 0, 0, 0, 0
    if off + HEADER_SIZE > n:
        if not any(bytes(buf[off:n])):
            return END, 0, 0, 0, 0
        return SHORT, 0, 0, 0, 0
    crc, length, rtype, flags = HEADER.unpack_from(buf, off)
    if crc == 0 and length == 0 and rtype == 0 and flags == 0:
        return END, 0, 0, 0, 0
    start = off + HEADER_SIZE
    end = start + length
    if end > n:
        return SHORT, rtype, flags, start, end
    if (
        rtype == 0
        or rtype not in TYPE_NAMES
        or flags & ~KNOWN_FLAGS
        or flags & _DICT_ZSTD == FLAG_DICT
    ):
        return BAD, rtype, flags, start, end
    if zlib.crc32(buf[off + 4 : end]) != crc:
        return BAD, rtype, flags, start, end
    return OK, rtype, flags, start, end


# Where a record header could start: a known type byte (1..10) then known flags (0..3,
# or 5 and 7: the dictionary bit comes with the zstd bit).
_CANDIDATE = re.compile(rb"(?=.{8}[\x01-\x0a][\x00-\x03\x05\x07])", re.DOTALL)
assert set(TYPE_NAMES) == set(range(1, 11)) and KNOWN_FLAGS == 0x07


def next_frame(buf: bytes | memoryview, start: int) -> int | None:
    """The first offset at or after `start` where a valid record frame starts (None:
    nowhere). What salvage and recovery use to look past damage."""
    for m in _CANDIDATE.finditer(buf, start):
        if parse_at(buf, m.start())[0] == OK:
            return m.start()
    return None

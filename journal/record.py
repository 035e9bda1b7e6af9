"""Record framing: the bytes of one log record, the record types, and finding frames.

A record is a 10-byte header followed by the payload (see FORMAT.md):

    offset size field
    0      4    crc32    zlib CRC-32 of bytes 4..(10 + length): length, type, flags, payload
    4      4    length   payload length in bytes (little-endian u32)
    8      1    type     record type (1..); 0 is invalid so zeroed space never parses
    9      1    flags    bit 0: payload is zstd-compressed; bit 1: record closes a commit;
                         bit 2: compressed with the session's dictionary (bit 0 set too)

Records between two commit-closing records (the latter included) form one
commit: readers and recovery accept them together or not at all.

`TYPES` is the one table of record types. Whether a record can start at a place
(`can_start`, `parse_at`, `frame_at`, `next_frame`) is derived from it, so a new
type is added there and nowhere else in this module.
"""

from __future__ import annotations

import re
import struct
import threading
import zlib
from typing import Any, NamedTuple, Protocol

import msgspec
import zstandard

from .errors import CorruptionError

HEADER = struct.Struct("<IIBB")
_LENGTH_TYPE_FLAGS = struct.Struct("<IBB")
_CRC = struct.Struct("<I")
HEADER_SIZE = HEADER.size  # 10

FLAG_ZSTD = 0x01
FLAG_COMMIT = 0x02
FLAG_DICT = 0x04  # with FLAG_ZSTD: the frame needs the session's dictionary
KNOWN_FLAGS = FLAG_ZSTD | FLAG_COMMIT | FLAG_DICT
_DICT_ZSTD = FLAG_DICT | FLAG_ZSTD
# Every flag byte a frame may carry: known bits only, and the dictionary bit only
# together with the zstd bit.
ANY_FLAGS = frozenset(f for f in range(KNOWN_FLAGS + 1) if f & _DICT_ZSTD != FLAG_DICT)

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


class RecordType(NamedTuple):
    code: int  # the header's type byte
    name: str  # as tools and messages show it
    # The flag bytes a frame of this type may carry. Rules about where a type may
    # stand (a SEAL or DICT record is a commit of its own) are the scan's and the
    # session's: a frame breaking them is intact, and reported as misplaced.
    flags: frozenset[int] = ANY_FLAGS


TYPES = (
    RecordType(CHECKPOINT, "checkpoint"),
    RecordType(TRANSCRIPT, "transcript"),
    RecordType(EXECUTION, "execution"),
    RecordType(EVENT, "event"),
    RecordType(COMMIT, "commit"),
    RecordType(CATALOG, "catalog"),
    RecordType(PAD, "pad"),
    RecordType(DICT, "dictionary"),
    RecordType(SEAL, "seal"),
    RecordType(LOSS, "loss"),
)
TYPE_NAMES = {t.code: t.name for t in TYPES}
# For each type byte 0..255, the flag bytes a frame of that type may carry (none: no
# such type). Indexed by the byte: one tuple index and one set lookup per check.
FLAGS_OF = tuple(
    next((t.flags for t in TYPES if t.code == code), frozenset[int]()) for code in range(256)
)


def can_start(rtype: int, flags: int) -> bool:
    """Can a frame with this type byte and flag byte start a record? (`TYPES` says.)"""
    return flags in FLAGS_OF[rtype]


def _byte_class(values: frozenset[int] | set[int]) -> bytes:
    return b"[" + b"".join(b"\\x%02x" % v for v in sorted(values)) + b"]"


def _candidate_pattern() -> re.Pattern[bytes]:
    """Where a record header could start: 8 bytes (checksum, length), then a type byte
    and a flag byte that `can_start` accepts. Types with the same flags share a class."""
    by_flags: dict[frozenset[int], set[int]] = {}
    for t in TYPES:
        by_flags.setdefault(t.flags, set()).add(t.code)
    heads = b"|".join(_byte_class(codes) + _byte_class(f) for f, codes in by_flags.items())
    return re.compile(rb"(?=.{8}(?:" + heads + rb"))", re.DOTALL)


_CANDIDATE = _candidate_pattern()

# Payloads at least this large are compressed when that saves at least 1/8.
COMPRESS_MIN = 2048
# With the session's dictionary, smaller ones are too (and only those are sampled).
DICT_COMPRESS_MIN = 64
MAX_PAYLOAD = 0xFFFF_FFFF


class DictionaryCodec(Protocol):
    """What framing needs of a session's dictionary (`dictionary.SessionDictionary`)."""

    def compress(self, payload: bytes) -> bytes: ...

    def decompress(self, stored: bytes, *, path: str, offset: int) -> bytes: ...


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
    dictionary: DictionaryCodec | None = None,
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
    dictionary: DictionaryCodec | None = None,
) -> bytes:
    """The payload of a record as written: `stored` decompressed when its flags say so."""
    if not flags & _DICT_ZSTD:
        return stored
    if flags & FLAG_DICT:  # (with FLAG_ZSTD: `can_start` rejects it alone)
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
        or flags not in FLAGS_OF[rtype]
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
    if flags not in FLAGS_OF[rtype] or zlib.crc32(buf[off + 4 : end]) != crc:
        return BAD, rtype, flags, start, end
    return OK, rtype, flags, start, end


def next_frame(buf: bytes | memoryview, start: int) -> int | None:
    """The first offset at or after `start` where a valid record frame starts (None:
    nowhere). What salvage and recovery use to look past damage."""
    for m in _CANDIDATE.finditer(buf, start):
        if parse_at(buf, m.start())[0] == OK:
            return m.start()
    return None

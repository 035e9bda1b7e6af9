"""The record-type table is the one place a record type is defined: every check of
"can a record start here" (the predicate, the parsers, the search past damage)
accepts exactly the types and flag bytes it lists."""

from __future__ import annotations

import struct
import zlib

import pytest

# reaches inside: these are unit tests of the record-type table itself
from journal.record import (
    ANY_FLAGS,
    BAD,
    FLAG_COMMIT,
    FLAG_DICT,
    FLAG_ZSTD,
    HEADER_SIZE,
    KNOWN_FLAGS,
    OK,
    TYPE_NAMES,
    TYPES,
    can_start,
    frame,
    frame_at,
    next_frame,
    parse_at,
)

CASES = [(t.code, f) for t in TYPES for f in sorted(t.flags)]
UNKNOWN_TYPES = [0, max(TYPE_NAMES) + 1, 0x7F, 0xFF]
BAD_FLAGS = [FLAG_DICT, FLAG_DICT | FLAG_COMMIT, 0x08, 0x80, 0xFF]


def _frame(rtype: int, flags: int, payload: bytes = b"payload") -> bytes:
    """A frame with exactly this type and flag byte (the payload is not compressed:
    framing does not look inside it)."""
    head = struct.pack("<IBB", len(payload), rtype, flags)
    return struct.pack("<I", zlib.crc32(head + payload)) + head + payload


def test_the_table_is_what_the_names_and_flags_say() -> None:
    assert {t.code: t.name for t in TYPES} == TYPE_NAMES
    assert len({t.code for t in TYPES}) == len(TYPES), "a type code is listed twice"
    assert 0 not in TYPE_NAMES, "type 0 is what zeroed space reads as"
    assert sorted(ANY_FLAGS) == [0, 1, 2, 3, 5, 7]
    for t in TYPES:
        assert t.flags <= ANY_FLAGS
        assert all(f & ~KNOWN_FLAGS == 0 for f in t.flags)


@pytest.mark.parametrize("rtype,flags", CASES)
def test_every_listed_type_and_flag_byte_can_start_a_record(rtype: int, flags: int) -> None:
    assert can_start(rtype, flags)
    data = _frame(rtype, flags)
    assert parse_at(data, 0)[:3] == (OK, rtype, flags)
    assert frame_at(data, 0, len(data)) is not None
    junk = b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d"  # no valid frame in it
    assert next_frame(junk + data, 0) == len(junk)


@pytest.mark.parametrize("rtype", UNKNOWN_TYPES)
def test_an_unknown_type_cannot_start_a_record(rtype: int) -> None:
    for flags in range(256):
        assert not can_start(rtype, flags)
    data = _frame(rtype, FLAG_COMMIT)
    if rtype:  # (an all-zero header would be "no record", END; this one has a checksum)
        assert parse_at(data, 0)[0] == BAD
    assert frame_at(data, 0, len(data)) is None
    assert next_frame(data, 0) is None


@pytest.mark.parametrize("flags", BAD_FLAGS)
def test_an_unknown_flag_byte_cannot_start_a_record(flags: int) -> None:
    for t in TYPES:
        assert not can_start(t.code, flags)
        data = _frame(t.code, flags)
        assert parse_at(data, 0)[0] == BAD
        assert frame_at(data, 0, len(data)) is None
        assert next_frame(data, 0) is None


def test_written_frames_start_records() -> None:
    """What `frame` writes, plain or compressed, commit or not, is accepted."""
    big = b"compressible " * 400
    for t in TYPES:
        for payload in (b"", b"small", big):
            for commit in (False, True):
                data = frame(t.code, payload, commit=commit)
                outcome, rtype, flags, _, end = parse_at(data, 0)
                assert (outcome, rtype, end) == (OK, t.code, len(data))
                assert can_start(rtype, flags)
                assert bool(flags & FLAG_ZSTD) == (payload is big)
    assert len(_frame(1, 0, b"")) == HEADER_SIZE

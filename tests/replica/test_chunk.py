"""The chunk object of FORMAT.md section 14, byte by byte: round trips, and every
damage a reader must refuse (each found by flipping or cutting real bytes)."""

from __future__ import annotations

import hashlib
import struct
import zlib

import pytest

from journal.errors import CorruptionError, ReplicaCorruptionError
from journal.layout import (
    parse_replica_merged,
    parse_replica_slot,
    replica_chunk_key,
    replica_merged_key,
)
from journal.replica import chunk as ck

WRITER = bytes(range(16))
KEY = "p/sessions/d/chunks/00000000000000000007"


def _data(n: int = 7, body: bytes = b"log bytes " * 5, start: int = 100) -> ck.Chunk:
    return ck.Chunk(
        kind=ck.KIND_DATA,
        n=n,
        epoch=3,
        segment_base=64,
        start=start,
        end=start + len(body),
        shipped_at_ms=1_700_000_000_123,
        commits=2,
        writer=WRITER,
        body=body,
    )


def test_header_bytes_are_where_the_table_says() -> None:
    c = _data()
    data = ck.encode_chunk(c)
    assert len(data) == 128 + len(c.body)
    assert data[0:8] == b"JRNLCHK\0"
    assert struct.unpack_from("<HBBI", data, 8) == (1, ck.KIND_DATA, 0, len(c.body))
    assert struct.unpack_from("<QQQQQQ", data, 16) == (
        7,
        3,
        64,
        100,
        100 + len(c.body),
        c.shipped_at_ms,
    )
    assert struct.unpack_from("<II", data, 64) == (2, 0)
    assert data[72:88] == WRITER
    assert data[88:120] == hashlib.sha256(c.body).digest()
    assert struct.unpack_from("<II", data, 120) == (zlib.crc32(data[:120]), 0)
    assert data[128:] == c.body


@pytest.mark.parametrize(
    "c",
    [
        _data(),
        _data(body=b""),
        ck.Chunk(ck.KIND_BEGIN, 0, 1, 0, 0, 0, 5, 0, WRITER, b"identity file bytes"),
        ck.Chunk(ck.KIND_FENCE, 9, 2, 0, 0, 0, 6, 0, WRITER, b""),
        ck.Chunk(ck.KIND_DELETE, 10, 2, 0, 0, 0, 7, 0, WRITER, b""),
    ],
)
def test_round_trip(c: ck.Chunk) -> None:
    assert ck.decode_chunk(ck.encode_chunk(c), key=KEY, n=c.n) == c
    assert ck.decode_chunk(ck.encode_chunk(c), key=KEY) == c


def _refused(data: bytes, what: str, *, n: int | None = 7) -> ReplicaCorruptionError:
    with pytest.raises(ReplicaCorruptionError) as caught:
        ck.decode_chunk(data, key=KEY, n=n)
    assert KEY in str(caught.value)
    assert what in str(caught.value)
    assert isinstance(caught.value, CorruptionError)
    return caught.value


def _flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x40
    return bytes(out)


def _recrc(data: bytes) -> bytes:
    """The header's CRC recomputed: damage that the CRC alone would not show."""
    return data[:120] + struct.pack("<I", zlib.crc32(data[:120])) + data[124:]


def test_every_damage_is_refused_naming_the_key() -> None:
    good = ck.encode_chunk(_data())
    _refused(_flip(good, 0), "magic")
    for at in (9, 12, 20, 30, 45, 60, 66, 80, 100, 121):
        _refused(_flip(good, at), "CRC")  # any header byte, the CRC's own included
    _refused(_flip(good, 130), "SHA-256")  # a body byte
    _refused(_flip(good, len(good) - 1), "SHA-256")
    _refused(_recrc(_flip(good, 90)), "SHA-256")  # the stored digest itself
    _refused(_recrc(good[:8] + struct.pack("<H", 2) + good[10:]), "version")
    _refused(_recrc(good[:10] + b"\x05" + good[11:]), "kind")
    _refused(_recrc(good[:11] + b"\x01" + good[12:]), "flags")
    _refused(good, "name says 8", n=8)
    _refused(good[:100], "shorter than a chunk header")
    _refused(good[:-1], "cut")
    _refused(good + b"\0", "after the chunk")
    # A DATA chunk whose end is not start + body length.
    bad_end = bytearray(good)
    struct.pack_into("<Q", bad_end, 48, 101)
    _refused(_recrc(bytes(bad_end)), "DATA end")


def test_merged_objects_split_into_checked_chunks() -> None:
    chunks = [_data(n, bytes([n]) * n, start=100 + sum(range(n))) for n in range(4, 8)]
    merged = b"".join(ck.encode_chunk(c) for c in chunks)
    key = replica_merged_key("p", "d", 4, 7)
    assert ck.split_merged(merged, key, 4, 7) == chunks
    with pytest.raises(ReplicaCorruptionError, match="its name says 8"):
        ck.split_merged(merged, key, 4, 8)
    with pytest.raises(ReplicaCorruptionError, match="where chunk 3 belongs"):
        ck.split_merged(merged, key, 3, 7)
    with pytest.raises(ReplicaCorruptionError, match="SHA-256"):
        ck.split_merged(_flip(merged, len(merged) - 1), key, 4, 7)
    with pytest.raises(ReplicaCorruptionError, match="cut"):
        ck.split_merged(merged[:-3], key, 4, 7)
    with pytest.raises(ReplicaCorruptionError):
        ck.split_merged(b"", key, 4, 7)


def test_key_names_parse_back() -> None:
    key = replica_chunk_key("a/b", "s-x", 12)
    assert key == "a/b/sessions/s-x/chunks/00000000000000000012"
    assert replica_chunk_key("", "s-x", 0) == "sessions/s-x/chunks/00000000000000000000"
    assert parse_replica_slot(key) == 12
    assert parse_replica_slot("a/b/sessions/s-x/chunks/12") is None
    merged = replica_merged_key("", "s-x", 64, 127)
    assert merged == "sessions/s-x/merged/00000000000000000064-00000000000000000127"
    assert parse_replica_merged(merged) == (64, 127)
    assert parse_replica_merged(replica_merged_key("", "s-x", 5, 4)) is None
    assert ck.lease_key("p", "d") == "p/sessions/d/lease"
    assert ck.head_key("p", "d") == "p/heads/d"


def test_head_round_trip_and_strict_decode() -> None:
    head = ck.Head(
        session_id="s1",
        dir="s1-abc",
        chunk=4,
        begin=0,
        end=900,
        epoch=1,
        deleted=False,
        updated_at_ms=5,
        summary=None,
    )
    import msgspec

    data = msgspec.json.encode(head)
    assert ck.decode_head(data, "p/heads/s1-abc") == head
    with pytest.raises(ReplicaCorruptionError, match="p/heads/s1-abc"):
        ck.decode_head(b'{"format": 1}', "p/heads/s1-abc")
    with pytest.raises(ReplicaCorruptionError, match="p/heads/s1-abc"):
        ck.decode_head(b"not json", "p/heads/s1-abc")

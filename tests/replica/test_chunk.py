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


def _only_corruption(data: bytes, key: str = KEY, n: int | None = 7) -> ck.Chunk | None:
    """decode_chunk's answer: the chunk, or None for a ReplicaCorruptionError naming
    the key; any other exception fails the test."""
    try:
        return ck.decode_chunk(data, key=key, n=n)
    except ReplicaCorruptionError as exc:
        assert key in str(exc)
        return None


def test_no_flipped_byte_yields_another_chunk() -> None:
    """Each byte of a real chunk object flipped in turn: refused naming the key, or
    (the 4 reserved bytes after the CRC, which carry nothing) the very same chunk."""
    c = _data(body=bytes(range(40)))
    good = ck.encode_chunk(c)
    undetected = []
    for at in range(len(good)):
        for mask in (0x01, 0x80, 0xFF):
            out = bytearray(good)
            out[at] ^= mask
            got = _only_corruption(bytes(out))
            if got is not None:
                assert got == c, f"byte {at} ^ {mask:#x} decoded as another chunk"
                undetected.append(at)
    assert all(ck.HEADER.size + 4 <= at < ck.HEADER_SIZE for at in undetected), undetected


def test_every_cut_and_every_extension_is_refused() -> None:
    good = ck.encode_chunk(_data(body=b"x" * 33))
    for size in range(len(good)):
        assert _only_corruption(good[:size]) is None, size
    for extra in (b"\0", b"\0" * 127, good):
        assert _only_corruption(good + extra) is None


def test_random_damage_raises_only_replica_corruption() -> None:
    """Random bytes, and real headers with random fields under a recomputed CRC (so
    the checks after the CRC see them): nothing but ReplicaCorruptionError escapes."""
    import random

    rng = random.Random(18)
    good = ck.encode_chunk(_data())
    for _ in range(3000):
        choice = rng.randrange(4)
        if choice == 0:
            data = rng.randbytes(rng.randrange(0, 300))
        elif choice == 1:
            data = ck.MAGIC + rng.randbytes(rng.randrange(0, 300))
        else:
            head = bytearray(good[: ck.HEADER.size])
            for _ in range(rng.randrange(1, 6)):
                head[rng.randrange(8, ck.HEADER.size)] = rng.randrange(256)
            data = _recrc(bytes(head) + good[ck.HEADER.size :])
            if choice == 3:
                data = data[: rng.randrange(len(data) + 1)]
        try:
            ck.decode_chunk(data, key=KEY, n=rng.choice([None, 7]))
        except ReplicaCorruptionError as exc:
            assert KEY in str(exc)
        try:
            ck.split_merged(data, KEY, 7, 7)
        except ReplicaCorruptionError as exc:
            assert KEY in str(exc)


def _merged(slots: list[int]) -> bytes:
    return b"".join(ck.encode_chunk(_data(n, bytes([n]) * 3)) for n in slots)


def test_a_merged_object_with_a_gap_or_extra_bytes_is_refused_naming_it() -> None:
    key = replica_merged_key("p", "d", 4, 7)
    with pytest.raises(ReplicaCorruptionError, match="where chunk 6 belongs") as caught:
        ck.split_merged(_merged([4, 5, 7]), key, 4, 7)
    assert key in str(caught.value)
    with pytest.raises(ReplicaCorruptionError, match="where chunk 5 belongs"):
        ck.split_merged(_merged([4, 4, 5, 6, 7]), key, 4, 7)  # a chunk twice
    with pytest.raises(ReplicaCorruptionError, match="its name says 7") as caught:
        ck.split_merged(_merged([4, 5, 6]), key, 4, 7)  # the last one missing
    assert key in str(caught.value)
    with pytest.raises(ReplicaCorruptionError, match="shorter than a chunk header"):
        ck.split_merged(_merged([4, 5, 6, 7]) + b"\0" * 10, key, 4, 7)
    with pytest.raises(ReplicaCorruptionError, match="no chunk magic"):
        ck.split_merged(_merged([4, 5, 6, 7]) + b"\0" * 200, key, 4, 7)
    # A chunk inside whose header is damaged: named by the merged object's key,
    # with the offset of the chunk inside it.
    data = bytearray(_merged([4, 5, 6, 7]))
    second = ck.HEADER_SIZE + 3
    data[second + 20] ^= 1
    with pytest.raises(ReplicaCorruptionError, match=f"CRC mismatch at offset {second}") as caught:
        ck.split_merged(bytes(data), key, 4, 7)
    assert key in str(caught.value)


def test_json_objects_refused_naming_the_key() -> None:
    for data in (b"", b"[]", b'{"session_id": 1}', b"\xff\xfe", b"{" * 10_000):
        with pytest.raises(ReplicaCorruptionError, match="p/heads/x"):
            ck.decode_head(data, "p/heads/x")

"""The objects of a replica in a bucket, byte by byte (FORMAT.md section 14).

A chunk object is a 128-byte header and a body. Its header names the slot (`n`)
of the session's chain it was written into, the writer's id and lease epoch, and
for a DATA chunk the log positions its body covers; a CRC-32 guards the header and
a SHA-256 the body. A merged object is chunk objects concatenated as they were.
Lease, head and marker objects are small JSON documents; object names are
`layout.py`'s (the one module that spells every name).
"""

from __future__ import annotations

import hashlib
import itertools
import struct
import time
import zlib
from typing import Any

import msgspec

from ..errors import ReplicaCorruptionError
from ..layout import (
    replica_chunk_key,
    replica_chunks_prefix,
    replica_head_key,
    replica_lease_key,
    replica_marker_key,
    replica_merged_key,
    replica_merged_prefix,
    replica_state_key,
)
from .objects import ObjectStore

MAGIC = b"JRNLCHK\0"
VERSION = 1
KIND_BEGIN = 1  # a new incarnation; body: the SESSION identity file
KIND_DATA = 2  # body: log bytes [start, end) of the segment at segment_base
KIND_FENCE = 3  # empty; a new writer's epoch
KIND_DELETE = 4  # empty; the incarnation was deleted
KINDS = (KIND_BEGIN, KIND_DATA, KIND_FENCE, KIND_DELETE)
KIND_NAMES = {KIND_BEGIN: "BEGIN", KIND_DATA: "DATA", KIND_FENCE: "FENCE", KIND_DELETE: "DELETE"}
# magic, version, kind, flags, body length, n, epoch, segment base, start, end,
# shipped_at_ms, commits, reserved, writer, sha256
HEADER = struct.Struct("<8sHBBIQQQQQQII16s32s")
CRC = struct.Struct("<II")  # CRC-32 of the 120 bytes before it, reserved
HEADER_SIZE = HEADER.size + CRC.size  # 128
MARKER_FORMAT = 1
HEAD_FORMAT = 1

# Re-exported names of the bucket's objects (layout.py spells them).
chunk_key = replica_chunk_key
chunks_prefix = replica_chunks_prefix
merged_key = replica_merged_key
merged_prefix = replica_merged_prefix
lease_key = replica_lease_key
head_key = replica_head_key
state_key = replica_state_key


class Chunk(msgspec.Struct):
    """One chunk of a session's chain."""

    kind: int
    n: int
    epoch: int
    segment_base: int
    start: int
    end: int
    shipped_at_ms: int
    commits: int
    writer: bytes  # 16 bytes
    body: bytes


def encode_chunk(c: Chunk) -> bytes:
    head = HEADER.pack(
        MAGIC,
        VERSION,
        c.kind,
        0,
        len(c.body),
        c.n,
        c.epoch,
        c.segment_base,
        c.start,
        c.end,
        c.shipped_at_ms,
        c.commits,
        0,
        c.writer,
        hashlib.sha256(c.body).digest(),
    )
    return head + CRC.pack(zlib.crc32(head), 0) + c.body


def _bad(key: str, what: str) -> ReplicaCorruptionError:
    return ReplicaCorruptionError(f"replica object {key!r}: {what}")


def decode_chunk_at(data: bytes, offset: int, key: str) -> tuple[Chunk, int]:
    """The chunk object at `offset` of `data` and the offset after it."""
    if len(data) - offset < HEADER_SIZE:
        raise _bad(
            key, f"{len(data) - offset} bytes at offset {offset}: shorter than a chunk header"
        )
    fields = HEADER.unpack_from(data, offset)
    (
        magic,
        version,
        kind,
        flags,
        length,
        n,
        epoch,
        base,
        start,
        end,
        shipped,
        commits,
        _,
        writer,
        sha,
    ) = fields
    if magic != MAGIC:
        raise _bad(key, f"no chunk magic at offset {offset}")
    crc, _ = CRC.unpack_from(data, offset + HEADER.size)
    if zlib.crc32(data[offset : offset + HEADER.size]) != crc:
        raise _bad(key, f"chunk header CRC mismatch at offset {offset}")
    if version != VERSION:
        raise _bad(key, f"chunk version {version} (this journal reads {VERSION})")
    if kind not in KINDS or flags != 0:
        raise _bad(key, f"chunk kind {kind} / flags {flags} at offset {offset}")
    body_at = offset + HEADER_SIZE
    if len(data) - body_at < length:
        raise _bad(key, f"chunk {n}: body of {length} bytes cut at {len(data) - body_at}")
    body = data[body_at : body_at + length]
    if hashlib.sha256(body).digest() != sha:
        raise _bad(key, f"chunk {n}: body SHA-256 mismatch")
    if kind == KIND_DATA and end != start + length:
        raise _bad(key, f"chunk {n}: DATA end {end} is not start {start} + {length}")
    c = Chunk(kind, n, epoch, base, start, end, shipped, commits, writer, body)
    return c, body_at + length


def decode_chunk(data: bytes, *, key: str, n: int | None = None) -> Chunk:
    """One chunk object, checked whole (`n`: the slot its key names)."""
    c, end = decode_chunk_at(data, 0, key)
    if end != len(data):
        raise _bad(key, f"{len(data) - end} bytes after the chunk")
    if n is not None and c.n != n:
        raise _bad(key, f"holds chunk {c.n}, its name says {n}")
    return c


def split_merged(data: bytes, key: str, first: int, last: int) -> list[Chunk]:
    """The chunks first..last of a merged object, each checked."""
    out: list[Chunk] = []
    offset = 0
    while offset < len(data):
        c, offset = decode_chunk_at(data, offset, key)
        if c.n != first + len(out):
            raise _bad(key, f"holds chunk {c.n} where chunk {first + len(out)} belongs")
        out.append(c)
    if not out or out[-1].n != last:
        raise _bad(key, f"ends at chunk {out[-1].n if out else None}, its name says {last}")
    return out


# ------------------------------------------------------------------ JSON objects
class Head(msgspec.Struct, forbid_unknown_fields=False):
    """The head object of a session: a hint of where its chain ends, and what
    `journal ls --replica` shows without reading the chain."""

    session_id: str
    dir: str
    chunk: int  # the newest slot this writer put (-1: none)
    begin: int  # the slot of the current incarnation's BEGIN (-1: none)
    end: int  # the log position shipped up to
    epoch: int
    deleted: bool
    updated_at_ms: int
    summary: dict[str, Any] | None = None
    format: int = HEAD_FORMAT


def read_head(objects: ObjectStore, prefix: str, dir_name: str) -> Head | None:
    """The session's head object; None when absent or unreadable (it is a hint)."""
    got = objects.get(replica_head_key(prefix, dir_name))
    if got is None:
        return None
    try:
        head = msgspec.json.decode(got[0], type=Head)
    except msgspec.DecodeError:
        return None
    return head if head.format == HEAD_FORMAT and head.dir == dir_name else None


def decode_head(data: bytes, key: str) -> Head:
    try:
        return msgspec.json.decode(data, type=Head)
    except msgspec.DecodeError as exc:
        raise _bad(key, f"not a head object: {exc}") from exc


def write_head(objects: ObjectStore, prefix: str, head: Head) -> None:
    objects.put(replica_head_key(prefix, head.dir), msgspec.json.encode(head))


def ensure_marker(objects: ObjectStore, prefix: str) -> None:
    """The prefix's marker object, created by the first writer (FORMAT.md section 14)."""
    key = replica_marker_key(prefix)
    if objects.get(key) is not None:
        return
    body = msgspec.json.encode({"format": MARKER_FORMAT, "created_at_ms": int(time.time() * 1000)})
    objects.put_if_absent(key, body)


def state_version_key(prefix: str, scope_dir: str, key_dir: str, at_ms: int, writer: bytes) -> str:
    """A new version's name (a per-process counter keeps two of one millisecond apart)."""
    return replica_state_key(prefix, scope_dir, key_dir, at_ms, writer.hex(), next(_versions))


_versions = itertools.count(1)

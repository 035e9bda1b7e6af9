"""Small whole-file records: the store manifest, session identity, snapshots.

Layout (FORMAT.md, "Whole-file records"): a 20-byte header then the payload.

    offset size field
    0      8    magic    b"JRNLMETA"
    8      2    version  format version of the file (u16)
    10     2    kind     1 manifest, 2 session identity, 3 snapshot, 4 state value,
                         5 delete intent, 6 catalog snapshot
    12     4    length   payload bytes (u32)
    16     4    crc32    zlib CRC-32 of the payload
    20     ...  payload  msgpack (zstd-compressed for snapshots, see there)
"""

from __future__ import annotations

import os
import struct
import zlib

from . import fsio
from .errors import CorruptionError, FormatVersionError, StorageError

META_MAGIC = b"JRNLMETA"
META_VERSION = 1
META_HEADER = struct.Struct("<8sHHII")
META_HEADER_SIZE = META_HEADER.size  # 20

KIND_MANIFEST = 1
KIND_IDENTITY = 2
KIND_SNAPSHOT = 3
KIND_STATE = 4
KIND_INTENT = 5
KIND_CATALOG_SNAPSHOT = 6


def encode_meta(kind: int, payload: bytes) -> bytes:
    return (
        META_HEADER.pack(META_MAGIC, META_VERSION, kind, len(payload), zlib.crc32(payload))
        + payload
    )


def decode_meta(data: bytes, kind: int, path: str) -> bytes:
    if len(data) < META_HEADER_SIZE:
        raise CorruptionError("file is shorter than its header", path=path, offset=len(data))
    magic, version, got_kind, length, crc = META_HEADER.unpack_from(data)
    if magic != META_MAGIC:
        raise CorruptionError("bad magic", path=path, offset=0)
    if version != META_VERSION:
        raise FormatVersionError(f"{path}: format version {version} is not supported")
    if got_kind != kind:
        raise CorruptionError(f"file kind {got_kind}, expected {kind}", path=path, offset=10)
    payload = data[META_HEADER_SIZE : META_HEADER_SIZE + length]
    if len(payload) != length:
        raise CorruptionError("payload is truncated", path=path, offset=len(data))
    if zlib.crc32(payload) != crc:
        raise CorruptionError("payload checksum mismatch", path=path, offset=META_HEADER_SIZE)
    return payload


def read_meta(path: str, kind: int) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}") from exc
    return decode_meta(data, kind, path)


# Kinds that are caches: derived data, rebuilt from the logs when missing, stale
# or torn. Writing one is never the caller's error (see `write_meta`).
CACHE_KINDS = frozenset({KIND_SNAPSHOT, KIND_CATALOG_SNAPSHOT})


def write_meta(
    path: str, kind: int, payload: bytes, *, durable: bool, sync_content: bool = False
) -> bool:
    """Write a whole-file record atomically (see `fsio.write_file`); True if written.

    A cache (`CACHE_KINDS`) that cannot be written (a full disk, an I/O error) is
    left as it was and False returned: it runs after a commit point, whose call
    must not fail for it, and the next open rebuilds what it lacks. Any other
    kind's failure raises `StorageError`.
    """
    data = encode_meta(kind, payload)
    if kind in CACHE_KINDS:
        try:
            fsio.write_file(path, data, durable=durable, sync_content=sync_content)
        except (StorageError, OSError):
            return False
        return True
    fsio.write_file(path, data, durable=durable, sync_content=sync_content)
    return True


def exists(path: str) -> bool:
    return os.path.exists(path)

"""The store manifest, `ROOT/JOURNAL` (FORMAT.md section 8): the store's format and
the retention policy recorded for it.

A whole-file record (metafile, kind 1) written when the store is created and
rewritten atomically (temporary file, sync, rename: `fsio.write_file`) when a
caller records a different retention policy. A manifest of an older version has
no `retention`; an older version reading this one ignores the field.
"""

from __future__ import annotations

import os
import time

import msgspec

from . import storecreate
from .errors import CorruptionError, FormatVersionError, NotFoundError
from .layout import MANIFEST_FILE
from .metafile import KIND_MANIFEST, read_meta, write_meta
from .retention import RetentionPolicy

STORE_FORMAT = 1


class Manifest(msgspec.Struct):
    format: int = STORE_FORMAT
    created_at: int = 0
    retention: RetentionPolicy | None = None


def open_manifest(root: str, *, create: bool) -> Manifest:
    """The manifest of the store at `root`, creating the store if `create`."""
    path = os.path.join(root, MANIFEST_FILE)
    try:
        raw = read_meta(path, KIND_MANIFEST)
    except FileNotFoundError:
        if not create:
            raise NotFoundError(f"no journal store at {root}") from None
        made = Manifest(STORE_FORMAT, int(time.time()))
        storecreate.create_or_finish(root, MANIFEST_FILE, msgspec.msgpack.encode(made))
        return read(root)
    return _decode(raw, path)


def read(root: str) -> Manifest:
    path = os.path.join(root, MANIFEST_FILE)
    return _decode(read_meta(path, KIND_MANIFEST), path)


def _decode(raw: bytes, path: str) -> Manifest:
    try:
        info = msgspec.msgpack.decode(raw, type=Manifest)
    except msgspec.ValidationError as exc:
        raise CorruptionError(f"store manifest {path}: {exc}") from None
    if info.format != STORE_FORMAT:
        raise FormatVersionError(
            f"store {os.path.dirname(path)} has format {info.format};"
            f" this version reads {STORE_FORMAT}"
        )
    storecreate.ensure_dirs(os.path.dirname(path))
    return info


def record_retention(root: str, policy: RetentionPolicy | None) -> Manifest:
    """Record `policy` (None: none) in the manifest, durably; the manifest after."""
    info = read(root)
    if info.retention == policy:
        return info
    updated = msgspec.structs.replace(info, retention=policy)
    path = os.path.join(root, MANIFEST_FILE)
    write_meta(path, KIND_MANIFEST, msgspec.msgpack.encode(updated), durable=True)
    return updated

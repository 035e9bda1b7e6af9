"""Every path and file name of a store and of a session directory (FORMAT.md section 1).

No other module spells a file or directory name of the store; they ask here. This
module is the bottom layer: it imports nothing of the package, so the log, the
catalog and the session can all use it.

Session ids and state scopes map to directory names `<slug>-<digest>`: the slug is a
short, lowercase, cosmetic hint taken from the id (so a person listing `sessions/`
can recognise it); the digest is 26 base32 characters (130 bits) of SHA-256 over the
id's UTF-8 bytes, so ids that differ in any way, case included, get different names
on case-insensitive and Windows filesystems too. Names never contain a path
separator, never start with a dot and never equal a reserved device name. The
identity file inside the directory stores the exact id and is checked on every
open, so a digest collision is detected, never silently shared.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from collections.abc import Callable
from typing import Any

# ------------------------------------------------------------------ a store's root
MANIFEST_FILE = "JOURNAL"  # the store's manifest: format version, kind
SESSIONS_DIR = "sessions"  # one directory per session, named by `dir_name`
TMP_DIR = "tmp"  # private builds of new session directories, imports, spares
STATE_DIR = "state"  # middleware state: one directory per scope, named by `dir_name`
CATALOG_DIR = "catalog"  # the session catalog (a log of its own, a snapshot)
PROCS_DIR = "procs"  # one file per live process that writes the catalog
TXN_DIR = "txn"  # delete intents
TRASH_DIR = "trash"  # directories a delete or a recovery moved away
TREE_LOCK = "tree.lock"  # held while writing or carrying out a delete intent
INTENT_PREFIX = "delete-"  # a delete intent's file name prefix, in txn/
SPARE_PREFIX = "spare-"  # a spare session directory's name prefix, in tmp/
CATALOG_BROKEN_PREFIX = "catalog.broken."  # a catalog set aside as undecodable
RETENTION_STAMP_FILE = "retention.last"  # its mtime: when a retention run last began
REPLICA_ID_FILE = "replica.id"  # the writer id this root ships to a bucket under (journal[s3])
# The directories every store has, and those a failed creation may leave behind.
CORE_DIRS = (SESSIONS_DIR, TMP_DIR, STATE_DIR)
LEFTOVER_DIRS = frozenset({*CORE_DIRS, TXN_DIR, TRASH_DIR, CATALOG_DIR, PROCS_DIR})

# --------------------------------------------------------- in a session directory
IDENTITY_FILE = "SESSION"  # the immutable identity (session id, parent, format)
LOCK_FILE = "LOCK"  # the writers' flock (also the catalog's, in catalog/)
SNAPSHOT_FILE = "snapshot"  # the head at some commit (also the catalog's)
LOG_DIR = "log"  # the segments (also the catalog's)
# The LOSS record that `journal repair --accept-loss` is writing, until it is done
# (FORMAT.md section 5): while it exists, the session refuses writes.
LOSS_PENDING_FILE = "loss.pending"
CUT_DIR = "repair"  # where `journal repair` keeps the bytes it cuts
BOOT_FILE = "BOOT"  # in catalog/: the boot a catalog's process files belong to
CATALOG_BASE_FILE = "base"  # in catalog/: the paged base (catalogbase.py)
CATALOG_BASE_TMP_PREFIX = ".base.tmp."  # in catalog/: a base being written
CATALOG_LOG_TMP_PREFIX = ".log.tmp."  # in catalog/: its first log, before it is renamed log/


def session_path(root: str, session_id: str) -> str:
    """The directory of the session `session_id` in the store at `root`."""
    return os.path.join(root, SESSIONS_DIR, dir_name(session_id))


def state_path(root: str, scope: str) -> str:
    """The directory of the middleware-state scope `scope` in the store at `root`."""
    return os.path.join(root, STATE_DIR, dir_name(scope))


def is_store(root: str) -> bool:
    """Whether `root` holds a store's manifest."""
    return os.path.exists(os.path.join(root, MANIFEST_FILE))


def _builtin_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 (the same digest, without OpenSSL's per-call lookups:
    most of a new id's name cost, cold), else hashlib's."""
    for module, name in (("_sha256", "sha256"), ("_sha2", "sha256")):  # 3.11, 3.12+
        try:
            found: Callable[[bytes], Any] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        return found
    import hashlib

    return hashlib.sha256


_new_sha256 = _builtin_sha256()

_SLUG_BAD = re.compile(r"[^a-z0-9_-]+")
SLUG_MAX = 24


_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"  # RFC 4648's alphabet, lowercased
_BASE32_PAIRS = [a + b for a in _BASE32 for b in _BASE32]  # 10 bits -> 2 characters
_SHIFTS = range(120, -1, -10)


@functools.lru_cache(maxsize=8192)  # called on every store call; hashing is not free
def dir_name(ident: str) -> str:
    """The directory name of a session id or state scope (see the module docstring)."""
    digest = _new_sha256(ident.encode("utf-8")).digest()
    # The first 26 characters of its base32 encoding: its first 130 bits, 10 at a
    # time (base64.b32encode is pure Python, and encodes all 256 bits).
    bits = int.from_bytes(digest[:17], "big") >> 6
    pairs = _BASE32_PAIRS
    tag = "".join([pairs[(bits >> shift) & 1023] for shift in _SHIFTS])
    lower = ident.lower()
    if lower.isascii() and lower.replace("-", "a").replace("_", "a").isalnum():
        slug = lower[:SLUG_MAX].strip("_")  # nothing to replace (the common case)
    else:
        slug = _SLUG_BAD.sub("_", lower)[:SLUG_MAX].strip("_")
    return f"{slug}-{tag}" if slug else tag


# ------------------------------------------------ in a bucket (FORMAT.md section 14)
REPLICA_MARKER = "JOURNAL-REPLICA"  # at the prefix: marks it as a journal replica
REPLICA_SESSIONS = "sessions"  # sessions/<dir>/{chunks/,merged/,lease,floor}
REPLICA_HEADS = "heads"  # heads/<dir>: one small summary per session
REPLICA_STATE = "state"  # state/<scope dir>/<key dir>/<version>
_SLOT_DIGITS = 20


def _bucket_key(prefix: str, *parts: str) -> str:
    return "/".join((prefix, *parts)) if prefix else "/".join(parts)


def replica_marker_key(prefix: str) -> str:
    return _bucket_key(prefix, REPLICA_MARKER)


def replica_sessions_prefix(prefix: str) -> str:
    return _bucket_key(prefix, REPLICA_SESSIONS, "")


def replica_chunks_prefix(prefix: str, dir_name: str) -> str:
    return _bucket_key(prefix, REPLICA_SESSIONS, dir_name, "chunks", "")


def replica_chunk_key(prefix: str, dir_name: str, n: int) -> str:
    return replica_chunks_prefix(prefix, dir_name) + f"{n:0{_SLOT_DIGITS}d}"


def replica_merged_prefix(prefix: str, dir_name: str) -> str:
    return _bucket_key(prefix, REPLICA_SESSIONS, dir_name, "merged", "")


def replica_merged_key(prefix: str, dir_name: str, first: int, last: int) -> str:
    return (
        replica_merged_prefix(prefix, dir_name)
        + f"{first:0{_SLOT_DIGITS}d}-{last:0{_SLOT_DIGITS}d}"
    )


def replica_lease_key(prefix: str, dir_name: str) -> str:
    return _bucket_key(prefix, REPLICA_SESSIONS, dir_name, "lease")


def replica_floor_key(prefix: str, dir_name: str) -> str:
    return _bucket_key(prefix, REPLICA_SESSIONS, dir_name, "floor")


def replica_heads_prefix(prefix: str) -> str:
    return _bucket_key(prefix, REPLICA_HEADS, "")


def replica_head_key(prefix: str, dir_name: str) -> str:
    return replica_heads_prefix(prefix) + dir_name


def replica_state_prefix(prefix: str) -> str:
    return _bucket_key(prefix, REPLICA_STATE, "")


def replica_state_key(
    prefix: str, scope_dir: str, key_dir: str, at_ms: int, writer_hex: str, counter: int
) -> str:
    return (
        replica_state_prefix(prefix)
        + f"{scope_dir}/{key_dir}/{at_ms:016d}-{writer_hex}-{counter:08d}"
    )


def parse_replica_slot(name: str) -> int | None:
    """The slot number of a chunk object's last name part (None: not a chunk name)."""
    last = name.rsplit("/", 1)[-1]
    if len(last) != _SLOT_DIGITS or not last.isdigit():
        return None
    return int(last)


def parse_replica_merged(name: str) -> tuple[int, int] | None:
    """(first, last) of a merged object's name (None: not one)."""
    first, _, last = name.rsplit("/", 1)[-1].partition("-")
    if len(first) != _SLOT_DIGITS or len(last) != _SLOT_DIGITS:
        return None
    if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
        return None
    return int(first), int(last)


def parse_replica_state(name: str) -> tuple[str, str, int] | None:
    """(scope dir, key dir, at_ms) of a state version's name below state/."""
    parts = name.split("/")
    if len(parts) < 3:
        return None
    scope, key, version = parts[-3:]
    at, _, _ = version.partition("-")
    if len(at) != 16 or not at.isdigit():
        return None
    return scope, key, int(at)

"""The catalog's records and entries: what its log holds and what its base holds.

The catalog log (catalog.py) holds `CatalogRecord`s; its base (catalogbase.py)
holds, per listed session, one `BaseEntry` (the summary, the log position it
reflects, every execution key and where its copy is) and the keys of the base's
other tables (see `Table` ids below and FORMAT.md section 13).
"""

from __future__ import annotations

import msgspec

from .errors import CorruptionError
from .layout import CATALOG_DIR
from .types import SessionSummary

OP_UPSERT = 1
OP_DELETE = 2
OP_RESET = 3
"""Reconciliation: the entry is replaced by this one whatever `covered` says.

An upsert only wins over a greater `covered`, which is right among writers of
one log, but the catalog can also be *ahead* of a session's log: a copy taken
while a writer ran (`cp -a` copies the catalog after the session), a power loss
in "os" mode (the catalog's unsynced bytes survived, the log's did not), a log
cut by `journal repair`. Only a record derived from the log as it is can undo
that; it is written under the session's writer lock, so no commit is missed.
"""
OP_EXECUTION = 4
"""A copy of one execution record (`record`), appended right after the upsert of the
commit that added it, so that `recent_executions` reads its answer from the catalog
log alone instead of opening up to `limit` sessions. Derived data like the rest:
an entry whose copy is unknown (rebuilt or reconciled entries) or fails its checks
is read from the session's own log instead."""


class CatalogRecord(msgspec.Struct, array_like=True):
    op: int
    session_id: str
    covered: int  # session log position the summary reflects (newer wins)
    summary: SessionSummary | None = None
    execution: tuple[int, int] | None = None  # (checkpoint sequence, started_at_ms)
    executions: list[tuple[int, int]] = msgspec.field(default_factory=list)  # full list on rebuild
    record: bytes = b""  # OP_EXECUTION: the ExecutionRecord payload (msgpack)
    where: list[tuple[int, int, int]] = msgspec.field(default_factory=list)  # always empty


decode_record_payload = msgspec.msgpack.Decoder(CatalogRecord).decode
encode = msgspec.msgpack.Encoder().encode


class BaseEntry(msgspec.Struct, array_like=True):
    """One listed session in the base's sessions table."""

    covered: int
    summary: SessionSummary
    executions: list[tuple[int, int]]  # (checkpoint sequence, started_at_ms)
    where: list[tuple[int, int, int]]  # (sequence, catalog log position, framed size)


class BaseMeta(msgspec.Struct, array_like=True):
    """The base's `meta`: the catalog log position it reflects, and its anchor."""

    covered: int
    anchor_pos: int  # the commit-closing record that ends at `covered` (checked on open)
    anchor_crc: int
    sessions: int  # listed sessions
    log_bytes: int  # catalog log bytes the base replaces (its `covered`)


decode_base_entry = msgspec.msgpack.Decoder(BaseEntry).decode
decode_summary = msgspec.msgpack.Decoder(SessionSummary).decode
decode_meta = msgspec.msgpack.Decoder(BaseMeta).decode

# The base's tables: id -> (entry type, key type, key fields, field of the session id).
T_SESSIONS = 1  # (session_id, BaseEntry bytes)
T_ORDER = 2  # (updated_at, sequence, session_id, SessionSummary bytes)
T_OWNERS = 3  # (owner_id, updated_at, sequence, session_id, SessionSummary bytes)
T_PARENTS = 4  # (parent_session_id, session_id, b"")
T_EXECS = 5  # (started_at_ms, session_id, sequence, copy position or -1, copy size)
T_DIRS = 6  # (directory name, session_id, b"")
TABLES: dict[int, tuple[object, object, int, int]] = {
    T_SESSIONS: (tuple[str, bytes], tuple[str], 1, 0),
    T_ORDER: (tuple[int, int, str, bytes], tuple[int, int, str], 3, 2),
    T_OWNERS: (tuple[str, int, int, str, bytes], tuple[str, int, int, str], 4, 3),
    T_PARENTS: (tuple[str, str, bytes], tuple[str, str], 2, 1),
    T_EXECS: (tuple[int, str, int, int, int], tuple[int, str, int], 3, 1),
    T_DIRS: (tuple[str, str, bytes], tuple[str, str], 2, 1),
}

SortKey = tuple[int, int, str]  # (updated_at, sequence, session_id), ascending
ExecKey = tuple[int, str, int]  # (started_at_ms, session_id, sequence), ascending
Span = tuple[int, int]  # (position, framed size) of a record in the catalog log


def sort_key(s: SessionSummary) -> SortKey:
    return (s.updated_at, s.sequence, s.session_id)


def decode_record(payload: bytes, pos: int) -> CatalogRecord:
    try:
        return decode_record_payload(payload)
    except msgspec.DecodeError as exc:
        raise CorruptionError(
            f"catalog record does not decode: {exc}", path=CATALOG_DIR, offset=pos
        ) from exc


def copy_of(key: ExecKey, payload: bytes) -> bytes | None:
    """The ExecutionRecord bytes of an execution copy, if it is that key's (else None)."""
    try:
        r = decode_record_payload(payload)
    except msgspec.DecodeError:
        return None
    if r.op != OP_EXECUTION or r.session_id != key[1] or r.execution != (key[2], key[0]):
        return None
    return r.record

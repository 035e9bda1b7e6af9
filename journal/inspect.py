"""The interface for offline tools: what the `journal` command line, and any tool like
it, uses beyond the public API (`journal/__init__.py`).

The command line imports only `journal` and this module; everything here is meant
to stay. It offers:

- views of a store (`session_view`, `listed_sessions`, `children_of`,
  `state_items`, `live_holder`, `is_store`), catalog cursors as text
  (`cursor_text`, `parse_cursor`) and `refresh_catalog`, which re-derives
  catalog entries after a tool changed a session's log behind the store's back;
- the log itself (`replay`, `describe`, `session_stats`, `dir_sizes`). These read
  the log directly (no lock, no caches), so they work on a copied directory, on a
  store another process is writing, and on a damaged log up to the damage;
- the tools' entry points: `verify_store`, `first_damage`, `describe_loss`,
  `loss_notes`, `repair_session`, `accept_loss`, `salvage_session`,
  `export_sessions`, `import_bundle` and `compact_session`.
"""

from __future__ import annotations

import datetime
import heapq
import importlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from . import payloads
from .errors import InvalidInputError, SessionBusyError
from .layout import LOCK_FILE, PROCS_DIR, dir_name, is_store, session_path
from .locks import FileLock
from .record import (
    CHECKPOINT,
    COMMIT,
    DICT,
    EVENT,
    EXECUTION,
    FLAG_ZSTD,
    TRANSCRIPT,
    TYPE_NAMES,
    Record,
)
from .scan import ScanState
from .sessiondir import open_log
from .store import Store
from .types import SessionCursor, SessionSummary

if TYPE_CHECKING:
    from .bundle import DamagedSessionsError, export_sessions, import_bundle
    from .compact import compact_session
    from .loss import accept_loss, loss_notes
    from .repair import repair_session
    from .salvage import salvage_session
    from .verify import SEVERITY_CACHE, SEVERITY_DATA, describe_loss, first_damage, verify_store
else:
    # The tools' entry points, each imported on first use: together they cost more
    # than the rest of the command line (bundle alone imports hashlib, tarfile and
    # tempfile), and a call like `journal ls` uses none of them.
    _TOOLS = {
        "DamagedSessionsError": "bundle",
        "export_sessions": "bundle",
        "import_bundle": "bundle",
        "compact_session": "compact",
        "accept_loss": "loss",
        "loss_notes": "loss",
        "repair_session": "repair",
        "salvage_session": "salvage",
        "SEVERITY_CACHE": "verify",
        "SEVERITY_DATA": "verify",
        "describe_loss": "verify",
        "first_damage": "verify",
        "verify_store": "verify",
    }

    def __getattr__(name: str) -> object:
        module = _TOOLS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", __package__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_TOOLS})


_DECODERS = payloads.DECODERS
_to_builtins = msgspec.to_builtins


def describe(rec: Record) -> dict[str, Any]:
    """A JSON-ready view of one committed record."""
    out: dict[str, Any] = {"position": rec.pos, "type": TYPE_NAMES[rec.rtype], "bytes": rec.size}
    if rec.rtype not in _DECODERS:
        return out  # PAD: filler left by compact
    p = _DECODERS[rec.rtype].decode(rec.payload)
    if rec.rtype == CHECKPOINT:
        header = msgspec.msgpack.decode(bytes(p.header))
        out.update(
            sequence=p.sequence,
            epoch=p.epoch,
            context_kept=p.base,
            context_added=[msgspec.msgpack.decode(bytes(i)) for i in p.items],
            receipts=p.receipts,
            checkpoint=header,
            updated_at=p.updated_at,
        )
    elif rec.rtype == TRANSCRIPT:
        out.update(
            sequence=p.sequence,
            created_at=p.created_at,
            items=[msgspec.msgpack.decode(bytes(i)) for i in p.items],
        )
    elif rec.rtype == EXECUTION:
        out.update(sequence=p.sequence, record=_to_builtins(p.record))
    elif rec.rtype == DICT:
        out.update(dict_id=p.dict_id, dictionary_bytes=len(p.data))
    elif rec.rtype == EVENT:
        out.update(
            sequence=p.sequence,
            recorded_at_ms=p.recorded_at_ms,
            event=_to_builtins(p.event),
            stream_metrics=_to_builtins(p.stream_metrics),
            removes=p.removes,
            transient=p.transient,
        )
    else:
        out.update({f: getattr(p, f) for f in p.__struct_fields__})
        out["type"] = "commit"
    return out


def replay(directory: str, state: ScanState | None = None) -> Iterator[list[Record]]:
    """Every committed record group of a session, in log order, up to the first damage
    (`state`, when given, says where and why the scan stopped)."""
    log = open_log(directory)
    try:
        yield from log.committed(0, state if state is not None else ScanState(), strict=False)
    finally:
        log.close()


# The views are msgspec Structs, not dataclasses: a dataclass costs about a millisecond
# to define (it compiles its methods), a Struct some microseconds, paid by every call.
class TypeStats(msgspec.Struct):
    records: int = 0
    stored_bytes: int = 0
    payload_bytes: int = 0  # after decompression
    compressed_records: int = 0


class Stats(msgspec.Struct):
    commits: int = 0
    log_bytes: int = 0  # bytes of the committed records read
    file_bytes: int = 0  # apparent size of every file of the session
    disk_bytes: int = 0  # blocks allocated to them (du)
    by_type: dict[str, TypeStats] = msgspec.field(default_factory=dict)
    # (bytes, position, type) of the largest records; (day, commits, bytes) per day
    largest: list[tuple[int, int, str]] = msgspec.field(default_factory=list)
    growth: list[tuple[str, int, int]] = msgspec.field(default_factory=list)


def session_stats(directory: str, top: int = 5) -> Stats:
    """What a session's log holds, by record type and by day, and its largest records."""
    stats = Stats()
    days: dict[str, list[int]] = {}
    last_day = "?"
    for commit in replay(directory):
        stats.commits += 1
        commit_bytes = sum(r.size for r in commit)
        # a DICT commit carries no time: it counts on the day of the commit before it
        day = last_day if commit[0].rtype == DICT else "?"
        for rec in commit:
            t = stats.by_type.setdefault(TYPE_NAMES[rec.rtype], TypeStats())
            t.records += 1
            t.stored_bytes += rec.size
            t.payload_bytes += len(rec.payload) + 10
            if rec.flags & FLAG_ZSTD:
                t.compressed_records += 1
            item = (rec.size, rec.pos, TYPE_NAMES[rec.rtype])
            if len(stats.largest) < top:
                heapq.heappush(stats.largest, item)
            else:
                heapq.heappushpop(stats.largest, item)
            if rec.rtype == COMMIT:
                at = payloads.commit_decoder.decode(rec.payload).committed_at_ms
                day = datetime.datetime.fromtimestamp(at / 1000, datetime.timezone.utc).strftime(
                    "%Y-%m-%d"
                )
            elif rec.rtype == EVENT and rec.commits:
                at = payloads.event_decoder.decode(rec.payload).recorded_at_ms
                day = datetime.datetime.fromtimestamp(at / 1000, datetime.timezone.utc).strftime(
                    "%Y-%m-%d"
                )
        last_day = day
        d = days.setdefault(day, [0, 0])
        d[0] += 1
        d[1] += commit_bytes
        stats.log_bytes += commit_bytes
    stats.largest.sort(reverse=True)
    stats.growth = [(day, c, b) for day, (c, b) in sorted(days.items())]
    stats.file_bytes, stats.disk_bytes = dir_sizes(directory)
    return stats


def dir_sizes(directory: str) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under `directory`."""
    files = disk = 0
    for dirpath, _dirs, names in os.walk(directory):
        for name in names:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except OSError:
                continue
            files += st.st_size
            disk += getattr(st, "st_blocks", 0) * 512
    return files, disk


# ------------------------------------------------------------------ store views
class SessionView(msgspec.Struct, frozen=True):
    """What an open session says of itself (`session_view`)."""

    session_id: str
    directory: str
    sequence: int  # of its latest checkpoint
    log_bytes: int  # of committed records
    events: int  # the latest event sequence
    transcript_batches: int
    executions: int


def cursor_text(c: SessionCursor) -> str:
    """A catalog cursor as `journal ls` prints it: UPDATED_AT:SEQUENCE:SESSION_ID."""
    return f"{c.updated_at}:{c.sequence}:{c.session_id}"


def parse_cursor(text: str) -> SessionCursor:
    """The cursor `cursor_text` printed; `InvalidInputError` for any other text."""
    parts = text.split(":", 2)
    try:
        return SessionCursor(updated_at=int(parts[0]), sequence=int(parts[1]), session_id=parts[2])
    except (ValueError, IndexError):
        raise InvalidInputError(
            f"{text!r} is not a session cursor (UPDATED_AT:SEQUENCE:SESSION_ID)"
        ) from None


def session_view(store: Store, session_id: str) -> SessionView | None:
    """A session's directory and counts (None: no such session). Opens the session,
    so a damaged one raises its `CorruptionError`."""
    sess = store.open_sessions.get(session_id)
    if sess is None:
        return None
    return sess.read_head(
        lambda head: SessionView(
            session_id=session_id,
            directory=sess.dir,
            sequence=head.sequence,
            log_bytes=head.covered,
            events=head.event_counter,
            transcript_batches=head.transcripts,
            executions=head.executions,
        )
    )


def listed_sessions(store: Store) -> dict[str, SessionSummary]:
    """Every session the catalog lists, by id, as of now."""
    store.catalog.refresh()
    return store.catalog.listed()


def children_of(store: Store) -> dict[str, list[str]]:
    """Every parent id the catalog knows, with the listed sessions forked from it."""
    store.catalog.refresh()
    return store.catalog.children_of()


def state_items(store: Store, scope: str) -> list[tuple[str, Any]]:
    """Every (key, value) of one state scope, sorted by key."""
    return store.state.keys(scope)


def refresh_catalog(store: Store, session_ids: list[str]) -> set[str]:
    """Re-derive these sessions' catalog entries from their logs, after a tool changed
    the logs (a repair's cut, an import's new directories). Returns the directory
    names it could not settle now (a busy lock): the next open settles them."""
    return store.upkeep.reconcile([dir_name(sid) for sid in session_ids])


def live_holder(root: str, directory: str) -> str | None:
    """Who else uses the session in `directory` now, or None: the holder of its lock,
    or a live process whose registration (`ROOT/procs/`) says it writes the session.
    A writer holds the session's lock only while it commits, so the registration is
    what shows a writer between its commits."""
    lock = FileLock(os.path.join(directory, LOCK_FILE), "session")
    try:
        if not lock.try_acquire():
            return lock.holder() or "another process (its lock file names no holder)"
        lock.release()
    finally:
        lock.close()
    procs = os.path.join(root, PROCS_DIR)
    try:
        names = sorted(os.listdir(procs))
    except FileNotFoundError:
        return None
    wanted = os.path.basename(directory)
    for name in names:
        if name.startswith("."):
            continue
        path = os.path.join(procs, name)
        if _registered_live(path, wanted):
            return f"pid={name.split('-')[0]} (a live store registered in {path})"
    return None


def _registered_live(path: str, name: str) -> bool:
    """Whether the registration at `path` is a live process's and names `name`."""
    reg = FileLock(path, "process registration")
    try:
        if reg.try_acquire():
            reg.release()
            return False  # a dead process's registration
        with open(path, "rb") as f:
            return name in f.read().decode("utf-8", "replace").split()
    except OSError:
        return False
    finally:
        reg.close()


__all__ = [
    "SEVERITY_CACHE",
    "SEVERITY_DATA",
    "DamagedSessionsError",
    "SessionBusyError",
    "SessionView",
    "Stats",
    "TypeStats",
    "accept_loss",
    "children_of",
    "compact_session",
    "cursor_text",
    "describe",
    "describe_loss",
    "dir_name",
    "dir_sizes",
    "export_sessions",
    "first_damage",
    "import_bundle",
    "is_store",
    "listed_sessions",
    "live_holder",
    "loss_notes",
    "parse_cursor",
    "refresh_catalog",
    "repair_session",
    "replay",
    "salvage_session",
    "session_path",
    "session_stats",
    "session_view",
    "state_items",
    "verify_store",
]

"""Read-only views of a session log for people: every record in order, and size statistics.

These read the log directly (no lock, no caches), so they work on a copied
directory, on a store another process is writing, and on a damaged log up to
the damage.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from . import payloads
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


@dataclass
class TypeStats:
    records: int = 0
    stored_bytes: int = 0
    payload_bytes: int = 0  # after decompression
    compressed_records: int = 0


@dataclass
class Stats:
    commits: int = 0
    log_bytes: int = 0  # bytes of the committed records read
    file_bytes: int = 0  # apparent size of every file of the session
    disk_bytes: int = 0  # blocks allocated to them (du)
    by_type: dict[str, TypeStats] = field(default_factory=dict)
    largest: list[tuple[int, int, str]] = field(default_factory=list)  # (bytes, pos, type)
    growth: list[tuple[str, int, int]] = field(default_factory=list)  # (day, commits, bytes)


def session_stats(directory: str, top: int = 5) -> Stats:
    import datetime

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

"""`journal replica prune`: merge chunks, and remove what no restore in the window needs.

For each session the bucket holds (its head object names it):

1. Merge: every aligned span of 64 chunks (slots 64k..64k+63) that is complete and
   not yet merged is written again as one merged object (put-if-absent), so that a
   restore reads a few large objects instead of many small ones.
2. Single chunks that a merged object holds again are removed once that merged
   object is older than `GRACE` seconds (a restore that listed the chain before the
   merge existed may still be reading them). The merged object holds the same
   bytes, so this never changes what any restore returns.
3. Incarnations deleted before the window (their DELETE chunk shipped more than
   `keep` seconds ago) are removed: a floor object is written first, naming the
   first slot still needed (the next BEGIN, or the chain's last chunk when the
   session is still deleted), then the chunks and merged objects wholly below it.
   The chain's last chunk always stays, so its slots stay dense from the floor and
   a stale writer's next PUT still meets a taken slot.
4. State versions older than the window are removed, except, per key, the newest
   one at or before the window's start (a restore to that moment needs it).

A restore to any time inside the window (now - keep .. now) reads the same
sessions and state before and after a prune.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from ..errors import ReplicaCorruptionError
from ..layout import (
    parse_replica_merged,
    parse_replica_slot,
    parse_replica_state,
    replica_floor_key,
    replica_state_prefix,
)
from . import chunk as ck
from .chain import read_chain
from .objects import ObjectInfo, ObjectStore
from .restore import bucket_sessions
from .shipper import MERGE_SPAN

GRACE = 300.0  # seconds a merged object exists before the chunks it holds go


@dataclass
class PruneReport:
    """What a prune did (or, with `dry_run`, would do)."""

    sessions: int = 0
    merged: int = 0  # merged objects written
    removed: int = 0  # objects removed
    removed_bytes: int = 0
    floors: int = 0  # floor objects written
    dry_run: bool = False


def prune(
    objects: ObjectStore,
    prefix: str,
    *,
    keep: float,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> PruneReport:
    """Prune the replica at `prefix` (see the module docstring); `keep` in seconds."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    window_start = now - int(keep * 1000)
    report = PruneReport(dry_run=dry_run)
    for dir_name, session_id in sorted(bucket_sessions(objects, prefix).items()):
        if progress:
            progress(f"prune {session_id}")
        report.sessions += 1
        _prune_session(objects, prefix, dir_name, window_start, now, report)
    _prune_state(objects, prefix, window_start, report)
    return report


def _remove(objects: ObjectStore, infos: list[ObjectInfo], report: PruneReport) -> None:
    if not infos:
        return
    report.removed += len(infos)
    report.removed_bytes += sum(i.size for i in infos)
    if not report.dry_run:
        objects.delete([i.key for i in infos])


def _prune_session(
    objects: ObjectStore,
    prefix: str,
    dir_name: str,
    window_start: int,
    now: int,
    report: PruneReport,
) -> None:
    chunk_infos = {
        n: info
        for info in objects.list(ck.chunks_prefix(prefix, dir_name))
        if (n := parse_replica_slot(info.key)) is not None
    }
    merged_infos: dict[tuple[int, int], ObjectInfo] = {}
    for info in objects.list(ck.merged_prefix(prefix, dir_name)):
        span = parse_replica_merged(info.key)
        if span is not None:
            merged_infos[span] = info
    if not chunk_infos and not merged_infos:
        return
    chain = read_chain(objects, prefix, dir_name)
    if not chain:
        return
    by_n = {c.n: c for c in chain}
    last = chain[-1].n
    # 1. Merge complete aligned spans (the newest, possibly incomplete, one waits).
    covered = {n for (lo, hi) in merged_infos for n in range(lo, hi + 1)}
    for lo in range(chain[0].n - chain[0].n % MERGE_SPAN, last + 1, MERGE_SPAN):
        hi = lo + MERGE_SPAN - 1
        slots = range(lo, hi + 1)
        if hi >= last or any(n not in by_n for n in slots) or all(n in covered for n in slots):
            continue
        key = ck.merged_key(prefix, dir_name, lo, hi)
        report.merged += 1
        if not report.dry_run:
            objects.put_if_absent(key, b"".join(ck.encode_chunk(by_n[n]) for n in slots))
    # 2. Singles held again by a merged object old enough.
    old_merged = {
        n
        for (lo, hi), info in merged_infos.items()
        if now - info.last_modified_ms >= GRACE * 1000
        for n in range(lo, hi + 1)
    }
    _remove(
        objects,
        [chunk_infos[n] for n in sorted(chunk_infos) if n in old_merged and n != last],
        report,
    )
    # 3. Incarnations deleted before the window.
    floor = chain[0].n
    for c in chain:
        if c.kind == ck.KIND_DELETE and c.shipped_at_ms < window_start:
            later_begin = next((d.n for d in chain if d.n > c.n and d.kind == ck.KIND_BEGIN), None)
            floor = later_begin if later_begin is not None else last
    if floor > chain[0].n:
        report.floors += 1
        if not report.dry_run:
            body = msgspec.json.encode({"format": 1, "first": floor})
            objects.put(replica_floor_key(prefix, dir_name), body)
        _remove(
            objects,
            [info for n, info in sorted(chunk_infos.items()) if n < floor and n not in old_merged],
            report,
        )
        _remove(objects, [info for (lo, hi), info in merged_infos.items() if hi < floor], report)
    if by_n.get(floor) is None and floor != chain[0].n:
        raise ReplicaCorruptionError(f"prune of {dir_name!r}: floor {floor} is no chunk")


def _prune_state(objects: ObjectStore, prefix: str, window_start: int, report: PruneReport) -> None:
    versions: dict[tuple[str, str], list[tuple[int, ObjectInfo]]] = {}
    for info in objects.list(replica_state_prefix(prefix)):
        parsed = parse_replica_state(info.key)
        if parsed is not None:
            versions.setdefault((parsed[0], parsed[1]), []).append((parsed[2], info))
    doomed: list[ObjectInfo] = []
    for found in versions.values():
        found.sort(key=lambda v: (v[0], v[1].key))
        before = [v for v in found if v[0] <= window_start]
        doomed.extend(info for _, info in before[:-1])  # the newest at the start stays
    _remove(objects, doomed, report)

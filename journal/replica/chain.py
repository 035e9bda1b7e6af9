"""Reading a session's chain from the bucket: checked, and cut where asked.

`read_chain` fetches the chunks of one session directory's chain (merged objects
where they cover a span, single chunks elsewhere, several GETs at a time) and
checks it whole before anything is built from it: every object's CRC and SHA-256,
slots dense from the floor, epochs never decreasing, and within an incarnation a
BEGIN first and DATA chunks contiguous in log positions. Any violation is a
`ReplicaCorruptionError` naming the object.

`read_incarnation` gives the session as the chain holds it (or held it at a time,
or up to the commit holding an event sequence): the identity and the log pieces
of its newest incarnation, or None when there is none (never written, or deleted
at that point).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec

from ..dictionary import SessionDictionary
from ..errors import ReplicaCorruptionError
from ..layout import (
    parse_replica_merged,
    parse_replica_slot,
    replica_floor_key,
)
from ..record import COMMIT, DICT, EVENT, FLAG_COMMIT, OK, open_payload, parse_at
from . import chunk as ck
from .objects import ObjectStore
from .tail import Piece

FETCHERS = 8  # GETs in flight while a chain is read


@dataclass
class Incarnation:
    """One incarnation of a session as the chain holds it."""

    identity: bytes
    pieces: list[Piece] = field(default_factory=list)
    begin_n: int = 0
    last_n: int = 0  # the newest chunk kept (fences included)
    shipped_at_ms: int = 0  # when its newest kept chunk was shipped

    @property
    def end(self) -> int:
        return self.pieces[-1].end if self.pieces else 0


def _floor(objects: ObjectStore, prefix: str, dir_name: str) -> int:
    key = replica_floor_key(prefix, dir_name)
    got = objects.get(key)
    if got is None:
        return 0
    try:
        floor = msgspec.json.decode(got[0], type=_Floor)
    except msgspec.DecodeError as exc:
        raise ReplicaCorruptionError(f"replica object {key!r} is not a floor: {exc}") from exc
    if floor.format != 1 or floor.first < 0:
        raise ReplicaCorruptionError(f"replica object {key!r} is not a format-1 floor")
    return floor.first


class _Floor(msgspec.Struct, forbid_unknown_fields=False):
    first: int
    format: int = 1


def holds_any(objects: ObjectStore, prefix: str, dir_name: str) -> bool:
    """Whether the bucket holds any chunk of this session directory."""
    return next(iter(objects.list(ck.chunks_prefix(prefix, dir_name))), None) is not None


def read_chain(
    objects: ObjectStore, prefix: str, dir_name: str, *, start: int | None = None
) -> list[ck.Chunk]:
    """The chain's chunks from `start` (default: the floor), checked (see above)."""
    floor = _floor(objects, prefix, dir_name)
    first = floor if start is None or start < floor else start
    after = ck.chunk_key(prefix, dir_name, first - 1) if first > 0 else ""
    slots = [
        n
        for n in (
            parse_replica_slot(i.key)
            for i in objects.list(ck.chunks_prefix(prefix, dir_name), start_after=after)
        )
        if n is not None
    ]
    spans = _merged_spans(objects, prefix, dir_name, first)
    end = max([*slots, *(hi for _, hi, _ in spans)], default=first - 1)
    have = set(slots)
    # Plan: a merged object wherever one holds the next slot needed, chunks elsewhere.
    plan: list[tuple[str, int, int]] = []  # (key, first, last)
    n = first
    while n <= end:
        holding = [(hi, lo, key) for lo, hi, key in spans if lo <= n <= hi]
        if holding:
            hi, lo, key = max(holding)
            plan.append((key, lo, hi))
            n = hi + 1
        elif n in have:
            plan.append((ck.chunk_key(prefix, dir_name, n), n, n))
            n += 1
        else:
            where = ck.chunk_key(prefix, dir_name, n)
            raise ReplicaCorruptionError(
                f"chain of {dir_name!r}: {where!r} is missing below the chain's end (slot {end})"
            )

    def fetch(step: tuple[str, int, int]) -> list[ck.Chunk]:
        key, lo, hi = step
        got = objects.get(key)
        if got is None:
            raise ReplicaCorruptionError(f"chain of {dir_name!r}: {key!r} vanished while read")
        if lo == hi and parse_replica_merged(key) is None:
            return [ck.decode_chunk(got[0], key=key, n=lo)]
        return ck.split_merged(got[0], key, lo, hi)

    with ThreadPoolExecutor(max_workers=FETCHERS) as pool:
        parts = list(pool.map(fetch, plan))
    chunks = [c for part in parts for c in part if c.n >= first]
    check_chain(chunks, dir_name, prefix)
    return chunks


def _merged_spans(
    objects: ObjectStore, prefix: str, dir_name: str, first: int
) -> list[tuple[int, int, str]]:
    """(first, last, key) of the merged objects holding slots from `first` on."""
    spans = []
    for info in objects.list(ck.merged_prefix(prefix, dir_name)):
        span = parse_replica_merged(info.key)
        if span is not None and span[1] >= first:
            spans.append((span[0], span[1], info.key))
    return spans


def get_chunk(objects: ObjectStore, prefix: str, dir_name: str, n: int) -> ck.Chunk | None:
    """Chunk `n` of the chain, from its own object or from a merged object holding
    it (a prune removes singles that merged objects hold); None when neither has it."""
    key = ck.chunk_key(prefix, dir_name, n)
    got = objects.get(key)
    if got is not None:
        return ck.decode_chunk(got[0], key=key, n=n)
    for lo, hi, merged in _merged_spans(objects, prefix, dir_name, n):
        if lo <= n <= hi:
            data = objects.get(merged)
            if data is not None:
                return ck.split_merged(data[0], merged, lo, hi)[n - lo]
    return None


def check_chain(chunks: list[ck.Chunk], dir_name: str, prefix: str) -> None:
    """Density, epochs and contiguity (see the module docstring)."""
    epoch = 0
    live = False
    pos = 0
    base = 0
    for i, c in enumerate(chunks):
        key = ck.chunk_key(prefix, dir_name, c.n)
        if i and c.n != chunks[i - 1].n + 1:
            raise ReplicaCorruptionError(f"chain of {dir_name!r}: a gap before {key!r}")
        if c.epoch < epoch:
            raise ReplicaCorruptionError(
                f"chain of {dir_name!r}: {key!r} has epoch {c.epoch} after epoch {epoch}"
            )
        epoch = c.epoch
        if c.kind == ck.KIND_BEGIN:
            live, pos, base = True, 0, 0
        elif c.kind == ck.KIND_DELETE:
            live = False
        elif c.kind == ck.KIND_DATA:
            if not live:
                raise ReplicaCorruptionError(
                    f"chain of {dir_name!r}: {key!r} is DATA with no BEGIN"
                )
            if c.start != pos or (c.segment_base != base and c.start != c.segment_base):
                raise ReplicaCorruptionError(
                    f"chain of {dir_name!r}: {key!r} covers log positions {c.start}..{c.end}"
                    f" (segment {c.segment_base}) where position {pos} comes next"
                )
            pos, base = c.end, c.segment_base


def read_incarnation(
    objects: ObjectStore,
    prefix: str,
    dir_name: str,
    *,
    at_time_ms: int | None = None,
    at_sequence: int | None = None,
) -> Incarnation | None:
    """The session's newest incarnation, as it is, or as it was at `at_time_ms`
    (chunks shipped by then), or up to the commit holding event `at_sequence`."""
    start = None
    if at_time_ms is None:
        head = ck.read_head(objects, prefix, dir_name)
        if head is not None and head.begin >= 0:
            start = head.begin  # the newest incarnation begins there (checked below)
    chunks = read_chain(objects, prefix, dir_name, start=start)
    if start is not None and (not chunks or chunks[0].kind != ck.KIND_BEGIN):
        chunks = read_chain(objects, prefix, dir_name)  # a stale head: read it all
    if at_time_ms is not None:
        kept = []
        for c in chunks:
            if c.shipped_at_ms > at_time_ms:
                break
            kept.append(c)
        chunks = kept
    inc: Incarnation | None = None
    for c in chunks:
        if c.kind == ck.KIND_BEGIN:
            inc = Incarnation(identity=c.body, begin_n=c.n)
        elif c.kind == ck.KIND_DELETE:
            inc = None
        elif c.kind == ck.KIND_DATA and inc is not None:
            inc.pieces.append(Piece(c.segment_base, c.start, c.end, c.body, c.commits))
        if inc is not None:
            inc.last_n, inc.shipped_at_ms = c.n, c.shipped_at_ms
    if inc is not None and at_sequence is not None:
        inc.pieces = cut_at_event(inc.pieces, at_sequence, dir_name)
    return inc


def cut_at_event(pieces: list[Piece], sequence: int, where: str) -> list[Piece]:
    """The pieces up to the end of the commit that holds event `sequence` (all of
    them when no commit does: the session has not reached it)."""
    dictionary: SessionDictionary | None = None
    out: list[Piece] = []
    for piece in pieces:
        data = piece.body
        off = 0
        commits = 0
        reached = False
        while off < len(data):
            outcome, rtype, flags, p_start, p_end = parse_at(data, off)
            if outcome != OK:
                raise ReplicaCorruptionError(
                    f"{where}: a record at log position {piece.start + off} does not parse"
                )
            if rtype in (DICT, EVENT, COMMIT):
                payload = open_payload(
                    flags,
                    data[p_start:p_end],
                    path=where,
                    offset=piece.start + off,
                    dictionary=dictionary,
                )
                fields = msgspec.msgpack.decode(payload)
                if rtype == DICT:
                    dictionary = SessionDictionary(fields[1], piece.start + off, path=where)
                elif (rtype == EVENT and fields[0] >= sequence) or (
                    rtype == COMMIT and fields[2] and fields[3] >= sequence
                ):
                    reached = True
            off = p_end
            if flags & FLAG_COMMIT:
                commits += 1
                if reached:
                    out.append(
                        Piece(
                            piece.segment_base, piece.start, piece.start + off, data[:off], commits
                        )
                    )
                    return out
        out.append(piece)
    return out

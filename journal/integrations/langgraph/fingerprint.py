"""The `fp` field every event of the saver carries: what makes cold reads fast.

Each event says what its writer knew of the log when it wrote it (the newest
event, the newest put, the chain of late events, the checkpoints with writes
stored ahead of their put), so a reader that trusts the newest event can find
an old checkpoint by binary search instead of reading everything newer
(`fastpath`). docs/langgraph.md describes the fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from journal import JournalEvent

from .events import EV_CHECKPOINT, EV_WRITES

FP_LEN = 8  # fields of a current `fp` (5: written before `pend`, `mine`, `lastseq`)
MAX_PEND = 64  # checkpoints with pending ahead writes an event lists (more: not clean)


@dataclass(frozen=True)
class Fp:
    """One event's `fp`.

    `prev`: the newest event sequence the writer had seen (the event landed at
    `prev + 1` unless another writer got in between); `late`: the newest "late"
    event strictly before this one (0: none); `last`: the id of the newest put at
    or before this event; `ok`: every earlier event carried an `fp`, none was
    raced, and put ids grew strictly in log order; `is_late`: this event refers
    to an older checkpoint than `last` (writes of an earlier checkpoint, deletes).
    `pend`: for each checkpoint id named by an "ahead" write at or before this
    event (a write naming an id newer than `last`: with LangGraph's
    `durability="async"` a step's writes are often stored before its
    checkpoint) whose put has not come yet, the sequence of the first such
    write; `mine` (on a put): `[s]` when its id had such writes (they all lie in
    `[s, put)`), else `[]`. A put's writes are therefore in `[mine, put)`, between
    it and the next put, and on the `late` chain. `lastseq`: the event sequence
    of the put `last` (0: unknown).
    """

    seq: int
    prev: int
    late: int
    last: str | None
    ok: bool
    is_late: bool
    pend: tuple[int, ...] = ()
    mine: tuple[int, ...] = ()
    lastseq: int = 0
    current: bool = False  # written with `pend`, `mine` and `lastseq`

    @property
    def clean(self) -> bool:
        """Whether the fast path may trust everything up to this event."""
        return self.ok and self.prev == self.seq - 1


def _seqs(value: Any, below: int) -> tuple[int, ...] | None:
    """A strictly increasing list of event sequences in [1, below], or None."""
    if not isinstance(value, list) or len(value) > MAX_PEND:
        return None
    last = 0
    for s in value:
        if not isinstance(s, int) or isinstance(s, bool) or not last < s <= below:
            return None
        last = s
    return tuple(value)


def of(ev: JournalEvent) -> Fp | None:
    """The `fp` of an event (None: it has none, or not a well-formed one)."""
    fp = ev.event.msg.get("fp")
    if (
        not isinstance(fp, list)
        or len(fp) not in (5, FP_LEN)
        or not isinstance(fp[0], int)
        or not isinstance(fp[1], int)
        or not (fp[2] is None or isinstance(fp[2], str))
        or not isinstance(fp[3], bool)
        or not isinstance(fp[4], bool)
        or isinstance(fp[0], bool)
        or isinstance(fp[1], bool)
        or not 0 <= fp[1] < ev.sequence
    ):
        return None
    if len(fp) == 5:  # written before `pend`: its ahead writes are on the late chain
        return Fp(ev.sequence, fp[0], fp[1], fp[2], fp[3], fp[4])
    pend = _seqs(fp[5], ev.sequence)
    mine = _seqs(fp[6], ev.sequence - 1)
    lastseq = fp[7]
    if (
        pend is None
        or mine is None
        or len(mine) > 1
        or not isinstance(lastseq, int)
        or isinstance(lastseq, bool)
        or not 0 <= lastseq <= ev.sequence
        or (fp[2] is None and lastseq != 0)
    ):
        return None
    return Fp(ev.sequence, fp[0], fp[1], fp[2], fp[3], fp[4], pend, mine, lastseq, True)


def id_time(checkpoint_id: str | None) -> int | None:
    """The timestamp of a uuid6 id (LangGraph's checkpoint ids), or None."""
    c = checkpoint_id
    if c is None or len(c) != 36 or c[8] != "-" or c[13] != "-" or c[14] != "6":
        return None
    try:
        return int(c[0:8] + c[9:13] + c[15:18], 16)
    except ValueError:
        return None


def for_new(
    prev: Fp | None,
    high: int,
    kind: str,
    checkpoint_id: str | None,
    resolve: Callable[[int], str | None],
) -> list[Any]:
    """The `fp` of a new event written after the event `high` (whose fp is `prev`).

    `resolve(seq)` names the checkpoint of the pending ahead write `seq` (None:
    unknown; the new event is then not clean). The new event is assumed to land
    at `high + 1`; if it does not, its `prev` says so and nothing trusts it.
    """
    late, last, ok, lastseq, pend = _carried(prev, high)
    mine: list[int] = []
    if kind == EV_CHECKPOINT:
        is_late = False
        if checkpoint_id is None or (last is not None and not checkpoint_id > last):
            ok = False
        if ok:
            ok, pend, mine = _settle(pend, checkpoint_id, resolve)
        last = checkpoint_id
        lastseq = high + 1 if checkpoint_id is not None else 0
    elif kind == EV_WRITES and checkpoint_id is not None and checkpoint_id == last:
        is_late = False  # local: between its put and the next one
    elif (
        kind == EV_WRITES
        and ok
        and checkpoint_id is not None
        and (last is None or checkpoint_id > last)
    ):
        is_late = False  # ahead: its put (if any) comes later and names `[first, put)`
        ok = _note_ahead(pend, checkpoint_id, high + 1, resolve)
    else:
        is_late = True
    if not ok:
        pend, mine = [], []
    return [high, late, last, ok, is_late, pend, mine, lastseq]


def _carried(prev: Fp | None, high: int) -> tuple[int, str | None, bool, int, list[int]]:
    """What a new event after `high` takes over from `prev`: (late, last, ok,
    lastseq, pend)."""
    if high == 0:
        return 0, None, True, 0, []
    if prev is None or prev.seq != high:
        return 0, None, False, 0, []
    late = prev.seq if prev.is_late else prev.late
    # After a 5-field `fp` (no `pend`: its ahead writes are unknown) nothing is clean.
    ok = prev.clean and prev.current
    return late, prev.last, ok, prev.lastseq, list(prev.pend) if ok else []


def _settle(
    pend: list[int], checkpoint_id: str | None, resolve: Callable[[int], str | None]
) -> tuple[bool, list[int], list[int]]:
    """A put's (ok, pend, mine): its own ahead writes leave `pend` for `mine`, and
    so do those of older ids, whose put can no longer come while `ok` holds (ids
    grow)."""
    keep: list[int] = []
    mine: list[int] = []
    for s in pend:
        named = resolve(s)
        if named is None:
            return False, keep, mine
        if named == checkpoint_id:
            mine.append(s)
        elif checkpoint_id is not None and named > checkpoint_id:
            keep.append(s)
    return True, keep, mine


def _note_ahead(
    pend: list[int], checkpoint_id: str, seq: int, resolve: Callable[[int], str | None]
) -> bool:
    """Add the ahead write `seq` to `pend` unless an earlier one names its id;
    whether the event stays clean."""
    named_before = False
    for s in pend:
        named = resolve(s)
        if named is None:
            return False
        if named == checkpoint_id:
            named_before = True
    if not named_before:
        if len(pend) >= MAX_PEND:
            return False  # too many checkpoints pending: stop trusting this session
        pend.append(seq)
    return True

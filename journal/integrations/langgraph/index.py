"""What the saver knows of one session's events: its puts, writes and deletes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .fingerprint import Fp
from .serde import SerCache


@dataclass
class Put:
    """One `put` as recorded by its `langgraph_checkpoint` event."""

    event_seq: int
    seq: int  # journal checkpoint sequence
    id: str
    parent: str | None
    msg: dict[str, Any]  # the whole event message (header, channels, metadata)
    metadata: dict[str, Any]
    ctx_channel: str | None
    ctx_len: int
    epoch: int
    # Where writes stored before this put can be: from `ahead[0]` on ([]: none),
    # when `known` (its `fp` is clean); anywhere below it otherwise.
    ahead: tuple[int, ...] = ()
    known: bool = False

    @property
    def writes_from(self) -> int:
        """The lowest event sequence that may hold a write of this checkpoint."""
        if not self.known:
            return 1
        return self.ahead[0] if self.ahead else self.event_seq


@dataclass
class Write:
    event_seq: int
    pos: int  # position within its event
    task_id: str
    channel: str
    value: list[Any]  # [type, base64]
    path: str


@dataclass
class Index:
    """What one session's event journal says, for the covered range [low, high]."""

    sid: str
    thread_id: str
    ns: str
    # The incarnation of the session this index describes (`Store.incarnation`):
    # read before the index's first event, so a session deleted and created again
    # since never matches.
    ident: tuple[int, int, int] | None
    puts: dict[str, Put] = field(default_factory=dict)  # newest put of each id
    writes: dict[str, dict[tuple[str, int], Write]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    low: int = 1  # lowest covered event sequence (1: complete)
    high: int = 0  # highest covered event sequence
    high_mark: str | None = None  # `events.mark` of the event at `high`
    high_fp: Fp | None = None  # the `fp` of the event at `high`
    late_loaded: bool = False  # every late event below `low` is applied
    late_fps: list[Fp] = field(default_factory=list)  # the `fp`s of that late chain
    # Islands read by the fast path below `low`: puts by event sequence, and the
    # event ranges [a, b] whose every event is applied (writes, deletes) or here.
    iputs: dict[int, Put] = field(default_factory=dict)
    iranges: list[tuple[int, int]] = field(default_factory=list)
    # Checkpoint ids of ahead writes seen (event sequence -> id), for `fingerprint.for_new`.
    wids: dict[int, str] = field(default_factory=dict)
    located: dict[str, int] = field(default_factory=dict)  # `locate` answers below `low`
    head: tuple[int, int, list[Any]] | None = None  # (seq, epoch, context) of the head
    # (seq, epoch, context length) of the newest put event read: the head's, unless a
    # checkpoint was saved without one (`Tuples.context_items` checks the head it loads).
    top: tuple[int, int, int] | None = None
    # The last context read with `checkpoint_at`, or the part of the head's read
    # with `load_prefix`: (seq, epoch, items). Within an epoch a checkpoint's
    # context is a prefix of every later one's.
    older: tuple[int, int, list[Any]] | None = None
    order: list[Put] | None = None  # `ordered()`, until `puts` or `deleted` change
    # The list items of the last put (objects, attribute snapshots, stored items).
    ser_cache: SerCache | None = None

    @property
    def complete(self) -> bool:
        return self.low <= 1

    def ordered(self) -> list[Put]:
        """Visible checkpoints, newest first (by journal sequence); do not modify."""
        if self.order is None:
            puts = [p for p in self.puts.values() if p.id not in self.deleted]
            puts.sort(key=lambda p: p.seq, reverse=True)
            self.order = puts
        return self.order

    def add_write(self, checkpoint_id: str, key: tuple[str, int], w: Write) -> None:
        slot = self.writes.setdefault(checkpoint_id, {})
        old = slot.get(key)
        if old is None:
            slot[key] = w
            return
        newer = (w.event_seq, w.pos) > (old.event_seq, old.pos)
        # Regular writes: the first one stays. Special writes (idx < 0): the last one.
        if (key[1] < 0) == newer:
            slot[key] = w

    def add_range(self, a: int, b: int) -> None:
        """Note that every event in [a, b] below `low` is applied or in `iputs`."""
        ranges = sorted([*self.iranges, (a, b)])
        merged: list[tuple[int, int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self.iranges = merged

    def range_at(self, seq: int) -> tuple[int, int] | None:
        """The range of `iranges` that holds `seq`, if any."""
        for a, b in self.iranges:
            if a <= seq <= b:
                return a, b
        return None

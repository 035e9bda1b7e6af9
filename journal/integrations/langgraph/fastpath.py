"""Cold reads of old checkpoints without the scan.

A cold read of an old checkpoint finds its put by binary search over event
sequences (every event's `fp.last` names the newest put at or before it, and
put ids grow strictly while `fp.ok` holds), reads the chain of "late" events
(writes to older checkpoints, deletes) once, and pages from there: O(log n +
late + answer) event reads instead of everything newer than it. What it reads
below the index's covered range is kept as "islands" (`Index.iputs`,
`Index.iranges`). Anything that contradicts the `fp` raises `NoFastPath`, and
the caller scans instead: the fast path never answers from a doubtful shortcut.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from journal import EventPageRequest, JournalEvent

from . import fingerprint
from .events import EV_CHECKPOINT, EV_WRITES
from .fingerprint import Fp
from .index import Index, Put
from .threads import PAGE, ThreadIndexes

MAX_LATE = 48  # late events the fast path reads one by one before it gives up


class NoFastPath(Exception):
    """The fast path cannot prove its answer: use the scan."""


class FastPath:
    """The fast path over the indexes of `threads` (it fills their islands)."""

    def __init__(self, threads: ThreadIndexes) -> None:
        self.threads = threads
        self.reads = threads.reads

    # ------------------------------------------------------------- entries
    def before(self, idx: Index, before_id: str) -> Iterator[Put] | None:
        """The puts older than `before_id`, newest first, without scanning (None: can't).

        The iterator raises `NoFastPath` when what it reads contradicts the `fp`.
        """
        if before_id in idx.puts or not self.usable(idx):
            return None
        try:
            self.load_late(idx)
            at = self.locate(idx, before_id)
        except NoFastPath:
            return None
        if at >= idx.low:
            return None  # older than every put below `low`? the scan decides
        return self.iter_island(idx, at)

    def find(self, idx: Index, checkpoint_id: str) -> Put | None:
        """`ThreadIndexes.find` for a checkpoint below `low`, without scanning;
        raises `NoFastPath`."""
        if not self.usable(idx):
            raise NoFastPath
        self.load_late(idx)
        at = self.locate(idx, checkpoint_id)
        if at >= idx.low:
            return None  # every put below `low` is older; the covered ones are not it
        put = self.island_put(idx, at)
        if put.id != checkpoint_id:
            return None
        if idx.range_at(at) is None:
            end = self._read_locals(idx, at)
            idx.iputs[at] = put
            idx.add_range(at, end)
        if put.id in idx.deleted:
            return None
        self.ensure_ahead(idx, put)
        return put

    def usable(self, idx: Index) -> bool:
        fp = idx.high_fp
        return (
            not idx.complete and idx.high > 0 and fp is not None and fp.seq == idx.high and fp.clean
        )

    # ------------------------------------------------------------- reads
    def event_at(self, idx: Index, seq: int) -> tuple[JournalEvent, Fp]:
        page = self.reads.event_page(idx.sid, EventPageRequest(before_sequence=seq + 1, limit=1))
        if not page.events or page.events[0].sequence != seq:
            raise NoFastPath
        ev = page.events[0]
        fp = fingerprint.of(ev)
        if fp is None:
            raise NoFastPath
        return ev, fp

    def load_late(self, idx: Index) -> None:
        """Apply every late event below `low` (once per index)."""
        if idx.late_loaded:
            return
        fp = idx.high_fp
        assert fp is not None
        at = fp.seq if fp.is_late else fp.late
        reads = 0
        # Applied only once the whole chain is read: a chain given up on halfway
        # (too long, or not what it should be) leaves the index as it was, instead
        # of its first events applied and listed again at the next attempt.
        below: list[JournalEvent] = []
        chain: list[Fp] = []
        while at > 0:
            reads += 1
            if reads > MAX_LATE:
                raise NoFastPath  # a long chain costs more than the scan saves
            ev, efp = self.event_at(idx, at)
            if not efp.is_late or efp.late >= at:
                raise NoFastPath
            if at < idx.low:
                below.append(ev)
            chain.append(efp)
            at = efp.late
        for ev in below:
            self.threads.apply(idx, ev, forward=False)
        idx.late_fps.extend(chain)
        idx.late_loaded = True

    def locate(self, idx: Index, checkpoint_id: str) -> int:
        """The first event below `low` at or after which the newest put id >= checkpoint_id.

        Returns `low` when every put below `low` has a smaller id.
        """
        hit = idx.located.get(checkpoint_id)
        if hit is not None and hit < idx.low:
            return hit
        ans = self.search(idx, checkpoint_id)
        if ans < idx.low:
            if len(idx.located) >= PAGE:
                idx.located.clear()
            idx.located[checkpoint_id] = ans
        return ans

    def search(self, idx: Index, checkpoint_id: str) -> int:
        """`locate`'s answer, by binary search (`_Search`); the events of the late
        chain, already read, count as probes."""
        s = _Search(idx, checkpoint_id)
        for fp in idx.late_fps:
            if fp.clean and fp.current and (found := s.seen(fp.seq, fp)) is not None:
                return found
        misses = 0  # guesses in a row that did not halve the range
        while s.lo <= s.hi:
            mid = s.probe(misses)
            width = s.hi - s.lo
            _, fp = self.event_at(idx, mid)
            if (found := s.seen(mid, fp)) is not None:
                return found
            misses = 0 if s.hi - s.lo <= width // 2 else misses + 1
        return s.ans

    # ------------------------------------------------------------- islands
    def island_put(self, idx: Index, seq: int) -> Put:
        """The put whose event is `seq` (an event where `fp.last` changed)."""
        put = idx.iputs.get(seq)
        if put is None:
            ev, _ = self.event_at(idx, seq)
            if ev.event.msg.get("type") != EV_CHECKPOINT:
                raise NoFastPath
            put = self.threads.parse_put(idx, ev)
        return put

    def island_events(self, idx: Index, events: list[JournalEvent]) -> None:
        for ev in events:
            if ev.event.msg.get("type") == EV_CHECKPOINT:
                idx.iputs[ev.sequence] = self.threads.parse_put(idx, ev)
            else:
                self.threads.apply(idx, ev, forward=False)

    def _read_locals(self, idx: Index, at: int) -> int:
        """Read the local writes of the put at `at` below `low`: the events after it
        up to the next put (or `low`); the last event sequence they may be at."""
        after, end = at, idx.low - 1
        while after < end:
            events = [
                ev for ev in self.reads.events_after(idx.sid, after, 16) if ev.sequence < idx.low
            ]
            if not events:
                break
            stop = next((ev for ev in events if ev.event.msg.get("type") == EV_CHECKPOINT), None)
            if stop is not None:
                events = [ev for ev in events if ev.sequence < stop.sequence]
                end = stop.sequence - 1
            self.island_events(idx, events)
            after = events[-1].sequence if events else end
        return end

    def ensure_ahead(self, idx: Index, put: Put) -> None:
        """Apply the events `[ahead, put)` of a put below `low` (its writes stored before it)."""
        if not put.ahead:
            return
        lo, hi = put.ahead[0], put.event_seq - 1
        r = idx.range_at(lo)
        if r is not None and r[1] >= hi:
            return
        top = idx.range_at(hi)
        if top is not None:
            # Its top part is applied already (the ahead ranges of neighbouring puts
            # overlap): read only what lies below that range (which starts above lo).
            hi = top[0] - 1
        first = True
        after = lo - 1
        while after < hi:
            events = [
                ev
                for ev in self.reads.events_after(idx.sid, after, min(hi - after, PAGE))
                if ev.sequence <= hi
            ]
            if not events or (first and events[0].sequence != lo):
                raise NoFastPath
            if first:
                msg = events[0].event.msg
                if msg.get("type") != EV_WRITES or msg.get("id") != put.id:
                    raise NoFastPath  # not what the put says: trust nothing
                first = False
            self.island_events(idx, events)
            idx.add_range(after + 1, events[-1].sequence)
            after = events[-1].sequence

    def iter_island(self, idx: Index, upper: int) -> Iterator[Put]:
        """Visible puts whose event is below `upper` (< low), newest first."""
        pos = upper
        size = 32  # pages grow: a `list(limit=10)` reads a few dozen events
        while pos > 1:
            r = idx.range_at(pos - 1)
            if r is None:
                page = self.reads.event_page(
                    idx.sid, EventPageRequest(before_sequence=pos, limit=size)
                )
                size = min(size * 2, PAGE)
                events = [ev for ev in page.events if ev.sequence < pos]
                if not events:
                    return
                self.island_events(idx, events)
                a = 1 if page.next_before_sequence is None else events[-1].sequence
                idx.add_range(a, pos - 1)
                r = (a, pos - 1)
            a = r[0]
            for seq in sorted((e for e in idx.iputs if a <= e < pos), reverse=True):
                put = idx.iputs[seq]
                if put.id not in idx.deleted:
                    self.ensure_ahead(idx, put)
                    yield put
            pos = a


class _Search:
    """One binary search for the first event below `low` whose newest put id is at
    least `checkpoint_id`, narrowed by the `fp` of each event read (`seen`).

    While LangGraph's uuid6 ids (time-ordered) let it, the probe is guessed by
    interpolating the ids' timestamps between the two puts seen that bracket the
    target most closely (else the last two seen); after two guesses in a row
    that did not halve the range comes a plain halving step, so never more than
    about 3*log2(n) probes: one guess that lands just short of the target is
    usually followed by the answer.
    """

    def __init__(self, idx: Index, checkpoint_id: str) -> None:
        self.checkpoint_id = checkpoint_id
        self.lo, self.hi, self.ans = 1, idx.low - 1, idx.low
        self.target = fingerprint.id_time(checkpoint_id)
        self.pts: list[tuple[int, int]] = []  # (event sequence of a put, its id's time)
        top = idx.high_fp
        if top is not None and top.lastseq and (t := fingerprint.id_time(top.last)) is not None:
            self.pts.append((top.lastseq, t))

    def seen(self, at: int, fp: Fp) -> int | None:
        """Narrow the range by the `fp` of event `at`; the answer, if this is it."""
        last = fp.last
        put_at = fp.lastseq if 0 < fp.lastseq <= at else 0
        if put_at and (t := fingerprint.id_time(last)) is not None:
            self.pts.append((put_at, t))
        if not self.lo <= at <= self.hi:
            return None
        if last is not None and last >= self.checkpoint_id:
            if last == self.checkpoint_id and put_at:
                return put_at  # the put itself: every event before it names an older id
            self.ans = put_at or at
            self.hi = self.ans - 1
        else:
            self.lo = at + 1
        return None

    def probe(self, misses: int) -> int:
        """The event to read next (`misses`: guesses in a row that did not halve the range)."""
        lo, hi = self.lo, self.hi
        mid = (lo + hi) // 2
        target, pts = self.target, self.pts
        if target is not None and misses < 2 and len(pts) >= 2:
            below = [p for p in pts if p[1] <= target]
            above = [p for p in pts if p[1] > target]
            if below and above:
                (s1, t1), (s2, t2) = max(below), min(above)
            else:
                (s1, t1), (s2, t2) = pts[-2], pts[-1]
            if t1 != t2:
                guess = s1 + math.ceil((target - t1) * (s2 - s1) / (t2 - t1))
                mid = min(max(guess, lo), hi)
        return mid

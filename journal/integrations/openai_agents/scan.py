"""Reading a session's live items from its log, newest first, across its branch chain.

A scan pages the event journal newest first (`Store.event_page`), so reading the
newest items or a page deep in a long history costs what the answer costs, not
what the history costs. Tombstones (pops, and the drops of a replacement)
remove the items they name from what the scan yields below them; a clear ends it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from journal import EventPageRequest, Store

from .records import (
    CLEAR,
    ITEMS,
    POP,
    REPLACE,
    Key,
    Segment,
    all_dicts,
    items_of,
    replaced_of,
    target_of,
)

PAGE_EVENTS = 128
"""Most events a scan asks the store for at once. A decoded event is about ten
objects the garbage collector tracks; larger pages keep enough of them alive
across collections to promote them to the oldest generation and set off full
collections (of everything the process holds, the SDK included)."""

ItemEvent = tuple[int, int, list[Any], int]
"""(depth, sequence, items, top) of one item event; see `LogScanner.events`."""


@dataclass
class _Pages:
    """The page size of one scan, and what it has read (for the items-per-event estimate)."""

    batch: int
    on_latest: Callable[[int], object] | None
    items: int = 0
    events: int = 0


class LogScanner:
    """The log reads of one `JournalSession`: its session's items and those of its
    ancestors, newest first.

    It keeps a running estimate of items per event, which sizes the first page of
    each scan. Strict: a record of ours that does not decode raises
    `CorruptionError` naming the session and event.
    """

    def __init__(self, store: Store, session_id: str):
        self.store = store
        self.session_id = session_id
        self.items_per_event = 1.0

    def items(
        self,
        chain: list[Segment],
        start: Key | None,
        pending: set[Key],
        *,
        want: int,
        on_tomb: Callable[[int, int, Key], object] | None = None,
        on_latest: Callable[[int], object] | None = None,
    ) -> Iterator[tuple[Key, Any, tuple[Key, ...]]]:
        """Yield (key, item, pending removals below it) for live items, newest first.

        `start`: begin below this item (`pending`: the removals still to apply
        below it); the rest as for `events`.
        """
        for depth, seq, items, top in self.events(
            chain, start, pending, want=want, on_tomb=on_tomb, on_latest=on_latest
        ):
            for index in range(top, -1, -1):
                key = (depth, seq, index)
                if pending and key in pending:
                    pending.discard(key)
                    continue
                yield key, items[index], tuple(sorted(pending)) if pending else ()

    def events(
        self,
        chain: list[Segment],
        start: Key | None,
        pending: set[Key],
        *,
        want: int,
        on_tomb: Callable[[int, int, Key], object] | None = None,
        on_latest: Callable[[int], object] | None = None,
    ) -> Iterator[ItemEvent]:
        """Yield (depth, sequence, items, top) for item events, newest first: the
        candidates are `items[top]` down to `items[0]`, less the keys in `pending`
        (which this adds each tombstone's target to, before the events below it).

        `want` sizes the first event page (from the running items-per-event
        estimate; the next ones double, up to `PAGE_EVENTS`). `on_tomb`: called
        with (depth, sequence, target) of each tombstone. `on_latest`: called with
        the session's latest event sequence as of the first page (`start` None).
        """
        first_depth = start[0] if start is not None else 0
        batch = max(2, min(PAGE_EVENTS, math.ceil(want / self.items_per_event) + 1))
        pages = _Pages(batch, on_latest)
        for depth in range(first_depth, len(chain)):
            cleared = yield from self._segment(chain[depth], depth, start, pending, pages, on_tomb)
            if cleared:
                return

    def _segment(
        self,
        seg: Segment,
        depth: int,
        start: Key | None,
        pending: set[Key],
        pages: _Pages,
        on_tomb: Callable[[int, int, Key], object] | None,
    ) -> Generator[ItemEvent, None, bool]:
        """The item events of one session of the chain (see `events`). Returns True
        when a clear ends the scan."""
        sid = seg.session_id
        edge, edge_top = -1, 0  # the event of `start`'s item in this segment, its top
        if start is not None and depth == start[0]:
            before: int | None = start[1] + 1
            edge, edge_top = start[1], start[2] - 1
        else:
            before = seg.events + 1 if seg.events is not None else None
        bound = seg.item_seq
        while True:
            page = self.store.event_page(
                sid, EventPageRequest(limit=pages.batch, before_sequence=before)
            )
            if pages.on_latest is not None:
                pages.on_latest(page.latest_sequence)
                pages.on_latest = None
            for jev in page.events:
                seq = jev.sequence
                msg = jev.event.msg
                kind = msg.get("type")
                drops: list[Key] = []
                if kind in (ITEMS, REPLACE):
                    if kind == ITEMS:
                        items = msg.get("items")
                        if type(items) is not list or not items or not all_dicts(items):
                            items = items_of(sid, seq, msg, self.session_id)  # the precise error
                    else:
                        items, drops = replaced_of(sid, seq, msg, depth, self.session_id)
                    pages.events += 1
                    pages.items += len(items)
                    top = len(items) - 1
                    if seq == edge:
                        top = min(top, edge_top)
                    if bound is not None and seq >= bound:
                        top = -1 if seq > bound else min(top, seg.item_index)
                    if top >= 0:
                        yield depth, seq, items, top
                    # A replacement's drops are older than its items: they apply below them.
                    for target in drops:
                        pending.add(target)
                        if on_tomb is not None:
                            on_tomb(depth, seq, target)
                elif kind == POP:
                    target = target_of(sid, seq, msg, depth, self.session_id)
                    pending.add(target)
                    if on_tomb is not None:
                        on_tomb(depth, seq, target)
                elif kind == CLEAR:
                    return True
            if pages.events:
                self.items_per_event = max(1.0, pages.items / pages.events)
            before = page.next_before_sequence
            if before is None:
                return False
            pages.batch = min(PAGE_EVENTS, pages.batch * 2)

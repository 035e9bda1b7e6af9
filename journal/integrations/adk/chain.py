"""An ADK session's events across its fork chain, newest first, with ADK's filters.

A session forked from another holds only the events appended to it since; its
metadata's chain names the sessions its earlier events are read from, nearest
first, each with the last event sequence it shares: `[[parent, 7], [grandparent,
3]]`. Nothing is copied at a fork, so reading a fork walks the chain.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.adk.events.event import Event as AdkEvent

from journal import EventPageRequest, JournalEvent, Store

from .records import decode_event

PAGE = 512


def sources(key: str, head: int, chain: list[list[Any]]) -> list[tuple[str, int]]:
    """(journal session, last sequence read there) for the session and its ancestors."""
    out = [(key, head)]
    for link in chain:
        out.append((str(link[0]), int(link[1])))
    return out


def newest_first(
    store: Store, srcs: list[tuple[str, int]], want: int | None = None
) -> Iterator[tuple[str, JournalEvent]]:
    """Every journal event of the chain, newest first, with the session it is in."""
    for sid, upto in srcs:
        before: int | None = upto + 1
        while before is not None and before > 1:
            limit = PAGE if want is None else max(1, min(PAGE, want))
            page = store.event_page(sid, EventPageRequest(limit=limit, before_sequence=before))
            for jev in page.events:
                yield sid, jev
            before = page.next_before_sequence


def read_events(
    store: Store,
    srcs: list[tuple[str, int]],
    num_recent_events: int | None,
    after_timestamp: float | None,
) -> list[AdkEvent]:
    """The session's events oldest first: the newest `num_recent_events` (None: all), and
    of those the ones after the newest event older than `after_timestamp` (as ADK's
    in-memory service filters: events appended with timestamps that go back are kept
    in the order they were appended)."""
    if num_recent_events == 0:
        return []
    out: list[AdkEvent] = []
    for sid, jev in newest_first(store, srcs, num_recent_events):
        event = decode_event(jev, sid)
        if after_timestamp is not None and event.timestamp < after_timestamp:
            break
        out.append(event)
        if num_recent_events is not None and len(out) >= num_recent_events:
            break
    out.reverse()
    return out


def find_fork_point(
    store: Store,
    srcs: list[tuple[str, int]],
    at_event_id: str | None,
    before_invocation_id: str | None,
) -> tuple[str, int] | None:
    """(journal session, sequence) a fork keeps everything up to: the event `at_event_id`,
    or the event before the first one of invocation `before_invocation_id`. None if no
    such event is in the chain."""
    found: tuple[str, int] | None = None
    for sid, jev in newest_first(store, srcs):
        raw = jev.event.msg.get("event")
        if not isinstance(raw, dict):
            continue
        if at_event_id is not None and raw.get("id") == at_event_id:
            return sid, jev.sequence
        if before_invocation_id is not None and raw.get("invocation_id") == before_invocation_id:
            found = (sid, jev.sequence - 1)  # an older event of it may come: keep looking
    return found

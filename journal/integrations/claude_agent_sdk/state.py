"""What this process knows of each session it appends to, and reading it from the log.

An append needs three things about its session: the latest event sequence (its
compare-and-append condition), the `uuid`s already stored (the SDK's idempotency
key: an entry whose uuid is there is not stored again) and the current summary
(the fold's input). `KeyState` holds them. It is built from the log once per
process (`rebuild`, one read of the whole session), kept up to date by this
process's own appends, and brought up to date with what other processes wrote
(`catch_up`) only when a conditional append is refused: a refusal is exactly the
sign that the log moved.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from journal import Store

from .records import Batch, decode, decode_lines, uuids_of

PAGE = 1024
"""Events read per `events_after` call."""

Ident = tuple[int, int, int]


@dataclass
class KeyState:
    """One session as this process last saw it."""

    ident: Ident | None  # the session's incarnation (None: it did not exist)
    latest: int = 0  # the latest event sequence seen
    uuids: set[str] = field(default_factory=set)
    summary: dict[str, Any] | None = None  # the main transcript's fold data
    summary_at: int | None = None  # the event that holds `summary`

    def apply(self, batch: Batch, uuids: list[Any]) -> None:
        """Take in one batch of this session's log (newer than `latest`) and the uuids
        of its entries (anything but a string is no uuid)."""
        self.uuids.update(u for u in uuids if type(u) is str)
        if batch.summary is not None:
            self.summary = batch.summary
            self.summary_at = batch.sequence
        self.latest = max(self.latest, batch.sequence)


def batches(store: Store, journal_id: str, after: int) -> Iterator[Batch]:
    """This session's append batches with a sequence above `after`, oldest first."""
    while True:
        events = store.events_after(journal_id, after, PAGE)
        for ev in events:
            batch = decode(journal_id, ev)
            if batch is not None:
                yield batch
        if len(events) < PAGE:
            return
        after = events[-1].sequence


def rebuild(store: Store, journal_id: str) -> KeyState:
    """The state of a session read from its log (`ident` None when it does not exist)."""
    state = KeyState(store.incarnation(journal_id))
    if state.ident is not None:
        catch_up(store, journal_id, state)
    return state


def catch_up(store: Store, journal_id: str, state: KeyState) -> bool:
    """Take in what the log holds beyond `state.latest`; whether there was any."""
    before = state.latest
    for batch in batches(store, journal_id, state.latest):
        state.apply(batch, uuids_of(decode_lines(journal_id, batch)))
    return state.latest > before


class States:
    """The `KeyState`s of the sessions this store object appended to or loaded, least
    recently used dropped first beyond `limit` (each holds its session's uuids)."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._states: OrderedDict[str, KeyState] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, journal_id: str) -> KeyState | None:
        with self._guard:
            state = self._states.get(journal_id)
            if state is not None:
                self._states.move_to_end(journal_id)
            return state

    def put(self, journal_id: str, state: KeyState) -> None:
        with self._guard:
            self._states[journal_id] = state
            self._states.move_to_end(journal_id)
            while len(self._states) > self.limit:
                self._states.popitem(last=False)

    def drop(self, journal_id: str, *, with_subkeys: bool = False) -> None:
        """Forget a session (and, for a main transcript, its subkeys' sessions)."""
        with self._guard:
            self._states.pop(journal_id, None)
            if with_subkeys:
                head = journal_id + "/"
                for jid in [j for j in self._states if j.startswith(head)]:
                    del self._states[jid]


class StripedLocks:
    """Per-session thread locks of one store object, striped so their number stays
    bounded however many sessions it touches (two sessions may share a stripe)."""

    def __init__(self, stripes: int = 256) -> None:
        self._locks = [threading.Lock() for _ in range(stripes)]

    def lock(self, journal_id: str) -> threading.Lock:
        return self._locks[hash(journal_id) % len(self._locks)]

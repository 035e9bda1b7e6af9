"""The saver's index of each session's events, built lazily and kept caught up.

An index is built newest first, only as deep as a call needs, and caught up
at every call, so it sees the commits of other processes and of earlier runs:
a read re-reads the newest event indexed and anything newer; a commit of the
saver checks the session's incarnation instead (`Store.incarnation`, one
`stat`). A bounded LRU keeps the indexes of the sessions used last.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from journal import CorruptionError, EventPageRequest, JournalError, JournalEvent, NotFoundError

from . import copymark, fingerprint
from .events import EV_CHECKPOINT, EV_DELETE, EV_WRITES, mark
from .fingerprint import FP_LEN, Fp
from .index import Index, Put, Write
from .reads import SessionReads
from .serde import ItemCodec

PAGE = 256  # events per page read
_MAX_INDEXES = 256


class _Unread:
    """The type of `_UNREAD`: an event's `fp` not parsed yet (None means it has none)."""


_UNREAD = _Unread()


class ThreadIndexes:
    """The indexes of the sessions a saver uses, by session id.

    Call the methods that take a session (or its index) with that session's lock
    held (`JournalSaver`): one caller at a time reads and changes an index.
    """

    def __init__(self, reads: SessionReads, codec: ItemCodec) -> None:
        self.store = reads.store
        self.reads = reads
        self.codec = codec  # decodes the metadata of the puts it indexes
        self.lock = threading.Lock()  # guards `indexes`
        self.indexes: OrderedDict[str, Index] = OrderedDict()

    def with_codec(self, codec: ItemCodec) -> ThreadIndexes:
        """These indexes, decoding with `codec` (`JournalSaver.with_allowlist`)."""
        other = copy.copy(self)
        other.codec = codec
        return other

    # ------------------------------------------------------------- events
    def parse_put(self, idx: Index, ev: JournalEvent, fp: Fp | _Unread | None = _UNREAD) -> Put:
        """The put of a checkpoint event (`fp`: its `fingerprint.of`, if the caller has it)."""
        msg = ev.event.msg
        if isinstance(fp, _Unread):
            fp = fingerprint.of(ev)
        known = fp is not None and fp.clean and fp.current
        try:
            ctx = msg.get("ctx") or [None, 0, 0]
            return Put(
                event_seq=ev.sequence,
                seq=int(msg["seq"]),
                id=str(msg["id"]),
                parent=msg.get("parent"),
                msg=msg,
                metadata=self.codec.decode_metadata(msg.get("metadata")),
                ctx_channel=ctx[0],
                ctx_len=int(ctx[1]),
                epoch=int(ctx[2]),
                ahead=fp.mine if fp is not None and known else (),
                known=known,
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CorruptionError(
                f"session {idx.sid!r}: malformed checkpoint event {ev.sequence}"
            ) from exc

    def apply(
        self, idx: Index, ev: JournalEvent, *, forward: bool, fp: Fp | _Unread | None = _UNREAD
    ) -> None:
        """Add what an event says to the index (`forward`: it is newer than `high`)."""
        msg = ev.event.msg
        kind = msg.get("type")
        if kind == EV_CHECKPOINT:
            put = self.parse_put(idx, ev, fp)
            old = idx.puts.get(put.id)
            if old is None or old.seq < put.seq:
                idx.puts[put.id] = put
                idx.order = None
            if forward:
                idx.head = None  # a newer checkpoint: the cached head is stale
                if idx.top is None or put.seq > idx.top[0]:
                    idx.top = (put.seq, put.epoch, put.ctx_len)
        elif kind == EV_WRITES:
            _apply_writes(idx, ev, msg)
        elif kind == EV_DELETE:
            ids = msg.get("ids")
            if isinstance(ids, list):
                idx.deleted.update(str(i) for i in ids)
                idx.order = None

    # ------------------------------------------------------------- upkeep
    def index(self, sid: str, thread_id: str, ns: str, *, mode: str = "read") -> Index | None:
        """The session's index, caught up with the store (None: no such session).

        `mode` "read": the event at `high` is read again and must be the one indexed
        (what tells a log deleted and created again, or cut by a repair), then the
        events after it are applied. For a commit of this saver, whose event is
        only trusted by readers when it lands right after `high`: "write" checks
        the session's incarnation (one `stat`) instead of re-reading the event at
        `high` and applies the events after it (a read that finds none decodes
        nothing); "cas" checks only the incarnation, for an append made with
        `expected_latest=high` (which the store refuses if anything came since).
        """
        with self.lock:
            idx = self.indexes.get(sid)
            if idx is not None:
                self.indexes.move_to_end(sid)
        if idx is not None and mode != "read":
            if (
                idx.ident is not None
                and self.store.incarnation(idx.sid) == idx.ident
                and (mode == "cas" or self.catch_up(idx, verify=False))
            ):
                return idx
            idx = None  # deleted (and perhaps created again) since: build it afresh
        # One read when the log still holds the event at `high`: it and anything newer.
        if idx is not None and idx.high > 0 and self.catch_up(idx):
            return idx
        return self._start(sid, thread_id, ns, idx)

    def _start(self, sid: str, thread_id: str, ns: str, old: Index | None) -> Index | None:
        """An index of `sid` from its newest event (None: no such session, or one of
        a thread whose copy is not finished: `copymark`), or `old` if it is an
        index of an empty log of the same incarnation, caught up."""
        ident = self.store.incarnation(sid)  # before the first read: an older one never matches
        self.reads.renew(sid)  # (a reader made before it would be such a read)
        try:
            newest = self.reads.event_page(sid, EventPageRequest(limit=1))
        except NotFoundError:
            self.forget(sid)
            return None
        root = copymark.root_of(sid, ns)
        if copymark.unfinished(self.reads, root, newest if root == sid else None):
            self.forget(sid)  # a copy not finished: the thread is absent until it is
            return None
        latest = newest.latest_sequence
        if (
            old is not None
            and old.high == 0
            and old.ident == ident
            and (latest == 0 or self.catch_up(old))
        ):
            return old
        idx = Index(sid, thread_id, ns, ident, low=latest + 1, high=latest)
        if newest.events:
            top = newest.events[0]
            idx.high_mark = mark(top)
            idx.high_fp = fingerprint.of(top)
            if top.event.msg.get("type") == EV_CHECKPOINT:
                with contextlib.suppress(CorruptionError):  # read again (and raised) if needed
                    put = self.parse_put(idx, top)
                    idx.top = (put.seq, put.epoch, put.ctx_len)
        with self.lock:
            self.indexes[sid] = idx
            while len(self.indexes) > _MAX_INDEXES:
                self.indexes.popitem(last=False)
        return idx

    def catch_up(self, idx: Index, *, verify: bool = True) -> bool:
        """Apply the events after `high`; False if the log is not the one indexed.

        `verify`: read the event at `high` again and compare it (else the caller
        has checked the incarnation, see `index`).
        """
        after = idx.high - 1 if verify and idx.high > 0 else idx.high
        first = verify
        while True:
            events = self.reads.events_after(idx.sid, after, PAGE)
            if first and idx.high > 0:
                if not events or mark(events[0]) != idx.high_mark:
                    return False
                events = events[1:]
                after = idx.high
            first = False
            if not events:
                return True
            for ev in events:
                self.advance(idx, ev)
                after = ev.sequence

    def advance(self, idx: Index, ev: JournalEvent) -> None:
        """Apply the event right after `high` (read, or just committed) and move `high` to it."""
        fp = fingerprint.of(ev)
        self.apply(idx, ev, forward=True, fp=fp)
        idx.high = ev.sequence
        idx.high_mark = mark(ev)
        idx.high_fp = fp

    def forget(self, sid: str) -> None:
        with self.lock:
            self.indexes.pop(sid, None)

    def forget_thread(self, thread_id: str) -> None:
        with self.lock:
            for sid in [s for s, i in self.indexes.items() if i.thread_id == thread_id]:
                del self.indexes[sid]

    # ------------------------------------------------------------- the scan
    def page_down(self, idx: Index, until: int = 0) -> bool:
        """Index one more page of older events; False when already complete.

        `until`: the event the caller needs (a smaller page when it is near).
        """
        if idx.complete:
            return False
        limit = PAGE if until <= 0 else max(16, min(PAGE, idx.low - until))
        page = self.reads.event_page(
            idx.sid, EventPageRequest(before_sequence=idx.low, limit=limit)
        )
        for ev in page.events:  # newest first
            if ev.sequence < idx.low:
                self.apply(idx, ev, forward=False)
        if page.next_before_sequence is None or not page.events:
            idx.low = 1
        else:
            idx.low = min(ev.sequence for ev in page.events)
        return True

    def page_all(self, idx: Index) -> None:
        """Index the whole log."""
        while self.page_down(idx):
            pass

    def cover(self, idx: Index, put: Put) -> Put:
        """Page down until every event that may hold a write of `put` is indexed.

        Writes can be stored before their checkpoint (LangGraph's async
        durability); a put with a clean `fp` says from where, any other put
        needs the whole log.
        """
        while idx.low > put.writes_from and self.page_down(idx, put.writes_from):
            pass
        return put

    def find(self, idx: Index, checkpoint_id: str) -> Put | None:
        while True:
            put = idx.puts.get(checkpoint_id)
            if put is not None:
                return None if put.id in idx.deleted else self.cover(idx, put)
            if not self.page_down(idx):
                return None

    def latest(self, idx: Index) -> Put | None:
        while True:
            visible = [p for p in idx.puts.values() if p.id not in idx.deleted]
            if visible:
                best = max(visible, key=lambda p: p.seq)
                # A put below the covered range cannot be newer than a covered one.
                return self.cover(idx, best)
            if not self.page_down(idx):
                return None

    def iter_puts(self, idx: Index, before_seq: int | None) -> Iterator[Put]:
        """Visible checkpoints newest first, paging older events in as needed."""
        done: set[str] = set()
        while True:
            low = idx.low
            for put in idx.ordered():
                if put.id in done or (before_seq is not None and put.seq >= before_seq):
                    continue
                done.add(put.id)
                # Paging down here only adds older puts (seen by the next round).
                yield self.cover(idx, put)
            if idx.low == low and not self.page_down(idx):
                return

    def cover_writes(self, idx: Index, checkpoint_id: str) -> None:
        """Page down until every stored write of `checkpoint_id` is indexed."""
        ahead = self.ahead_from(idx, checkpoint_id)
        if ahead is not None:  # its put is still to come: earlier writes are >= ahead
            while idx.low > ahead and self.page_down(idx, ahead):
                pass
        elif self.find(idx, checkpoint_id) is None:
            self.page_all(idx)  # writes for an unknown id: check them all

    # ------------------------------------------------------------- new events
    def next_fp(self, idx: Index, kind: str, checkpoint_id: str | None) -> list[Any]:
        """The `fp` of a new event of `kind` naming `checkpoint_id`, written after `high`."""
        return fingerprint.for_new(idx.high_fp, idx.high, kind, checkpoint_id, self.resolver(idx))

    def ahead_from(self, idx: Index, checkpoint_id: str) -> int | None:
        """For a write whose checkpoint is not put yet: where its earlier writes start.

        When the newest event is clean and `checkpoint_id` is newer than every put
        so far, every earlier write naming it was an ahead write, at or after the
        first one, which `pend` lists. None: unknown (or not an ahead write).
        """
        fp = idx.high_fp
        if fp is None or not fp.current or not fp.clean or fp.seq != idx.high:
            return None
        if fp.last is not None and not checkpoint_id > fp.last:
            return None
        resolve = self.resolver(idx)
        for s in fp.pend:
            named = resolve(s)
            if named is None:
                return None
            if named == checkpoint_id:
                return s
        return idx.high + 1

    def resolver(self, idx: Index) -> Callable[[int], str | None]:
        """`resolve` for `fingerprint.for_new`: the checkpoint id an ahead write event names."""

        def resolve(seq: int) -> str | None:
            cid = idx.wids.get(seq)
            if cid is not None:
                return cid
            try:
                page = self.reads.event_page(
                    idx.sid, EventPageRequest(before_sequence=seq + 1, limit=1)
                )
            except JournalError:
                return None
            if not page.events or page.events[0].sequence != seq:
                return None
            msg = page.events[0].event.msg
            named = msg.get("id")
            if msg.get("type") != EV_WRITES or not isinstance(named, str):
                return None
            idx.wids[seq] = named
            return named

        return resolve


def _apply_writes(idx: Index, ev: JournalEvent, msg: dict[str, Any]) -> None:
    """Add the writes of a `langgraph_writes` event to the index."""
    cid = msg.get("id")
    task_id = msg.get("task")
    writes = msg.get("w")
    if not isinstance(cid, str) or not isinstance(task_id, str) or not isinstance(writes, list):
        raise CorruptionError(f"session {idx.sid!r}: malformed writes event {ev.sequence}")
    path = msg.get("path") if isinstance(msg.get("path"), str) else ""
    raw = msg.get("fp")
    if isinstance(raw, list) and len(raw) == FP_LEN and raw[5] and raw[5][-1] == ev.sequence:
        idx.wids[ev.sequence] = cid  # an ahead write: a later put will name it
    for pos, w in enumerate(writes):
        if not isinstance(w, list) or len(w) != 3:
            raise CorruptionError(f"session {idx.sid!r}: malformed write in event {ev.sequence}")
        key = (task_id, int(w[0]))
        idx.add_write(cid, key, Write(ev.sequence, pos, task_id, str(w[1]), w[2], str(path)))

"""Pages of items newest first, and the cursors that name their items.

A cursor records the log position it was issued at and the removals still
pending below its item, so a page below it leaves out exactly what was popped or
cleared since, without re-reading the history above it. The cache answers a page
that lies in (or right below) what it holds; a deeper one is read from the log
directly, costing the page, not the history above it.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from journal import InvalidInputError

from .cache import Cache
from .records import (
    CLEAR,
    POP,
    REPLACE,
    Key,
    Segment,
    chain_of,
    decode_all,
    is_count,
    older,
    replaced_of,
    sort_key,
    target_of,
)
from .sync import CacheSync

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

_CURSOR_PREFIX = "jc1."
_cursor_encode = msgspec.msgpack.Encoder().encode
_cursor_decode = msgspec.msgpack.Decoder(list[Any]).decode
_URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64 -> urlsafe base64

Cursor = tuple[int, Key, list[Key]]
"""A decoded cursor: (latest event when issued, item key, removals pending below the item)."""


@dataclass
class ItemPage:
    """Items newest first, each with its cursor; `next_before` continues with older items.

    A cursor names one item: pass it as `before=` to page below it, or as `at=` /
    `before=` to `branch`. `next_before` is None when there is nothing older.
    """

    items: list[TResponseInputItem] = field(default_factory=list)
    cursors: list[str] = field(default_factory=list)
    next_before: str | None = None

    def into_chronological(self) -> list[TResponseInputItem]:
        """The items oldest first (a new list)."""
        return self.items[::-1]


def session_tag(session_id: str) -> int:
    """The tag a session's cursors carry, so a cursor of another session is refused."""
    return zlib.crc32(session_id.encode("utf-8", "surrogatepass"))


def encode_cursor(tag: int, latest: int, key: Key, pending: Sequence[Key]) -> str:
    raw = _cursor_encode((tag, latest, *key, pending))
    b64 = binascii.b2a_base64(raw, newline=False).translate(_URLSAFE)
    return _CURSOR_PREFIX + b64.decode("ascii").rstrip("=")


def decode_cursor(cursor: str, tag: int, session_id: str, depths: int) -> Cursor:
    """A cursor of the session `session_id` (whose branch chain has `depths` sessions)."""

    def bad() -> InvalidInputError:
        return InvalidInputError(f"not a cursor of session {session_id!r}: {cursor!r}")

    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX):
        raise bad()
    body = cursor[len(_CURSOR_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        got_tag, latest, depth, seq, index, pend = _cursor_decode(raw)
        pending = [(int(a), int(b), int(c)) for a, b, c in pend]
    except (ValueError, TypeError, msgspec.DecodeError):
        raise bad() from None
    if got_tag != tag:
        raise bad()
    if (
        not (is_count(latest) and is_count(depth) and is_count(seq) and is_count(index))
        or depth >= depths
    ):
        raise bad()
    return latest, (depth, seq, index), pending


class Pager:
    """The pages of one `JournalSession`, from its cache or from the log."""

    def __init__(self, sync: CacheSync, tag: int):
        self.sync = sync
        self.store = sync.store
        self.session_id = sync.session_id
        self.tag = tag

    def page(self, limit: int, before: str | None) -> ItemPage:
        """At most `limit` items newest first, older than the item named by `before`."""
        sync = self.sync
        ident = sync.identity()
        if before is not None and ident is not None:
            cold = sync.current
            if cold is None or cold.ident != ident:
                # Nothing cached: a page below a cursor is read from the log; reading
                # the newest items into a new cache first would be wasted work.
                cp = self.store.load(self.session_id)
                if cp is not None:
                    chain = chain_of(self.session_id, cp)
                    cur = self.decode(before, len(chain))
                    return self.disk_page(chain, cur[0], limit, cur)
        c = sync.sync_as(ident, limit + 1 if before is None else 1)
        cursor = self.decode(before, len(c.chain)) if before is not None else None
        page = self._cached_page(c, limit, cursor[1] if cursor is not None else None)
        if page is not None:
            return page
        return self.disk_page(c.chain, c.latest, limit, cursor)

    def decode(self, cursor: str, depths: int) -> Cursor:
        return decode_cursor(cursor, self.tag, self.session_id, depths)

    def _cached_page(self, c: Cache, limit: int, key: Key | None) -> ItemPage | None:
        """The page below `key` (None: the newest) from the cache, reading older items
        into it as needed; None when the log must answer."""

        def position() -> int:
            if key is None:
                return len(c.keys)
            return bisect.bisect_left(c.keys, sort_key(key), key=sort_key)

        # The cache answers when the page lies in (or right below) what it holds;
        # a cursor deeper than that is resumed on the log directly (O(page)),
        # without loading everything above it.
        if not (
            c.complete
            or key is None
            or (c.extendable and not older(key, c.boundary))
            or (c.keys and not older(key, c.keys[0]))
        ):
            return None
        p = position()
        while p < limit + 1 and not c.complete and c.extendable:
            self.sync.extend(c, len(c.keys) + limit + 1 - p)
            p = position()
        if p < limit + 1 and not c.complete:
            return None
        lo = max(0, p - limit)
        keys = c.keys[lo:p][::-1]
        page = ItemPage(items=decode_all(c.vals[lo:p])[::-1])
        tag, latest = self.tag, c.latest
        if c.tombs:
            page.cursors = [encode_cursor(tag, latest, k, sorted(c.pending_at(k))) for k in keys]
        else:  # no removal can be pending below any of them
            page.cursors = [encode_cursor(tag, latest, k, ()) for k in keys]
        if lo > 0:
            page.next_before = page.cursors[-1]
        return page

    def disk_page(
        self, chain: list[Segment], latest: int, limit: int, cursor: Cursor | None
    ) -> ItemPage:
        """A page read from the log (history beyond the cache budget, or nothing cached).

        `chain`, `latest`: the session's branch chain and the log position to read
        at when there is no cursor (a cursor brings its own)."""
        sid = self.session_id
        start: Key | None = None
        pending: set[Key] = set()
        if cursor is not None:
            latest, start, pend_list = cursor
            pending = set(pend_list)
            # Pops and clears since the cursor was issued (exact, without a rescan).
            while True:
                new = self.store.events_after(sid, latest, 1024)
                for jev in new:
                    latest = jev.sequence
                    kind = jev.event.msg.get("type")
                    if kind == POP:
                        t = target_of(sid, latest, jev.event.msg, 0, sid)
                        if older(t, start):
                            pending.add(t)
                    elif kind == REPLACE:
                        _, drops = replaced_of(sid, latest, jev.event.msg, 0, sid)
                        pending.update(t for t in drops if older(t, start))
                    elif kind == CLEAR:
                        return ItemPage()
                if len(new) < 1024:
                    break
        chain = [Segment(sid, events=latest), *chain[1:]]
        page = ItemPage()
        for key, item, pend in self.sync.scanner.items(chain, start, pending, want=limit + 1):
            if len(page.items) == limit:
                page.next_before = page.cursors[-1]
                break
            page.items.append(item)
            page.cursors.append(encode_cursor(self.tag, latest, key, pend))
        return page

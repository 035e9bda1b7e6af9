"""The catalog as its readers see it: the base on disk and the delta in memory.

The base (catalogbase.py) holds every listed session as of one catalog log
position; the delta holds what the log's records after that position changed,
one entry per session they touched (`Live`, or None for a deleted session). A
session in the delta is read from there only: its base entries, in every table,
are skipped. So a record is applied by copying the session's base entry into the
delta first (`_own`), and each query merges a range scan of a base table with
the delta's own sorted keys. `write_merged` streams base and delta into a new
base, table by table, in key order.

Not thread-safe by itself: the catalog calls it under its lock.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator
from typing import Any

from .catalogbase import Base, BaseWriter, Entry, Table
from .catalogrecords import (
    OP_DELETE,
    OP_EXECUTION,
    OP_RESET,
    T_DIRS,
    T_EXECS,
    T_ORDER,
    T_OWNERS,
    T_PARENTS,
    T_SESSIONS,
    TABLES,
    BaseEntry,
    CatalogRecord,
    ExecKey,
    SortKey,
    Span,
    decode_base_entry,
    decode_summary,
    encode,
    sort_key,
)
from .layout import dir_name
from .types import SessionSummary

_TOP = 1 << 64  # above every timestamp and sequence: the end of an owner's range


class Live:
    """One session's entry in the delta."""

    __slots__ = ("covered", "executions", "seqs", "summary", "where")

    def __init__(
        self,
        summary: SessionSummary,
        covered: int,
        executions: list[tuple[int, int]],
        where: dict[int, Span],
    ) -> None:
        self.summary, self.covered = summary, covered
        self.executions = executions
        self.seqs = {seq for seq, _ in executions}
        self.where = where

    def copy(self) -> Live:
        return Live(self.summary, self.covered, list(self.executions), dict(self.where))

    def encoded(self) -> bytes:
        where = [(seq, *span) for seq, span in sorted(self.where.items())]
        return encode(BaseEntry(self.covered, self.summary, self.executions, where))


def _live(entry: BaseEntry) -> Live:
    where = {seq: (pos, size) for seq, pos, size in entry.where}
    return Live(entry.summary, entry.covered, list(entry.executions), where)


class CatalogView:
    def __init__(self, base: Base | None) -> None:
        self.base = base
        self.delta: dict[str, Live | None] = {}
        self.keys: list[SortKey] = []
        self.by_owner: dict[str, list[SortKey]] = {}
        self.children: dict[str, set[str]] = {}
        self.dirs: dict[str, str] = {}
        self.exec_keys: list[ExecKey] = []

    def table(self, table: int) -> Table | None:
        if self.base is None:
            return None
        entry, key, _, _ = TABLES[table]
        return self.base.table(table, entry, key)

    # ------------------------------------------------------------- the base
    def _base_entry(self, sid: str) -> BaseEntry | None:
        sessions = self.table(T_SESSIONS)
        if sessions is None:
            return None
        for e in sessions.ascending((sid,)):
            return decode_base_entry(e[1]) if e[0] == sid else None
        return None

    def current(self, sid: str) -> Live | None:
        """A session's entry (None: not listed), without copying it into the delta."""
        if sid in self.delta:
            return self.delta[sid]
        entry = self._base_entry(sid)
        return None if entry is None else _live(entry)

    # ------------------------------------------------------------- applying
    def apply(self, r: CatalogRecord, span: Span | None) -> None:
        sid = r.session_id
        if r.op == OP_EXECUTION:
            # The copy is only trusted for an execution the catalog lists (the upsert
            # before it added the key); a stray copy of a deleted session is dropped.
            if span is None or r.execution is None:
                return
            cur = self.current(sid)
            if cur is not None and r.execution[0] in cur.seqs:
                owned = self._own(sid)
                assert owned is not None
                owned.where[r.execution[0]] = span
            return
        if r.op in (OP_DELETE, OP_RESET):
            self._drop(sid)
            cur = None
        else:
            cur = self._own(sid)
        if r.summary is not None and r.covered >= (-1 if cur is None else cur.covered):
            if cur is None:
                cur = Live(r.summary, r.covered, [], {})
                self.delta[sid] = cur
            else:
                self._unindex(sid, cur)
                cur.summary, cur.covered = r.summary, r.covered
            self._index(sid, cur)
        if cur is None:
            return  # executions of a session we do not list (deleted) are not kept
        added = list(r.executions)
        if r.execution is not None:
            added.append(r.execution)
        for seq, started in added:
            if seq not in cur.seqs:
                cur.seqs.add(seq)
                cur.executions.append((seq, started))
                bisect.insort(self.exec_keys, (started, sid, seq))

    def _own(self, sid: str) -> Live | None:
        """The session's delta entry, copied from the base on its first change."""
        if sid in self.delta:
            return self.delta[sid]
        entry = self._base_entry(sid)
        if entry is None:
            return None
        live = self.delta[sid] = _live(entry)
        self._index(sid, live)
        for seq, started in live.executions:
            bisect.insort(self.exec_keys, (started, sid, seq))
        return live

    def _drop(self, sid: str) -> None:
        """Make the session unlisted (a tombstone over its base entries)."""
        old = self.delta.get(sid)
        if old is not None:
            self._unindex(sid, old)
            for seq, started in old.executions:
                _remove_sorted(self.exec_keys, (started, sid, seq))
        self.delta[sid] = None

    def _index(self, sid: str, live: Live) -> None:
        s = live.summary
        key = sort_key(s)
        bisect.insort(self.keys, key)
        bisect.insort(self.by_owner.setdefault(s.session_context.owner_id, []), key)
        if s.parent_session_id is not None:
            self.children.setdefault(s.parent_session_id, set()).add(sid)
        self.dirs[dir_name(sid)] = sid

    def _unindex(self, sid: str, live: Live) -> None:
        s = live.summary
        key = sort_key(s)
        _remove_sorted(self.keys, key)
        owner = s.session_context.owner_id
        owned = self.by_owner.get(owner)
        if owned is not None:
            _remove_sorted(owned, key)
            if not owned:
                del self.by_owner[owner]
        parent = s.parent_session_id
        if parent is not None and parent in self.children:
            self.children[parent].discard(sid)
            if not self.children[parent]:
                del self.children[parent]
        self.dirs.pop(dir_name(sid), None)

    # --------------------------------------------------------------- queries
    def page(
        self, owner_id: str | None, cursor: SortKey | None, limit: int
    ) -> tuple[list[SessionSummary], SortKey | None]:
        """Up to `limit` summaries below `cursor`, newest first, and the cursor of
        the next page (None: no more)."""
        delta = self.delta
        if owner_id is None:
            mine = self.keys
            table = self.table(T_ORDER)
            base: Iterator[Entry] = iter(()) if table is None else table.descending(cursor)
            sid_at = 2
        else:
            mine = self.by_owner.get(owner_id, [])
            table = self.table(T_OWNERS)
            top = (owner_id, *cursor) if cursor is not None else (owner_id, _TOP)
            base = iter(()) if table is None else table.descending(top)
            sid_at = 3
        hi = len(mine) if cursor is None else bisect.bisect_left(mine, cursor)
        out: list[tuple[SortKey, Any]] = []
        b = _next_base(base, delta, sid_at, owner_id)
        while len(out) <= limit:
            d = mine[hi - 1] if hi > 0 else None
            bkey = None if b is None else (b[sid_at - 2], b[sid_at - 1], b[sid_at])
            if d is None and bkey is None:
                break
            if d is not None and (bkey is None or d > bkey):
                out.append((d, None))
                hi -= 1
            else:
                assert b is not None and bkey is not None
                out.append((bkey, b))
                b = _next_base(base, delta, sid_at, owner_id)
        more = len(out) > limit
        out = out[:limit]
        summaries = []
        for key, entry in out:
            if entry is None:
                live = delta[key[2]]
                assert live is not None
                summaries.append(live.summary)
            else:
                summaries.append(decode_summary(entry[-1]))
        return summaries, (out[-1][0] if more and out else None)

    def recent_execution_keys(self, limit: int) -> tuple[list[tuple[ExecKey, Span | None]], bool]:
        """The `limit` newest execution keys, each with where its copy is (if known),
        and whether there are no more."""
        delta = self.delta
        table = self.table(T_EXECS)
        base: Iterator[Entry] = iter(()) if table is None else table.descending(None)
        hi = len(self.exec_keys)
        out: list[tuple[ExecKey, Span | None]] = []
        b = _next_base(base, delta, 1, None)
        while len(out) <= limit:
            d = self.exec_keys[hi - 1] if hi > 0 else None
            bkey = None if b is None else (b[0], b[1], b[2])
            if d is None and bkey is None:
                break
            if d is not None and (bkey is None or d > bkey):
                live = delta[d[1]]
                assert live is not None
                out.append((d, live.where.get(d[2])))
                hi -= 1
            else:
                assert b is not None and bkey is not None
                out.append((bkey, (b[3], b[4]) if b[3] >= 0 else None))
                b = _next_base(base, delta, 1, None)
        return out[:limit], len(out) <= limit

    def child_ids(self, parent_id: str) -> list[str]:
        """The listed sessions forked from `parent_id` (no order)."""
        out = [sid for sid in self.children.get(parent_id, ()) if self.delta.get(sid)]
        table = self.table(T_PARENTS)
        if table is not None:
            for e in table.ascending((parent_id,)):
                if e[0] != parent_id:
                    break
                if e[1] not in self.delta:
                    out.append(e[1])
        return out

    def child_summaries(self, parent_id: str) -> list[SessionSummary]:
        out = []
        for sid in self.child_ids(parent_id):
            cur = self.current(sid)
            if cur is not None:
                out.append(cur.summary)
        return out

    def listed_id_of_dir(self, name: str) -> str | None:
        """The listed session whose directory name is `name`, if any."""
        sid = self.dirs.get(name)
        if sid is not None:
            return sid
        table = self.table(T_DIRS)
        if table is None:
            return None
        for e in table.ascending((name,)):
            if e[0] != name:
                return None
            if e[1] not in self.delta:
                return str(e[1])
        return None

    def unlisted(self, names: Iterable[str]) -> set[str]:
        """The directory names among `names` of no listed session: a lookup of each,
        or for many names a merge of the sorted names with one scan of the base's
        name table."""
        wanted = sorted(set(names) - self.dirs.keys())
        table = self.table(T_DIRS)
        if table is not None and len(wanted) < table.blocks:
            # Fewer names than blocks: a lookup each reads less than the scan.
            return {name for name in wanted if self.listed_id_of_dir(name) is None}
        it: Iterator[Entry] = iter(()) if table is None else table.ascending(())
        out: set[str] = set()
        e = next(it, None)
        for name in wanted:
            while e is not None and e[0] < name:
                e = next(it, None)
            listed = False
            while e is not None and e[0] == name:
                listed = listed or e[1] not in self.delta
                e = next(it, None)
            if not listed:
                out.add(name)
        return out

    def listed(self) -> Iterator[tuple[str, Live]]:
        """Every listed session and its entry (base order, then the delta's)."""
        table = self.table(T_SESSIONS)
        if table is not None:
            for e in table.ascending(()):
                if e[0] not in self.delta:
                    yield e[0], _live(decode_base_entry(e[1]))
        for sid, live in list(self.delta.items()):
            if live is not None:
                yield sid, live

    def listed_dir_names(self) -> Iterator[str]:
        """The directory names of every listed session."""
        table = self.table(T_DIRS)
        if table is not None:
            for e in table.ascending(()):
                if e[1] not in self.delta:
                    yield e[0]
        yield from list(self.dirs)

    # ---------------------------------------------------------------- merging
    def frozen(self) -> dict[str, Live | None]:
        """A copy of the delta, for a merge that runs without the catalog's lock."""
        return {sid: None if live is None else live.copy() for sid, live in self.delta.items()}

    def write_merged(self, writer: BaseWriter, delta: dict[str, Live | None]) -> int:
        """Write every table of base + `delta` (a `frozen` copy); the sessions listed."""
        live = sorted(((sid, e) for sid, e in delta.items() if e is not None), key=_by_sid)
        rows: dict[int, list[Entry]] = {t: [] for t in TABLES}
        for sid, e in live:
            s = e.summary
            summary = encode(s)
            rows[T_SESSIONS].append((sid, e.encoded()))
            rows[T_ORDER].append((s.updated_at, s.sequence, sid, summary))
            owner = s.session_context.owner_id
            rows[T_OWNERS].append((owner, s.updated_at, s.sequence, sid, summary))
            if s.parent_session_id is not None:
                rows[T_PARENTS].append((s.parent_session_id, sid, b""))
            for seq, started in e.executions:
                pos, size = e.where.get(seq, (-1, 0))
                rows[T_EXECS].append((started, sid, seq, pos, size))
            rows[T_DIRS].append((dir_name(sid), sid, b""))
        count = [0]
        for t, (_, _, keys, sid_at) in TABLES.items():
            mine = sorted(rows[t])
            table = self.table(t)
            theirs: Iterable[Entry] = () if table is None else table.ascending(())
            kept = (e for e in theirs if e[sid_at] not in delta)
            merged: Iterator[Entry] = heapq.merge(kept, mine)
            if t == T_SESSIONS:
                merged = _counting(merged, count)
            writer.table(t, merged, keys)
        return count[0]


def _by_sid(item: tuple[str, Live]) -> str:
    return item[0]


def _counting(entries: Iterable[Entry], count: list[int]) -> Iterator[Entry]:
    for e in entries:
        count[0] += 1
        yield e


def _next_base(
    it: Iterator[Entry], delta: dict[str, Any], sid_at: int, owner: str | None
) -> Entry | None:
    """The next base entry not superseded by the delta (within `owner`'s range)."""
    for e in it:
        if owner is not None and e[0] != owner:
            return None
        if e[sid_at] not in delta:
            return e
    return None


def _remove_sorted(keys: list[Any], key: Any) -> None:
    i = bisect.bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        del keys[i]

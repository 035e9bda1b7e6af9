"""What the viewer shows, as JSON-ready data: the JSON API answers with these
documents as they are, and the pages render them.

Every answer reads a bounded amount: one catalog page, one page of a journal, or a
scan with a budget (`SCAN_BUDGET`) that says where it stopped, so a page costs the
same at the top of a store of a million sessions or a session of a million events.
The store is opened read-only: no lock is taken and no byte is written. The shapes
follow `journal ... --json` (docs/viewer.md lists the differences).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec

import journal
from journal import (
    EventPageRequest,
    ExecutionPageRequest,
    JournalError,
    JournalEvent,
    NotFoundError,
    SessionCursor,
    SessionPageRequest,
    SessionSummary,
    TranscriptPageRequest,
)
from journal import inspect as tools

from .convo import Message, conversation, decode_serialised

SCAN_BUDGET = 10_000  # catalog rows or events one filtered answer looks at, at most
MAX_LIMIT = 500  # the largest page any answer gives
TREE_NODES = 1_000  # the largest fork tree drawn
# Levels of a fork tree drawn above the session, and in all: the tree is nested
# (JSON and HTML alike), and a chain of forks of forks deeper than a few hundred
# would exceed Python's recursion limit in whatever builds or encodes it.
TREE_UP = 100
TREE_DEPTH = 200
SDK_TYPES = ("agents.items", "agents.pop", "agents.clear", "agents.replace")

_builtins = msgspec.to_builtins


def error_doc(exc: BaseException) -> dict[str, Any]:
    """An error as the command line prints it under --json (without the exit code)."""
    return {
        "error": str(exc),
        "type": type(exc).__name__,
        "path": getattr(exc, "path", None),
        "offset": getattr(exc, "offset", None),
    }


class Data:
    """The viewer's read-only view of one store (thread-safe, like the store)."""

    def __init__(self, root: str):
        if not tools.is_store(root):
            raise NotFoundError(f"no journal store at {root}")
        self.root = os.path.abspath(root)
        self.store = journal.open(root, read_only=True, create=False)
        # The catalog is read on its first use: here, before the server answers,
        # rather than in the first visitor's request.
        self.store.list_sessions_page(SessionPageRequest(limit=1))
        self._lock = threading.Lock()
        # what verify found, by session id: (log bytes verified, first data finding)
        self._verified: dict[str, tuple[int, dict[str, Any] | None]] = {}

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------- sessions
    def _view(self, sid: str) -> tuple[tools.SessionView | None, dict[str, Any] | None]:
        """(counts, damage): a session that cannot be opened is damaged; one that a
        verify in this process found damaged stays marked until its log grows."""
        try:
            view = tools.session_view(self.store, sid)
        except JournalError as exc:
            return None, error_doc(exc)
        with self._lock:
            known = self._verified.get(sid)
        if view is not None and known is not None and known[0] == view.log_bytes:
            return view, known[1]
        return view, None

    def _row(self, s: SessionSummary) -> dict[str, Any]:
        view, damage = self._view(s.session_id)
        files = disk = 0
        if view is not None:
            files, disk = tools.dir_sizes(view.directory)
        return {
            **_builtins(s),
            "events": view.events if view else None,
            "log_bytes": view.log_bytes if view else 0,
            "file_bytes": files,
            "disk_bytes": disk,
            "damaged": damage is not None,
            "damage": damage,
        }

    def sessions(
        self,
        *,
        limit: int = 50,
        before: str | None = None,
        owner: str | None = None,
        q: str | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> dict[str, Any]:
        """Sessions newest first (updated_at, sequence, id), a page at a time.

        `before`: the cursor of the previous page; `until`: only sessions updated
        before this Unix second; `since`: only those updated at or after it; `q`: only
        those whose id or first user message holds it (any case). With `q`, at most
        `SCAN_BUDGET` catalog rows are looked at: `scanned` says how many, and
        `next_before` goes on from there."""
        limit = max(1, min(limit, MAX_LIMIT))
        cursor = tools.parse_cursor(before) if before else None
        if cursor is None and until is not None:
            cursor = SessionCursor(updated_at=until, sequence=0, session_id="")
        needle = q.casefold() if q else None
        found: list[SessionSummary] = []
        scanned = 0
        while True:
            step = limit - len(found) if needle is None else 500
            page = self.store.list_sessions_page(
                SessionPageRequest(owner_id=owner or None, cursor=cursor, limit=step)
            )
            rest = len(page.sessions)
            for s in page.sessions:
                if since is not None and s.updated_at < since:
                    return self._page(found, None, scanned)  # older ones follow: none match
                scanned += 1
                rest -= 1
                cursor = SessionCursor(
                    updated_at=s.updated_at, sequence=s.sequence, session_id=s.session_id
                )
                if (
                    needle is None
                    or needle in s.session_id.casefold()
                    or (
                        s.first_user_message is not None
                        and needle in s.first_user_message.casefold()
                    )
                ):
                    found.append(s)
                    if len(found) == limit:
                        break
            if len(found) == limit:
                more = cursor if rest or page.next_cursor is not None else None
                return self._page(found, more, scanned)
            if page.next_cursor is None:
                return self._page(found, None, scanned)
            if scanned >= SCAN_BUDGET:
                return self._page(found, cursor, scanned)

    def _page(
        self, found: list[SessionSummary], more: SessionCursor | None, scanned: int
    ) -> dict[str, Any]:
        return {
            "sessions": [self._row(s) for s in found],
            "next_before": tools.cursor_text(more) if more is not None else None,
            "scanned": scanned,
        }

    def summary(self, sid: str) -> SessionSummary:
        s = self.store.session_summary(sid)
        if s is None:
            raise NotFoundError(f"session {sid!r} does not exist")
        return s

    def show(self, sid: str) -> dict[str, Any]:
        """`journal show --json`, without what reads the whole log: the first damage
        and the accepted losses (`verify` reports both)."""
        summary = self.summary(sid)
        view, damage = self._view(sid)
        ancestors: list[str] = []
        parent = summary.parent_session_id
        while parent is not None and len(ancestors) < TREE_NODES:
            ancestors.append(parent)
            ps = self.store.session_summary(parent)
            parent = ps.parent_session_id if ps else None
        children = sorted(k.session_id for k in self.store.child_sessions(sid))
        header: dict[str, Any] | None = None
        if view is not None:
            try:
                with self.store.reader(sid) as r:
                    cp = r.load_prefix(0)
                if cp is not None:
                    header = {k: v for k, v in _builtins(cp).items() if k != "context"}
            except JournalError as exc:
                damage = damage or error_doc(exc)
        files, disk = tools.dir_sizes(view.directory) if view else (0, 0)
        return {
            "summary": _builtins(summary),
            "events": view.events if view else None,
            "transcript_batches": view.transcript_batches if view else None,
            "executions": view.executions if view else None,
            "context_epoch": header["context_epoch"] if header else None,
            "log_bytes": view.log_bytes if view else None,
            "file_bytes": files,
            "disk_bytes": disk,
            "directory": view.directory if view else self.store.session_dir(sid),
            "ancestors": ancestors,
            "children": children,
            "damaged": damage is not None,
            "damage": damage,
            "checkpoint_header": header,
        }

    # ------------------------------------------------------------- journals
    def events(
        self,
        sid: str,
        *,
        before: int | None = None,
        limit: int = 50,
        types: list[str] | None = None,
    ) -> dict[str, Any]:
        """A page of events newest first; with `types`, only those, looking at no more
        than `SCAN_BUDGET` events (`next_before` goes on where it stopped)."""
        self.summary(sid)
        limit = max(1, min(limit, MAX_LIMIT))
        wanted = set(types or ())
        out: list[JournalEvent] = []
        scanned = 0
        latest = 0
        nxt = before
        while True:
            step = limit - len(out) if not wanted else max(limit, 200)
            page = self.store.event_page(sid, EventPageRequest(before_sequence=nxt, limit=step))
            latest = page.latest_sequence
            nxt = page.next_before_sequence
            for e in page.events:
                scanned += 1
                if not wanted or e.event.msg.get("type") in wanted:
                    out.append(e)
                    if len(out) == limit:
                        if e is not page.events[-1]:
                            nxt = e.sequence  # older ones of this page are left
                        break
            if nxt is None or len(out) >= limit or scanned >= SCAN_BUDGET:
                break
        return {
            "latest_sequence": latest,
            "events": _builtins(out),
            "next_before": nxt,
            "scanned": scanned,
        }

    def transcript(self, sid: str, *, before: int | None = None, limit: int = 10) -> dict[str, Any]:
        """`journal transcript --json`: batches newest first."""
        self.summary(sid)
        page = self.store.transcript_page(
            sid,
            TranscriptPageRequest(
                before_sequence=before, max_batches=max(1, min(limit, MAX_LIMIT))
            ),
        )
        return {
            "batches": _builtins(page.batches),
            "next_before_sequence": page.next_before_sequence,
        }

    def executions(self, sid: str, *, before: int | None = None, limit: int = 50) -> dict[str, Any]:
        self.summary(sid)
        page = self.store.execution_page(
            sid, ExecutionPageRequest(before_sequence=before, limit=max(1, min(limit, MAX_LIMIT)))
        )
        return {"executions": _builtins(page.executions), "next_before": page.next_before_sequence}

    def state(self, sid: str) -> dict[str, Any]:
        """`journal state SESSION --json`: the session's middleware state by key."""
        self.summary(sid)
        return dict(tools.state_items(self.store, sid))

    # --------------------------------------------------------- conversation
    def sources(self, sid: str) -> list[str]:
        """Where this session's conversation is: "transcript" (transcript batches),
        "items" (Agents SDK events), "context" (the checkpoint's context)."""
        view, _ = self._view(sid)
        out = []
        if view is not None and view.transcript_batches:
            out.append("transcript")
        newest = self.store.event_page(sid, EventPageRequest(limit=20)).events
        if any(e.event.msg.get("type") in SDK_TYPES for e in newest):
            out.append("items")
        out.append("context")
        return out

    def conversation(
        self,
        sid: str,
        *,
        source: str | None = None,
        before: int | None = None,
        limit: int = 50,
        at: int | None = None,
    ) -> dict[str, Any]:
        """The conversation, a page at a time, oldest first within the page:
        transcript batches (`before`: a batch sequence), Agents SDK items (`before`:
        an event sequence) or the checkpoint context (`before`: an item index;
        `at`: the checkpoint of that sequence)."""
        self.summary(sid)
        sources = self.sources(sid)
        source = source or sources[0]
        limit = max(1, min(limit, MAX_LIMIT))
        items: list[tuple[str, Any]] = []
        nxt: int | None = None
        total: int | None = None
        if source == "transcript":
            page = self.store.transcript_page(
                sid, TranscriptPageRequest(before_sequence=before, max_batches=limit)
            )
            for target, item in page.items_chronological():
                items.append(
                    (f"batch {target.checkpoint_sequence} #{target.batch_item_count}", item)
                )
            nxt = page.next_before_sequence
        elif source == "items":
            items, nxt = self._sdk_items(sid, before, limit)
        elif source == "context":
            cp = self.store.load(sid) if at is None else self.store.checkpoint_at(sid, at)
            if cp is None:
                raise NotFoundError(f"session {sid!r} has no checkpoint at {at}")
            total = len(cp.context)
            end = total if before is None else max(0, min(before, total))
            start = max(0, end - limit)
            items = [(f"context #{i}", cp.context[i]) for i in range(start, end)]
            nxt = start if start > 0 else None
        else:
            raise journal.InvalidInputError(f"no conversation source {source!r}")
        messages: list[Message] = conversation(items)
        return {
            "source": source,
            "sources": sources,
            "messages": [m.to_json() for m in messages],
            "next_before": nxt,
            "context_items": total,
        }

    def _sdk_items(
        self, sid: str, before: int | None, limit: int
    ) -> tuple[list[tuple[str, Any]], int | None]:
        batches: list[list[tuple[str, Any]]] = []
        count = scanned = 0
        nxt = before
        while count < limit and scanned < SCAN_BUDGET:
            page = self.store.event_page(sid, EventPageRequest(before_sequence=nxt, limit=200))
            for e in page.events:
                scanned += 1
                msg = e.event.msg
                kind = msg.get("type")
                if kind == "agents.items" and isinstance(msg.get("items"), list):
                    batch = [
                        (f"event {e.sequence} #{i}", it) for i, it in enumerate(msg["items"], 1)
                    ]
                elif kind in ("agents.pop", "agents.clear"):
                    note = {"role": "system", "content": f"{kind} {msg.get('target', '')}".strip()}
                    batch = [(f"event {e.sequence}", note)]
                elif kind == "agents.replace" and isinstance(msg.get("items"), list):
                    # a compaction: the items it drops, then those it puts in their place
                    drops = msg.get("drop")
                    dropped = len(drops) if isinstance(drops, list) else 0
                    note = {"role": "system", "content": f"{kind}: {dropped} item(s) replaced by"}
                    batch = [(f"event {e.sequence}", note)]
                    batch += [
                        (f"event {e.sequence} #{i}", it) for i, it in enumerate(msg["items"], 1)
                    ]
                else:
                    continue
                batches.append(batch)
                count += len(batch)
                if count >= limit:
                    nxt = e.sequence
                    break
            else:
                nxt = page.next_before_sequence
            if nxt is None:
                break
        return [it for b in reversed(batches) for it in b], nxt

    # ------------------------------------------------------ checkpoints, diff
    def checkpoint(self, sid: str, at: int | None = None) -> dict[str, Any]:
        """`journal checkpoint --json [--at N]`: the checkpoint exactly as saved."""
        self.summary(sid)
        cp = self.store.load(sid) if at is None else self.store.checkpoint_at(sid, at)
        if cp is None:
            where = f" at sequence {at}" if at is not None else ""
            raise NotFoundError(f"session {sid!r} has no checkpoint{where}")
        doc: dict[str, Any] = _builtins(cp)
        return doc

    def diff(self, a: str, at_a: int | None, b: str, at_b: int | None) -> dict[str, Any]:
        """`journal diff --json`: the fields that differ, the context in common, the
        items only in each. Each side is a session's latest checkpoint, or the one at
        a sequence."""
        ca, cb = self.checkpoint(a, at_a), self.checkpoint(b, at_b)
        fields = sorted(k for k in ca if k != "context" and ca.get(k) != cb.get(k))
        common = 0
        for x, y in zip(ca["context"], cb["context"], strict=False):
            if x != y:
                break
            common += 1
        return {
            "a": f"{a}@{ca['sequence']}",
            "b": f"{b}@{cb['sequence']}",
            "fields": {k: {"a": ca.get(k), "b": cb.get(k)} for k in fields},
            "common_context_items": common,
            "only_a": ca["context"][common:],
            "only_b": cb["context"][common:],
            "only_a_decoded": [decode_serialised(i) for i in ca["context"][common:]],
            "only_b_decoded": [decode_serialised(i) for i in cb["context"][common:]],
        }

    # ------------------------------------------------------------ tree, verify
    def tree(self, sid: str) -> dict[str, Any]:
        """The fork tree holding `sid` (as `journal tree SESSION --json`, one root),
        at most `TREE_NODES` nodes, from at most `TREE_UP` levels above `sid` down to
        `TREE_DEPTH` levels below that; each node says where it was forked.
        `truncated` says that sessions were left out."""
        top = self.summary(sid)
        seen = {top.session_id}
        cut = False
        while top.parent_session_id is not None:
            up = self.store.session_summary(top.parent_session_id)
            if up is None or up.session_id in seen:
                break
            if len(seen) > TREE_UP:
                cut = True
                break
            seen.add(up.session_id)
            top = up
        count = 0

        def node(s: SessionSummary, depth: int) -> dict[str, Any]:
            nonlocal count, cut
            count += 1
            _, damage = self._view(s.session_id)
            kids = sorted(self.store.child_sessions(s.session_id), key=lambda k: k.session_id)
            if kids and (depth >= TREE_DEPTH or count >= TREE_NODES):
                cut = True
                kids = []
            return {
                "session_id": s.session_id,
                "sequence": s.sequence,
                "forked_at": s.parent_sequence,
                "damaged": damage is not None,
                "updated_at": s.updated_at,
                "first_user_message": s.first_user_message,
                "children": [node(k, depth + 1) for k in kids if count < TREE_NODES],
            }

        root = node(top, 0)
        return {"root": root, "nodes": count, "truncated": cut or count >= TREE_NODES}

    def verify(self, sid: str) -> dict[str, Any]:
        """`journal verify SESSION --json`: every checksum, commit, index and snapshot
        of the session, with the file and offset of each finding."""
        directory = self.store.session_dir(sid)
        if not os.path.isdir(directory):
            raise NotFoundError(f"session {sid!r} does not exist")
        started = time.monotonic()
        findings: list[dict[str, Any]] = []
        commits = 0
        log_bytes = 0
        for report, found in tools.verify_store(self.root, [tools.dir_name(sid)]):
            if report is not None:
                commits += report.commits
                log_bytes = report.log_bytes
            findings += [
                {
                    "severity": f.severity,
                    "session": f.session,
                    "path": f.path,
                    "offset": f.offset,
                    "message": f.message,
                    "advice": f.advice,
                }
                for f in found
            ]
        data = [f for f in findings if f["severity"] == tools.SEVERITY_DATA]
        ok = not any(f["severity"] in (tools.SEVERITY_DATA, tools.SEVERITY_CACHE) for f in findings)
        view, _ = self._view(sid)
        first = None
        if data:
            first = {"error": data[0]["message"], "type": "CorruptionError"}
            first.update(path=data[0]["path"], offset=data[0]["offset"])
        with self._lock:
            self._verified[sid] = (view.log_bytes if view else log_bytes, first)
        return {
            "ok": ok,
            "sessions": 1,
            "commits": commits,
            "damaged_sessions": [sid] if data else [],
            "findings": findings,
            "checked": [{"session": sid, "commits": commits, "damaged": bool(data)}],
            "seconds": round(time.monotonic() - started, 3),
        }

    # ------------------------------------------------------------------ live
    def follow(
        self, sid: str, after: int, *, interval: float = 0.25, stop: threading.Event
    ) -> Iterator[list[dict[str, Any]]]:
        """New events as other processes commit them, oldest first, in batches (an
        empty batch now and then, so the caller can tell a closed connection).
        Each read looks only past `after`: the store reads the new commits at the
        log's end, not the log again."""
        self.summary(sid)
        last = after
        idle = 0.0
        while not stop.is_set():
            batch = self.store.events_after(sid, last, 500)
            if batch:
                last = batch[-1].sequence
                idle = 0.0
                yield _builtins(batch)
                continue
            stop.wait(interval)
            idle += interval
            if idle >= 10.0:
                idle = 0.0
                yield []

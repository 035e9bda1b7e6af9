"""Answers from the catalog: pages of sessions, a session's children, recent turns.

Each answer leaves out the sessions a pending delete names (committed, not yet
carried out): they are already gone for readers. The caller (`Store`) checks the
arguments and brings the catalog up to date first (`Upkeep.reconcile_dead`).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from . import validate
from .catalog import Catalog
from .catalogrecords import sort_key
from .layout import dir_name
from .tree import Tree
from .types import ExecutionRecord, SessionCursor, SessionPage, SessionPageRequest, SessionSummary

_execution_decoder = msgspec.msgpack.Decoder(ExecutionRecord)
_executions_decoder = msgspec.msgpack.Decoder(list[ExecutionRecord | None])


def sessions_page(catalog: Catalog, tree: Tree, req: SessionPageRequest) -> SessionPage:
    """Sessions by (updated_at, sequence, session_id) descending; exclusive cursor."""
    cursor = None
    if req.cursor is not None:
        c = req.cursor
        cursor = (c.updated_at, c.sequence, c.session_id)
    catalog.refresh()
    pending = tree.pending_session_dirs()
    out: list[SessionSummary] = []
    nxt = cursor
    while True:
        page, nxt = catalog.page(req.owner_id, nxt, req.limit - len(out))
        for summary in page:
            if pending and dir_name(summary.session_id) in pending:
                continue
            validate.validate_owner_id(summary.session_context.owner_id, "stored session owner ID")
            out.append(summary)
        if nxt is None or len(out) >= req.limit:
            break
    next_cursor = None
    if nxt is not None and out:
        last = out[-1]
        next_cursor = SessionCursor(
            updated_at=last.updated_at, sequence=last.sequence, session_id=last.session_id
        )
    return SessionPage(sessions=out, next_cursor=next_cursor)


def child_sessions(catalog: Catalog, tree: Tree, session_id: str) -> list[SessionSummary]:
    """The listed sessions forked directly from this one, in catalog order."""
    catalog.refresh()
    pending = tree.pending_session_dirs()
    kids = [
        s
        for s in catalog.child_summaries(session_id)
        if not pending or dir_name(s.session_id) not in pending
    ]
    kids.sort(key=sort_key, reverse=True)
    return kids


def recent_executions(
    catalog: Catalog,
    tree: Tree,
    limit: int,
    from_log: Callable[[str, int], ExecutionRecord | None],
) -> list[ExecutionRecord]:
    """Finished turns across all sessions by (started_at_ms, session_id, sequence) desc.

    Most records are read from their copies in the catalog log (one file, a few
    reads); the rest from their sessions (`from_log(session_id, sequence)`). Keys of
    sessions deleted since the catalog was read are skipped: fetch more. (Another
    thread refreshing the catalog meanwhile can shift the list: `seen`.)
    """
    catalog.refresh()
    out: list[ExecutionRecord] = []
    seen: set[tuple[int, str, int]] = set()
    want = limit
    while True:
        listed, exhausted = catalog.recent_execution_keys(want)
        pending = tree.pending_session_dirs()
        if pending:
            listed = [(k, span) for k, span in listed if dir_name(k[1]) not in pending]
        if seen:
            listed = [(k, span) for k, span in listed if k not in seen]
        if not exhausted:
            seen.update(k for k, _ in listed)
        with_copy = [(k, span) for k, span in listed if span is not None]
        records = _decode_all(catalog.execution_copies(with_copy))
        by_copy = iter(records)
        for key, span in listed:
            rec = next(by_copy) if span is not None else None
            if rec is None:
                rec = from_log(key[1], key[2])
            if rec is not None:
                out.append(rec)
                if len(out) == limit:
                    return out
        if exhausted:
            return out
        want *= 2


def _decode_all(bodies: list[bytes | None]) -> list[ExecutionRecord | None]:
    """Catalog copies of execution records, decoded in one call when all are there
    and decode (None for one that is missing or does not decode: use the log)."""
    if bodies and None not in bodies:
        n = len(bodies)
        head = bytes([0x90 | n]) if n < 16 else b"\xdd" + n.to_bytes(4, "big")
        try:
            return _executions_decoder.decode(head + b"".join(bodies))  # type: ignore[arg-type]
        except msgspec.DecodeError:
            pass
    return [None if body is None else _decode_execution(body) for body in bodies]


def _decode_execution(body: bytes) -> ExecutionRecord | None:
    """A catalog copy of an execution record (None if it does not decode: use the log)."""
    try:
        return _execution_decoder.decode(body)
    except msgspec.DecodeError:
        return None

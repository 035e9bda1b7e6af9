"""Branching a conversation at an item: a journal fork of the session holding it.

The child starts with no items of its own and reads its ancestors' items up to
the branch point, which its checkpoint metadata records (`META_KEY`), so a
branch costs the same at any history length and nothing is copied.
"""

from __future__ import annotations

from typing import Any

from journal import Checkpoint, EventPageRequest, NotFoundError, Store, validate_session_id

from .paging import decode_cursor
from .records import META_KEY, Key, Segment, chain_of, older
from .scan import LogScanner


def fork_branch(
    store: Store,
    scanner: LogScanner,
    tag: int,
    new_id: str,
    at: str | None,
    before: str | None,
) -> None:
    """Create the session `new_id`, a branch of `scanner`'s session at the item named
    by `at` (kept) or `before` (not kept); with neither, at the newest item."""
    session_id = scanner.session_id
    validate_session_id(new_id)
    cp = store.load(session_id)
    if cp is None:
        raise NotFoundError(f"session {session_id!r} does not exist")
    latest = store.event_page(session_id, EventPageRequest(limit=1)).latest_sequence
    chain = chain_of(session_id, cp)
    chain[0] = Segment(session_id, events=latest)
    cursor = at if at is not None else before
    target: Key | None = None
    if cursor is not None:
        _, key, _ = decode_cursor(cursor, tag, session_id, len(chain))
        target = _branch_point(scanner, chain, key, keep=at is not None)
    else:
        for k, _item, _ in scanner.items(chain, None, set(), want=1):
            target = k
            break
    parent, new_chain = _lineage(session_id, chain, target)
    parent_cp = cp if parent == session_id else store.load(parent)
    if parent_cp is None:
        raise NotFoundError(f"session {parent!r} does not exist")
    child = Checkpoint.empty(new_id, owner_id=parent_cp.session_context.owner_id)
    child.first_user_message = parent_cp.first_user_message
    child.metadata = {META_KEY: {"v": 1, "chain": new_chain}} if new_chain else {}
    store.fork(parent, parent_cp.sequence, child)


def _branch_point(scanner: LogScanner, chain: list[Segment], key: Key, *, keep: bool) -> Key | None:
    """The newest item the branch keeps: the item `key` (`keep`), else the next older one.

    The item must still be in the conversation."""
    found = False
    for k, _item, _ in scanner.items(chain, None, set(), want=64):
        if found:
            return k
        if k == key:
            found = True
            if keep:
                return k
        elif older(k, key):
            break  # passed the cursor's position without meeting the item
    if not found:
        raise NotFoundError(
            f"session {scanner.session_id!r}: the item named by the cursor is no longer"
            " in the conversation (popped or cleared)"
        )
    return None


def _lineage(
    session_id: str, chain: list[Segment], target: Key | None
) -> tuple[str, list[list[Any]]]:
    """The session to fork and the chain the branch records, for a branch point."""
    if target is None:
        # Nothing to share: a fresh session that records its origin in the lineage.
        return session_id, []
    depth, seq, index = target
    seg = chain[depth]
    assert seg.events is not None
    new_chain: list[list[Any]] = [[seg.session_id, seq, index, seg.events]]
    new_chain += [[s.session_id, s.item_seq, s.item_index, s.events] for s in chain[depth + 1 :]]
    return seg.session_id, new_chain

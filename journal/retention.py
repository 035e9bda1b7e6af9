"""Retention: deleting whole sessions by last update, fork-aware, tree by tree.

`plan` reads the catalog page by page and picks the sessions a policy lets go:
updated longer ago than `older_than` seconds, and not among the `keep_last` most
recently updated (both among the sessions of `owner_id` when one is given). A
session so picked is deleted only with its whole subtree: while any descendant
is kept (too young, among the newest, another owner's), the session is kept too,
and the report names it. Kept rather than made self-contained, because a fork's
`parent_session_id` and `parent_sequence` name a point of its parent's history
(`checkpoint_at`, `journal tree`, the viewer's diff against the fork point): a
parent deleted under a kept child would leave that reference dangling, and
`delete_sessions`' contract deletes descendants with their parent.

`apply` deletes the planned trees a batch at a time (whole trees, about `BATCH`
sessions per commit: one delete intent, the locking and crash recovery of
`delete_sessions`), after checking each tree under the tree lock against the
plan: a session updated or forked from since the plan is left for the next run,
never deleted on stale information. So a prune is all or nothing per tree (and
per batch), and a crash leaves every tree either whole or deleted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import msgspec

from .errors import InvalidInputError
from .types import SessionCursor, SessionPageRequest, SessionSummary
from .validate import validate_owner_id

if TYPE_CHECKING:
    from .store import Store

PAGE = 1000  # catalog rows per page while planning
BATCH = 256  # sessions deleted per commit (whole trees: a tree is never split)
DEFAULT_INTERVAL = 3600.0  # seconds between runs of the background job


class RetentionPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a prune lets go: sessions last updated more than `older_than` seconds
    ago and not among the `keep_last` most recently updated (of `owner_id`'s
    sessions when given). At least one of `older_than` and `keep_last` is set for
    a policy that deletes anything; `interval` is how often the store's
    background job applies a policy recorded in the manifest (seconds)."""

    older_than: float | None = None
    keep_last: int | None = None
    owner_id: str | None = None
    interval: float = DEFAULT_INTERVAL

    @property
    def active(self) -> bool:
        return self.older_than is not None or self.keep_last is not None


def check_policy(policy: object) -> RetentionPolicy:
    """`policy` as a RetentionPolicy, or `InvalidInputError` saying what is wrong."""
    if not isinstance(policy, RetentionPolicy):
        raise InvalidInputError(f"retention must be a RetentionPolicy, not {type(policy).__name__}")
    if policy.older_than is not None:
        _check_number(policy.older_than, "retention older_than (seconds)", zero_ok=True)
    if policy.keep_last is not None and (
        not isinstance(policy.keep_last, int)
        or isinstance(policy.keep_last, bool)
        or policy.keep_last < 0
    ):
        raise InvalidInputError(
            f"retention keep_last must be a non-negative integer, not {policy.keep_last!r}"
        )
    if policy.owner_id is not None:
        validate_owner_id(policy.owner_id, "retention owner")
    _check_number(policy.interval, "retention interval (seconds)", zero_ok=False)
    return policy


def _check_number(value: object, what: str, *, zero_ok: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value != value or value in (float("inf"), float("-inf")):  # NaN, inf
        raise InvalidInputError(f"{what} must be a finite number, not {value!r}")
    assert isinstance(value, (int, float))
    if value < 0 or (value == 0 and not zero_ok):
        raise InvalidInputError(f"{what} must be {'0 or more' if zero_ok else 'positive'}")


class PruneReport(msgspec.Struct, kw_only=True):
    """What a prune did (or, with `dry_run`, would do)."""

    dry_run: bool
    scanned: int = 0  # catalog rows read
    deleted: list[str] = msgspec.field(default_factory=list)  # every session, roots first
    trees: int = 0  # delete commits (one per tree)
    bytes_freed: int = 0  # disk blocks of the deleted sessions' directories
    kept_for_descendants: list[str] = msgspec.field(default_factory=list)
    changed: list[str] = msgspec.field(default_factory=list)  # updated since the plan: left
    compacted: int = 0  # sessions whose hidden records the retention job freed
    compacted_bytes: int = 0  # what that gave back (du)


class Plan(msgspec.Struct):
    """The trees to delete (root id, then its descendants) and what they hold."""

    trees: list[list[str]]
    seen: dict[str, tuple[int, int]]  # session id -> (updated_at, sequence) at planning
    kept_for_descendants: list[str]
    scanned: int


def _catalog_rows(store: Store) -> Iterator[SessionSummary]:
    cursor: SessionCursor | None = None
    while True:
        page = store.list_sessions_page(SessionPageRequest(cursor=cursor, limit=PAGE))
        yield from page.sessions
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def updated_since(store: Store, since: float) -> Iterator[str]:
    """The sessions updated at or after `since` (Unix seconds), newest first."""
    for s in _catalog_rows(store):
        if s.updated_at < since:
            return
        yield s.session_id


def plan(store: Store, policy: RetentionPolicy, now: float) -> Plan:
    """The sessions `policy` lets go at time `now` (Unix seconds), tree by tree."""
    if not policy.active:
        raise InvalidInputError(
            "a prune needs older_than or keep_last (one of them): nothing would be kept"
        )
    cutoff = None if policy.older_than is None else now - policy.older_than
    rank = 0
    candidates: set[str] = set()
    seen: dict[str, tuple[int, int]] = {}
    parents: dict[str, str | None] = {}
    scanned = 0
    for s in _catalog_rows(store):  # newest first
        scanned += 1
        if policy.owner_id is not None and s.session_context.owner_id != policy.owner_id:
            continue
        rank += 1
        if policy.keep_last is not None and rank <= policy.keep_last:
            continue
        if cutoff is not None and s.updated_at >= cutoff:
            continue
        candidates.add(s.session_id)
        seen[s.session_id] = (s.updated_at, s.sequence)
        parents[s.session_id] = s.parent_session_id
    catalog = store.catalog
    deletable: dict[str, bool] = {}

    def subtree_goes(sid: str) -> bool:
        """Whether `sid` and every descendant go (iterative: fork chains run deep)."""
        stack = [(sid, False)]
        while stack:
            node, expanded = stack.pop()
            if node in deletable:
                continue
            if node not in candidates:
                deletable[node] = False
                continue
            kids = catalog.child_ids(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if k not in deletable)
                continue
            deletable[node] = all(deletable.get(k, False) for k in kids)
        return deletable[sid]

    trees: list[list[str]] = []
    kept: list[str] = []
    for sid in sorted(candidates):
        if not subtree_goes(sid):
            kept.append(sid)
            continue
        parent = parents.get(sid)
        if parent is not None and parent in candidates and subtree_goes(parent):
            continue  # deleted with its parent's tree
        trees.append(_tree_of(catalog.child_ids, sid))
    return Plan(trees, seen, kept, scanned)


def _tree_of(children: Callable[[str], list[str]], root: str) -> list[str]:
    out = [root]
    i = 0
    while i < len(out):
        out.extend(sorted(children(out[i])))
        i += 1
    return out


def allocated_bytes(path: str) -> int:
    """The disk blocks under `path` (what `du` counts), 0 if it is gone."""
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


def apply(
    store: Store,
    policy: RetentionPolicy,
    *,
    dry_run: bool,
    now: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> PruneReport:
    """Plan and (unless `dry_run`) delete tree by tree; the report of either."""
    when = time.time() if now is None else now
    p = plan(store, policy, when)
    report = PruneReport(
        dry_run=dry_run, scanned=p.scanned, kept_for_descendants=p.kept_for_descendants
    )
    batch: list[list[str]] = []
    for tree in p.trees:
        if stop is not None and stop():
            break  # the store is closing: the rest waits for the next run
        if dry_run:
            report.deleted.extend(tree)
            report.trees += 1
            report.bytes_freed += _tree_bytes(store, tree)
            continue
        batch.append(tree)
        if sum(map(len, batch)) >= BATCH:
            _delete_batch(store, p, batch, report)
            batch = []
    if batch:
        _delete_batch(store, p, batch, report)
    return report


def _tree_bytes(store: Store, tree: list[str]) -> int:
    return sum(allocated_bytes(store.session_dir(sid)) for sid in tree)


def _delete_batch(store: Store, p: Plan, batch: list[list[str]], report: PruneReport) -> None:
    """Delete these trees in one commit, each only if it is still as planned."""
    planned = {tree[0]: tree for tree in batch}
    catalog = store.catalog
    sizes = {root: _tree_bytes(store, tree) for root, tree in planned.items()}

    def unchanged(closure: list[str]) -> bool:
        tree = planned.get(closure[0])
        if tree is None or sorted(closure) != sorted(tree):
            return False
        for sid in closure:  # the catalog, refreshed under the tree lock: no session opened
            s = catalog.summary(sid)
            if s is None or (s.updated_at, s.sequence) != p.seen.get(sid):
                return False
        return True

    deleted = set(store.trees.delete_trees(list(planned), unchanged))
    for root, tree in planned.items():
        if root in deleted:
            report.deleted.extend(tree)
            report.trees += 1
            report.bytes_freed += sizes[root]
        elif catalog.lists(root):
            report.changed.append(root)

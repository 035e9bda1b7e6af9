"""Bringing a session from the bucket into a live store: lazy fetch and take-over.

`fetch_session` installs a session the store does not have (a store opened with
`replica=` on an empty root fetches each session on first access); its fork
parents come first, as in every import. `take_over` fences the previous writer
(shipper.py) and then makes the local copy equal to what the bucket holds:
kept when it is exactly that already, otherwise replaced whole (built in tmp/,
verified, swapped in under the tree lock and the session's lock; the old
directory goes to trash/), so that other processes of the root see the session
created again and reopen it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

from .. import fsio
from ..errors import CorruptionError, FencedError, ReplicaCorruptionError
from ..layout import LOCK_FILE, LOG_DIR, TMP_DIR, TRASH_DIR, dir_name
from ..locks import FileLock
from ..publish import install
from ..sessiondir import read_identity
from ..types import SessionSummary
from ..verify import SEVERITY_DATA, verify_session_dir
from . import chain
from .restore import rebuild_session_dir
from .tail import identity_bytes, read_tail

if TYPE_CHECKING:
    from ..store import Store
    from .replicator import Replicator

_MAX_DEPTH = 64  # fork ancestors fetched for one session, at most


def fetch_session(store: Store, replica: Replicator, session_id: str, depth: int = 0) -> bool:
    """Install `session_id` from the bucket if the store lacks it and the bucket holds
    it live. Whether it was installed."""
    if fsio.is_dir(store.session_dir(session_id)):
        return False
    inc = chain.read_incarnation(replica.objects, replica.target.prefix, dir_name(session_id))
    if inc is None:
        return False
    built = _build(store, inc, session_id)
    try:
        parent = read_identity(built).parent_session_id
        if parent is not None and depth < _MAX_DEPTH:
            fetch_session(store, replica, parent, depth + 1)
        with store.tree.locked():
            if fsio.is_dir(store.session_dir(session_id)):
                return False  # another thread or process installed it first
            install(built, store.session_dir(session_id))
        store.registry.note(dir_name(session_id))
        store.upkeep.reconcile([dir_name(session_id)])
        return True
    finally:
        fsio.remove_tree(os.path.dirname(built))


def take_over(store: Store, replica: Replicator, session_id: str) -> SessionSummary | None:
    """`Store.take_over`: fence, then make the local copy the bucket's."""
    sh = replica.shipper(session_id)
    with sh.lock:
        sh.take_over()
        name = dir_name(session_id)
        inc = chain.read_incarnation(replica.objects, replica.target.prefix, name)
        local = store.session_dir(session_id)
        if inc is None:
            if fsio.is_dir(local) and chain.holds_any(replica.objects, replica.target.prefix, name):
                _replace(store, session_id, None)  # deleted where it was written last
        elif not _same(local, inc):
            built = _build(store, inc, session_id)
            try:
                if fsio.is_dir(local):
                    _replace(store, session_id, built)
                else:
                    with store.tree.locked():
                        install(built, local)
                    store.registry.note(name)
                    store.upkeep.reconcile([name])
            finally:
                fsio.remove_tree(os.path.dirname(built))
        sh.ready = False
        sh.prepare()
    if sh.fenced:
        raise FencedError(sh.fenced)
    return store.session_summary(session_id)


def _same(local: str, inc: chain.Incarnation) -> bool:
    """Whether the local directory holds exactly the incarnation's committed log."""
    if not fsio.is_dir(local):
        return False
    try:
        if identity_bytes(local) != inc.identity:
            return False
        if not inc.pieces:
            return not read_tail(local, 0, limit_bytes=1)
        last = inc.pieces[-1]
        pieces = read_tail(local, last.start, limit_bytes=None)
    except (CorruptionError, OSError):
        return False
    held = b"".join(p.body for p in pieces)
    return held == last.body


def _build(store: Store, inc: chain.Incarnation, session_id: str) -> str:
    """The incarnation as a verified session directory in the store's tmp/."""
    work = os.path.join(store.root, TMP_DIR, f"fetch-{uuid.uuid4().hex}")
    built = os.path.join(work, dir_name(session_id))  # verify checks the name
    try:
        rebuild_session_dir(inc, built)
        os.makedirs(os.path.join(built, LOG_DIR), exist_ok=True)
        with open(os.path.join(built, LOCK_FILE), "ab"):
            pass
        _, findings = verify_session_dir(built)
        bad = [f for f in findings if f.severity == SEVERITY_DATA]
        if bad:
            raise ReplicaCorruptionError(
                f"session {session_id!r} rebuilt from the bucket fails verify: {bad[0]}"
            )
        return built
    except BaseException:
        fsio.remove_tree(work)
        raise


def _replace(store: Store, session_id: str, built: str | None) -> None:
    """Swap the local directory of a session for `built` (None: just move it away),
    under the tree lock and the session's lock."""
    local = store.session_dir(session_id)
    name = dir_name(session_id)
    trash = os.path.join(store.root, TRASH_DIR)
    os.makedirs(trash, exist_ok=True)
    with store.tree.locked(), contextlib.ExitStack() as held:
        lock = FileLock(os.path.join(local, LOCK_FILE), f"session {session_id!r}")
        held.callback(lock.close)
        lock.acquire(store.options.lock_timeout)
        held.callback(lock.release)
        store.open_sessions.drop([session_id])
        fsio.rename(local, os.path.join(trash, f"{name}.replaced-{uuid.uuid4().hex[:12]}"))
        if built is not None:
            install(built, local)
        else:
            fsio.sync_dir(os.path.dirname(local))
        fsio.sync_dir(trash)
    store.registry.note(name)
    store.upkeep.reconcile([name])
    store.tree.empty_trash_soon()

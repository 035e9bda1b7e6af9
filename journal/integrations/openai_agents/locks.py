"""The locks of a session: one per session in this process; across processes a
clear holds `journal.integrations.dirlock.DirLock` on the session directory."""

from __future__ import annotations

import threading

# One lock per (store root, session id) in this process, shared by every
# JournalSession object (and every event loop) that works on that session.
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def session_lock(root: str, session_id: str) -> threading.Lock:
    """This process's lock of a session, which every operation on it holds."""
    with _locks_guard:
        lock = _locks.get((root, session_id))
        if lock is None:
            lock = _locks[(root, session_id)] = threading.Lock()
        return lock

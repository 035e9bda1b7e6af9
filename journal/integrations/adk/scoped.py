"""`app:` and `user:` state: stamped values, rolled forward from the commits that carry them.

Each value is journal middleware state `{"v": value, "t": clock, "s": session,
"q": sequence}`: the value and the stamp `(clock, session, sequence)` of the
commit that wrote it. A commit whose event carries `app:`/`user:` keys records
them in its checkpoint metadata (`"scoped"`: the deltas, its clock and its
sequence), so they are durable with the event; the values are written after it.
Applying a record writes a key only if the record's stamp is greater than the
stored one, under an `flock` on the scope's directory, so applying it again,
late, or after a newer write is harmless: a key holds the value of the
committed write with the greatest stamp, whenever each write was applied. A
crash between the commit and the value writes leaves the record, which the
next read or append of that session (or a listing, or a read of the user's
state) applies.

The clock of a write is the greatest of the wall clock (ns), one more than the
session's previous clock, and one more than every stamp its keys held when the
append read them: an append that starts after another has returned stamps
later than it, whatever the clocks say.
"""

from __future__ import annotations

import time
from typing import Any

from journal import CorruptionError, Store

from ..dirlock import DirLock
from . import naming

Stamp = tuple[int, str, int]
NONE: Stamp = (-1, "", -1)
SCOPES = ("app", "user")


def scope_of(which: str, app_name: str, user_id: str) -> str:
    """The middleware-state scope of `app:` (which="app") or `user:` keys."""
    return naming.app_scope(app_name) if which == "app" else naming.user_scope(app_name, user_id)


def _unwrap(raw: Any, scope: str, key: str) -> tuple[Any, Stamp]:
    if (
        not isinstance(raw, dict)
        or "v" not in raw
        or not isinstance(raw.get("t"), int)
        or not isinstance(raw.get("s"), str)
        or not isinstance(raw.get("q"), int)
    ):
        raise CorruptionError(f"ADK state {key!r} in scope {scope!r} is not a stamped value")
    return raw["v"], (raw["t"], raw["s"], raw["q"])


def stamp_of(store: Store, scope: str, key: str) -> Stamp:
    """The stamp of the value under (scope, key); NONE if there is none."""
    raw = store.load_state(scope, key)
    return NONE if raw is None else _unwrap(raw, scope, key)[1]


def values(store: Store, scope: str) -> dict[str, Any]:
    """Every key of a scope with its value (stamps dropped)."""
    return {k: _unwrap(raw, scope, k)[0] for k, raw in store.state.keys(scope)}


def new_record(
    store: Store,
    app_name: str,
    user_id: str,
    deltas: dict[str, dict[str, Any]],
    sequence: int,
    previous: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """The record a commit at `sequence` carries for its `app:`/`user:` deltas (None: none)."""
    if not deltas["app"] and not deltas["user"]:
        return None
    clock = time.time_ns()
    if previous is not None:
        clock = max(clock, int(previous["t"]) + 1)
    for which in SCOPES:
        scope = scope_of(which, app_name, user_id)
        for key in deltas[which]:
            clock = max(clock, stamp_of(store, scope, key)[0] + 1)
    return {"t": clock, "q": sequence, "app": deltas["app"], "user": deltas["user"]}


def apply(store: Store, app_name: str, user_id: str, session_key: str, record: Any) -> None:
    """Write the record's values that no newer write has superseded; idempotent."""
    if not isinstance(record, dict):
        return
    stamp: Stamp = (int(record["t"]), session_key, int(record["q"]))
    for which in SCOPES:
        delta: dict[str, Any] = record[which]
        scope = scope_of(which, app_name, user_id)
        if delta and any(stamp_of(store, scope, k) < stamp for k in delta):
            _write_newer(store, scope, delta, stamp)


def _write_newer(store: Store, scope: str, delta: dict[str, Any], stamp: Stamp) -> None:
    """Compare and write each key under the scope directory's lock. A scope with no
    directory yet has no values to lose: the first pass writes unlocked (making the
    directory), and a second pass under its lock redoes the comparison."""
    while True:
        with DirLock(
            store.state.scope_dir(scope), store.options.lock_timeout, "ADK state lock"
        ) as locked:
            for key, value in delta.items():
                if stamp_of(store, scope, key) < stamp:
                    store.save_state(
                        scope, key, {"v": value, "t": stamp[0], "s": stamp[1], "q": stamp[2]}
                    )
            if locked:
                return

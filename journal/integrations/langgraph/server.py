"""`generate_checkpointer`: the `JournalSaver` of a LangGraph Server (`langgraph dev`).

A `langgraph.json` names it as the server's checkpointer:

    {"graphs": {"agent": "./agent.py:graph"},
     "checkpointer": {"path": "journal.integrations.langgraph.generate_checkpointer"}}

(langgraph-api takes a path without "/" or ".py:" as `module.attribute`: the
attribute follows the last dot; a colon there is read as part of its name.)

The server enters it (an async context manager) when it starts, once per
thread that serves requests, and leaves it when it stops. Every entry in a
process on the same store shares one saver (and its indexes); the store is
closed when the last one leaves.

The store is `$JOURNAL_LANGGRAPH_ROOT`, else `$JOURNAL_ROOT`, else
`.langgraph_api/journal` under the server's working directory (next to what
`langgraph dev` keeps of its own). `$JOURNAL_LANGGRAPH_DURABILITY` is "fsync"
(the default) or "os".
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator

from journal import Durability, InvalidInputError

from .saver import JournalSaver

ROOT_ENV = "JOURNAL_LANGGRAPH_ROOT"
DURABILITY_ENV = "JOURNAL_LANGGRAPH_DURABILITY"
DEFAULT_ROOT = os.path.join(".langgraph_api", "journal")

_lock = threading.Lock()  # guards `_shared`
_shared: dict[tuple[str, str], tuple[JournalSaver, int]] = {}  # (root, durability) -> saver, users


def store_root() -> str:
    """The store directory the server's saver opens (absolute)."""
    root = os.environ.get(ROOT_ENV) or os.environ.get("JOURNAL_ROOT") or DEFAULT_ROOT
    return os.path.abspath(root)


def durability() -> Durability:
    """The durability the server's saver opens its store with."""
    value = os.environ.get(DURABILITY_ENV) or "fsync"
    if value == "fsync":
        return "fsync"
    if value == "os":
        return "os"
    raise InvalidInputError(f"${DURABILITY_ENV} must be 'fsync' or 'os', not {value!r}")


@contextlib.asynccontextmanager
async def generate_checkpointer() -> AsyncIterator[JournalSaver]:
    """The process's `JournalSaver` on `store_root()`, shared by every entry."""
    key = (store_root(), durability())
    with _lock:
        saver, users = _shared.get(key) or (None, 0)
        if saver is None:
            saver = JournalSaver(key[0], durability=key[1])
        _shared[key] = (saver, users + 1)
    try:
        yield saver
    finally:
        with _lock:
            saver, users = _shared[key]
            if users > 1:
                _shared[key] = (saver, users - 1)
            else:
                del _shared[key]
        if users == 1:
            await saver.__aexit__()

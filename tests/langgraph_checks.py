"""Helpers shared by the LangGraph saver's tests (not a test module)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from journal.integrations.langgraph import JournalSaver
from journal.integrations.langgraph.index import Index


def cfg(thread: str, checkpoint_id: str | None = None, ns: str = "") -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def same(a: CheckpointTuple | None, b: CheckpointTuple | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert a.config == b.config
    assert a.parent_config == b.parent_config
    assert a.metadata == b.metadata
    assert a.checkpoint["id"] == b.checkpoint["id"]
    assert a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
    assert sorted(a.pending_writes or [], key=repr) == sorted(b.pending_writes or [], key=repr)


def count_reads(
    saver: JournalSaver, names: tuple[str, ...], seen: Callable[[str, Any], None]
) -> None:
    """Call `seen(name, answer)` after each of the saver's reads named in `names`:
    `Store` methods, and the methods of the same names of the `Store.reader`s the
    saver makes (it reads through both)."""
    store = saver.store

    def counted(obj: Any, name: str) -> None:
        orig = getattr(obj, name)

        def call(*a: Any, **k: Any) -> Any:
            out = orig(*a, **k)
            seen(name, out)
            return out

        setattr(obj, name, call)

    for name in names:
        if hasattr(store, name):
            counted(store, name)
    make_reader = store.reader

    def reader(sid: str) -> Any:
        made = make_reader(sid)
        for name in names:
            counted(made, name)
        return made

    store.reader = reader  # type: ignore[method-assign]


class Reads:
    """Counts the saver's journal reads of events (calls, events read), made through
    the store or through a `Store.reader` (`event_page`, `events_after`)."""

    def __init__(self, saver: JournalSaver) -> None:
        self.n = 0
        self.calls = 0

        def seen(name: str, out: Any) -> None:
            self.calls += 1
            self.n += len(out if isinstance(out, list) else out.events)

        count_reads(saver, ("event_page", "events_after"), seen)


def index_of(saver: JournalSaver, thread: str) -> Index | None:
    """The saver's index of a thread's root session, caught up."""
    # internal: the index is what tells which path a read took (fast path or scan)
    return saver._threads.index(thread, thread, "")


def slow_saver(root: Path) -> JournalSaver:
    """A saver that answers every read by the scan (the fast path's reference)."""
    saver = JournalSaver(root)
    saver._fast.usable = lambda idx: False  # type: ignore[method-assign]  # internal: no public switch
    return saver

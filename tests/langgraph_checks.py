"""Helpers shared by the LangGraph saver's fast-path tests (not a test module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from journal.integrations.langgraph import JournalSaver


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


class Reads:
    """Counts the saver's journal reads of events (calls, events read), made through
    the store or through a `Store.reader` (the saver's `_event_page`, `_events_after`)."""

    def __init__(self, saver: JournalSaver) -> None:
        self.n = 0
        self.calls = 0
        for name in ("_event_page", "_events_after"):
            orig = getattr(saver, name)

            def counted(*a: Any, _orig: Any = orig, **k: Any) -> Any:
                out = _orig(*a, **k)
                self.calls += 1
                self.n += len(out if isinstance(out, list) else out.events)
                return out

            setattr(saver, name, counted)


def slow_saver(root: Path) -> JournalSaver:
    saver = JournalSaver(root)
    saver._fast_usable = lambda idx: False  # type: ignore[method-assign]
    return saver

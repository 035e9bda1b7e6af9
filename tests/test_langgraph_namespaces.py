"""Which sessions `JournalSaver.list(config without checkpoint_ns)` reads.

A thread is its root session and its subgraph namespaces (sessions forked from
the root, named `<thread>::ns::<namespace>`). `list` answers from the root first
and asks the catalog for the namespaces only when it gets past the root; other
forks of the root are not part of the thread (for `list`, `prune` and
`copy_thread` alike).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_checks import cfg, same

from journal import CHECKPOINT_VERSION, Checkpoint, SessionContext
from journal.integrations.langgraph import ORIGIN_LABEL, JournalSaver

_step = [0]


def put(savers: list[Any], thread: str, ns: str, n: int) -> list[str]:
    ids: list[str] = []
    parent: str | None = None
    for _ in range(n):
        _step[0] += 1
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=_step[0]))
        cp["channel_values"] = {"messages": [f"m{_step[0]}"], "n": _step[0]}
        cp["channel_versions"] = {"messages": f"{_step[0]:032}.0", "n": f"{_step[0]:032}.0"}
        for s in savers:
            s.put(cfg(thread, parent, ns), cp, {"step": _step[0]}, dict(cp["channel_versions"]))
            s.put_writes(cfg(thread, cp["id"], ns), [("x", _step[0])], f"task-{_step[0]}")
        ids.append(cp["id"])
        parent = cp["id"]
    return ids


def whole(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}  # no checkpoint_ns: every namespace


class Catalog:
    """Counts the saver's catalog reads."""

    def __init__(self, saver: JournalSaver) -> None:
        self.calls: list[str] = []
        store = saver.store
        for name in ("session_summary", "child_sessions", "list_sessions_page"):
            orig = getattr(store, name)

            def counted(*a: Any, _orig: Any = orig, _name: str = name, **k: Any) -> Any:
                self.calls.append(_name)
                return _orig(*a, **k)

            setattr(store, name, counted)


def test_list_reads_the_catalog_only_past_the_root(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        put([saver, ref], "t", "", 5)
        put([saver, ref], "t", "sub", 3)
        put([saver, ref], "t", "sub2", 2)
    with JournalSaver(root) as fresh:
        catalog = Catalog(fresh)
        got = list(fresh.list(whole("t"), limit=3))
        assert [t.config for t in got] == [t.config for t in ref.list(whole("t"), limit=3)]
        assert catalog.calls == []  # the root's newest three: no catalog read
        got = list(fresh.list(whole("t")))
        want = list(ref.list(whole("t")))
        assert [t.config for t in got] == [t.config for t in want]
        for g, w in zip(got, want, strict=True):
            same(g, w)
        assert catalog.calls == ["child_sessions"]
        # Past the root with a limit: the namespaces in order, up to the limit.
        got = list(fresh.list(whole("t"), limit=7))
        assert [t.config for t in got] == [t.config for t in want[:7]]
    with JournalSaver(root) as fresh:
        assert list(fresh.list(whole("nothing-here"))) == []


def test_another_fork_of_the_root_is_not_part_of_the_thread(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JournalSaver(root) as saver:
        ids = put([saver], "t", "", 3)
        put([saver], "t", "sub", 2)
        # A fork of the thread's root under another name (e.g. with `Store.fork`),
        # then used as a thread of its own.
        summary = saver.store.session_summary("t")
        assert summary is not None
        fork = Checkpoint(
            version=CHECKPOINT_VERSION,
            session_id="other",
            session_context=SessionContext(owner_id="langgraph", origin_label=ORIGIN_LABEL),
            metadata={"langgraph": {"thread_id": "other", "checkpoint_ns": ""}},
        )
        saver.store.fork("t", summary.sequence, fork)
        other = put([saver], "other", "", 2)
        assert {s.session_id for s in saver.store.child_sessions("t")} >= {"other"}
        listed = [t.config["configurable"] for t in saver.list(whole("t"))]
        assert {c["thread_id"] for c in listed} == {"t"}
        assert [c["checkpoint_id"] for c in listed if c["checkpoint_ns"] == ""] == ids[::-1]
        saver.copy_thread("t", "t2")
        copied = [t.config["configurable"] for t in saver.list(whole("t2"))]
        assert [(c["checkpoint_ns"], c["checkpoint_id"]) for c in copied] == [
            (c["checkpoint_ns"], c["checkpoint_id"]) for c in listed
        ]
        saver.prune(["t"])
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(whole("other"))] == (
            other[::-1]
        )

"""`JournalSaver.prune`/`delete_for_runs` declare what they hide erasable, and
`free=True` (or any later compaction) gives its bytes back: every answer of the
saver (fresh or warm, fast path or scan) stays the same, and the graph goes on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph_checks import cfg, same
from test_langgraph_fastpath import build as build_puts
from test_langgraph_fastpath import check_against
from typing_extensions import TypedDict

from journal.compact import compact_session
from journal.erase import ERASE_KEY, is_erased
from journal.integrations.langgraph import JournalSaver, fastpath


@pytest.fixture(autouse=True)
def long_late_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastpath, "MAX_LATE", 10**6)  # internal: as test_langgraph_fastpath


def log_bytes(saver: JournalSaver, sid: str) -> int:
    log = os.path.join(saver.store.session_dir(sid), "log")
    return sum(os.stat(os.path.join(log, n)).st_blocks * 512 for n in os.listdir(log))


def answers(root: Path, ids: list[str]) -> list[Any]:
    """What a fresh saver says about the thread, at many depths."""
    out: list[Any] = []
    with JournalSaver(root) as fresh:
        for depth in (0, 1, 5, 40, 99, 120, 160, 250, 399):
            anchor = ids[-1 - depth]
            got = list(fresh.list(cfg("t"), before=cfg("t", anchor), limit=5))
            out.append([t.config for t in got])
            out.append(fresh.get_tuple(cfg("t", anchor)))
        out.append([t.config for t in fresh.list(cfg("t"))])
    return out


def test_delete_for_runs_then_compaction_answers_the_same(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JournalSaver(root) as saver:
        ids = build_puts([saver, InMemorySaver()], "t", 400, seed=11)
        sid = saver.session_id("t")
        saver.delete_for_runs(["run-2", "run-5"])
        before_free = log_bytes(saver, sid)
    expected = answers(root, ids)
    with JournalSaver(root) as saver:
        evs = saver.store.event_page(sid, _page()).events
        decl = next(e for e in evs if ERASE_KEY in e.event.msg).event.msg[ERASE_KEY]
        assert decl["events"] and decl["checkpoints"]
        report = compact_session(saver.store.session_dir(sid), sid)
        assert len(report.erased_events) == len(decl["events"])
        assert log_bytes(saver, sid) < before_free
    got = answers(root, ids)
    assert len(got) == len(expected)
    for g, w in zip(got, expected, strict=True):
        if isinstance(w, list):
            assert g == w
        else:
            same(g, w)
    # the fast path still agrees with the scan, on a log with stubs in it
    check_against(root, None, "t", ids, [0, 1, 17, 60, 120, 251, 399])


def _page() -> Any:
    from journal import EventPageRequest

    return EventPageRequest(limit=100_000)


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int


FILLER = "The build failed because the linker could not find libssl; " * 4


def graph(limit: int) -> StateGraph[State]:
    """A scripted model calling a tool until `limit` steps (no network)."""

    def model(state: State) -> dict[str, Any]:
        n = state.get("steps", 0)
        if n + 3 >= limit:
            return {"messages": [AIMessage(content="done. " + FILLER)], "steps": n + 1}
        call = {"name": "lookup", "args": {"q": f"q{n}"}, "id": f"c{n}", "type": "tool_call"}
        return {"messages": [AIMessage(content=FILLER, tool_calls=[call])], "steps": n + 1}

    def tools(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        call = last.tool_calls[0]
        out = ToolMessage(
            content=f"result for {call['args']['q']}: {FILLER}", tool_call_id=call["id"]
        )
        return {"messages": [out], "steps": state.get("steps", 0) + 2}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g


def test_prune_keep_latest_with_free_gives_the_bytes_back(tmp_path: Path) -> None:
    root = tmp_path / "store"
    conf: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 300}
    with JournalSaver(root) as saver:
        app = graph(200).compile(checkpointer=saver)
        app.invoke({"messages": [HumanMessage(content="why is CI red?")], "steps": 0}, conf)
        sid = saver.session_id("t")
        state = app.get_state(conf)
        n_before = len(list(saver.list(conf)))
        du_before = log_bytes(saver, sid)
        saver.prune(["t"], free=True)
        du_after = log_bytes(saver, sid)
        assert len(list(saver.list(conf))) == 1 < n_before
        assert app.get_state(conf).values == state.values
        evs = saver.store.event_page(sid, _page()).events
        assert sum(is_erased(e) for e in evs) >= n_before - 1
    assert du_after < du_before * 0.75, (du_before, du_after)
    with JournalSaver(root) as saver:  # a fresh saver: the same thread, and it goes on
        app = graph(230).compile(checkpointer=saver)
        assert app.get_state(conf).values == state.values
        app.invoke({"messages": [HumanMessage(content="and now?")]}, conf)
        after = app.get_state(conf).values["messages"]
        assert [m.content for m in after[: len(state.values["messages"])]] == [
            m.content for m in state.values["messages"]
        ]
        assert len(after) > len(state.values["messages"])


def test_the_async_prune_frees_too(tmp_path: Path) -> None:
    import asyncio

    root = tmp_path / "store"
    conf: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 300}
    with JournalSaver(root) as saver:
        app = graph(40).compile(checkpointer=saver)
        app.invoke({"messages": [HumanMessage(content="why is CI red?")], "steps": 0}, conf)
        sid = saver.session_id("t")
        asyncio.run(saver.aprune(["t"], free=True))
        evs = saver.store.event_page(sid, _page()).events
        assert sum(is_erased(e) for e in evs) > 0

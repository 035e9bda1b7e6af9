"""`JournalSaver.get_delta_channel_history` answers what the inherited walk answers.

The inherited implementation (`BaseCheckpointSaver.get_delta_channel_history`,
one `get_tuple` per ancestor) is the reference: for every checkpoint of
varied threads (real graphs with `DeltaChannel`s, fan-out tasks writing one
channel, a subgraph namespace, time-travel forks; hand-made threads with
seeds at different depths, special writes, a deleted ancestor) and several
channel sets, the override's answer equals the reference's, on a cold saver
and a warm one, sync and async. A graph whose state lives in `DeltaChannel`s
resumes on a fresh saver with the same state an `InMemorySaver` gives. Cold,
a checkpoint deep in a long thread is walked from where it is (the fast path):
far fewer events are read than the log holds.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send
from typing_extensions import TypedDict

from journal import EventPageRequest
from journal.integrations.langgraph import JournalSaver


def concat(state: list[str], writes: Sequence[Any]) -> list[str]:
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


def merge(state: dict[str, int], writes: Sequence[Any]) -> dict[str, int]:
    out = dict(state)
    for w in writes:
        out.update(w)
    return out


class Sub(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=2)]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=3)]
    tally: Annotated[dict[str, int], DeltaChannel(merge, snapshot_frequency=1000)]
    total: Annotated[int, operator.add]
    item: str


def build(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    sub = StateGraph(Sub)
    sub.add_node("inner", lambda s: {"log": [f"inner{len(s['log'])}"]})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    subgraph = sub.compile(checkpointer=True)  # its own namespace in the thread

    def plan(state: State) -> dict[str, Any]:
        n = len(state.get("log") or [])
        return {"messages": [AIMessage(content=f"plan {n}")], "log": [f"plan{n}"], "total": 1}

    def fan(state: State) -> list[Send]:
        return [Send("work", {"item": x}) for x in ("a", "b", "c")]

    def work(state: State) -> dict[str, Any]:
        return {"log": [f"work-{state['item']}"], "tally": {state["item"]: 1}, "total": 1}

    b = StateGraph(State)
    b.add_node("plan", plan)
    b.add_node("work", work)
    b.add_node("nested", subgraph)
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", fan, ["work"])
    b.add_edge("work", "nested")
    b.add_edge("nested", END)
    return b.compile(checkpointer=checkpointer)


def run_graph(saver: BaseCheckpointSaver[Any], thread: str) -> None:
    graph = build(saver)
    cfg: RunnableConfig = {"configurable": {"thread_id": thread}}
    for i in range(4):
        graph.invoke({"messages": [HumanMessage(content=f"go {i}")]}, cfg)
    # A fork: run again from an older checkpoint (time travel).
    history = list(graph.get_state_history(cfg))
    old = history[len(history) // 2].config
    graph.invoke({"messages": [HumanMessage(content="fork")]}, old)
    # And an update_state on another older one.
    graph.update_state(history[-3].config, {"log": ["patched"], "tally": {"z": 9}})


def handmade(saver: JournalSaver, thread: str) -> None:
    """Puts and writes by hand: seeds at several depths, special writes, writes
    with and without a task path, and a deleted ancestor."""
    cfg: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for i in range(12):
        values: dict[str, Any] = {"messages": [f"m{j}" for j in range(i)]}
        if i % 5 == 0:
            values["a"] = [f"seed-a{i}"]
        if i % 7 == 3:
            values["b"] = {"seed": i}
        cp = {
            "v": 1,
            "id": f"1ef{i:05d}-0000-6000-8000-000000000000",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": values,
            "channel_versions": {},
            "versions_seen": {},
            "updated_channels": None,
        }
        cfg = saver.put(cfg, cp, {"run_id": f"r{i % 4}", "step": i}, {})  # type: ignore[arg-type]
        saver.put_writes(cfg, [("a", f"a{i}-x"), ("b", {"w": i}), ("a", f"a{i}-y")], "t2", "~p2")
        saver.put_writes(cfg, [("a", f"a{i}-first"), ("__error__", "boom")], "t1", "~p1")
        saver.put_writes(cfg, [("b", {"nopath": i})], "t0")
    saver.delete_for_runs(["r2"])  # a hole in the chain: the walk stops there


CHANNEL_SETS = [
    ["log"],
    ["tally"],
    ["log", "tally"],
    ["messages"],
    ["a"],
    ["b"],
    ["a", "b", "messages"],
    ["never-stored"],
    ["__error__", "a"],
    [],
]


def configs(saver: JournalSaver, threads: list[str]) -> Iterator[RunnableConfig]:
    for thread in threads:
        yield {"configurable": {"thread_id": thread}}  # the newest checkpoint
        namespaces = {
            t.config["configurable"]["checkpoint_ns"]
            for t in saver.list({"configurable": {"thread_id": thread}})
        }
        for ns in sorted(namespaces):
            for t in saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ns}}):
                yield t.config
    yield {"configurable": {"thread_id": "missing"}}
    yield {"configurable": {"thread_id": threads[0], "checkpoint_id": "no-such-checkpoint"}}


def reference(saver: JournalSaver, cfg: RunnableConfig, channels: list[str]) -> Any:
    return BaseCheckpointSaver.get_delta_channel_history(saver, config=cfg, channels=channels)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("delta") / "store"
    with JournalSaver(root) as saver:
        run_graph(saver, "graph")
        handmade(saver, "hand")
    return root


THREADS = ["graph", "hand"]


def test_some_answers_are_non_trivial(store: Path) -> None:
    """The threads exercise what the comparison is about (it could not pass vacuously)."""
    with JournalSaver(store) as saver:
        answers = [
            saver.get_delta_channel_history(config=cfg, channels=["log", "tally", "a", "b"])
            for cfg in configs(saver, THREADS)
        ]
        assert any(len(h["log"]["writes"]) >= 3 and "seed" in h["log"] for h in answers)
        assert any(h["log"]["writes"] and "seed" not in h["log"] for h in answers)
        assert any(len(h["tally"]["writes"]) >= 3 for h in answers)
        assert any(h["a"]["writes"] and "seed" in h["a"] for h in answers)
        assert any(h["b"]["writes"] and "seed" not in h["b"] for h in answers)
        namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(None)}
        assert len(namespaces) > 1


def test_equals_the_inherited_walk_cold_and_warm(store: Path) -> None:
    compared = 0
    with JournalSaver(store) as warm:
        for cfg in configs(warm, THREADS):
            for channels in CHANNEL_SETS:
                want = reference(warm, cfg, channels)
                with JournalSaver(store) as cold:  # a new saver and store: no index yet
                    assert cold.get_delta_channel_history(config=cfg, channels=channels) == want
                assert warm.get_delta_channel_history(config=cfg, channels=channels) == want
                compared += 1
    assert compared > 200


def test_async_form_equals_the_inherited_async_walk(store: Path) -> None:
    async def run() -> int:
        n = 0
        with JournalSaver(store) as saver:
            for cfg in list(configs(saver, THREADS))[::3]:
                for channels in CHANNEL_SETS[:4]:
                    want = await BaseCheckpointSaver.aget_delta_channel_history(
                        saver, config=cfg, channels=channels
                    )
                    got = await saver.aget_delta_channel_history(config=cfg, channels=channels)
                    assert got == want
                    n += 1
        return n

    assert asyncio.run(run()) > 20


def test_a_delta_graph_resumes_on_a_fresh_saver_as_in_memory(tmp_path: Path) -> None:
    memory = InMemorySaver()
    run_graph(memory, "t")
    with JournalSaver(tmp_path / "s") as saver:
        run_graph(saver, "t")
    with JournalSaver(tmp_path / "s") as fresh:
        cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
        mine = build(fresh).get_state(cfg).values
        theirs = build(memory).get_state(cfg).values
        assert mine["log"] == theirs["log"] and mine["tally"] == theirs["tally"]
        assert [m.content for m in mine["messages"]] == [m.content for m in theirs["messages"]]
        build(fresh).invoke({"messages": [HumanMessage(content="more")]}, cfg)
        build(memory).invoke({"messages": [HumanMessage(content="more")]}, cfg)
        assert (
            build(fresh).get_state(cfg).values["log"] == build(memory).get_state(cfg).values["log"]
        )


class EventCount:
    """Counts the events a saver's store hands out (its reads and its readers')."""

    def __init__(self, saver: JournalSaver) -> None:
        self.events = 0
        store = saver.store
        real_reader, real_page, real_after = store.reader, store.event_page, store.events_after

        def counted(fn: Any, pick: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                out = fn(*args, **kwargs)
                self.events += len(pick(out))
                return out

            return call

        def reader(*args: Any, **kwargs: Any) -> Any:
            r = real_reader(*args, **kwargs)
            r.event_page = counted(r.event_page, lambda p: p.events)  # type: ignore[method-assign]
            r.events_after = counted(r.events_after, lambda evs: evs)  # type: ignore[method-assign]
            return r

        store.reader = reader  # type: ignore[method-assign]
        store.event_page = counted(real_page, lambda p: p.events)  # type: ignore[method-assign]
        store.events_after = counted(real_after, lambda evs: evs)  # type: ignore[method-assign]


def test_a_deep_target_in_a_long_thread_is_walked_from_where_it_is(tmp_path: Path) -> None:
    """Cold, a checkpoint deep in a long thread: its ancestors are read from the
    checkpoint down (the fast path), not by scanning everything newer; the
    answer is the inherited walk's."""
    root = tmp_path / "s"
    with JournalSaver(root, durability="os") as saver:
        graph = build_long(saver)
        cfg: RunnableConfig = {"configurable": {"thread_id": "long"}}
        graph.invoke({"log": [], "n": 0}, {**cfg, "recursion_limit": 400})
        ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg)]
        logged = saver.store.event_page("long", EventPageRequest(limit=1)).latest_sequence
    assert len(ids) > 300 and logged > 600
    deep: RunnableConfig = {"configurable": {"thread_id": "long", "checkpoint_id": ids[-120]}}
    with JournalSaver(root, durability="os") as cold:
        count = EventCount(cold)
        got = cold.get_delta_channel_history(config=deep, channels=["log"])
        read = count.events
    with JournalSaver(root, durability="os") as ref:
        want = reference(ref, deep, ["log"])
    assert got == want and len(want["log"]["writes"]) >= 10 and "seed" in want["log"]
    assert read < logged // 4, (read, logged)  # the scan would read about 600 events


class Long(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=50)]
    n: int


def build_long(saver: BaseCheckpointSaver[Any]) -> Any:
    def step(state: Long) -> dict[str, Any]:
        return {"log": [f"s{state['n']}"], "n": state["n"] + 1}

    g = StateGraph(Long)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= 320 else "step", ["step", END])
    return g.compile(checkpointer=saver)

"""LangGraph: the same graph on `SqliteSaver` and on `JournalSaver`, side by side.

    python benchmarks/bench_langgraph.py [--quick] [--steps N] [--json]
                                         [--graph-durability async|sync|exit]
    python benchmarks/bench_langgraph.py --delta [--steps N] [--reps R]

The graph is a tool-using agent loop (scripted fake model -> ToolNode -> model
-> ...) whose `messages` list grows by one message per step; one `invoke` runs
N steps (each step a checkpoint plus the step's writes). Measured, for each
saver and each durability pairing (journal "fsync" vs SQLite synchronous=FULL,
journal "os" vs SQLite synchronous=NORMAL; both WAL):

- per-step latency: wall time of the run / number of checkpoints;
- `list` latency deep in the long thread: `list(before=<a checkpoint 90% of the
  way back>, limit=10)`, cold (the first call of a new saver object and
  store/connection: the journal saver has no index yet) and warm (the same
  saver again); medians over several rounds in which the two savers take
  turns, so that drift of a shared machine hits both alike;
- bytes on disk after N steps (every file of the store / the database + WAL).

Ratios are SQLite / journal: > 1 means the journal saver is better. Needs
`langgraph-checkpoint-sqlite`; without it the script says so and exits 0.

`--delta` measures `get_delta_channel_history` instead: a graph whose message
list is a `DeltaChannel` (no snapshot within the run, so the walk goes back to
the thread's start) runs N steps (default 200); then, cold (a new saver and
store, or connection, each time), the journal saver's override, the inherited
walk on the journal saver (`BaseCheckpointSaver.get_delta_channel_history`,
one `get_tuple` per ancestor) and SqliteSaver (which inherits it) answer for
the newest checkpoint and for the one halfway back, taking turns, R rounds
(default 11): median, min, max.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Annotated, Any

try:
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.channels.delta import DeltaChannel
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolNode
    from typing_extensions import TypedDict
except ImportError:  # pragma: no cover
    print("bench_langgraph: LangGraph is not installed (pip install 'journal[langgraph]')")
    sys.exit(0)

try:
    from langgraph.checkpoint.sqlite import SqliteSaver
except ImportError:  # pragma: no cover
    SqliteSaver = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from journal.integrations.langgraph import JournalSaver

GRAPH_DURABILITY = "async"  # LangGraph's default; --graph-durability changes it
FILLER = "The build failed because the linker could not find libssl; " * 4  # ~240 chars


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int


@tool
def lookup(query: str) -> str:
    """Pretend to look something up."""
    return f"result for {query}: {FILLER}"


def build(limit: int) -> StateGraph[State]:
    def model(state: State) -> dict[str, Any]:
        n = state.get("steps", 0)
        if n + 3 >= limit:
            return {"messages": [AIMessage(content="done. " + FILLER)], "steps": n + 1}
        call = {"name": "lookup", "args": {"query": f"q{n}"}, "id": f"c{n}", "type": "tool_call"}
        return {"messages": [AIMessage(content=FILLER, tool_calls=[call])], "steps": n + 1}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    def tools_done(state: State) -> dict[str, Any]:
        return {"steps": state.get("steps", 0) + 2}  # the tools step and this one

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([lookup]))
    g.add_node("count", tools_done)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "count")
    g.add_edge("count", "model")
    return g


def dir_bytes(path: str) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(base, f)).st_size
    return total


def make_sqlite(path: str, durable: bool) -> tuple[Any, Callable[[], None]]:
    conn = sqlite3.connect(os.path.join(path, "lg.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # WAL
    conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
    return saver, conn.close


def make_journal(path: str, durable: bool) -> tuple[Any, Callable[[], None]]:
    saver = JournalSaver(os.path.join(path, "store"), durability="fsync" if durable else "os")
    return saver, saver.close


def build_one(
    name: str,
    factory: Callable[[str, bool], tuple[Any, Callable[[], None]]],
    durable: bool,
    steps: int,
) -> dict[str, Any]:
    """Run the graph on a fresh store; the store stays on disk for `measure_lists`."""
    path = tempfile.mkdtemp(prefix=f"bench-lg-{name}-")
    saver, close = factory(path, durable)
    # Each model+tools+count round is 3 steps; recursion_limit bounds supersteps.
    graph = build(steps).compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
    t0 = time.perf_counter()
    graph.invoke(
        {"messages": [HumanMessage(content="why is CI red?")], "steps": 0},
        cfg,
        durability=GRAPH_DURABILITY,  # type: ignore[arg-type]
    )
    elapsed = time.perf_counter() - t0
    ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg)]
    msgs = len(graph.get_state(cfg).values["messages"])
    close()
    return {
        "saver": name,
        "durable": durable,
        "path": path,
        "factory": factory,
        "deep": ids[int(len(ids) * 0.9)],
        "checkpoints": len(ids),
        "messages": msgs,
        "per_step_ms": elapsed / len(ids) * 1e3,
        "cold": [],
        "warm": [],
    }


def measure_lists(runs: list[dict[str, Any]], reps: int) -> None:
    """`list(before=<90% back>, limit=10)`, the savers taking turns (the machine drifts).

    Each round opens every saver afresh: its first call is the cold one (a new
    saver object and store/connection), the median of three more is the warm one.
    """
    cfg: Any = {"configurable": {"thread_id": "bench"}}
    for _ in range(reps):
        for r in runs:
            before: Any = {"configurable": {"thread_id": "bench", "checkpoint_id": r["deep"]}}
            saver, close = r["factory"](r["path"], r["durable"])

            def list_deep(s: Any = saver, b: Any = before) -> float:
                t = time.perf_counter()
                got = list(s.list(cfg, before=b, limit=10))
                assert len(got) == 10, len(got)
                return time.perf_counter() - t

            r["cold"].append(list_deep())
            r["warm"].append(statistics.median(list_deep() for _ in range(3)))
            close()
    for r in runs:
        r["list_deep_warm_ms"] = statistics.median(r.pop("warm")) * 1e3
        r["list_deep_cold_ms"] = statistics.median(r.pop("cold")) * 1e3
        r["bytes"] = dir_bytes(r["path"])
        shutil.rmtree(r.pop("path"), ignore_errors=True)
        del r["factory"], r["deep"]


def append_messages(state: list[Any], writes: Any) -> list[Any]:
    """The `DeltaChannel` reducer of the delta benchmark: append each write's messages."""
    out = list(state)
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


class DeltaState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(append_messages, snapshot_frequency=10_000)]
    steps: int


def build_delta(limit: int) -> StateGraph[DeltaState]:
    def step(state: DeltaState) -> dict[str, Any]:
        n = state.get("steps", 0) + 1
        return {"messages": [AIMessage(content=f"{n}: {FILLER}")], "steps": n}

    def route(state: DeltaState) -> str:
        return END if state["steps"] >= limit else "step"

    g = StateGraph(DeltaState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", route, ["step", END])
    return g


def bench_delta(steps: int, reps: int) -> None:
    """Cold `get_delta_channel_history` of the newest checkpoint of an N-step thread,
    and of the one halfway back."""
    paths: dict[str, str] = {}
    factories: dict[str, Callable[[str, bool], tuple[Any, Callable[[], None]]]] = {
        "journal": make_journal
    }
    if SqliteSaver is not None:
        factories["sqlite"] = make_sqlite
    cfg: Any = {"configurable": {"thread_id": "delta"}, "recursion_limit": steps + 10}
    for name, factory in factories.items():
        paths[name] = tempfile.mkdtemp(prefix=f"bench-lg-delta-{name}-")
        saver, close = factory(paths[name], True)
        graph = build_delta(steps).compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="start")], "steps": 0}, cfg)
        close()
    ways: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
        "journal override": (
            "journal",
            lambda s, c: s.get_delta_channel_history(config=c, channels=["messages"]),
        ),
        "journal inherited": (
            "journal",
            lambda s, c: BaseCheckpointSaver.get_delta_channel_history(
                s, config=c, channels=["messages"]
            ),
        ),
    }
    if "sqlite" in paths:
        ways["SqliteSaver (inherited)"] = (
            "sqlite",
            lambda s, c: s.get_delta_channel_history(config=c, channels=["messages"]),
        )
    # The newest checkpoint (what a resumed run asks for) and one halfway back
    # (time travel, a history view): the same thread, ids read once.
    first, close = factories["journal"](paths["journal"], True)
    ids = [
        t.config["configurable"]["checkpoint_id"]
        for t in first.list({"configurable": {"thread_id": "delta"}})
    ]
    close()
    targets: dict[str, Any] = {
        "newest checkpoint": {"configurable": {"thread_id": "delta"}},
        "checkpoint halfway back": {
            "configurable": {"thread_id": "delta", "checkpoint_id": ids[len(ids) // 2]}
        },
    }
    for label, target in targets.items():
        times: dict[str, list[float]] = {w: [] for w in ways}
        answers: dict[str, int] = {}
        for _ in range(reps):
            for way, (name, call) in ways.items():
                saver, close = factories[name](paths[name], True)
                t = time.perf_counter()
                got = call(saver, target)
                times[way].append(time.perf_counter() - t)
                answers[way] = len(got["messages"]["writes"])
                close()
        print(f"get_delta_channel_history, {label} of a {steps}-step thread, cold, {reps} rounds")
        print(f"{'':26} {'median':>9} {'min':>9} {'max':>9} {'writes':>7}")
        for way, ts in times.items():
            ms = sorted(x * 1e3 for x in ts)
            print(
                f"{way:26} {statistics.median(ms):>7.2f}ms {ms[0]:>7.2f}ms {ms[-1]:>7.2f}ms"
                f" {answers[way]:>7}"
            )
        base = statistics.median(times["journal inherited"])
        ratio = base / statistics.median(times["journal override"])
        print(f"inherited / override: {ratio:.1f}x\n")
    for p in paths.values():
        shutil.rmtree(p, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300 steps instead of 1000")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--graph-durability",
        choices=("async", "sync", "exit"),
        default="async",
        help="LangGraph's durability for invoke (default: async, LangGraph's default)",
    )
    ap.add_argument("--delta", action="store_true", help="get_delta_channel_history, cold")
    ap.add_argument("--reps", type=int, default=11)
    args = ap.parse_args()
    if args.delta:
        bench_delta(args.steps or 200, args.reps)
        return
    global GRAPH_DURABILITY
    GRAPH_DURABILITY = args.graph_durability
    if SqliteSaver is None:
        print(
            "bench_langgraph: langgraph-checkpoint-sqlite is not installed; "
            "pip install langgraph-checkpoint-sqlite to compare with SqliteSaver. Skipping."
        )
        return
    steps = args.steps or (300 if args.quick else 1000)
    reps = 7 if args.quick else 11
    results: list[dict[str, Any]] = []
    for durable in (True, False):
        runs = [
            build_one(name, factory, durable, steps)
            for name, factory in (("sqlite", make_sqlite), ("journal", make_journal))
        ]
        measure_lists(runs, reps)
        results.extend(runs)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print_table(results, steps)


def print_table(results: list[dict[str, Any]], steps: int) -> None:
    """Each durability pairing's figures, side by side, with their ratio."""
    print(
        f"LangGraph agent loop, {steps} steps, growing message list (~300 B per message),"
        f" graph durability={GRAPH_DURABILITY}"
    )
    for durable in (True, False):
        s = next(r for r in results if r["saver"] == "sqlite" and r["durable"] == durable)
        j = next(r for r in results if r["saver"] == "journal" and r["durable"] == durable)
        mode = "fsync / synchronous=FULL" if durable else "os / synchronous=NORMAL"
        print(
            f"\n[{mode}]  checkpoints: sqlite {s['checkpoints']}, journal {j['checkpoints']};"
            f" messages at the end: {j['messages']}"
        )
        print(f"{'metric':28} {'SqliteSaver':>14} {'JournalSaver':>14} {'ratio':>8}")
        for key, label, unit in (
            ("per_step_ms", "per-step latency", "ms"),
            ("list_deep_warm_ms", "list deep (warm), limit 10", "ms"),
            ("list_deep_cold_ms", "list deep (cold), limit 10", "ms"),
            ("bytes", "bytes on disk", "B"),
        ):
            sv, jv = s[key], j[key]
            if unit == "B":
                sv_s, jv_s = f"{sv / 1e6:.2f} MB", f"{jv / 1e6:.2f} MB"
            else:
                sv_s, jv_s = f"{sv:.2f} ms", f"{jv:.2f} ms"
            print(f"{label:28} {sv_s:>14} {jv_s:>14} {sv / jv:>7.2f}x")
    print("\nratio = SqliteSaver / JournalSaver: > 1 means the journal saver is better")


if __name__ == "__main__":
    main()

"""A real LangGraph `StateGraph` on `JournalSaver`: interrupt, SIGKILL, resume, time travel.

The graph (tests/langgraph_graph.py) is a scripted agent with a `ToolNode` and an
`interrupt()` before every tool call. A child process runs it until the interrupt
and is killed with SIGKILL; another process resumes it from the store with
`Command(resume=...)`; a kill in the middle of a tool step loses only that step.
Time travel forks a branch from an earlier checkpoint while the original
history stays intact, and the journal command line reads the store afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

import journal
from journal.integrations.langgraph import JournalSaver

sys.path.insert(0, str(Path(__file__).resolve().parent))
import langgraph_graph as lgg

SCRIPT = str(Path(__file__).resolve().parent / "langgraph_graph.py")


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "journal.cli", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def spawn(root: Path, mode: str, thread: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.Popen(
        [sys.executable, SCRIPT, str(root), mode, thread],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def wait_for_line(proc: Any, marker: str, timeout: float = 90) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.strip() == marker:
            return lines
    proc.kill()
    raise AssertionError(f"child never printed {marker}: {lines} {proc.stderr.read()}")


def kill9(proc: Any) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def contents(values: dict[str, Any]) -> list[str]:
    return [f"{type(m).__name__}:{m.id}:{m.content}" for m in values["messages"]]


def test_interrupt_kill_resume_time_travel(tmp_path: Path) -> None:
    root = tmp_path / "store"
    thread = "thread-1"
    cfg = lgg.config(thread)

    # 1. A child process runs the graph until the interrupt, then is killed with SIGKILL.
    child = spawn(root, "interrupt", thread)
    lines = wait_for_line(child, "INTERRUPTED")
    assert json.loads(lines[0]) == {"interrupted": True, "next": ["approve"]}
    kill9(child)

    # 2. This process sees the interrupted state in the store.
    saver = JournalSaver(root)
    graph = lgg.build().compile(checkpointer=saver)
    state = graph.get_state(cfg)
    assert state.next == ("approve",)
    assert state.interrupts and state.interrupts[0].value["call"] == "add"
    assert [m.id for m in state.values["messages"]] == ["human-0", "ai-0"]

    # 3. A new process resumes it from the store (and stops at the second interrupt).
    resumer = spawn(root, "resume", thread)
    out, err = resumer.communicate(timeout=90)
    assert resumer.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"last": ""}  # the 2nd tool call
    state = graph.get_state(cfg)
    assert state.next == ("approve",)
    msgs = state.values["messages"]
    assert [m.id for m in msgs[:2]] + [msgs[3].id] == ["human-0", "ai-0", "ai-1"]
    assert isinstance(msgs[2], ToolMessage) and msgs[2].content == "5"

    # 4. Finish here.
    final = graph.invoke(Command(resume="yes"), cfg)
    assert final["messages"][-1].content == "total=18"
    assert final["approvals"] == 2
    original = list(graph.get_state_history(cfg))
    original_ids = [s.config["configurable"]["checkpoint_id"] for s in original]
    original_values = {
        s.config["configurable"]["checkpoint_id"]: contents(s.values) for s in original
    }
    assert len(original_ids) == len(set(original_ids)) == 9

    # 5. Time travel: back to the first interrupt; replace the model's answer there.
    fork_point = next(
        s for s in reversed(original) if s.next == ("approve",) and len(s.values["messages"]) == 2
    )
    branch_cfg = graph.update_state(
        fork_point.config,
        {"messages": [AIMessage(content="never mind", id="ai-0")]},
        as_node="agent",
    )
    assert branch_cfg["configurable"]["checkpoint_id"] not in original_ids
    out2 = graph.invoke(None, branch_cfg)
    assert [m.content for m in out2["messages"]] == ["add things up", "never mind"]

    # Both branches exist; the new one is the thread's head; the old one is intact.
    head = graph.get_state(cfg)
    assert contents(head.values) == [
        "HumanMessage:human-0:add things up",
        "AIMessage:ai-0:never mind",
    ]
    after = list(graph.get_state_history(cfg))
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in after}
    for cid in original_ids:
        assert cid in by_id, "a checkpoint of the original branch vanished"
        assert contents(by_id[cid].values) == original_values[cid]
    fp_id = fork_point.config["configurable"]["checkpoint_id"]
    children = [
        s
        for s in after
        if s.parent_config and s.parent_config["configurable"]["checkpoint_id"] == fp_id
    ]
    assert len(children) == 2, "the fork point should have two children: old and new branch"
    old_final = graph.get_state(
        {"configurable": {**cfg["configurable"], "checkpoint_id": original_ids[0]}}
    )
    assert old_final.values["messages"][-1].content == "total=18"

    # The branch replaced a message: the saver started a new context epoch for it.
    cp = saver.store.load(thread)
    assert cp is not None and cp.context_epoch >= 1
    saver.close()

    # 6. The journal command line reads the LangGraph thread.
    ls = cli(root, "ls")
    assert ls.returncode == 0 and thread in ls.stdout and "add things up" in ls.stdout
    verify = cli(root, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    events = cli(root, "events", thread, "--json")
    assert events.returncode == 0
    assert "langgraph_checkpoint" in events.stdout and "langgraph_writes" in events.stdout
    bundle = tmp_path / "t.jbundle"
    exp = cli(root, "export", thread, "-o", str(bundle))
    assert exp.returncode == 0, exp.stderr
    other = tmp_path / "other"
    imp = cli(other, "import", str(bundle))
    assert imp.returncode == 0, imp.stderr
    # The imported copy is a working LangGraph thread in another store.
    with JournalSaver(other) as copy_saver:
        g2 = lgg.build().compile(checkpointer=copy_saver)
        assert contents(g2.get_state(cfg).values) == contents(head.values)
        assert len(list(g2.get_state_history(cfg))) == len(after)


def test_kill_in_the_middle_of_a_tool_step(tmp_path: Path) -> None:
    root = tmp_path / "store"
    thread = "thread-mid"
    cfg = lgg.config(thread)
    with JournalSaver(root) as saver:
        graph = lgg.build().compile(checkpointer=saver)
        graph.invoke(lgg.first_input(), cfg)
        assert graph.get_state(cfg).next == ("approve",)

    # A new process resumes; its tool blocks; it is killed while the tool runs.
    marker = tmp_path / "in-tool"
    env = {"JOURNAL_LG_SLOW_TOOL": str(marker), "JOURNAL_LG_DURABILITY": "sync"}
    child = spawn(root, "resume", thread, env=env)
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.02)
    kill9(child)

    with JournalSaver(root) as saver:
        graph = lgg.build().compile(checkpointer=saver)
        state = graph.get_state(cfg)
        # The approval step finished (durable); the tool step was lost with the process.
        assert state.next == ("tools",)
        assert state.values["approvals"] == 1
        out = graph.invoke(None, cfg)  # re-runs only the tool step
        assert graph.get_state(cfg).next == ("approve",)
        tool_msgs = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert [m.tool_call_id for m in tool_msgs] == ["call-0"]  # exactly once
        final = graph.invoke(Command(resume="yes"), cfg)
        assert final["messages"][-1].content == "total=18"
        assert isinstance(final["messages"][0], HumanMessage)
        ids = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg)]
        assert len(ids) == len(set(ids))
    assert cli(root, "verify").returncode == 0


def test_subgraph_namespaces_are_child_sessions(tmp_path: Path) -> None:
    from langgraph.graph import START, StateGraph

    inner = lgg.build().compile()  # inherits the parent's checkpointer

    outer = StateGraph(lgg.State)
    outer.add_node("inner", inner)
    outer.add_edge(START, "inner")
    root = tmp_path / "store"
    cfg = lgg.config("outer-thread")
    with JournalSaver(root) as saver:
        graph = outer.compile(checkpointer=saver)
        graph.invoke(lgg.first_input(), cfg)
        state = graph.get_state(cfg, subgraphs=True)
        assert state.next == ("inner",)
        sub = state.tasks[0].state
        assert sub is not None and sub.next == ("approve",)
        final = graph.invoke(Command(resume="yes"), cfg)
        final = graph.invoke(Command(resume="yes"), cfg)
        assert final["messages"][-1].content == "total=18"
        # The subgraph's checkpoints live in a child session of the thread's session.
        summaries = saver.store.list_sessions_page(journal.SessionPageRequest(limit=50)).sessions
        kids = [s for s in summaries if s.parent_session_id == "outer-thread"]
        assert kids and all(s.session_id.startswith("outer-thread::ns::inner") for s in kids)
        saver.delete_thread("outer-thread")
        assert saver.get_tuple(cfg) is None
        left = saver.store.list_sessions_page(journal.SessionPageRequest(limit=50)).sessions
        assert left == []

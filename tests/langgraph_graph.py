"""A small real LangGraph agent for the JournalSaver tests: no network, no LLM.

The graph: START -> agent -> (tool calls?) -> approve -> tools -> agent -> ... -> END.

- `agent` is a scripted fake model: it reads the conversation and answers with
  the next scripted AIMessage (two tool-calling turns, then a final answer).
- `approve` asks a human through `interrupt()` before any tool runs; the resume
  value "yes" lets the tools run, anything else cancels the call.
- `tools` is LangGraph's prebuilt `ToolNode` with one tool, `add`. When the
  environment variable JOURNAL_LG_SLOW_TOOL names a file, the tool writes it and
  sleeps, so a test can kill the process in the middle of a step.

Run as a script (`python tests/langgraph_graph.py ROOT MODE THREAD`) it is the
child process of the crash tests; MODE is "interrupt" (run until the interrupt,
print INTERRUPTED, then wait to be killed) or "resume" (resume with "yes" and
print the final answer).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    approvals: int


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    marker = os.environ.get("JOURNAL_LG_SLOW_TOOL")
    if marker:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
    return a + b


SCRIPT = [(2, 3), (5, 8)]


def agent(state: State) -> dict[str, Any]:
    """The fake model: one scripted tool call per turn, then a final answer."""
    tool_results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    turn = len(tool_results)
    if turn < len(SCRIPT):
        a, b = SCRIPT[turn]
        call = {"name": "add", "args": {"a": a, "b": b}, "id": f"call-{turn}", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{turn}")]}
    total = sum(int(str(m.content)) for m in tool_results)
    return {"messages": [AIMessage(content=f"total={total}", id="ai-final")]}


def approve(state: State) -> Command[Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage) and last.tool_calls
    answer = interrupt({"question": "run tool?", "call": last.tool_calls[0]["name"]})
    if answer == "yes":
        return Command(goto="tools", update={"approvals": state.get("approvals", 0) + 1})
    cancel = ToolMessage(content="0", tool_call_id=last.tool_calls[0]["id"], id=f"cancel-{answer}")
    return Command(goto="agent", update={"messages": [cancel]})


def route(state: State) -> str:
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return "approve"
    return END


def build() -> StateGraph[State]:
    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("approve", approve)
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["approve", END])
    g.add_edge("tools", "agent")
    return g


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def first_input() -> dict[str, Any]:
    return {"messages": [HumanMessage(content="add things up", id="human-0")], "approvals": 0}


def main(argv: list[str]) -> None:
    from journal.integrations.langgraph import JournalSaver

    root, mode, thread = argv
    saver = JournalSaver(root)
    graph = build().compile(checkpointer=saver)
    if mode == "interrupt":
        graph.invoke(first_input(), config(thread))
        state = graph.get_state(config(thread))
        print(json.dumps({"interrupted": bool(state.interrupts), "next": list(state.next)}))
        print("INTERRUPTED", flush=True)
        time.sleep(120)  # wait to be killed
    elif mode == "resume":
        # "sync": each checkpoint is durable before the next step starts (LangGraph's
        # default, "async", may still be writing it while the next step runs).
        durability: Any = os.environ.get("JOURNAL_LG_DURABILITY", "async")
        out = graph.invoke(Command(resume="yes"), config(thread), durability=durability)
        print(json.dumps({"last": out["messages"][-1].content}), flush=True)
    elif mode == "continue":
        out = graph.invoke(None, config(thread))
        print(json.dumps({"last": out["messages"][-1].content}), flush=True)
    saver.close()


if __name__ == "__main__":
    main(sys.argv[1:])

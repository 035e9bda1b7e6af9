"""`langgraph dev` on a journal store: `generate_checkpointer` in a real LangGraph Server.

The test writes a `langgraph.json` and a tiny graph into tmp_path, starts
`langgraph dev` (langgraph-cli[inmem]) as a real subprocess on a free local
port with analytics and tracing off, drives it through its HTTP API with
`langgraph_sdk`'s client, and checks the journal store from this process with
a fresh `JournalSaver`: the thread's session, its checkpoints and state, a
copy made through the API (`acopy_thread`), a rollback that removes a
cancelled run's checkpoints (`adelete_for_runs`), a delete through the API
(`adelete_thread`), and `journal verify`. The server is stopped by its PID
(SIGTERM) and must exit by itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langgraph_api")
pytest.importorskip("langgraph_sdk")

from helpers import run_cli
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from journal import Store
from journal.integrations.langgraph import JournalSaver
from journal.integrations.langgraph import server as lg_server

REPO = Path(__file__).resolve().parent.parent
LANGGRAPH = Path(sys.executable).parent / "langgraph"
DEV_ARGS = ("dev", "--no-browser", "--no-reload")
CHECKPOINTER = "journal.integrations.langgraph.generate_checkpointer"

AGENT = """
import asyncio
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int
    slow: bool


def think(state: State) -> dict[str, Any]:
    n = state.get("steps", 0) + 1
    return {"messages": [AIMessage(content=f"thought {n}")], "steps": n}


async def answer(state: State) -> dict[str, Any]:
    if state.get("slow"):
        await asyncio.sleep(120)  # until a rollback cancels the run
    return {"messages": [AIMessage(content=f"answer {state['steps']}")], "slow": False}


builder = StateGraph(State)
builder.add_node("think", think)
builder.add_node("answer", answer)
builder.add_edge(START, "think")
builder.add_edge("think", "answer")
builder.add_edge("answer", END)
graph = builder.compile()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(store: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_"))
        and k not in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    }
    env.update(
        {
            lg_server.ROOT_ENV: str(store),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # the CLI's usage report
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
        }
    )
    return env


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, store: Path, log: Path):
        self.proc = proc
        self.url = url
        self.store = store
        self.log = log

    def client(self) -> SyncLangGraphClient:
        return get_sync_client(url=self.url)

    def stop(self) -> int:
        """SIGTERM to the server's PID; its exit code (it must exit by itself)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"langgraph dev ignored SIGTERM; log: {self.log}") from None


def wait_ready(server: Server) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise AssertionError(f"langgraph dev exited: {server.log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(server.url + "/ok", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"langgraph dev did not answer: {server.log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    app = tmp_path_factory.mktemp("app")
    store = tmp_path_factory.mktemp("data") / "store"
    (app / "agent.py").write_text(AGENT)
    config = {
        "dependencies": ["."],
        "graphs": {"agent": "./agent.py:graph"},
        "checkpointer": {"path": CHECKPOINTER},
    }
    (app / "langgraph.json").write_text(json.dumps(config))
    port = free_port()
    log = app / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(LANGGRAPH), *DEV_ARGS, "--port", str(port), "--host", "127.0.0.1"],
            cwd=app,
            env=server_env(store),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    srv = Server(proc, f"http://127.0.0.1:{port}", store, log)
    try:
        wait_ready(srv)
        yield srv
    finally:
        srv.stop()


def contents(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"]]


def stored(store: Path, thread_id: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The thread's messages and its checkpoints' metadata (newest first), read by a
    fresh saver in this process."""
    with JournalSaver(store) as saver:
        tup = saver.get_tuple({"configurable": {"thread_id": thread_id}})
        assert tup is not None, thread_id
        msgs = [m.content for m in tup.checkpoint["channel_values"].get("messages", [])]
        metas = [dict(t.metadata) for t in saver.list({"configurable": {"thread_id": thread_id}})]
    return msgs, metas


def session_exists(store: Path, session_id: str) -> bool:
    s = Store(store)
    try:
        return s.session_summary(session_id) is not None
    finally:
        s.close()


def test_langgraph_dev_runs_on_a_journal_store(server: Server) -> None:
    client = server.client()
    thread = client.threads.create()
    tid = thread["thread_id"]
    client.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]})
    out = client.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "more"}]})
    want = ["hi", "thought 1", "answer 1", "more", "thought 2", "answer 2"]
    assert isinstance(out, dict) and contents(out) == want
    assert contents(client.threads.get_state(tid)["values"]) == want

    # The checkpoints are in the journal store, where a fresh saver reads them.
    assert session_exists(server.store, tid)
    msgs, metas = stored(server.store, tid)
    assert msgs == want
    assert len(metas) == len(client.threads.get_history(tid, limit=100))
    assert {m.get("graph_id") for m in metas} == {"agent"}  # the server's metadata, kept
    run_cli(server.store, "verify")

    # POST /threads/<id>/copy: the saver's acopy_thread.
    copy = client.threads.copy(tid)
    cid = copy["thread_id"]
    assert cid != tid
    assert contents(client.threads.get_state(cid)["values"]) == want
    copied_msgs, copied_metas = stored(server.store, cid)
    assert copied_msgs == want
    assert len(copied_metas) == len(metas)

    # DELETE /threads/<id>: the saver's adelete_thread; the copy stays.
    client.threads.delete(tid)
    assert not session_exists(server.store, tid)
    assert session_exists(server.store, cid)
    with JournalSaver(server.store) as saver:
        assert saver.get_tuple({"configurable": {"thread_id": tid}}) is None
    client.runs.wait(cid, "agent", input={"messages": [{"role": "user", "content": "on copy"}]})
    assert stored(server.store, cid)[0][-3:] == ["on copy", "thought 3", "answer 3"]
    run_cli(server.store, "verify")


def test_rollback_removes_the_cancelled_runs_checkpoints(server: Server) -> None:
    """multitask_strategy="rollback" cancels the running run and deletes its
    checkpoints through the saver's adelete_for_runs."""
    client = server.client()
    tid = client.threads.create()["thread_id"]
    slow = client.runs.create(
        tid, "agent", input={"messages": [{"role": "user", "content": "slow"}], "slow": True}
    )
    deadline = time.monotonic() + 60
    while True:  # until the slow run has checkpoints in the store
        try:
            _, metas = stored(server.store, tid)
        except AssertionError:
            metas = []
        if any(m.get("run_id") == slow["run_id"] for m in metas):
            break
        assert time.monotonic() < deadline, "the slow run stored no checkpoint"
        time.sleep(0.2)
    fast = client.runs.create(
        tid,
        "agent",
        input={"messages": [{"role": "user", "content": "fast"}]},
        multitask_strategy="rollback",
    )
    client.runs.join(tid, fast["run_id"])
    msgs, metas = stored(server.store, tid)
    assert msgs == ["fast", "thought 1", "answer 1"]
    assert not any(m.get("run_id") == slow["run_id"] for m in metas)
    assert any(m.get("run_id") == fast["run_id"] for m in metas)


def test_server_stops_on_sigterm_and_leaves_a_clean_store(server: Server) -> None:
    assert server.stop() == 0 or server.proc.returncode == -signal.SIGTERM
    run_cli(server.store, "verify")
    with JournalSaver(server.store) as saver:
        assert list(saver.list(None))  # what the server stored is still readable


def test_generate_checkpointer_shares_one_saver_and_its_async_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the server's adapter asks of the saver, in this process: every method
    it looks for is the saver's own, and the async forms work."""
    # The adapter's test (`_is_overridden`): the method is not BaseCheckpointSaver's.
    for name in (
        "adelete_thread",
        "adelete_for_runs",
        "acopy_thread",
        "aprune",
        "aget_delta_channel_history",
        "get_delta_channel_history",
    ):
        assert getattr(JournalSaver, name) is not getattr(BaseCheckpointSaver, name), name
    monkeypatch.setenv(lg_server.ROOT_ENV, str(tmp_path / "s"))

    async def run() -> None:
        async with lg_server.generate_checkpointer() as a, lg_server.generate_checkpointer() as b:
            assert a is b
            cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            ids = []
            for run_id in ("r1", "r2", "r3"):
                cp = {
                    "v": 1,
                    "id": f"1ef0000{len(ids)}-0000-6000-8000-000000000000",
                    "ts": "2026-01-01T00:00:00+00:00",
                    "channel_values": {"messages": [f"m{run_id}"]},
                    "channel_versions": {},
                    "versions_seen": {},
                    "updated_channels": None,
                }
                cfg = await a.aput(cfg, cp, {"run_id": run_id}, {})  # type: ignore[arg-type]
                ids.append(cp["id"])
            await a.adelete_for_runs(["r2"])
            thread_t = {"configurable": {"thread_id": "t"}}
            listed = [t.config["configurable"]["checkpoint_id"] async for t in a.alist(thread_t)]
            assert listed == [ids[2], ids[0]]
            await a.acopy_thread("t", "u")
            copied = [
                t.config["configurable"]["checkpoint_id"]
                async for t in a.alist({"configurable": {"thread_id": "u"}})
            ]
            assert copied == listed
            await a.aprune(["t"])
            kept = [
                t.metadata["run_id"] async for t in a.alist({"configurable": {"thread_id": "t"}})
            ]
            assert kept == ["r3"]
            await a.adelete_thread("u")
            assert await a.aget_tuple({"configurable": {"thread_id": "u"}}) is None
        assert a.store.open_sessions.closed  # the last one out closed the store

    asyncio.run(run())
    monkeypatch.setenv(lg_server.DURABILITY_ENV, "none")
    with pytest.raises(Exception, match="fsync"):
        lg_server.durability()

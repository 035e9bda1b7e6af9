"""ADK's real `Runner` on `JournalSessionService`, with a scripted model (no network):
turns with tool calls and scoped state, a reopen, forks, and ADK's own service
registry and API server resolving a `journal:` URI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
)
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import journal
from journal.integrations.adk import JournalSessionService, from_uri, register, root_of

APP = "shop"


class ScriptedModel(BaseLlm):
    """A model that asks for the `remember` tool once per user message, then answers
    with the text of the tool's result: deterministic, offline."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        part = last.parts[0] if last.parts else None
        if part is not None and part.function_response is not None:
            said = part.function_response.response or {}
            text = f"noted {said.get('result')}"
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
            return
        said = part.text if part is not None and part.text else ""
        call = types.FunctionCall(name="remember", args={"item": said})
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=call)])
        )


def remember(item: str, tool_context: ToolContext) -> str:
    """Remember an item for this session, this user and this app."""
    items = list(tool_context.state.get("items", []))
    items.append(item)
    tool_context.state["items"] = items
    tool_context.state["user:count"] = tool_context.state.get("user:count", 0) + 1
    tool_context.state["app:last_item"] = item
    tool_context.state["temp:scratch"] = item
    return f"{item} ({len(items)})"


def runner_on(service: BaseSessionService) -> Runner:
    agent = LlmAgent(name="clerk", model=ScriptedModel(), tools=[remember], output_key="reply")
    return Runner(app_name=APP, agent=agent, session_service=service)


async def turn(runner: Runner, user: str, session_id: str, text: str) -> list[str]:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    out = []
    async for ev in runner.run_async(user_id=user, session_id=session_id, new_message=message):
        out.append(describe(ev))
    return out


def describe(ev: Any) -> str:
    """An event as the test compares it: author and what it carries."""
    bits = []
    for p in ev.content.parts if ev.content and ev.content.parts else []:
        if p.text:
            bits.append(f"text:{p.text}")
        if p.function_call:
            bits.append(f"call:{p.function_call.name}{json.dumps(p.function_call.args)}")
        if p.function_response:
            bits.append(f"result:{json.dumps(p.function_response.response)}")
    return f"{ev.author}|{'|'.join(bits)}|{json.dumps(ev.actions.state_delta, sort_keys=True)}"


@pytest.mark.asyncio
async def test_runner_turns_reopen_and_same_as_in_memory(tmp_path: Path) -> None:
    async def script(make: Any) -> tuple[list[str], dict[str, Any], list[str]]:
        service = make()
        s = await service.create_session(app_name=APP, user_id="ann", session_id="s1")
        seen = []
        for text in ("apples", "pears"):
            seen += await turn(runner_on(service), "ann", s.id, text)
        if isinstance(service, JournalSessionService):
            await service.close()
            service = make()  # a new process would do the same: the state is on disk
        seen += await turn(runner_on(service), "ann", s.id, "plums")
        got = await service.get_session(app_name=APP, user_id="ann", session_id=s.id)
        assert got is not None
        if isinstance(service, JournalSessionService):
            await service.close()
        return seen, got.state, [describe(e) for e in got.events]

    memory = InMemorySessionService()
    in_memory = await script(lambda: memory)
    on_journal = await script(lambda: JournalSessionService(tmp_path / "store"))
    assert on_journal == in_memory
    _, state, events = on_journal
    assert state == {
        "items": ["apples", "pears", "plums"],
        "reply": "noted plums (3)",
        "user:count": 3,
        "app:last_item": "plums",
    }
    assert len(events) == 12  # per turn: the user's message, call, result, answer
    assert events[0].startswith("user|text:apples")

    # Each event is one journal event of one ordinary journal session.
    with journal.open(tmp_path / "store", read_only=True) as store:
        [summary] = store.list_sessions_page(journal.SessionPageRequest(limit=10)).sessions
        assert summary.session_id == f"adk/{APP}/ann/s1"
        assert summary.first_user_message == "apples"
        page = store.event_page(summary.session_id, journal.EventPageRequest(limit=100))
        assert page.latest_sequence == 12 == summary.sequence
        assert all(e.event.msg["type"] == "adk.event" for e in page.events)


@pytest.mark.asyncio
async def test_fork_shares_history_and_diverges(tmp_path: Path) -> None:
    service = JournalSessionService(tmp_path / "store")
    runner = runner_on(service)
    s = await service.create_session(app_name=APP, user_id="ann", session_id="main")
    await turn(runner, "ann", s.id, "apples")
    await turn(runner, "ann", s.id, "pears")
    main = await service.get_session(app_name=APP, user_id="ann", session_id="main")
    assert main is not None
    second_turn = main.events[4].invocation_id

    # Retry the second turn differently: fork before it.
    retry = await service.fork_session(
        app_name=APP,
        user_id="ann",
        session_id="main",
        new_session_id="retry",
        before_invocation_id=second_turn,
    )
    assert [describe(e) for e in retry.events] == [describe(e) for e in main.events[:4]]
    assert retry.state["items"] == ["apples"]
    assert retry.state["user:count"] == 2  # user state is the user's, not the session's
    store = service.store
    assert store.event_page("adk/shop/ann/retry", journal.EventPageRequest(limit=5)).events == []
    [child] = store.child_sessions("adk/shop/ann/main")
    assert (child.session_id, child.parent_sequence) == ("adk/shop/ann/retry", 4)

    await turn(runner, "ann", "retry", "plums")
    retry_now = await service.get_session(app_name=APP, user_id="ann", session_id="retry")
    main_now = await service.get_session(app_name=APP, user_id="ann", session_id="main")
    assert retry_now is not None and main_now is not None
    assert retry_now.state["items"] == ["apples", "plums"]
    assert main_now.state["items"] == ["apples", "pears"]
    assert [describe(e) for e in main_now.events] == [describe(e) for e in main.events]
    assert len(retry_now.events) == 8

    # A fork of the fork at an event it shares with `main` is a fork of `main`.
    first_answer = main.events[3].id
    again = await service.fork_session(
        app_name=APP, user_id="ann", session_id="retry", at_event_id=first_answer
    )
    assert [e.id for e in again.events] == [e.id for e in main.events[:4]]
    assert {c.session_id for c in store.child_sessions("adk/shop/ann/main")} == {
        "adk/shop/ann/retry",
        f"adk/shop/ann/{again.id}",
    }
    # ... and a fork at the fork's own event reads through both.
    deep = await service.fork_session(
        app_name=APP, user_id="ann", session_id="retry", new_session_id="deep"
    )
    assert [e.id for e in deep.events] == [e.id for e in retry_now.events]
    recent = await service.get_session(
        app_name=APP,
        user_id="ann",
        session_id="deep",
        config=GetSessionConfig(num_recent_events=6),
    )
    assert recent is not None
    assert [e.id for e in recent.events] == [e.id for e in retry_now.events[-6:]]

    with pytest.raises(AlreadyExistsError):
        await service.fork_session(
            app_name=APP, user_id="ann", session_id="main", new_session_id="retry"
        )
    with pytest.raises(journal.NotFoundError):
        await service.fork_session(
            app_name=APP, user_id="ann", session_id="main", at_event_id="no-such-event"
        )

    # Deleting a session deletes its forks: they read their history from it.
    await service.delete_session(app_name=APP, user_id="ann", session_id="main")
    listed = await service.list_sessions(app_name=APP, user_id="ann")
    assert listed.sessions == []
    await service.close()


def test_uri_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert root_of("journal:///var/lib/s") == ("/var/lib/s", {})
    assert root_of("journal://rel/dir") == (str(tmp_path / "rel" / "dir"), {})
    assert root_of("journal:rel") == (str(tmp_path / "rel"), {})
    assert root_of("journal:///a%20b?durability=os") == ("/a b", {"durability": "os"})
    for bad in ("journal://", "sqlite:///x.db", "journal:///x?size=3"):
        with pytest.raises(journal.InvalidInputError):
            root_of(bad)
    with pytest.raises(journal.InvalidInputError):
        from_uri(f"journal://{tmp_path / 'never'}?durability=weird")
    assert not (tmp_path / "never").exists()  # refused before a store is made


@pytest.mark.asyncio
async def test_uri_resolves_through_adks_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.adk.cli import service_registry
    from google.adk.cli.utils.service_factory import create_session_service_from_options

    monkeypatch.setattr(service_registry, "_service_registry_instance", None)  # a fresh registry
    monkeypatch.chdir(tmp_path)
    agents = tmp_path / "agents"
    agents.mkdir()
    # What the docs tell a user to write next to their agents.
    (agents / "services.yaml").write_text(
        "services:\n"
        "  - scheme: journal\n"
        "    type: session\n"
        "    class: journal.integrations.adk.from_uri\n"
    )
    service_registry.load_services_module(str(agents))
    svc = create_session_service_from_options(
        base_dir=agents, session_service_uri="journal://sessions?durability=os"
    )
    assert isinstance(svc, JournalSessionService)
    assert svc.store.root == str(tmp_path / "sessions")
    assert svc.store.durability == "os"
    await svc.create_session(app_name="a", user_id="u", session_id="s")
    await svc.close()

    # `register()` (a services.py) adds the same scheme.
    monkeypatch.setattr(service_registry, "_service_registry_instance", None)
    register()
    other = create_session_service_from_options(
        base_dir=agents, session_service_uri=f"journal://{tmp_path / 'sessions'}"
    )
    assert isinstance(other, JournalSessionService)
    assert await other.get_session(app_name="a", user_id="u", session_id="s") is not None
    await other.close()
    with pytest.raises(journal.InvalidInputError):
        from_uri("journal:///x", unexpected=1)


AGENT_SOURCE = """
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.genai import types


class EchoModel(BaseLlm):
    model: str = "echo"

    async def generate_content_async(self, llm_request, stream=False):
        said = llm_request.contents[-1].parts[0].text
        reply = types.Content(role="model", parts=[types.Part(text="echo " + said)])
        yield LlmResponse(content=reply)


root_agent = LlmAgent(name="echo", model=EchoModel(), output_key="last")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read() or b"null")


@pytest.mark.slow
def test_adk_api_server_runs_on_a_journal_uri(tmp_path: Path) -> None:
    """`adk api_server --session_service_uri journal://...` on 127.0.0.1, one turn over HTTP."""
    agents = tmp_path / "agents"
    (agents / "echo_app").mkdir(parents=True)
    (agents / "echo_app" / "__init__.py").write_text("from . import agent\n")
    (agents / "echo_app" / "agent.py").write_text(textwrap.dedent(AGENT_SOURCE))
    (agents / "services.yaml").write_text(
        "services:\n  - scheme: journal\n    type: session\n"
        "    class: journal.integrations.adk.from_uri\n"
    )
    port = _free_port()
    store_dir = tmp_path / "sessions"
    adk = Path(sys.executable).with_name("adk")
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [
            str(adk),
            "api_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--session_service_uri",
            f"journal://{store_dir}",
            str(agents),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, "ADK_DISABLE_LOAD_DOTENV": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _http("GET", f"{base}/health")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise AssertionError((tmp_path / "server.log").read_text()[-3000:]) from None
                time.sleep(0.2)
        created = _http("POST", f"{base}/apps/echo_app/users/ann/sessions", {"sessionId": "s1"})
        assert created["id"] == "s1"
        events = _http(
            "POST",
            f"{base}/run",
            {
                "appName": "echo_app",
                "userId": "ann",
                "sessionId": "s1",
                "newMessage": {"role": "user", "parts": [{"text": "hello"}]},
            },
        )
        assert [e["content"]["parts"][0]["text"] for e in events] == ["echo hello"]
        got = _http("GET", f"{base}/apps/echo_app/users/ann/sessions/s1")
        assert got["state"] == {"last": "echo hello"}
        assert len(got["events"]) == 2
    finally:
        server.terminate()
        server.wait(30)
        log.close()
    # The turn is in the journal store, readable by any journal tool.
    with journal.open(store_dir, read_only=True) as store:
        page = store.event_page("adk/echo_app/ann/s1", journal.EventPageRequest(limit=10))
        texts = [e.event.msg["event"]["content"]["parts"][0]["text"] for e in page.events]
        assert texts == ["echo hello", "hello"]

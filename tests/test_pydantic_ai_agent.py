"""Real pydantic-ai `Agent` runs persisting through `JournalConversationStore`, on
pydantic-ai's own `TestModel` and `FunctionModel` (no network): several runs, a new
store object per run (as a new process would have), tools, forks that share entries,
and a run paused for tool approval resumed from the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from journal import EventPageRequest
from journal.integrations.pydantic_ai import JournalConversationStore


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def counting_model() -> FunctionModel:
    """Answers with how many user prompts the history it is sent holds, and the last one."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen = prompts(messages)
        return ModelResponse(parts=[TextPart(f"{len(seen)}:{seen[-1]}")])

    return FunctionModel(reply)


async def run_turn(root: Path, agent: Agent[None, str], cid: str, prompt: str) -> str:
    """One turn as a stateless server handles it: open, load, run, save, close."""
    async with JournalConversationStore(root) as store:
        conversation = await store.load(cid) or Conversation(conversation_id=cid)
        result = await agent.run(prompt, conversation=conversation)
        await store.save(result)
        return result.output


def test_runs_continue_the_stored_conversation(tmp_path: Path) -> None:
    agent = Agent(counting_model())
    root = tmp_path / "store"

    async def main() -> None:
        outputs = [await run_turn(root, agent, "chat", f"p{i}") for i in range(5)]
        assert outputs == [f"{i + 1}:p{i}" for i in range(5)]  # each run saw every earlier turn
        async with JournalConversationStore(root) as store:
            loaded = await store.load("chat")
            assert loaded is not None
            assert prompts(loaded.messages) == [f"p{i}" for i in range(5)]
            assert len(loaded.messages) == 10 and loaded.usage.requests == 5
            # each message stored once: one event per message, none written twice
            page = store.store.event_page("chat", EventPageRequest(limit=100))
            assert page.latest_sequence == 10
            entries = await store.load_entries("chat")
            assert entries is not None and len({e.id for e in entries}) == 10

    asyncio.run(main())


def test_tool_calls_round_trip_through_the_store(tmp_path: Path) -> None:
    agent = Agent(TestModel())

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    root = tmp_path / "store"

    async def main() -> None:
        first = await run_turn(root, agent, "tools", "add things")
        second = await run_turn(root, agent, "tools", "again")
        assert first == second
        async with JournalConversationStore(root) as store:
            loaded = await store.load("tools")
            assert loaded is not None
            calls = [p for m in loaded.messages for p in m.parts if isinstance(p, ToolCallPart)]
            returns = [p for m in loaded.messages for p in m.parts if isinstance(p, ToolReturnPart)]
            assert calls and [r.tool_call_id for r in returns] == [c.tool_call_id for c in calls]
            assert [r.content for r in returns] == [0] * len(calls)  # TestModel's a=0, b=0
            assert loaded.usage.tool_calls == len(calls)
            assert prompts(loaded.messages) == ["add things", "again"]
            # what was stored equals what the runs produced, message for message
            memory_agent = Agent(TestModel())
            memory_agent.tool_plain(add)
            replay = await memory_agent.run("add things")
            assert [type(m) for m in loaded.messages[:4]] == [
                type(m) for m in replay.all_messages()
            ]

    asyncio.run(main())


def test_forks_share_history_and_diverge(tmp_path: Path) -> None:
    agent = Agent(counting_model())
    root = tmp_path / "store"

    async def main() -> None:
        for i in range(3):
            await run_turn(root, agent, "main", f"m{i}")
        async with JournalConversationStore(root) as store:
            fork = await store.fork("main", at=4, new_conversation_id="alt")  # the first two turns
            result = await agent.run("alt-2", conversation=fork)
            assert result.output == "3:alt-2"
            await store.save(result)
            again = await agent.run("alt-3", conversation=result.conversation)
            await store.save(again)
            assert store.store.session_summary("alt").parent_session_id == "main"  # type: ignore[union-attr]
        assert await run_turn(root, agent, "main", "m3") == "4:m3"
        assert await run_turn(root, agent, "alt", "alt-4") == "5:alt-4"
        async with JournalConversationStore(root) as store:
            main_entries = await store.load_entries("main")
            alt_entries = await store.load_entries("alt")
            assert main_entries is not None and alt_entries is not None
            assert [e.id for e in alt_entries[:4]] == [e.id for e in main_entries[:4]]
            assert prompts([e.message for e in alt_entries]) == [
                "m0",
                "m1",
                "alt-2",
                "alt-3",
                "alt-4",
            ]
            assert prompts([e.message for e in main_entries]) == ["m0", "m1", "m2", "m3"]
            # the fork's session holds only its own messages
            alt_events = store.store.event_page("alt", EventPageRequest(limit=100))
            assert alt_events.latest_sequence == 6

    asyncio.run(main())


def test_a_run_paused_for_approval_resumes_from_the_store(tmp_path: Path) -> None:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f"deleted {path}"

    root = tmp_path / "store"

    async def main() -> None:
        async with JournalConversationStore(root) as store:
            result = await agent.run("clean up", conversation=Conversation(conversation_id="ops"))
            assert isinstance(result.output, DeferredToolRequests)
            await store.save(result)
        async with JournalConversationStore(root) as store:
            paused = await store.load("ops")
            assert paused is not None and paused.deferred_tool_requests is not None
            assert paused.deferred_tool_requests == result.output
            answers = paused.deferred_tool_requests.build_results(approve_all=True)
            resumed = await agent.run(conversation=paused, deferred_tool_results=answers)
            assert isinstance(resumed.output, str)
            await store.save(resumed)
            done = await store.load("ops")
            assert done is not None and done.deferred_tool_requests is None
            returns = [p for m in done.messages for p in m.parts if isinstance(p, ToolReturnPart)]
            assert [r.content for r in returns] == ["deleted a"]

    asyncio.run(main())

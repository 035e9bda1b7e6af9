"""The SDK's own Runner driving a `JournalSession`, with a scripted model (no network).

Ports the runner-level checks of the SDK's session tests (history reaches the
model, sessions stay apart, list input, input callback, session limits) and
adds a restart: a second Runner with a new store object on the same directory
continues the conversation.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.memory import SessionSettings
from openai_agents_fake_model import ScriptedModel, function_call, text_message

import journal
from journal.integrations.openai_agents import JournalSession

os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-used")
set_tracing_disabled(True)


def _run_sync(agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, input_data, **kwargs)
    finally:
        loop.close()


async def run(method: str, agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    if method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(_run_sync, agent, input_data, **kwargs)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


def text_of(item: Any) -> Any:
    content = item.get("content")
    if isinstance(content, list):
        return content[0]["text"]
    return content


METHODS = ["run", "run_sync", "run_streamed"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.asyncio
async def test_history_reaches_the_model_and_sessions_stay_apart(
    method: str, tmp_path: Path
) -> None:
    store = journal.open(tmp_path / "store", durability="os")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    cats, dogs = JournalSession("s1", store), JournalSession("s2", store)

    model.script([text_message("San Francisco")])
    r1 = await run(method, agent, "What city is the Golden Gate Bridge in?", session=cats)
    assert r1.final_output == "San Francisco"
    model.script([text_message("I like dogs")])
    await run(method, agent, "I like dogs", session=dogs)
    model.script([text_message("California")])
    r2 = await run(method, agent, "What state is it in?", session=cats)
    assert r2.final_output == "California"
    assert [text_of(i) for i in model.last_input] == [
        "What city is the Golden Gate Bridge in?",
        "San Francisco",
        "What state is it in?",
    ]
    assert [text_of(i) for i in await dogs.get_items()] == ["I like dogs", "I like dogs"]
    store.close()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.asyncio
async def test_session_limits_via_run_config(method: str, tmp_path: Path) -> None:
    store = journal.open(tmp_path / "store", durability="os")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    s = JournalSession("limit", store)
    for i in (1, 2, 3):
        model.script([text_message(f"Reply {i}")])
        await run(method, agent, f"Message {i}", session=s)
    assert len(await s.get_items()) == 6

    def ask(limit: int | None) -> RunConfig:
        return RunConfig(session_settings=SessionSettings(limit=limit))

    model.script([text_message("Reply 4")])
    await run(method, agent, "Message 4", session=s, run_config=ask(2))
    assert [text_of(i) for i in model.last_input] == ["Message 3", "Reply 3", "Message 4"]
    model.script([text_message("Reply 5")])
    await run(method, agent, "Message 5", session=s, run_config=ask(0))
    assert [text_of(i) for i in model.last_input] == ["Message 5"]
    model.script([text_message("Reply 6")])
    await run(method, agent, "Message 6", session=s, run_config=ask(None))
    assert len(model.last_input) == 11
    model.script([text_message("Reply 7")])
    await run(method, agent, "Message 7", session=s, run_config=ask(100))
    assert len(model.last_input) == 13
    store.close()


@pytest.mark.asyncio
async def test_list_input_and_input_callback(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "store", durability="os")
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    s = JournalSession("callback", store)
    history = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    await s.add_items(history)
    new_input = [{"role": "user", "content": "What your name?"}]

    model.script([text_message("appended")])
    await Runner.run(agent, new_input, session=s)  # type: ignore[arg-type]
    assert model.last_input == history + new_input

    def only_user(hist: list[Any], new: list[Any]) -> list[Any]:
        return [i for i in hist if i["role"] == "user"] + new

    model.script([text_message("I'm gpt-4o")])
    await Runner.run(
        agent,
        new_input,  # type: ignore[arg-type]
        session=s,
        run_config=RunConfig(session_input_callback=only_user),
    )
    assert model.last_input == [history[0], new_input[0], new_input[0]]
    store.close()


@pytest.mark.asyncio
async def test_add_items_failure_propagates_in_streamed(tmp_path: Path) -> None:
    s = JournalSession("failing", tmp_path / "store", durability="os")

    async def failing(_items: Any) -> None:
        raise RuntimeError("Simulated session.add_items failure")

    s.add_items = failing  # type: ignore[method-assign]
    model = ScriptedModel()
    model.script([text_message("not reached")])
    result = Runner.run_streamed(Agent(name="test", model=model), "Hello", session=s)

    async def consume() -> None:
        async for _ in result.stream_events():
            pass

    with pytest.raises(RuntimeError, match=r"Simulated session\.add_items failure"):
        await asyncio.wait_for(consume(), timeout=10.0)
    s.close()


@pytest.mark.asyncio
async def test_tool_turns_survive_a_restart_and_a_new_runner_continues(tmp_path: Path) -> None:
    root = tmp_path / "store"
    calls: list[str] = []

    @function_tool
    def lookup(city: str) -> str:
        """Look up the weather of a city."""
        calls.append(city)
        return json.dumps({"city": city, "forecast": "sunny", "detail": "x" * 3000})

    model = ScriptedModel()
    agent = Agent(name="weather", model=model, tools=[lookup])
    async with JournalSession("conv", root) as s:  # default durability: fsync
        for i, city in enumerate(["Paris", "Oslo", "Lima"]):
            model.script(
                [function_call("lookup", json.dumps({"city": city}), f"call-{i}")],
                [text_message(f"{city}: sunny")],
            )
            result = await Runner.run(agent, f"Weather in {city}?", session=s)
            assert result.final_output == f"{city}: sunny"
        before = await s.get_items()
    assert calls == ["Paris", "Oslo", "Lima"]
    kinds = [i.get("type", "message") for i in before]
    assert kinds == ["message", "function_call", "function_call_output", "message"] * 3

    # A new process would do exactly this: a new store object on the same directory.
    model2 = ScriptedModel()
    agent2 = Agent(name="weather", model=model2, tools=[lookup])
    async with JournalSession("conv", root) as s2:
        assert await s2.get_items() == before
        model2.script([text_message("You asked about three cities.")])
        result = await Runner.run(agent2, "What did I ask so far?", session=s2)
        assert result.final_output == "You asked about three cities."
        assert model2.last_input[:-1] == before
        assert text_of(model2.last_input[-1]) == "What did I ask so far?"
        assert len(await s2.get_items()) == len(before) + 2
        # a branch retries the last question with a different answer
        page = await s2.get_items_page(2)
        alt = await s2.branch("conv-alt", before=page.cursors[1])
        model2.script([text_message("Paris, Oslo and Lima.")])
        await Runner.run(agent2, "Which cities did I ask about?", session=alt)
        assert model2.last_input[:-1] == before
        assert [text_of(i) for i in (await alt.get_items(2))] == [
            "Which cities did I ask about?",
            "Paris, Oslo and Lima.",
        ]
        assert len(await s2.get_items()) == len(before) + 2

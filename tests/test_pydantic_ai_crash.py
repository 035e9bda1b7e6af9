"""kill -9 of a process running a pydantic-ai `Agent` on `JournalConversationStore`.

A child process runs turns of one conversation (load, `agent.run` on pydantic-ai's
`FunctionModel`, save) and acknowledges each turn on a pipe only after `save`
returned. The parent kills it with SIGKILL at random moments (between runs, inside a
run, inside a save's commit or sync), starts the next child on the same directory,
and at the end reopens the store and checks: every acknowledged turn is there, whole
and in order; of each child at most the one turn it had not acknowledged is there
too, whole (its request and its response, never one without the other); nothing else
is; the next child always continued from what the last one saved; and `journal
verify` finds nothing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from journal.inspect import verify_store

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs fork and SIGKILL")

KILLS = 16


def run_until_killed(root: str, tag: int, conn: Any) -> None:
    """The child: runs turns "tag:i" until killed, acknowledging each saved one."""
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from journal.integrations.pydantic_ai import JournalConversationStore

    def echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        return ModelResponse(parts=[TextPart(f"echo {last.content}")])  # type: ignore[union-attr]

    agent = Agent(FunctionModel(echo))

    async def main() -> None:
        store = JournalConversationStore(root)  # default durability: fsync
        i = 0
        while True:
            conversation = await store.load("crash") or Conversation(conversation_id="crash")
            seen = len(conversation.messages)
            result = await agent.run(f"{tag}:{i}", conversation=conversation)
            await store.save(result)
            conn.send((tag, i, seen))
            i += 1
            if i % 3 == 0:
                await asyncio.sleep(0.002)  # some kills land between runs

    asyncio.run(main())


def test_acknowledged_turns_survive_sigkill(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["pydantic_ai", "pydantic_ai.models.function", "journal.integrations.pydantic_ai"]
    )
    rng = random.Random(19)
    acked: dict[int, list[tuple[int, int]]] = {}
    for tag in range(KILLS):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=run_until_killed, args=(root, tag, send))
        proc.start()
        send.close()
        got: list[tuple[int, int]] = []
        want = rng.randrange(0, 5)
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            if recv.poll(0.05):
                _tag, i, seen = recv.recv()
                got.append((i, seen))
        time.sleep(rng.random() * 0.02)  # anywhere: in a run, a save, a sync, between runs
        proc.kill()
        proc.join()
        assert proc.exitcode == -9
        while True:  # acknowledgements already in the pipe were sent before the kill
            try:
                _tag, i, seen = recv.recv()
            except EOFError:
                break
            got.append((i, seen))
        recv.close()
        acked[tag] = got
    assert sum(len(v) for v in acked.values()) >= KILLS  # the test did run turns

    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from journal.integrations.pydantic_ai import JournalConversationStore

    async def read() -> list[Any]:
        async with JournalConversationStore(root) as store:
            loaded = await store.load("crash")
            return [] if loaded is None else list(loaded.messages)

    messages = asyncio.run(read())
    assert len(messages) % 2 == 0
    turns: list[tuple[int, int]] = []
    for request, response in zip(messages[::2], messages[1::2], strict=True):
        assert isinstance(request, ModelRequest) and isinstance(response, ModelResponse)
        prompt = request.parts[-1]
        assert isinstance(prompt, UserPromptPart)
        reply = response.parts[0]
        assert isinstance(reply, TextPart) and reply.content == f"echo {prompt.content}"
        tag, i = map(int, str(prompt.content).split(":"))
        turns.append((tag, i))
    position = 0
    for tag in range(KILLS):
        mine = [i for t, i in turns if t == tag]
        done = [i for i, _seen in acked[tag]]
        assert mine[: len(done)] == done  # every acknowledged turn, in order
        assert mine in (done, [*done, len(done)])  # at most the one unacknowledged turn
        for i, seen in acked[tag]:  # each run continued from everything saved before it
            assert seen == 2 * (position + i)
        position += len(mine)
    assert [t for t, _ in turns] == sorted(t for t, _ in turns)  # children in order
    findings = [f for _report, found in verify_store(root) for f in found]
    assert not findings, findings

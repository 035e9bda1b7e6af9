"""Conflicting writers of one conversation: real threads and a second real process.

The revision check and the commit are one step (the conversation lock, and the
checkpoint sequence the journal itself refuses to reuse), so of writers that loaded
the same revision exactly one saves and the others get pydantic-ai's own
`ConversationConflict`; writers that reload and retry lose nothing.

Run as a script (`python test_pydantic_ai_concurrency.py ROOT CID TAG COUNT`) this
file is the second process: it appends COUNT turns, retrying on conflict, and
prints how many conflicts it met.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from journal.integrations.pydantic_ai import JournalConversationStore

T = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def turn(text: str) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(content=text, timestamp=T)]),
        ModelResponse(parts=[TextPart(f"re {text}")], timestamp=T),
    ]


def prompts(conversation: Conversation | None) -> list[str]:
    assert conversation is not None
    return [
        str(part.content)
        for message in conversation.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


async def append_with_retry(store: JournalConversationStore, cid: str, text: str) -> int:
    """Append one turn, reloading after each conflict; returns the conflicts met."""
    conflicts = 0
    while True:
        conversation = await store.load(cid) or Conversation(conversation_id=cid)
        conversation.messages.extend(turn(text))
        try:
            await store.save(conversation)
            return conflicts
        except ConversationConflict:
            conflicts += 1


def test_threads_that_loaded_one_revision_one_saves(tmp_path: Path) -> None:
    root = tmp_path / "s"
    shared = JournalConversationStore(root)
    asyncio.run(shared.save(Conversation(conversation_id="c", messages=turn("base"))))
    n = 8
    barrier = threading.Barrier(n)
    outcomes: list[str] = []
    lock = threading.Lock()

    def writer(i: int) -> None:
        # half share one store object, half have their own (as separate processes do)
        store = shared if i % 2 else JournalConversationStore(root)

        async def go() -> str:
            conversation = await store.load("c")
            assert conversation is not None
            conversation.messages.extend(turn(f"t{i}"))
            barrier.wait()
            try:
                await store.save(conversation)
                return f"saved t{i}"
            except ConversationConflict as exc:
                assert exc.conversation_id == "c"
                return "conflict"

        result = asyncio.run(go())
        with lock:
            outcomes.append(result)
        if store is not shared:
            store.close()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o != "conflict"]
    assert len(winners) == 1 and outcomes.count("conflict") == n - 1
    stored = prompts(asyncio.run(shared.load("c")))
    assert stored == ["base", winners[0].removeprefix("saved ")]
    shared.close()


def test_threads_that_retry_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    JournalConversationStore(root).close()  # the store exists before the writers open it
    n, each = 4, 6
    conflicts: list[int] = []

    def writer(i: int) -> None:
        async def go() -> int:
            async with JournalConversationStore(root, durability="os") as store:
                return sum([await append_with_retry(store, "c", f"{i}:{k}") for k in range(each)])

        conflicts.append(asyncio.run(go()))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def check() -> None:
        async with JournalConversationStore(root) as store:
            got = prompts(await store.load("c"))
            assert sorted(got) == sorted(f"{i}:{k}" for i in range(n) for k in range(each))
            for i in range(n):  # each writer's turns in its own order
                assert [p for p in got if p.startswith(f"{i}:")] == [
                    f"{i}:{k}" for k in range(each)
                ]

    asyncio.run(check())
    assert len(conflicts) == n


def test_a_second_process_conflicts_and_retries(tmp_path: Path) -> None:
    root = tmp_path / "s"

    async def first() -> Conversation:
        async with JournalConversationStore(root) as store:
            await store.save(Conversation(conversation_id="c", messages=turn("base")))
            loaded = await store.load("c")
            assert loaded is not None
            return loaded

    mine = asyncio.run(first())
    # another process saves the conversation after this one loaded it
    subprocess.run([sys.executable, __file__, str(root), "c", "other", "1"], check=True)
    mine.messages.extend(turn("mine"))
    with pytest.raises(ConversationConflict):
        asyncio.run(_save(root, mine))

    # both at once, retrying: nothing lost
    count = 15
    child = subprocess.Popen(
        [sys.executable, __file__, str(root), "c", "child", str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )

    async def mine_loop() -> None:
        async with JournalConversationStore(root) as store:
            for k in range(count):
                await append_with_retry(store, "c", f"parent:{k}")

    asyncio.run(mine_loop())
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out
    got = prompts(asyncio.run(_load(root)))
    assert got[:2] == ["base", "other:0"]
    assert [p for p in got if p.startswith("parent:")] == [f"parent:{k}" for k in range(count)]
    assert [p for p in got if p.startswith("child:")] == [f"child:{k}" for k in range(count)]
    assert len(got) == 2 + 2 * count


def test_a_delete_racing_saves_is_never_undone(tmp_path: Path) -> None:
    """A writer that keeps saving while another deletes: once the delete is done the
    writer's stale copies conflict, and nothing brings the conversation back."""
    root = tmp_path / "s"

    async def main() -> None:
        async with JournalConversationStore(root, durability="os") as store:
            await store.save(Conversation(conversation_id="c", messages=turn("base")))
            stop = asyncio.Event()
            outcomes: list[str] = []

            async def saver() -> None:
                while not stop.is_set():
                    conversation = await store.load("c")
                    if conversation is None:
                        outcomes.append("gone")
                        return
                    conversation.messages.extend(turn("more"))
                    try:
                        await store.save(conversation)
                        outcomes.append("saved")
                    except ConversationConflict:
                        outcomes.append("conflict")

            task = asyncio.ensure_future(saver())
            while "saved" not in outcomes:
                await asyncio.sleep(0.001)
            await store.delete("c")
            await task
            assert outcomes[-1] == "gone"
            assert await store.load("c") is None
            assert store.store.load("c") is None  # the session is gone from disk too

    asyncio.run(main())


async def _save(root: Path, conversation: Conversation) -> None:
    async with JournalConversationStore(root) as store:
        await store.save(conversation)


async def _load(root: Path) -> Conversation | None:
    async with JournalConversationStore(root) as store:
        return await store.load("c")


def _child(root: str, cid: str, tag: str, count: int) -> None:
    async def go() -> int:
        async with JournalConversationStore(root) as store:
            return sum([await append_with_retry(store, cid, f"{tag}:{k}") for k in range(count)])

    print(asyncio.run(go()), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
    os._exit(0)

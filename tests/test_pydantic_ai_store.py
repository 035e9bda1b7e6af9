"""`JournalConversationStore` on disk: what is stored where, reopening, forks as journal
forks, deletes that free sessions, damage reported, and an event loop that never waits."""

from __future__ import annotations

import asyncio
import datetime
import fcntl
import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, InMemoryConversationStore
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.usage import RunUsage

import journal
from journal import Checkpoint, CorruptionError, Event, EventPageRequest, SessionPageRequest
from journal.inspect import verify_store
from journal.integrations.pydantic_ai import ENTRY, META_KEY, JournalConversationStore, locks

T = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def turn(n: int, pad: str = "") -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(content=f"question {n}{pad}", timestamp=T)]),
        ModelResponse(parts=[TextPart(f"answer {n}")], timestamp=T),
    ]


async def grow(store: JournalConversationStore, cid: str, turns: range) -> Conversation:
    conversation = await store.load(cid) or Conversation(conversation_id=cid)
    for n in turns:
        conversation.messages.extend(turn(n))
        await store.save(conversation)
    return conversation


def entry_events(s: journal.Store, sid: str) -> list[dict[str, object]]:
    page = s.event_page(sid, EventPageRequest(limit=1000))
    return [ev.event.msg for ev in page.into_chronological()]


def test_what_a_save_stores_and_reopening(tmp_path: Path) -> None:
    root = tmp_path / "store"

    async def write() -> Conversation:
        async with JournalConversationStore(root) as store:
            conversation = await grow(store, "c", range(3))
            conversation.usage = RunUsage(requests=3, input_tokens=7)
            await store.save(conversation)
            return conversation

    written = asyncio.run(write())
    with journal.open(root) as s:
        cp = s.load("c")
        assert cp is not None and cp.sequence == 3  # one checkpoint per save, from 0
        assert cp.session_context.origin_label == "pydantic-ai"
        assert cp.first_user_message == "question 0"
        assert cp.context == [] and META_KEY in cp.metadata
        events = entry_events(s, "c")
        assert [e["type"] for e in events] == [ENTRY] * 6  # one event per message, once
        assert events[0]["parent_id"] is None and events[1]["parent_id"] == events[0]["id"]
        assert events[1]["parent_at"] == -1  # stored by the same commit as its parent
        assert events[2]["parent_at"] == 2  # an earlier commit: its event sequence
    findings = [f for _report, found in verify_store(str(root)) for f in found]
    assert not findings, findings

    async def read() -> None:
        async with JournalConversationStore(root) as store:
            loaded = await store.load("c")
            assert loaded is not None
            assert loaded.messages == written.messages
            assert loaded.usage == RunUsage(requests=3, input_tokens=7)
            assert loaded.revision == written.revision
            assert [e.id for e in await store.load_entries("c") or []] == [
                str(e["id"]) for e in entry_events(store.store, "c")
            ]

    asyncio.run(read())


def test_a_fork_is_a_journal_fork_that_copies_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            await grow(store, "c", range(4))
            fork = await store.fork("c", at=6, new_conversation_id="f")
            s = store.store
            summary = s.session_summary("f")
            assert summary is not None and summary.parent_session_id == "c"
            assert [c.session_id for c in s.child_sessions("c")] == ["f"]
            assert s.event_page("f", EventPageRequest(limit=10)).latest_sequence == 0
            fork.messages.extend(turn(9))
            await store.save(fork)
            assert len(entry_events(s, "f")) == 2  # only its own new messages
            entries = await store.load_entries("f")
            assert entries is not None and len(entries) == 8
            assert [e.id for e in entries[:6]] == [str(e["id"]) for e in entry_events(s, "c")[:6]]
            # a reader in a new store object (no entry index) follows the same locations
        async with JournalConversationStore(tmp_path / "s") as again:
            loaded = await again.load("f")
            assert loaded is not None and len(loaded.messages) == 8

    asyncio.run(main())


def test_delete_frees_sessions_once_no_fork_needs_them(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            s = store.store
            await grow(store, "alone", range(2))
            await store.delete("alone")
            assert s.load("alone") is None  # the session is gone, bytes and all

            await grow(store, "c", range(2))
            await store.fork("c", new_conversation_id="f")
            await store.delete("c")
            kept = s.load("c")
            assert kept is not None and kept.metadata[META_KEY]["record"] is None
            assert len(entry_events(s, "c")) == 4  # kept for the fork
            assert [r.conversation_id for r in await store.list_conversations()] == ["f"]
            await store.delete("f")
            assert s.load("f") is None and s.load("c") is None  # both freed
            assert s.list_sessions_page(SessionPageRequest(limit=10)).sessions == []

    asyncio.run(main())


def test_a_fork_into_a_kept_id_copies_what_it_must(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            await grow(store, "c", range(2))
            await store.fork("c", new_conversation_id="f")
            await store.delete("c")  # kept: f shares its entries
            await grow(store, "other", range(5, 6))
            again = await store.fork("other", new_conversation_id="c")
            assert len(again.messages) == 2
            # "c" is not a journal child of "other": the two entries are copied into it
            assert len(entry_events(store.store, "c")) == 4 + 2
            assert (await store.load("f")) is not None
            assert len((await store.load("c")).messages) == 2  # type: ignore[union-attr]

    asyncio.run(main())


def test_scope_is_the_session_owner(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            await store.save(Conversation(conversation_id="a", messages=turn(0)), scope="alice")
            await store.save(Conversation(conversation_id="b", messages=turn(0)))
            page = store.store.list_sessions_page(SessionPageRequest(limit=10, owner_id="alice"))
            assert [x.session_id for x in page.sessions] == ["a"]
            assert store.store.load("b").session_context.owner_id == "local"  # type: ignore[union-attr]

    asyncio.run(main())


def test_prefix_and_foreign_sessions(tmp_path: Path) -> None:
    async def main() -> None:
        with journal.open(tmp_path / "s", durability="os") as s:
            s.save(Checkpoint.empty("someone-else"))
            store = JournalConversationStore(s, session_prefix="pai/")
            await store.save(Conversation(conversation_id="c", messages=turn(0)))
            assert s.load("pai/c") is not None
            assert [r.conversation_id for r in await store.list_conversations()] == ["c"]
            plain = JournalConversationStore(s)
            with pytest.raises(UserError, match="not a pydantic-ai conversation"):
                await plain.load("someone-else")
            with pytest.raises(UserError, match="cannot name a journal session"):
                await plain.load("")
            store.close()  # does not close a store it was given
            assert s.load("pai/c") is not None

    asyncio.run(main())


def test_events_appended_by_someone_else_do_not_misplace_entries(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            conversation = await grow(store, "c", range(1))
            real = store.store.append_event
            calls = 0

            def sneaky(*args: object, **kwargs: object) -> object:
                return real(*args, **kwargs)  # type: ignore[arg-type]

            # an event appended between the prediction of the sequences and the commit
            original = store.store.save_with_events

            def save_with_interloper(cp, *a, **k):  # type: ignore[no-untyped-def]
                nonlocal calls
                calls += 1
                if calls == 1:
                    sneaky("c", 1, Event(msg={"type": "warning", "message": "hi"}))
                return original(cp, *a, **k)

            store.store.save_with_events = save_with_interloper  # type: ignore[method-assign]
            conversation.messages.extend(turn(1))
            await store.save(conversation)
            assert calls == 2  # the save, then the record saved again with real locations
            del store.store.save_with_events
        async with JournalConversationStore(tmp_path / "s") as fresh:
            loaded = await fresh.load("c")
            assert loaded is not None and loaded.messages == [*turn(0), *turn(1)]

    asyncio.run(main())


def test_damaged_entry_is_reported_not_skipped(tmp_path: Path) -> None:
    root = tmp_path / "s"

    async def write() -> None:
        async with JournalConversationStore(root, dictionary=False) as store:
            await grow(store, "c", range(3))

    asyncio.run(write())
    with journal.open(root) as s:
        log_dir = Path(s.session_dir("c")) / "log"
    segment = max(log_dir.iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(segment.read_bytes())
    at = data.rfind(b"question 1")  # in the entry's event (the first is a checkpoint's title)
    assert at > 0
    data[at] ^= 0x20
    segment.write_bytes(bytes(data))

    async def read() -> None:
        async with JournalConversationStore(root) as store:
            with pytest.raises(CorruptionError):
                await store.load("c")

    asyncio.run(read())


def test_the_event_loop_runs_while_a_save_waits_for_the_lock(tmp_path: Path) -> None:
    """A save blocked on the conversation lock (held by another open file description,
    as another process would) waits in a worker thread: the loop keeps running."""

    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            conversation = await grow(store, "c", range(1))
            fd = os.open(store.store.session_dir("c"), os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            released = threading.Event()
            ticked = threading.Event()

            def watchdog() -> None:  # releases the lock in any case, so a failure cannot hang
                ticked.wait(10)
                released.set()
                os.close(fd)

            threading.Thread(target=watchdog, daemon=True).start()
            conversation.messages.extend(turn(1))
            save = asyncio.ensure_future(store.save(conversation))
            for _ in range(20):
                await asyncio.sleep(0)  # the loop is free: this coroutine runs
            assert not save.done() and not released.is_set()
            ticked.set()  # only reachable while the save is still waiting
            await save
            assert released.is_set()
            assert len((await store.load("c")).messages) == 4  # type: ignore[union-attr]

    asyncio.run(main())


def test_two_store_objects_conflict_like_two_processes(tmp_path: Path) -> None:
    async def main() -> None:
        a = JournalConversationStore(tmp_path / "s", durability="os")
        b = JournalConversationStore(tmp_path / "s", durability="os")
        try:
            await grow(a, "c", range(1))
            mine = await a.load("c")
            theirs = await b.load("c")
            assert mine is not None and theirs is not None
            theirs.messages.extend(turn(1))
            await b.save(theirs)
            mine.messages.extend(turn(2))
            with pytest.raises(ConversationConflict):
                await a.save(mine)
        finally:
            a.close()
            b.close()

    asyncio.run(main())


def test_same_answers_as_the_in_memory_store_for_a_long_history(tmp_path: Path) -> None:
    """Past the first page of events (64) and through pages that grow: limits at the edges."""

    async def main() -> None:
        memory = InMemoryConversationStore()
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            for backend in (memory, store):
                conversation = Conversation(conversation_id="c")
                for n in range(150):
                    conversation.messages.extend(turn(n))
                    if n % 7 == 0:
                        await backend.save(conversation)
                await backend.save(conversation)
            for limit in (None, 1, 63, 64, 65, 200, 299, 300, 301):
                got = await store.load("c", limit=limit)
                want = await memory.load("c", limit=limit)
                assert got is not None and want is not None
                assert got.messages == want.messages, limit

    asyncio.run(main())


def test_sweep_deletes_what_an_interrupted_delete_left(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            await grow(store, "c", range(2))
            await store.fork("c", new_conversation_id="f")
            await store.delete("c")  # kept for f
            # f's session deleted as a crash after its delete would leave it: c not collected
            store.store.delete_sessions(["f"])
            assert store.store.load("c") is not None
            assert await store.sweep() == 1
            assert store.store.load("c") is None
            assert await store.sweep() == 0

    asyncio.run(main())


def test_a_cancelled_save_that_started_still_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = threading.Event()
    enter = locks.ConversationLock.__enter__

    def noting(self: locks.ConversationLock) -> bool:
        entered.set()  # the write has started: its worker thread takes the lock
        return enter(self)

    monkeypatch.setattr(locks.ConversationLock, "__enter__", noting)

    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", durability="os") as store:
            conversation = await grow(store, "c", range(1))
            fd = os.open(store.store.session_dir("c"), os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)  # the save's worker thread waits here
            conversation.messages.extend(turn(1))
            entered.clear()
            save = asyncio.ensure_future(store.save(conversation))
            assert await asyncio.to_thread(entered.wait, 30)
            save.cancel()
            with pytest.raises(asyncio.CancelledError):
                await save
            os.close(fd)  # the worker goes on: the commit it started is made
            for _ in range(6000):
                loaded = await store.load("c")
                if loaded is not None and len(loaded.messages) == 4:
                    break
                await asyncio.sleep(0.005)
            assert loaded is not None and loaded.messages == [*turn(0), *turn(1)]

    asyncio.run(main())

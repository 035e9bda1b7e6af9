"""The SDK's `OpenAIResponsesCompactionSession` over a `JournalSession` (no network).

What is real: the SDK's Runner, its compaction session (the decision hook, the
snapshot/suffix matching, the manual and automatic paths) and the `openai`
client building the `responses.compact` request and parsing its reply. What is
stood in: the model (tests/openai_agents_fake_model.py, a scripted `Model`) and
the compact endpoint's server (tests/openai_agents_compact_stub.py, an
`httpx.MockTransport` answering with the user messages and one compaction item).

Checked: the same conversation on `SQLiteSession` (the SDK's reference store,
whose replacement is one SQL transaction) and on `JournalSession` gives the same
history after every turn and the same compact requests; a replacement is one
record (`agents.replace`, or one checkpoint save for the whole-history path);
a stale snapshot replaces nothing; and a writer killed with SIGKILL during
repeated replacements leaves the old items or the new, never a mix.
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

pytest.importorskip("agents")

from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
from agents.memory import OpenAIResponsesCompactionSession
from openai_agents_compact_stub import (
    BASE,
    CompactServer,
    base_items,
    compact_until_killed,
    generation,
    stand_in_client,
)
from openai_agents_fake_model import ScriptedModel, text_message

import journal
from journal import Event
from journal.inspect import verify_store
from journal.integrations.openai_agents import REPLACE, JournalSession, drop_caches

os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-used")
set_tracing_disabled(True)


def two_candidates(ctx: dict[str, Any]) -> bool:
    return len(ctx["compaction_candidate_items"]) >= 2


async def conversation(
    under: Any, mode: str, turns: int = 6
) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """Run `turns` Runner turns through a compaction session over `under`; return
    the stored history after each turn and the compact requests the server got."""
    server = CompactServer()
    session = OpenAIResponsesCompactionSession(
        "c",
        under,
        client=stand_in_client(server),
        compaction_mode=mode,  # type: ignore[arg-type]
        should_trigger_compaction=two_candidates,
    )
    model = ScriptedModel()
    agent = Agent(name="assistant", model=model)
    history = []
    for t in range(turns):
        model.script([text_message(f"reply {t}")])
        await Runner.run(agent, f"question {t}", session=session)
        history.append(await under.get_items(limit=1000))
    return history, server.requests


def event_types(store: journal.Store, sid: str) -> list[str]:
    return [e.event.msg["type"] for e in store.events_after(sid, 0, 10_000)]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mode", "settings"),
    [("auto", None), ("input", None), ("input", {"limit": 2})],
    ids=["auto-chain", "input", "input-partial-suffix"],
)
async def test_same_history_as_sqlite_session(
    tmp_path: Path, mode: str, settings: dict[str, int] | None
) -> None:
    sqlite = SQLiteSession("c", str(tmp_path / "ref.db"), session_settings=settings)
    ours = JournalSession("c", tmp_path / "j", session_settings=settings)
    want = await conversation(sqlite, mode)
    got = await conversation(ours, mode)
    assert got == want
    history, requests = got
    assert len(requests) >= 2  # compaction did run, more than once
    assert any(item.get("type") == "compaction" for item in history[-1])
    types = event_types(ours.store, "c")
    # every compaction is one replacement record; nothing is cleared and re-added
    assert types.count(REPLACE) == len(requests)
    assert "agents.clear" not in types
    drop_caches()  # a cold read (as a new process) sees the same
    assert await ours.get_items(limit=1000) == history[-1]
    sqlite.close()
    ours.close()


@pytest.mark.asyncio
async def test_partial_suffix_keeps_older_items(tmp_path: Path) -> None:
    """With a retrieval limit the model sees a suffix: only that suffix is compacted."""
    ours = JournalSession("c", tmp_path / "j", session_settings={"limit": 2})
    history, requests = await conversation(ours, "input")
    final = history[-1]
    # each compaction replaced only the turns the model saw; earlier summaries stay
    summaries = [i["encrypted_content"] for i in final if i.get("type") == "compaction"]
    assert summaries == ["summary 1 of 4 items", "summary 2 of 4 items", "summary 3 of 4 items"]
    assert [len(r["input"]) for r in requests] == [4, 4, 4]
    replaces = [
        e.event.msg
        for e in ours.store.events_after("c", 0, 10_000)
        if e.event.msg["type"] == REPLACE
    ]
    assert [len(r["drop"]) for r in replaces] == [4, 4, 4]
    assert [len(r["items"]) for r in replaces] == [3, 3, 3]
    ours.close()


@pytest.mark.asyncio
async def test_manual_compaction_is_one_commit_not_clear_and_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_compaction()` without a run replaces the whole history through
    `_atomic_replace_items`: one checkpoint save, never the SDK's clear-then-add."""
    ours = JournalSession("c", tmp_path / "j")
    await ours.add_items([{"role": "user", "content": f"q{i}"} for i in range(3)])
    await ours.add_items([{"role": "assistant", "content": "a"}])
    server = CompactServer()
    session = OpenAIResponsesCompactionSession(
        "c", ours, client=stand_in_client(server), compaction_mode="input"
    )

    async def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the fallback clear/add path was taken")

    monkeypatch.setattr(JournalSession, "clear_session", refuse)
    before = ours.store.load("c")
    assert before is not None
    seq_before = event_types(ours.store, "c")
    await session.run_compaction({"force": True})
    items = await ours.get_items()
    assert [i.get("type") for i in items] == ["message"] * 3 + ["compaction"]
    assert [i["content"][0]["text"] for i in items[:3]] == ["q0", "q1", "q2"]
    after = ours.store.load("c")
    assert after is not None and after.sequence == before.sequence + 1  # one checkpoint save
    assert event_types(ours.store, "c") == [*seq_before, "agents.clear", "agents.items"]
    assert len(server.requests[0]["input"]) == 4
    drop_caches()
    assert await ours.get_items() == items
    ours.close()


@pytest.mark.asyncio
async def test_stale_snapshot_replaces_nothing(tmp_path: Path) -> None:
    root = tmp_path / "j"
    a = JournalSession("c", root)
    await a.add_items([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    snap = await a._get_compaction_snapshot(10)
    assert snap is not None and snap.complete and len(snap.items) == 2
    # another process (its own store object) adds an item meanwhile
    b = JournalSession("c", journal.Store(root))
    await b.add_items([{"role": "user", "content": "later"}])
    assert not await snap.replace_suffix(0, [{"type": "compaction", "encrypted_content": "x"}])
    assert [i["content"] for i in await a.get_items()] == ["q", "a", "later"]
    assert REPLACE not in event_types(a.store, "c")
    # an event of another kind does not make a snapshot stale: its items are the same
    snap = await a._get_compaction_snapshot(10)
    assert snap is not None
    b.store.append_event("c", 1, Event(msg={"type": "note"}))
    assert await snap.replace_suffix(2, [{"type": "compaction", "encrypted_content": "x"}])
    assert [i.get("content", i.get("type")) for i in await a.get_items()] == [
        "q",
        "a",
        "compaction",
    ]
    assert [i.get("content", i.get("type")) for i in await b.get_items()] == [
        "q",
        "a",
        "compaction",
    ]
    b.store.close()
    a.close()


@pytest.mark.asyncio
async def test_snapshot_beyond_the_cache_and_pages_after_replacement(tmp_path: Path) -> None:
    s = JournalSession("c", tmp_path / "j", cache_bytes=0)  # every read goes to the log
    for i in range(20):
        await s.add_items(
            [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
        )
    page = await s.get_items_page(5)
    old_cursor = page.cursors[0]  # the newest item, "a19", which the replacement drops
    snap = await s._get_compaction_snapshot(4)
    assert snap is not None and not snap.complete
    assert [i["content"] for i in snap.items] == ["q18", "a18", "q19", "a19"]
    out = [{"role": "user", "content": "q19"}, {"type": "compaction", "encrypted_content": "s"}]
    assert await snap.replace_suffix(2, out)
    items = await s.get_items()
    assert len(items) == 38 + 2
    assert [i.get("content") for i in items[-4:]] == ["q18", "a18", "q19", None]
    # a cursor issued before the replacement pages what is older than its item,
    # less what the replacement dropped ("q19")
    older = await s.get_items_page(3, before=old_cursor)
    assert [i["content"] for i in older.items] == ["a18", "q18", "a17"]
    drop_caches()
    assert await s.get_items() == items
    older = await s.get_items_page(3, before=old_cursor)
    assert [i["content"] for i in older.items] == ["a18", "q18", "a17"]
    s.close()


@pytest.mark.asyncio
async def test_replacing_on_a_branch_leaves_the_parent(tmp_path: Path) -> None:
    parent = JournalSession("p", tmp_path / "j")
    await parent.add_items([{"role": "user", "content": f"q{i}"} for i in range(4)])
    child = await parent.branch("child")
    snap = await child._get_compaction_snapshot(3)
    assert snap is not None and not snap.complete
    assert await snap.replace_suffix(1, [{"type": "compaction", "encrypted_content": "s"}])
    assert [i.get("content") for i in await child.get_items()] == ["q0", "q1", None]
    assert [i["content"] for i in await parent.get_items()] == ["q0", "q1", "q2", "q3"]
    assert await child._atomic_replace_items([{"role": "user", "content": "fresh"}])
    assert [i["content"] for i in await child.get_items()] == ["fresh"]
    assert [i["content"] for i in await parent.get_items()] == ["q0", "q1", "q2", "q3"]
    parent.close()


@pytest.mark.asyncio
async def test_hooks_on_missing_and_subclassed_sessions(tmp_path: Path) -> None:
    s = JournalSession("none", tmp_path / "j")
    snap = await s._get_compaction_snapshot(5)
    assert snap is not None and snap.items == [] and snap.complete
    assert not await snap.replace_suffix(0, [{"role": "user", "content": "x"}])
    assert s.store.load("none") is None
    assert await s._atomic_replace_items([{"role": "user", "content": "x"}])  # creates it
    assert [i["content"] for i in await s.get_items()] == ["x"]
    with pytest.raises(journal.InvalidInputError):
        await s._get_compaction_snapshot(0)

    class Transforming(JournalSession):
        pass

    t = Transforming("t", s.store)
    # a subclass may transform items: it gets the SDK's fallbacks, as SQLiteSession's do
    assert await t._get_compaction_snapshot(5) is None
    assert await t._atomic_replace_items([]) is False
    s.close()


# --------------------------------------------------------------------- crash

KILLS = 30


def _state(items: list[dict[str, Any]]) -> int:
    """The generation the items are, checking they are exactly one generation."""
    assert items[:BASE] == base_items(), "the base items changed"
    rest = items[BASE:]
    assert rest, "no generation at all"
    g = int(rest[0]["content"].split(":")[0][1:])
    assert rest == generation(g), f"a mix of generations: {[i['content'] for i in rest]}"
    return g


@pytest.mark.skipif(os.name != "posix", reason="needs fork and SIGKILL")
def test_sigkill_during_replacements_leaves_old_or_new(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        [
            "agents.memory.session_settings",
            "journal.integrations.openai_agents",
            "openai_agents_compact_stub",
        ]
    )
    rng = random.Random(4321)

    async def read() -> list[dict[str, Any]]:
        drop_caches()
        async with JournalSession("crash", root) as s:
            return await s.get_items()

    acked = 0
    replaced = 0
    for _ in range(KILLS):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=compact_until_killed, args=(root, "crash", send))
        proc.start()
        send.close()
        got: list[int] = []
        want = rng.randrange(0, 5)
        deadline = time.monotonic() + 20
        while len(got) < want and time.monotonic() < deadline:
            if recv.poll(0.05):
                got.append(recv.recv())
        time.sleep(rng.random() * 0.01)  # land the kill anywhere, also inside a write
        proc.kill()
        proc.join()
        assert proc.exitcode == -9
        while True:
            try:
                got.append(recv.recv())
            except EOFError:
                break
        recv.close()
        replaced += len(got)
        items = asyncio.run(read())
        if not items:  # killed before its very first add committed
            assert acked == 0 and not got
            continue
        g = _state(items)
        if got:
            acked = got[-1]
        # the acknowledged generation, or the one in flight when the kill came
        assert g in (acked, acked + 1), (g, acked)
        acked = g
    assert replaced > KILLS  # the test did replace things, both ways
    findings = [f for _report, found in verify_store(root) for f in found]
    assert not findings, findings

"""`JournalSession.clear_session`/`pop_item` declare what they hide erasable; with
`free=True` (or any later compaction) its bytes go back, while the conversation,
its later items and its branches read as before."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import journal
from journal import EventPageRequest
from journal.compact import compact_session
from journal.erase import is_erased
from journal.integrations.openai_agents import JournalSession


def turn(i: int) -> list[Any]:
    out = random.Random(i).randbytes(2500).hex()
    return [
        {"role": "user", "content": f"question {i}"},
        {"type": "function_call", "call_id": f"c{i}", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{i}", "output": out},
        {"role": "assistant", "content": f"answer {i}"},
    ]


def log_bytes(store: journal.Store, sid: str) -> int:
    log = os.path.join(store.session_dir(sid), "log")
    return sum(os.stat(os.path.join(log, n)).st_blocks * 512 for n in os.listdir(log))


def test_clear_session_frees_but_branches_keep_what_they_read(tmp_path: Path) -> None:
    async def run() -> None:
        store = journal.open(tmp_path / "s")
        sess = JournalSession("chat", store)
        for i in range(60):
            await sess.add_items(turn(i))
        branch = await sess.branch("chat-b")  # at the newest item: it reads events 1..60
        branch_items = await branch.get_items()
        assert len(branch_items) == 240
        for i in range(60, 120):
            await sess.add_items(turn(i))
        du_before = log_bytes(store, "chat")
        await sess.clear_session(free=True)
        du_after = log_bytes(store, "chat")
        assert await sess.get_items() == []
        evs = store.event_page("chat", EventPageRequest(limit=1000)).events
        erased = [e.sequence for e in evs if is_erased(e)]
        latest_branch_read = 60  # the branch reads the first 60 add_items events
        assert erased and min(erased) > latest_branch_read
        assert du_after < du_before * 0.7, (du_before, du_after)
        fresh = JournalSession("chat-b", journal.open(tmp_path / "s"))
        assert await fresh.get_items() == branch_items  # its ancestor's bytes it reads stay
        assert await branch.get_items() == branch_items
        await sess.add_items(turn(200))
        assert await sess.get_items() == turn(200)
        fresh.store.close()
        store.close()

    asyncio.run(run())


def test_pop_item_frees_a_batch_whose_items_are_all_gone(tmp_path: Path) -> None:
    async def run() -> None:
        store = journal.open(tmp_path / "s")
        sess = JournalSession("chat", store)
        for i in range(30):
            await sess.add_items(turn(i))
        expected = [item for i in range(30) for item in turn(i)]
        for _ in range(4 * 10 + 2):  # ten whole batches, and two items of the next
            await sess.pop_item(free=True)
            expected.pop()
        assert await sess.get_items() == expected
        evs = store.event_page("chat", EventPageRequest(limit=1000)).events
        assert sorted(e.sequence for e in evs if is_erased(e)) == list(range(21, 31))
        # a later compaction (the retention job's) finds nothing more to do
        report = compact_session(store.session_dir("chat"), "chat")
        assert report.erased_events == []
        fresh = JournalSession("chat", journal.open(tmp_path / "s"))
        assert await fresh.get_items() == expected
        assert await fresh.pop_item() == expected[-1]
        fresh.store.close()
        store.close()

    asyncio.run(run())

"""The viewer's conversation of an Agents SDK session after a compaction: the
`agents.replace` record's items are shown, after a note of what they replace."""

from __future__ import annotations

import asyncio
from pathlib import Path

import journal
from journal.integrations.openai_agents import JournalSession
from journal.viewer.data import Data


def test_a_compacted_conversation_shows_the_replacement(tmp_path: Path) -> None:
    root = tmp_path / "store"

    async def write() -> None:
        s = JournalSession("conv", str(root))
        await s.add_items([{"role": "user", "content": "first question"}])
        await s.add_items([{"role": "assistant", "content": "first answer"}])
        s.close()

    asyncio.run(write())
    with journal.open(root) as store:
        newest = store.event_page("conv", journal.EventPageRequest(limit=1)).events[0]
        # A compaction's record (what OpenAIResponsesCompactionSession commits through
        # the session's hooks): drop the two items, put one summary in their place.
        store.append_event(
            "conv",
            newest.recorded_at_ms + 1,
            journal.Event(
                msg={
                    "type": "agents.replace",
                    "drop": [[0, newest.sequence - 1, 0], [0, newest.sequence, 0]],
                    "items": [{"role": "assistant", "content": "summary of the talk"}],
                }
            ),
        )
    data = Data(str(root))
    try:
        convo = data.conversation("conv", source="items")
    finally:
        data.store.close()
    texts = [m.get("text") or str(m) for m in convo["messages"]]
    joined = "\n".join(texts)
    assert "agents.replace: 2 item(s) replaced by" in joined
    assert "summary of the talk" in joined
    assert joined.index("first question") < joined.index("summary of the talk")

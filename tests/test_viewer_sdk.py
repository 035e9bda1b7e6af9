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


def test_an_imported_claude_code_session_pairs_tool_use_with_its_result(tmp_path: Path) -> None:
    import json

    from journal.transcripts import import_transcripts

    log = tmp_path / "0a6afc57-2f31-4cb4-8ff0-01247f50c64c.jsonl"
    lines = [
        {"role": "user", "content": "Why is CI red?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ci.yml"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A missing libssl."}]},
    ]
    with log.open("w") as f:
        for n, message in enumerate(lines):
            entry = {
                "type": message["role"],
                "uuid": f"u{n}",
                "parentUuid": f"u{n - 1}" if n else None,
                "timestamp": f"2026-01-20T11:00:0{n}.000Z",
                "message": message,
            }
            f.write(json.dumps(entry) + "\n")
    root = tmp_path / "store"
    with journal.open(root) as store:
        report = import_transcripts(store, [str(log)])
        assert report.findings == []
    data = Data(str(root))
    try:
        convo = data.conversation("claude-code/0a6afc57-2f31-4cb4-8ff0-01247f50c64c")
    finally:
        data.store.close()
    shown = [m for m in convo["messages"] if not m["paired"]]
    assert [m["role"] for m in shown] == ["user", "assistant", "assistant"]
    assert shown[1]["text"] == "Let me look."
    [call] = shown[1]["calls"]
    assert call["name"] == "Bash" and call["result"]["text"] == "ci.yml"

"""journal import-transcripts, the library: transcripts built from the documented
shapes (docs/import-transcripts.md) become sessions, forks, items and events;
re-imports write only what is new; damaged lines are reported and kept."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

import journal
from journal import TranscriptPageRequest
from journal.transcripts import import_transcripts

SID = "0a6afc57-2f31-4cb4-8ff0-01247f50c64c"
THREAD = "019a0000-0000-7000-8000-000000000001"
CHILD = "019a0000-0000-7000-8000-000000000002"


# ----------------------------------------------------------------- builders
def ts(second: int) -> str:
    return f"2026-01-20T11:{second // 60:02d}:{second % 60:02d}.000Z"


def ms(second: int) -> int:
    """Unix milliseconds of `ts(second)`."""
    at = datetime.datetime(2026, 1, 20, 11, second // 60, second % 60, tzinfo=datetime.timezone.utc)
    return int(at.timestamp() * 1000)


def cc(kind: str, uuid: str, parent: str | None, second: int, **extra: Any) -> dict[str, Any]:
    """A Claude Code line: the fields every user/assistant line carries."""
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/me/proj",
        "sessionId": SID,
        "version": "2.1.12",
        "gitBranch": "main",
        "type": kind,
        "uuid": uuid,
        "timestamp": ts(second),
        **extra,
    }


def user(uuid: str, parent: str | None, second: int, content: Any, **extra: Any) -> dict[str, Any]:
    return cc("user", uuid, parent, second, message={"role": "user", "content": content}, **extra)


def assistant(
    uuid: str, parent: str, second: int, msg_id: str, block: dict[str, Any]
) -> dict[str, Any]:
    message = {
        "model": "claude-opus-4-5-20251101",
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "content": [block],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    return cc("assistant", uuid, parent, second, message=message, requestId="req_1")


def claude_lines() -> list[dict[str, Any]]:
    """A session with parallel tool calls, an error result, a Task subagent, a
    compaction and a multi-part prompt."""
    return [
        {
            "type": "file-history-snapshot",
            "messageId": "u1",
            "snapshot": {"trackedFileBackups": {}},
        },
        user("u1", None, 1, "Why is CI red?"),
        assistant(
            "a1",
            "u1",
            2,
            "msg_1",
            {"type": "thinking", "thinking": "look at logs", "signature": "s"},
        ),
        assistant("a2", "a1", 3, "msg_1", {"type": "text", "text": "Let me look."}),
        assistant(
            "a3",
            "a2",
            4,
            "msg_1",
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "Bash",
                "input": {"command": "make test"},
            },
        ),
        assistant(
            "a4",
            "a3",
            4,
            "msg_1",
            {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"file_path": "ci.yml"}},
        ),
        user(
            "r1",
            "a3",
            5,
            [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "1 failed"}],
            toolUseResult={"stdout": "1 failed"},
        ),
        user(
            "r2",
            "a4",
            5,
            [
                {
                    "tool_use_id": "toolu_2",
                    "type": "tool_result",
                    "content": "no such file",
                    "is_error": True,
                }
            ],
        ),
        assistant(
            "a5",
            "r2",
            6,
            "msg_2",
            {
                "type": "tool_use",
                "id": "toolu_3",
                "name": "Task",
                "input": {"prompt": "find libssl", "subagent_type": "general-purpose"},
            },
        ),
        user(
            "r3",
            "a5",
            9,
            [
                {
                    "tool_use_id": "toolu_3",
                    "type": "tool_result",
                    "content": [{"type": "text", "text": "libssl is missing"}],
                }
            ],
            toolUseResult={"agentId": "a1b2c3d"},
        ),
        assistant("a6", "r3", 10, "msg_3", {"type": "text", "text": "A missing libssl."}),
        cc(
            "system",
            "b1",
            None,
            11,
            subtype="compact_boundary",
            content="Conversation compacted",
            logicalParentUuid="a6",
            compactMetadata={"trigger": "manual", "preTokens": 1234},
        ),
        user(
            "c1",
            "b1",
            11,
            "This session is being continued from a previous conversation...",
            isCompactSummary=True,
        ),
        user(
            "u2",
            "c1",
            12,
            [
                {"type": "text", "text": "Fix it"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        ),
        assistant("a7", "u2", 13, "msg_4", {"type": "text", "text": "Done."}),
        {"type": "summary", "summary": "Fixing CI", "leafUuid": "a7"},
    ]


def subagent_lines() -> list[dict[str, Any]]:
    lines = [
        user("s1", None, 7, "find libssl", isSidechain=True, agentId="a1b2c3d"),
        assistant("s2", "s1", 8, "msg_s", {"type": "text", "text": "libssl is missing"}),
    ]
    for line in lines:
        line["isSidechain"] = True
        line["agentId"] = "a1b2c3d"
    return lines


def write_jsonl(path: Path, lines: list[Any], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for line in lines:
            f.write(json.dumps(line).encode() + b"\n")
        f.write(tail)
    return path


def claude_project(base: Path) -> Path:
    """~/.claude/projects/<project>/ with one session and its subagent."""
    project = base / "projects" / "-home-me-proj"
    write_jsonl(project / f"{SID}.jsonl", claude_lines())
    agent = write_jsonl(project / SID / "subagents" / "agent-a1b2c3d.jsonl", subagent_lines())
    meta = {"agentType": "general-purpose", "description": "find libssl", "toolUseId": "toolu_3"}
    agent.with_name("agent-a1b2c3d.meta.json").write_text(json.dumps(meta))
    return base / "projects"


def rl(second: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A Codex rollout line (`RolloutLine`: timestamp + the tagged `RolloutItem`)."""
    return {"timestamp": ts(second), "type": kind, "payload": payload}


def codex_lines() -> list[dict[str, Any]]:
    return [
        rl(
            1,
            "session_meta",
            {
                "id": THREAD,
                "timestamp": ts(1),
                "cwd": "/home/me/proj",
                "originator": "codex_cli_rs",
                "cli_version": "0.128.0",
                "source": "cli",
                "model_provider": "openai",
            },
        ),
        rl(
            1,
            "turn_context",
            {"cwd": "/home/me/proj", "model": "gpt-5", "approval_policy": "on-request"},
        ),
        rl(
            2,
            "event_msg",
            {"type": "task_started", "turn_id": "t1", "model_context_window": 272000},
        ),
        rl(
            2,
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Why is CI red?"}],
            },
        ),
        rl(2, "event_msg", {"type": "user_message", "message": "Why is CI red?", "images": []}),
        rl(
            3,
            "response_item",
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "check logs"}],
                "encrypted_content": "gAAA",
            },
        ),
        rl(
            4,
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": '{"command":["make","test"]}',
                "call_id": "call_1",
            },
        ),
        rl(
            5,
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": '{"output":"1 failed","metadata":{"exit_code":1}}',
            },
        ),
        rl(
            5,
            "response_item",
            {
                "type": "function_call",
                "name": "spawn_agent",
                "call_id": "call_3",
                "arguments": '{"message":"look at ci.yml"}',
            },
        ),
        rl(
            6,
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_3",
                "output": '{"agent_id":"' + CHILD + '"}',
            },
        ),
        rl(
            6,
            "response_item",
            {
                "type": "custom_tool_call",
                "name": "apply_patch",
                "call_id": "call_2",
                "input": "*** Begin Patch\n*** End Patch",
            },
        ),
        rl(
            6,
            "response_item",
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Success"},
        ),
        rl(
            7,
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "A missing libssl."}],
            },
        ),
        rl(7, "event_msg", {"type": "agent_message", "message": "A missing libssl."}),
        rl(
            7,
            "event_msg",
            {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 10}}},
        ),
        rl(
            8,
            "event_msg",
            {"type": "task_complete", "turn_id": "t1", "last_agent_message": "A missing libssl."},
        ),
        rl(
            9,
            "compacted",
            {
                "message": "Summary: CI fails on libssl.",
                "replacement_history": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "Summary: CI fails on libssl."}],
                    }
                ],
            },
        ),
        rl(9, "event_msg", {"type": "context_compacted"}),
    ]


def codex_child_lines() -> list[dict[str, Any]]:
    source = {
        "subagent": {
            "thread_spawn": {
                "parent_thread_id": THREAD,
                "depth": 1,
                "agent_nickname": "Turing",
                "agent_role": "worker",
            }
        }
    }
    return [
        rl(
            5,
            "session_meta",
            {"id": CHILD, "timestamp": ts(5), "cwd": "/home/me/proj", "source": source},
        ),
        rl(
            5,
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "look at ci.yml"}],
            },
        ),
    ]


def codex_home(base: Path) -> Path:
    day = base / "sessions" / "2026" / "01" / "20"
    write_jsonl(day / f"rollout-2026-01-20T11-00-01-{THREAD}.jsonl", codex_lines())
    write_jsonl(day / f"rollout-2026-01-20T11-00-05-{CHILD}.jsonl", codex_child_lines())
    return base / "sessions"


# ------------------------------------------------------------------ helpers
def events(store: journal.Store, sid: str) -> list[dict[str, Any]]:
    return [e.event.msg for e in store.events_after(sid, 0, 10_000)]


def items(store: journal.Store, sid: str) -> list[Any]:
    page = store.transcript_page(sid, TranscriptPageRequest(max_batches=10_000))
    return [item for _, item in page.items_chronological()]


def item_at(store: journal.Store, sid: str, target: dict[str, int]) -> Any:
    """The transcript item an event's `message_target` names."""
    seq = target["checkpoint_sequence"]
    page = store.transcript_page(sid, TranscriptPageRequest(before_sequence=seq + 1, max_batches=1))
    assert page.batches[0].sequence == seq
    return page.batches[0].items[target["batch_item_count"] - 1]


def kinds(evs: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in evs]


def dump(store: journal.Store, sid: str, every: int = 1) -> dict[str, Any]:
    """Everything a session holds that an import decides (its checkpoints: every
    `every`-th, and the last)."""
    summary = store.session_summary(sid)
    assert summary is not None
    cp = store.load(sid)
    assert cp is not None
    return {
        "sequence": summary.sequence,
        "parent": (summary.parent_session_id, summary.parent_sequence),
        "events": [
            (e.sequence, e.recorded_at_ms, e.event.msg) for e in store.events_after(sid, 0, 10_000)
        ],
        "items": items(store, sid),
        "checkpoints": [
            store.checkpoint_at(sid, k)
            for k in [*range(0, summary.sequence, every), summary.sequence]
        ],
        "context": cp.context,
        "epoch": cp.context_epoch,
        "metadata": cp.metadata,
    }


def logical(store: journal.Store, sid: str) -> dict[str, Any]:
    """What a session says, whichever commits its lines were written in: its events
    (each `message_target` replaced by the item it names), items, last checkpoint."""
    evs = []
    for e in store.events_after(sid, 0, 100_000):
        msg = dict(e.event.msg)
        if "message_target" in msg:
            msg["message_target"] = item_at(store, sid, msg["message_target"])
        evs.append((e.sequence, e.recorded_at_ms, msg))
    summary = store.session_summary(sid)
    assert summary is not None
    return {
        "parent": (summary.parent_session_id, summary.parent_sequence),
        "events": evs,
        "items": items(store, sid),
        "last": store.load(sid),
    }


def sessions(store: journal.Store) -> dict[str, tuple[str | None, int | None, int]]:
    page = store.list_sessions_page(journal.SessionPageRequest(limit=1000))
    return {
        s.session_id: (s.parent_session_id, s.parent_sequence, s.sequence) for s in page.sessions
    }


@pytest.fixture
def store(tmp_path: Path) -> journal.Store:
    s = journal.open(tmp_path / "store")
    yield s
    s.close()


CC = f"claude-code/{SID}"


# -------------------------------------------------------------------- tests
def test_a_claude_code_session_becomes_items_events_and_a_subagent_fork(
    tmp_path: Path, store: journal.Store
) -> None:
    report = import_transcripts(store, [claude_project(tmp_path / "claude")])
    assert report.findings == [] and not report.refused
    assert sessions(store) == {
        CC: (None, None, 15),  # one commit per line
        f"{CC}/agent-a1b2c3d": (CC, 8, 2),  # forked at the line of the Task call toolu_3
    }
    lines = claude_lines()
    messages = [line["message"] for line in lines if line.get("type") in ("user", "assistant")]
    assert items(store, CC) == messages  # the messages as they are, in order
    evs = events(store, CC)
    begins = {e["call_id"]: e for e in evs if e["type"] == "tool_call_begin"}
    ends = {e["call_id"]: e for e in evs if e["type"] == "tool_call_end"}
    assert set(begins) == set(ends) == {"toolu_1", "toolu_2", "toolu_3"}  # every call paired
    assert ends["toolu_2"]["is_error"] is True and ends["toolu_1"]["is_error"] is False
    assert ends["toolu_2"]["name"] == "Read" and ends["toolu_3"]["output"] == [
        {"type": "text", "text": "libssl is missing"}
    ]
    assert begins["toolu_1"]["arguments"] == {"command": "make test"}
    # every event points at its transcript item: the call at the tool_use, the end at the result
    assert item_at(store, CC, begins["toolu_1"]["message_target"])["content"][0]["id"] == "toolu_1"
    result = item_at(store, CC, ends["toolu_1"]["message_target"])
    assert result["content"][0]["tool_use_id"] == "toolu_1"
    # times kept: the user message's event is at the line's timestamp
    first = next(e for e in store.events_after(CC, 0, 100) if e.event.msg["type"] == "message")
    assert first.recorded_at_ms == ms(1) and first.event.msg["text"] == "Why is CI red?"
    assert kinds(evs).count("turn_started") == 2 and kinds(evs).count("turn_complete") == 1
    # the compaction: a new epoch whose context starts at the summary; the transcript keeps all
    cp = store.load(CC)
    assert cp is not None
    assert cp.context_epoch == 1 and cp.last_context_rewrite == {
        "epoch": 1,
        "reasons": ["compaction"],
    }
    assert cp.context[0]["content"].startswith("This session is being continued")
    assert len(cp.context) == 3 and cp.context[1]["content"][1]["type"] == "image"  # multi-part
    assert "context_compacted" in kinds(evs)
    assert (
        cp.first_user_message == "Why is CI red?" and cp.model_route == "claude-opus-4-5-20251101"
    )
    assert cp.metadata["summary"] == "Fixing CI" and cp.metadata["cwd"] == "/home/me/proj"
    assert cp.session_context.origin_label == "claude-code"
    # the lines that are not messages are kept whole
    kept = [e["entry"] for e in evs if e["type"] == "transcript_entry"]
    assert kept == [lines[0], lines[-1]]
    agent = store.load(f"{CC}/agent-a1b2c3d")
    assert agent is not None and agent.metadata["parent_tool_use_id"] == "toolu_3"
    assert agent.metadata["agent_type"] == "general-purpose"
    assert agent.context[0]["content"] == "find libssl"  # its own context


def test_a_codex_rollout_becomes_items_events_and_a_sub_agent_fork(
    tmp_path: Path, store: journal.Store
) -> None:
    report = import_transcripts(store, [codex_home(tmp_path / "codex")])
    assert report.findings == [] and not report.refused
    thread, child = f"codex/{THREAD}", f"codex/{CHILD}"
    # the child started at second 5, after the spawn_agent call of line 9 (seq 8)
    assert sessions(store) == {thread: (None, None, 17), child: (thread, 8, 2)}
    lines = codex_lines()
    response_items = [line["payload"] for line in lines if line["type"] == "response_item"]
    summary = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Summary: CI fails on libssl."}],
    }
    assert items(store, thread) == [*response_items, summary]
    evs = events(store, thread)
    ends = {e["call_id"]: e for e in evs if e["type"] == "tool_call_end"}
    assert ends["call_1"]["name"] == "shell" and ends["call_2"]["name"] == "apply_patch"
    assert ends["call_2"]["output"] == "Success" and ends["call_3"]["name"] == "spawn_agent"
    starts = [e for e in evs if e["type"] == "turn_started"]
    assert starts[0]["turn_id"] == "t1" and starts[0]["model_context_window"] == 272000
    assert [e["type"] for e in evs if e.get("turn_id") == "t1"][-1] == "turn_complete"
    kept = [
        e["entry"]["payload"]["type"]
        for e in evs
        if e["type"] == "transcript_entry" and e["entry"]["type"] == "event_msg"
    ]
    assert kept == ["user_message", "agent_message", "token_count"]
    cp = store.load(thread)
    assert cp is not None and cp.context == lines[16]["payload"]["replacement_history"]
    assert cp.context_epoch == 1 and cp.model_route == "gpt-5"
    assert cp.first_user_message == "Why is CI red?"
    kid = store.load(child)
    assert (
        kid is not None and kid.metadata["codex_source"]["subagent"]["thread_spawn"]["depth"] == 1
    )


def test_an_unchanged_file_imported_again_changes_nothing(
    tmp_path: Path, store: journal.Store
) -> None:
    paths = [claude_project(tmp_path / "claude"), codex_home(tmp_path / "codex")]
    import_transcripts(store, paths)
    before = {sid: dump(store, sid) for sid in sessions(store)}
    again = import_transcripts(store, paths)
    assert sum(f.written for f in again.files) == 0 and not again.findings
    assert {s.status for f in again.files for s in f.sessions} == {"unchanged"}
    assert {sid: dump(store, sid) for sid in sessions(store)} == before


@pytest.mark.parametrize("cut", [1, 2, 7, 11, 13, 15])
def test_a_grown_file_gets_only_its_new_lines_and_ends_as_one_import(
    tmp_path: Path, store: journal.Store, cut: int
) -> None:
    lines = claude_lines()
    path = write_jsonl(tmp_path / "p" / f"{SID}.jsonl", lines[:cut])
    first = import_transcripts(store, [path])
    assert first.files[0].sessions[0].written == cut
    write_jsonl(path, lines)  # the CLI appended the rest
    grown = import_transcripts(store, [path])
    s = grown.files[0].sessions[0]
    assert (s.status, s.existing, s.written) == ("appended", cut, len(lines) - cut)
    with journal.open(tmp_path / "once") as once:
        import_transcripts(once, [path])
        assert logical(store, CC) == logical(once, CC)


def test_a_file_changed_since_its_import_is_refused_and_nothing_written(
    tmp_path: Path, store: journal.Store
) -> None:
    lines = claude_lines()
    path = write_jsonl(tmp_path / "p" / f"{SID}.jsonl", lines)
    import_transcripts(store, [path])
    before = dump(store, CC)
    lines[1]["message"]["content"] = "Why is CI green?"  # an imported line rewritten
    write_jsonl(path, [*lines, user("u9", "a7", 20, "more")])
    report = import_transcripts(store, [path])
    assert report.refused and "changed" in (report.files[0].refused or "")
    assert dump(store, CC) == before
    write_jsonl(path, lines[:5])  # shorter than what was imported
    report = import_transcripts(store, [path])
    assert report.refused and dump(store, CC) == before


def test_damaged_and_unknown_lines_are_reported_with_file_and_line_and_kept(
    tmp_path: Path, store: journal.Store
) -> None:
    good = claude_lines()
    path = tmp_path / "p" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    torn = json.dumps(good[2]).encode()[:40]  # the CLI was killed while writing it
    path.write_bytes(
        json.dumps(good[1]).encode()
        + b"\n"
        + b'{"type": "user", "message": {"role": \n'  # malformed
        + b"[1, 2]\n"  # JSON, not an object
        + b"\n"  # an empty line: nothing to import, nothing to report
        + json.dumps({"type": "brand-new-kind", "x": 1}).encode()
        + b"\n"  # unknown type
        + json.dumps(assistant("a1", "u1", 2, "m", {"type": "hologram", "data": 1})).encode()
        + b"\n"
        + torn
    )
    report = import_transcripts(store, [path])
    found = [(f.line, f.kind) for f in report.findings]
    assert found == [
        (2, "malformed"),
        (3, "malformed"),
        (5, "unknown_type"),
        (6, "unknown_item"),
        (7, "incomplete"),
    ]
    assert all(f.path == str(path) for f in report.findings)
    assert len(report.not_understood) == 5
    evs = events(store, CC)
    unparsed = [e for e in evs if e["type"] == "transcript_unparsed"]
    assert [(e["line"], e["raw"]) for e in unparsed] == [
        (2, '{"type": "user", "message": {"role": \n'),
        (3, "[1, 2]\n"),
    ]
    unknown = [e for e in evs if e["type"] == "transcript_unknown"]
    assert unknown[0]["entry"] == {"type": "brand-new-kind", "x": 1}
    assert items(store, CC)[-1]["content"] == [{"type": "hologram", "data": 1}]  # kept as it is
    assert sessions(store)[CC][2] == 4  # lines 1, 2, 3, 5, 6: the torn line is not imported
    # The line is finished (the writer was not dead after all): the next import reads it
    # and reports nothing of what it reported before.
    with open(path, "ab") as f:
        f.write(json.dumps(good[2]).encode()[40:] + b"\n")
    again = import_transcripts(store, [path])
    assert again.findings == [] and again.files[0].sessions[0].written == 1
    assert items(store, CC)[-1] == good[2]["message"]


def test_a_last_line_without_its_newline_that_parses_is_imported(
    tmp_path: Path, store: journal.Store
) -> None:
    lines = claude_lines()[:3]
    path = write_jsonl(tmp_path / "p" / f"{SID}.jsonl", lines[:2], json.dumps(lines[2]).encode())
    report = import_transcripts(store, [path])
    assert report.findings == [] and sessions(store)[CC][2] == 2


def test_sidechain_lines_in_a_session_file_are_a_fork(tmp_path: Path, store: journal.Store) -> None:
    lines = claude_lines()[:6]
    side = [
        user("x1", None, 5, "sub task"),
        assistant("x2", "x1", 6, "mx", {"type": "text", "text": "sub done"}),
    ]
    for line in side:
        line["isSidechain"] = True
    path = write_jsonl(tmp_path / "p" / f"{SID}.jsonl", [*lines[:4], *side, *lines[4:]])
    import_transcripts(store, [path])
    got = sessions(store)
    assert got[f"{CC}/sidechain-x1"] == (CC, 3, 2)  # forked at the commit before its first line
    assert got[CC][2] == 5  # the session has its own 6 lines
    assert items(store, f"{CC}/sidechain-x1") == [line["message"] for line in side]


def test_a_fork_whose_parent_is_nowhere_is_imported_on_its_own(
    tmp_path: Path, store: journal.Store
) -> None:
    day = tmp_path / "sessions"
    path = write_jsonl(day / f"rollout-2026-01-20T11-00-05-{CHILD}.jsonl", codex_child_lines())
    report = import_transcripts(store, [path])
    assert [f.kind for f in report.findings] == ["parent_missing"] and not report.not_understood
    assert sessions(store) == {f"codex/{CHILD}": (None, None, 2)}  # seq 0: the fork point


def test_a_codex_rollout_with_unknown_and_malformed_lines(
    tmp_path: Path, store: journal.Store
) -> None:
    lines = codex_lines()[:3]
    path = tmp_path / f"rollout-2026-01-20T11-00-01-{THREAD}.jsonl"
    write_jsonl(
        path,
        [
            *lines,
            rl(3, "world_state", {"x": 1}),
            {"record_type": "state"},
            rl(4, "response_item", {"type": "hologram_call", "call_id": "h"}),
        ],
        b"NaN\n",
    )
    report = import_transcripts(store, [path])
    assert [(f.line, f.kind) for f in report.findings] == [
        (4, "unknown_type"),
        (5, "unknown_type"),
        (6, "unknown_item"),
        (7, "malformed"),
    ]
    assert items(store, f"codex/{THREAD}") == [{"type": "hologram_call", "call_id": "h"}]


def test_a_dry_run_writes_nothing(tmp_path: Path) -> None:
    report = import_transcripts(None, [claude_project(tmp_path / "claude")], dry_run=True)
    assert report.dry_run and sum(s.written for f in report.files for s in f.sessions) == 3 + 16
    assert not (tmp_path / "store").exists()
    with journal.open(tmp_path / "store") as s:
        assert (
            import_transcripts(s, [tmp_path / "claude"], dry_run=True).files[0].sessions[0].written
            == 16
        )
        assert sessions(s) == {}

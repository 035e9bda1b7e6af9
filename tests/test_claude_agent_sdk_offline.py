"""The SDK itself driving `JournalSessionStore`, offline.

1. The real Claude Code CLI bundled with the SDK, run by `query()` against a
   scripted Messages API on 127.0.0.1 (every other address goes to a refusing
   proxy, HOME and CLAUDE_CONFIG_DIR are the test's): the SDK mirrors the CLI's
   transcript into the store as it runs, a subagent becomes a subkey (a journal
   fork), and a resume with the local transcripts deleted is materialized from the
   store (the model then sees the first turn).
2. The SDK's store helpers on a transcript written in the CLI's on-disk shape:
   `import_session_to_store` (twice: re-import stores nothing twice), listing,
   messages, subagents, rename, tag, fork, delete, resume materialization; each
   compared with the SDK's own reading of the same files on disk.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("claude_agent_sdk")

import claude_agent_sdk as sdk
from claude_agent_sdk import ClaudeAgentOptions, SessionKey, project_key_for_directory

from journal.integrations.claude_agent_sdk import JournalSessionStore

SID = "0b1c2d3e-4f50-4617-8899-aabbccddeeff"


# ------------------------------------------------------- a scripted model API
def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content)


def _reply(req: dict[str, Any]) -> list[dict[str, Any]]:
    """The scripted model: a subagent's task gets a text; a turn asking to spawn one
    gets a `Task` tool call; a tool result gets a closing text; anything else, hello."""
    users = [m for m in req.get("messages") or [] if m.get("role") == "user"] or [{}]
    if "SUBAGENT-TASK" in _text(users[0].get("content")):
        return [{"type": "text", "text": "subagent done"}]
    last = users[-1].get("content")
    if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
        return [{"type": "text", "text": "main done"}]
    if "spawn a subagent" in _text(last):
        task = {"description": "check", "prompt": "SUBAGENT-TASK: say done"}
        task["subagent_type"] = "general-purpose"
        return [{"type": "tool_use", "id": "toolu_01", "name": "Task", "input": task}]
    return [{"type": "text", "text": "Hello from the scripted model."}]


class _API(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: list[dict[str, Any]]

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(404, "application/json", b'{"error": "not found"}')

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if "count_tokens" in self.path:
            return self._send(200, "application/json", b'{"input_tokens": 10}')
        self.requests.append(req)
        blocks = _reply(req)
        stop = "tool_use" if blocks[0]["type"] == "tool_use" else "end_turn"
        message: dict[str, Any] = {
            "id": "msg_scripted",
            "type": "message",
            "role": "assistant",
            "model": "claude-scripted",
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if not req.get("stream"):
            return self._send(200, "application/json", json.dumps(message).encode())
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}}
        ]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": b["text"]}
            else:
                start = {**b, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            events.append({"type": "content_block_start", "index": i, "content_block": start})
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
            events.append({"type": "content_block_stop", "index": i})
        done = {"stop_reason": stop, "stop_sequence": None}
        events.append({"type": "message_delta", "delta": done, "usage": {"output_tokens": 5}})
        events.append({"type": "message_stop"})
        body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
        self._send(200, "text/event-stream", body)


@pytest.fixture
def api() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (_API,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()
    server.server_close()


def _cli_present() -> bool:
    bundled = Path(sdk.__file__).parent / "_bundled" / "claude"
    return bundled.is_file() or shutil.which("claude") is not None


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _subsequence(part: list[Any], whole: list[Any]) -> bool:
    it = iter(whole)
    return all(any(p == w for w in it) for p in part)


# ---------------------------------------------------------- 1. the real CLI
@pytest.mark.skipif(not _cli_present(), reason="the SDK's bundled CLI is not installed")
def test_the_cli_mirrors_into_the_store_and_resumes_from_it(
    tmp_path: Path, api: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, requests = api
    cfg, home, proj = tmp_path / "cfg", tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(cfg))  # where the SDK looks for local files
    env = {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-test-offline",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(cfg),
        # anything but the scripted API goes to a port that refuses connections
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
    }
    pk = project_key_for_directory(str(proj))
    store = JournalSessionStore(tmp_path / "store")

    async def turn(prompt: str, **options: Any) -> str:
        opts = ClaudeAgentOptions(
            session_store=store, env=env, cwd=str(proj), max_turns=3, **options
        )
        session_id = ""
        with anyio.fail_after(180):
            async for message in sdk.query(prompt=prompt, options=opts):
                if isinstance(message, sdk.ResultMessage):
                    assert not message.is_error, message
                    session_id = message.session_id
        return session_id

    try:
        sid = anyio.run(turn, "Please spawn a subagent")
        assert sid and requests, "the CLI never reached the scripted API"
        key: SessionKey = {"project_key": pk, "session_id": sid}

        # what the CLI wrote locally reached the store, in order, entries unchanged
        stored = anyio.run(store.load, key)
        disk = _lines(cfg / "projects" / pk / f"{sid}.jsonl")
        assert stored is not None and _subsequence(stored, disk)
        messages = [e["uuid"] for e in disk if e.get("type") in ("user", "assistant")]
        assert messages and messages == [
            e["uuid"] for e in stored if e.get("type") in ("user", "assistant")
        ]
        # the subagent is a subkey: a journal fork of the main transcript
        [subpath] = anyio.run(store.list_subkeys, key)
        assert subpath.startswith("subagents/agent-")
        sub_disk = _lines(cfg / "projects" / pk / sid / f"{subpath}.jsonl")
        sub_stored = anyio.run(store.load, {**key, "subpath": subpath})
        assert sub_stored is not None
        transcript = [e for e in sub_stored if e.get("type") != "agent_metadata"]
        assert _subsequence(transcript, sub_disk)
        assert any("subagent done" in json.dumps(e) for e in transcript)
        [child] = store.store.child_sessions(f"{pk}/{sid}")
        assert child.session_id == f"{pk}/{sid}/{subpath}"
        # the SDK's listing from the store agrees with its listing of the local files
        [from_store] = anyio.run(sdk.list_sessions_from_store, store, str(proj))
        [from_disk] = sdk.list_sessions(str(proj))
        assert (from_store.session_id, from_store.summary, from_store.first_prompt) == (
            from_disk.session_id,
            from_disk.summary,
            from_disk.first_prompt,
        )

        # resume with the local transcripts gone: materialized from the store
        shutil.rmtree(cfg / "projects")
        requests.clear()
        assert anyio.run(lambda: turn("What did I ask before?", resume=sid)) == sid
        assert "Please spawn a subagent" in json.dumps(requests[0]["messages"])
        after = anyio.run(store.load, key)
        assert after is not None and after[: len(stored)] == stored
        assert any("What did I ask before?" in json.dumps(e) for e in after[len(stored) :])
        uuids = [e["uuid"] for e in after if "uuid" in e]
        assert len(uuids) == len(set(uuids))  # the resumed CLI's re-sent lines: stored once
    finally:
        store.close()


# ------------------------------------------------- 2. the SDK's store helpers
def _u(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _transcript(cwd: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A main transcript and a subagent's, in the CLI's on-disk shape."""
    common = {"sessionId": SID, "cwd": cwd, "version": "2.1.0", "gitBranch": "main"}

    def line(n: int, parent: int | None, kind: str, content: Any, ts: int, **more: Any) -> Any:
        msg = {"role": kind, "content": content}
        return {
            "parentUuid": _u(parent) if parent else None,
            "isSidechain": False,
            "type": kind,
            "message": msg,
            "uuid": _u(n),
            "timestamp": f"2026-03-01T10:00:{ts:02d}.000Z",
            **common,
            **more,
        }

    tool = {"type": "tool_use", "id": "toolu_9", "name": "Task", "input": {"prompt": "look"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_9", "content": "found it"}
    main = [
        line(1, None, "user", "Why does the build fail on ARM?", 1),
        line(2, 1, "assistant", [{"type": "text", "text": "Let me look."}, tool], 2),
        line(3, 2, "user", [result], 3),
        line(4, 3, "assistant", [{"type": "text", "text": "A missing libssl — 日本語 too."}], 4),
        {"type": "custom-title", "customTitle": "ARM build", "sessionId": SID},
        {"type": "tag", "tag": "ci", "sessionId": SID, "uuid": _u(90)},
    ]
    sub = [
        {**line(11, None, "user", "look", 2), "isSidechain": True, "agentId": "a1"},
        {
            **line(12, 11, "assistant", [{"type": "text", "text": "found it"}], 3),
            "isSidechain": True,
        },
    ]
    return main, sub


def _write(path: Path, entries: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in entries)
    path.write_text("".join(line + "\n" for line in lines))  # compact, as the CLI writes


def test_the_sdks_store_helpers_on_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, proj = tmp_path / "cfg", tmp_path / "proj"
    proj.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(cfg))
    pk = project_key_for_directory(str(proj))
    main, sub = _transcript(str(proj))
    _write(cfg / "projects" / pk / f"{SID}.jsonl", main)
    _write(cfg / "projects" / pk / SID / "subagents" / "agent-a1.jsonl", sub)
    meta = {"agentType": "general-purpose", "toolUseId": "toolu_9"}
    (cfg / "projects" / pk / SID / "subagents" / "agent-a1.meta.json").write_text(json.dumps(meta))
    key: SessionKey = {"project_key": pk, "session_id": SID}
    d = str(proj)

    async def go(store: JournalSessionStore) -> None:
        for _ in range(2):  # a re-import finds every uuid stored: only uuid-less lines again
            await sdk.import_session_to_store(SID, store, directory=d)
        got = await store.load(key)
        title = {"type": "custom-title", "customTitle": "ARM build", "sessionId": SID}
        assert got == [*main, title]  # the uuid-less title line twice, as the SDK sends it
        sub_key: SessionKey = {**key, "subpath": "subagents/agent-a1"}
        sidecar = {**meta, "type": "agent_metadata"}  # no uuid either: stored twice
        assert await store.load(sub_key) == [*sub, sidecar, sidecar]

        # reads through the store agree with the SDK's reads of the files
        assert await sdk.get_session_messages_from_store(store, SID, d) == (
            sdk.get_session_messages(SID, d)
        )
        [listed] = await sdk.list_sessions_from_store(store, d)
        [on_disk] = sdk.list_sessions(d)
        for field in ("session_id", "summary", "custom_title", "first_prompt", "git_branch", "tag"):
            assert getattr(listed, field) == getattr(on_disk, field), field
        assert listed.created_at == on_disk.created_at
        assert await sdk.list_subagents_from_store(store, SID, d) == sdk.list_subagents(SID, d)
        sub_msgs = await sdk.get_subagent_messages_from_store(store, SID, "a1", d)
        assert [m.uuid for m in sub_msgs] == [
            m.uuid for m in sdk.get_subagent_messages(SID, "a1", d)
        ]
        assert sub_msgs[0].parent_tool_use_id == "toolu_9"  # from the stored sidecar

        # writes through the store
        await sdk.rename_session_via_store(store, SID, "ARM build, fixed", d)
        await sdk.tag_session_via_store(store, SID, "done", d)
        [renamed] = await sdk.list_sessions_from_store(store, d)
        assert (renamed.custom_title, renamed.tag) == ("ARM build, fixed", "done")
        fork = await sdk.fork_session_via_store(store, SID, d, up_to_message_id=_u(2))
        forked = await sdk.get_session_messages_from_store(store, fork.session_id, d)
        assert [m.message for m in forked] == [e["message"] for e in main[:2]]
        assert {s.session_id for s in await sdk.list_sessions_from_store(store, d)} == {
            SID,
            fork.session_id,
        }

        # resume: the SDK writes the store's copy out as the CLI's files
        opts = ClaudeAgentOptions(session_store=store, resume=SID, cwd=d)
        from claude_agent_sdk._internal.session_resume import materialize_resume_session

        done = await materialize_resume_session(opts)
        assert done is not None
        try:
            out = done.config_dir / "projects" / pk
            assert _lines(out / f"{SID}.jsonl") == await store.load(key)
            assert _lines(out / SID / "subagents" / "agent-a1.jsonl") == sub
            assert json.loads((out / SID / "subagents" / "agent-a1.meta.json").read_text()) == meta
        finally:
            await done.cleanup()

        await sdk.delete_session_via_store(store, SID, d)
        assert await store.load(key) is None and await store.load(sub_key) is None
        assert [s.session_id for s in await sdk.list_sessions_from_store(store, d)] == [
            fork.session_id
        ]

    with JournalSessionStore(tmp_path / "store") as store:
        anyio.run(go, store)


def test_the_mirror_batcher_flushes_into_the_store(tmp_path: Path) -> None:
    """The SDK's `TranscriptMirrorBatcher` (what `query()` feeds the CLI's
    transcript_mirror frames to), flushing main and subagent frames."""
    from claude_agent_sdk._internal.transcript_mirror_batcher import TranscriptMirrorBatcher

    projects = tmp_path / "projects"
    errors: list[Any] = []

    async def on_error(key: Any, message: str) -> None:
        errors.append((key, message))

    main, sub = _transcript("/work")
    with JournalSessionStore(tmp_path / "store") as store:
        batcher = TranscriptMirrorBatcher(
            store=store, projects_dir=str(projects), on_error=on_error
        )

        async def go() -> None:
            base = projects / "p"
            for e in main[:3]:
                batcher.enqueue(str(base / f"{SID}.jsonl"), [e])
            batcher.enqueue(str(base / SID / "subagents" / "agent-a1.jsonl"), sub)
            batcher.enqueue(str(base / f"{SID}.jsonl"), main[3:])
            await batcher.flush()
            await batcher.close()

        anyio.run(go)
        assert not errors
        key: SessionKey = {"project_key": "p", "session_id": SID}
        assert anyio.run(store.load, key) == main
        assert anyio.run(store.load, {**key, "subpath": "subagents/agent-a1"}) == sub
        assert os.path.isdir(store.store.session_dir(f"p/{SID}/subagents/agent-a1"))

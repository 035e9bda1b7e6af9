"""Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`) as ops.

The shapes relied on are in docs/import-transcripts.md, with their sources. In short:
one JSON object a line, tagged by `type`; `user` and `assistant` lines carry an
Anthropic Messages `message` (`role`, `content`: a string or blocks `text`,
`thinking`, `tool_use`, `tool_result`, ...), a `uuid`, a `parentUuid`, a
`timestamp`, `isSidechain`, `sessionId`. A compaction is a `system` line of subtype
`compact_boundary` followed by a `user` line with `isCompactSummary`.

Sessions: the file `<id>.jsonl` is session `claude-code/<id>`. A subagent's file
(`<id>/subagents/agent-<a>.jsonl`, or `agent-<a>.jsonl` beside the session files
in older versions, whose lines name the parent in `sessionId`) is session
`claude-code/<id>/agent-<a>`, a fork of its parent at the commit that made the
spawning tool call (`toolUseId` of `agent-<a>.meta.json`), or of the subagent
`parentAgentId` names. Lines with `isSidechain` inside a session's own file are
session `claude-code/<id>/sidechain-<uuid of the sidechain's first line>`, a fork
of the session at the commit before that line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from .lines import Line
from .model import Draft, Finding, Fork, Op, SessionState, fork_op, iso_ms, text_of

FORMAT = "claude-code"
PREFIX = "claude-code/"
AUXILIARY = frozenset(
    {
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "progress",
        "attachment",
        "custom-title",
        "tag",
        "content-replacement",
    }
)
"""Line types kept as `transcript_entry` events: understood, but not messages."""
ASSISTANT_BLOCKS = frozenset(
    {"text", "thinking", "redacted_thinking", "tool_use", "server_tool_use"}
)
USER_BLOCKS = frozenset({"text", "image", "document", "tool_result"})
LINE_META = {"cwd": "cwd", "gitBranch": "git_branch", "version": "claude_code_version"}


def is_subagent_file(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("agent-") and name.endswith(".jsonl")


def main_session_id(path: str) -> str:
    return PREFIX + os.path.basename(path).removesuffix(".jsonl")


def subagent_parent(path: str) -> str | None:
    """The source id of the session a subagent file belongs to, from its path
    (`<project>/<session>/subagents/.../agent-<a>.jsonl`), or None (older layout)."""
    parts = os.path.normpath(path).split(os.sep)
    if "subagents" in parts[:-1]:
        at = len(parts) - 1 - parts[::-1].index("subagents")
        if at >= 1:
            return parts[at - 1]
    return None


def sidecar(path: str) -> dict[str, Any]:
    """`agent-<a>.meta.json` beside a subagent transcript ({} when absent or unusable)."""
    try:
        with open(path.removesuffix(".jsonl") + ".meta.json", encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


class Reader:
    """Turns the lines of one Claude Code file into ops, in file order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.subagent = is_subagent_file(path)
        self.sid = main_session_id(path)
        self.main: SessionState | None = None
        self.sides: dict[str, SessionState] = {}  # uuid of a sidechain line -> its session

    # ------------------------------------------------------------- sessions
    def _main(self, line: Line, entry: dict[str, Any] | None) -> Iterator[Op]:
        """Start the file's own session if it has not started (a fork, for a subagent)."""
        if self.main is not None:
            return
        if not self.subagent:
            self.main = SessionState(self.sid)
            return
        agent = os.path.basename(self.path).removesuffix(".jsonl").removeprefix("agent-")
        parent = subagent_parent(self.path)
        if parent is None and entry is not None and isinstance(entry.get("sessionId"), str):
            parent = entry["sessionId"]
        meta = sidecar(self.path)
        self.sid = f"{PREFIX}{parent}/agent-{agent}" if parent else f"{PREFIX}agent-{agent}"
        info = {"agent_id": agent}
        for key, name in (("agentType", "agent_type"), ("description", "description")):
            if isinstance(meta.get(key), str):
                info[name] = meta[key]
        call_id = meta.get("toolUseId") if isinstance(meta.get("toolUseId"), str) else None
        if call_id:
            info["parent_tool_use_id"] = call_id
        if parent is None:
            self.main = SessionState(self.sid)
            return
        parent_sid = PREFIX + parent
        if isinstance(meta.get("parentAgentId"), str):
            parent_sid = f"{PREFIX}{parent}/agent-{meta['parentAgentId']}"
        started = iso_ms(entry.get("timestamp")) if entry else None
        fork = Fork(parent_sid, call_id=call_id, agent_id=agent, started_ms=started)
        self.main, op = fork_op(self.sid, fork, line.start, _sha_before(line), started or 0, info)
        self.main.meta.update(info)
        yield op

    def _session(self, line: Line, entry: dict[str, Any]) -> Iterator[Op | SessionState]:
        """The session a line belongs to (yielding the fork op of a new sidechain first)."""
        assert self.main is not None
        if self.subagent or entry.get("isSidechain") is not True:
            yield self.main
            return
        parent = entry.get("parentUuid")
        found = self.sides.get(parent) if isinstance(parent, str) else None
        if found is None:
            if self.main.sequence < 0:  # a sidechain before any line of its session
                yield Draft(self.main, line.number, line.start, _sha_before(line), None).finish()
            root = (
                entry.get("uuid") if isinstance(entry.get("uuid"), str) else f"line-{line.number}"
            )
            fork = Fork(self.sid, sequence=self.main.sequence)
            sid = f"{self.sid}/sidechain-{root}"
            ms = iso_ms(entry.get("timestamp")) or self.main.last_ms
            found, op = fork_op(sid, fork, line.start, _sha_before(line), ms, {"sidechain": True})
            yield op
        if isinstance(entry.get("uuid"), str):
            self.sides[entry["uuid"]] = found
        yield found

    # ---------------------------------------------------------------- lines
    def ops(self, lines: Iterable[Line]) -> Iterator[Op]:
        for line in lines:
            entry = line.entry
            if entry is None and line.error == "an empty line":
                continue
            yield from self._main(line, entry)
            assert self.main is not None
            if entry is None:
                d = Draft(self.main, line.number, line.end, line.sha256, None)
                raw = line.raw.decode("utf-8", "replace")
                d.event(
                    {
                        "type": "transcript_unparsed",
                        "format": FORMAT,
                        "line": line.number,
                        "raw": raw,
                        "error": line.error,
                    }
                )
                d.op.findings.append(Finding(self.path, line.number, "malformed", str(line.error)))
                yield d.finish()
                continue
            state = self.main
            for got in self._session(line, entry):
                if isinstance(got, Op):
                    yield got
                else:
                    state = got
            d = Draft(state, line.number, line.end, line.sha256, iso_ms(entry.get("timestamp")))
            self._entry(d, entry)
            yield d.finish()

    def _entry(self, d: Draft, entry: dict[str, Any]) -> None:
        kind = entry.get("type")
        for key, name in LINE_META.items():
            if isinstance(entry.get(key), str) and entry[key]:
                d.meta(name, entry[key])
        if kind in ("user", "assistant") and isinstance(entry.get("message"), dict):
            self._message(d, entry, entry["message"])
        elif kind == "system":
            if entry.get("subtype") == "compact_boundary":
                extra = entry.get("compactMetadata")
                d.event(
                    {
                        "type": "context_compacted",
                        "source": _source(d, entry),
                        "logical_parent_uuid": entry.get("logicalParentUuid"),
                        "compact_metadata": extra if isinstance(extra, dict) else None,
                    }
                )
            else:
                d.event(
                    {
                        "type": "transcript_entry",
                        "format": FORMAT,
                        "line": d.op.line,
                        "entry": entry,
                    }
                )
        elif kind in AUXILIARY:
            if kind == "summary" and isinstance(entry.get("summary"), str):
                d.meta("summary", entry["summary"])
            if kind == "custom-title" and isinstance(entry.get("customTitle"), str):
                d.meta("title", entry["customTitle"])
            d.event(
                {"type": "transcript_entry", "format": FORMAT, "line": d.op.line, "entry": entry}
            )
        else:
            if kind in ("user", "assistant"):
                what = f"a {kind} line without a message object"
            elif isinstance(kind, str):
                what = f"a line of unknown type {kind!r}"
            else:
                what = "a line without a string type"
            d.event(
                {"type": "transcript_unknown", "format": FORMAT, "line": d.op.line, "entry": entry}
            )
            d.op.findings.append(Finding(self.path, d.op.line, "unknown_type", what))

    def _message(self, d: Draft, entry: dict[str, Any], msg: dict[str, Any]) -> None:
        source = _source(d, entry)
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        if entry["type"] == "assistant":
            self._assistant(d, entry, msg, blocks, source)
            return
        if entry.get("isCompactSummary") is True:
            target = d.item(msg, context=False)
            d.rewrite([msg])
            d.event(
                {
                    "type": "message",
                    "author": {"role": "user"},
                    "text": text_of(content),
                    "message_target": target,
                    "compact_summary": True,
                    "source": source,
                }
            )
            return
        target = d.item(msg)
        known = USER_BLOCKS
        self._unknown_blocks(d, blocks, known)
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                call_id = block.get("tool_use_id")
                if isinstance(call_id, str):
                    d.result(
                        self.path,
                        call_id,
                        block.get("content"),
                        block.get("is_error") is True,
                        target,
                        source=source,
                    )
        text = text_of(content)
        if not isinstance(content, str) and not any(
            isinstance(b, dict) and b.get("type") != "tool_result" for b in blocks
        ):
            return  # only tool results
        meta = entry.get("isMeta") is True
        if not meta:
            if d.state.turn_id is not None:
                d.event({"type": "turn_complete", "turn_id": d.state.turn_id}, d.prev_ms)
            d.state.turn_id = (
                entry.get("uuid") if isinstance(entry.get("uuid"), str) else (f"line-{d.op.line}")
            )
            d.event({"type": "turn_started", "turn_id": d.state.turn_id})
            d.first_user_message(text)
        msg_event: dict[str, Any] = {
            "type": "message",
            "author": {"role": "user"},
            "text": text,
            "message_target": target,
            "source": source,
        }
        if meta:
            msg_event["meta"] = True
        d.event(msg_event)

    def _assistant(
        self,
        d: Draft,
        entry: dict[str, Any],
        msg: dict[str, Any],
        blocks: list[Any],
        source: dict[str, Any],
    ) -> None:
        target = d.item(msg)
        model = msg.get("model")
        if isinstance(model, str) and model and not model.startswith("<"):
            d.op.model_route = model
        if isinstance(msg.get("content"), str):
            blocks = [{"type": "text", "text": msg["content"]}]
        self._unknown_blocks(d, blocks, ASSISTANT_BLOCKS)
        step = msg.get("id") if isinstance(msg.get("id"), str) else entry.get("uuid")
        for i, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind in ("text", "thinking", "redacted_thinking"):
                text = block.get("text" if kind == "text" else "thinking")
                phase = "final_answer" if kind == "text" else "reasoning"
                part = {
                    "output_index": 0,
                    "part_index": i,
                    "phase": phase,
                    "text": text if isinstance(text, str) else "",
                    "annotations": [],
                }
                d.event(
                    {
                        "type": "assistant_message",
                        "turn_id": d.state.turn_id,
                        "model_step_id": step,
                        "content": [part],
                        "message_target": target,
                        "source": source,
                    }
                )
            elif kind in ("tool_use", "server_tool_use") and isinstance(block.get("id"), str):
                d.call(
                    block["id"], str(block.get("name")), block.get("input"), target, source=source
                )
            elif isinstance(kind, str) and kind.endswith("_tool_result"):
                call_id = block.get("tool_use_id")
                if isinstance(call_id, str):
                    d.result(self.path, call_id, block.get("content"), False, target, source=source)

    def _unknown_blocks(self, d: Draft, blocks: list[Any], known: frozenset[str]) -> None:
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in known or (isinstance(kind, str) and kind.endswith("_tool_result")):
                continue
            d.op.findings.append(
                Finding(
                    self.path,
                    d.op.line,
                    "unknown_item",
                    f"a content block of type {kind!r} (kept in the transcript item, not read)",
                )
            )


def _source(d: Draft, entry: dict[str, Any]) -> dict[str, Any]:
    return {"line": d.op.line, "uuid": entry.get("uuid"), "parent_uuid": entry.get("parentUuid")}


def _sha_before(line: Line) -> str:
    """The prefix hash at the start of `line` (that of the line before it)."""
    return line.start_sha256

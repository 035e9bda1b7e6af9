"""Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`) as ops.

The shapes relied on are in docs/import-transcripts.md, with their sources
(codex-rs/protocol: `RolloutLine`, `RolloutItem`, `SessionMeta`, `ResponseItem`).
In short: one JSON object a line, `{"timestamp", "type", "payload"}`, `type` one of
`session_meta` (the first line: the thread `id`, `cwd`, `source`, ...),
`response_item` (an OpenAI Responses item: `message`, `reasoning`, `function_call`,
`function_call_output`, ...), `compacted` (`message`, `replacement_history`),
`turn_context` and `event_msg` (a protocol event tagged by its own `type`).

Sessions: a rollout is session `codex/<id>`. A sub-agent's rollout (its `source`
is `{"subagent": {"thread_spawn": {"parent_thread_id", ...}}}`) and a forked one
(`forked_from_id`) are forks of that session at its last commit at or before the
rollout's start. Response items are the transcript and the context (a compaction
replaces the context by its `replacement_history`); tool calls and their outputs
are paired by `call_id` as `tool_call_begin`/`tool_call_end` events; task
start/complete events are `turn_started`/`turn_complete`; every other line is kept
whole as a `transcript_entry` event.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from .lines import Line
from .model import Draft, Finding, Fork, Op, SessionState, fork_op, iso_ms, text_of

FORMAT = "codex"
PREFIX = "codex/"
ITEMS = frozenset(
    {
        "message",
        "reasoning",
        "local_shell_call",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "tool_search_output",
        "web_search_call",
        "image_generation_call",
        "ghost_snapshot",
        "compaction",
        "compaction_summary",
    }
)
CALLS = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "local_shell_call": "action",
    "tool_search_call": "arguments",
}
OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "tool_search_output"})
TURN_EVENTS = {
    "task_started": "turn_started",
    "turn_started": "turn_started",
    "task_complete": "turn_complete",
    "turn_complete": "turn_complete",
    "turn_aborted": "turn_aborted",
    "context_compacted": "context_compacted",
}
META = ("cwd", "cli_version", "originator", "model_provider", "agent_nickname", "agent_role")


def file_session_id(path: str) -> str:
    """The id in a rollout's name (`rollout-<time>-<uuid>.jsonl`), else its whole stem."""
    stem = os.path.basename(path).removesuffix(".jsonl")
    tail = stem[-36:]
    if len(stem) > 36 and tail.count("-") == 4:
        return tail
    return stem.removeprefix("rollout-")


def parent_of(meta: dict[str, Any]) -> str | None:
    """The thread a sub-agent's or a forked rollout branches from (its `session_meta`)."""
    source = meta.get("source")
    if isinstance(source, dict):
        sub = source.get("subagent")
        spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
        if isinstance(spawn, dict) and isinstance(spawn.get("parent_thread_id"), str):
            return str(spawn["parent_thread_id"])
    for key in ("parent_thread_id", "forked_from_id"):
        if isinstance(meta.get(key), str) and meta[key]:
            return str(meta[key])
    return None


class Reader:
    """Turns the lines of one rollout into ops, in file order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sid = PREFIX + file_session_id(path)
        self.state: SessionState | None = None

    def _start(self, line: Line, entry: dict[str, Any] | None) -> Iterator[Op]:
        if self.state is not None:
            return
        payload = entry.get("payload") if entry else None
        if entry is None or entry.get("type") != "session_meta" or not isinstance(payload, dict):
            self.state = SessionState(self.sid)
            return
        if isinstance(payload.get("id"), str) and payload["id"]:
            self.sid = PREFIX + payload["id"]
        parent = parent_of(payload)
        if parent is None or PREFIX + parent == self.sid:
            self.state = SessionState(self.sid)
            return
        started = iso_ms(payload.get("timestamp")) or iso_ms(entry.get("timestamp"))
        fork = Fork(PREFIX + parent, started_ms=started)
        self.state, op = fork_op(self.sid, fork, line.start, line.start_sha256, started or 0, {})
        yield op

    def ops(self, lines: Iterable[Line]) -> Iterator[Op]:
        for line in lines:
            entry = line.entry
            if entry is None and line.error == "an empty line":
                continue
            yield from self._start(line, entry)
            assert self.state is not None
            ms = iso_ms(entry.get("timestamp")) if entry else None
            d = Draft(self.state, line.number, line.end, line.sha256, ms)
            if entry is None:
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
            else:
                self._entry(d, entry)
            yield d.finish()

    def _keep(self, d: Draft, entry: dict[str, Any]) -> None:
        d.event({"type": "transcript_entry", "format": FORMAT, "line": d.op.line, "entry": entry})

    def _entry(self, d: Draft, entry: dict[str, Any]) -> None:
        kind = entry.get("type")
        payload = entry.get("payload")
        if kind not in (
            "session_meta",
            "response_item",
            "compacted",
            "turn_context",
            "event_msg",
        ) or (not isinstance(payload, dict)):
            what = f"type {kind!r}" if isinstance(kind, str) else "no string type"
            if isinstance(kind, str) and not isinstance(payload, dict):
                what += " (or no payload object)"
            d.event(
                {"type": "transcript_unknown", "format": FORMAT, "line": d.op.line, "entry": entry}
            )
            d.op.findings.append(Finding(self.path, d.op.line, "unknown_type", f"a line of {what}"))
            return
        if kind == "response_item":
            self._item(d, payload)
            return
        if kind == "compacted":
            self._compacted(d, payload)
            return
        if kind == "session_meta":
            for key in META:
                if isinstance(payload.get(key), str):
                    d.meta(key, payload[key])
            d.meta("codex_source", payload.get("source"))
            d.meta("git", payload.get("git") if isinstance(entry.get("payload"), dict) else None)
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                d.op.model_route = payload["model"]
            if isinstance(payload.get("cwd"), str):
                d.meta("cwd", payload["cwd"])
        elif kind == "event_msg":
            self._event(d, entry, payload)
            return
        self._keep(d, entry)

    def _event(self, d: Draft, entry: dict[str, Any], payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        mapped = TURN_EVENTS.get(kind) if isinstance(kind, str) else None
        if mapped is None:
            if not isinstance(kind, str):
                d.op.findings.append(
                    Finding(
                        self.path,
                        d.op.line,
                        "unknown_item",
                        "an event_msg without a string type (kept)",
                    )
                )
            if kind == "user_message" and isinstance(payload.get("message"), str):
                d.first_user_message(payload["message"])
            self._keep(d, entry)
            return
        turn = payload.get("turn_id")
        if mapped == "turn_started":
            d.state.turn_id = turn if isinstance(turn, str) else f"turn-{d.op.line}"
        elif isinstance(turn, str):
            d.state.turn_id = turn
        d.event(
            {
                **payload,
                "type": mapped,
                "turn_id": d.state.turn_id,
                "source_type": kind,
                "line": d.op.line,
            }
        )
        if mapped in ("turn_complete", "turn_aborted"):
            d.state.turn_id = None

    def _item(self, d: Draft, item: dict[str, Any]) -> None:
        kind = item.get("type")
        target = d.item(item)
        if kind not in ITEMS:
            d.op.findings.append(
                Finding(
                    self.path,
                    d.op.line,
                    "unknown_item",
                    f"a response item of type {kind!r} (kept, not read)",
                )
            )
            return
        if kind == "message":
            role = item.get("role")
            text = text_of(item.get("content"))
            if role == "assistant":
                part = {
                    "output_index": 0,
                    "part_index": 0,
                    "phase": "final_answer",
                    "text": text,
                    "annotations": [],
                }
                d.event(
                    {
                        "type": "assistant_message",
                        "turn_id": d.state.turn_id,
                        "model_step_id": item.get("id"),
                        "content": [part],
                        "message_target": target,
                        "line": d.op.line,
                    }
                )
            else:
                if role == "user" and not text.startswith("<"):
                    d.first_user_message(text)
                d.event(
                    {
                        "type": "message",
                        "author": {"role": role},
                        "text": text,
                        "message_target": target,
                        "line": d.op.line,
                    }
                )
        elif kind == "reasoning":
            text = text_of(item.get("summary")) or text_of(item.get("content"))
            part = {
                "output_index": 0,
                "part_index": 0,
                "phase": "reasoning",
                "text": text,
                "annotations": [],
            }
            d.event(
                {
                    "type": "assistant_message",
                    "turn_id": d.state.turn_id,
                    "model_step_id": item.get("id"),
                    "content": [part],
                    "message_target": target,
                    "line": d.op.line,
                }
            )
        elif kind in CALLS:
            call_id = item.get("call_id") or item.get("id") or f"line-{d.op.line}"
            name = item.get("name") or kind.removesuffix("_call")
            d.call(str(call_id), str(name), item.get(CALLS[kind]), target, line=d.op.line)
        elif kind in OUTPUTS:
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                output, failed = _output(item.get("output", item.get("tools")))
                d.result(self.path, call_id, output, failed, target, line=d.op.line)

    def _compacted(self, d: Draft, payload: dict[str, Any]) -> None:
        message = payload.get("message") if isinstance(payload.get("message"), str) else ""
        summary = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": message}],
        }
        target = d.item(summary, context=False)
        history = payload.get("replacement_history")
        d.rewrite(history if isinstance(history, list) else [summary])
        d.event(
            {
                "type": "context_compacted",
                "turn_id": d.state.turn_id,
                "message": message,
                "replacement_history": isinstance(history, list),
                "message_target": target,
                "line": d.op.line,
            }
        )


def _output(output: Any) -> tuple[Any, bool]:
    """A tool output's text (or value) and whether it says the call failed."""
    if isinstance(output, dict):
        failed = output.get("success") is False
        content = output.get("content")
        return (content if content is not None else output), failed
    if isinstance(output, list):
        return text_of(output) or output, False
    return output, False

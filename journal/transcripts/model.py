"""What reading a transcript produces: one `Op` per commit, `Finding`s, and `Draft`,
the builder the two format readers share.

An import is a pure function of the file's bytes: each complete line becomes one
commit (`Op`) of one journal session, at a sequence that depends only on the lines
before it. So a re-import recomputes the same ops, skips those the store already
has (their sequence is not above the session's), and a file that grew gets only
the ops of its new lines. `Draft` assembles one op: the transcript items of the
line, the context change, the events (with the line's time), the tool calls it
opens and the results that close them (paired by call id).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from journal import Event, TimestampedEvent

EVENT_FIELD_LIMIT = 4096
"""Tool arguments and outputs longer than this (in characters, or JSON characters)
are cut in events; the whole value is in the transcript item the event points to."""

SPAWNING_TOOLS = frozenset({"Task", "Agent", "spawn_agent"})
"""Tools that start a subagent (Claude Code's Task, renamed Agent; Codex's spawn_agent):
a commit ends after each call, so that a fork can start exactly there."""

NOT_UNDERSTOOD = frozenset({"malformed", "unknown_type", "unknown_item", "incomplete"})
"""Finding kinds that make the exit status non-zero (unless --allow-unknown)."""


@dataclass
class Finding:
    """Something an import reports: where (file and 1-based line), what kind, and why."""

    path: str
    line: int | None
    kind: str
    message: str

    @property
    def not_understood(self) -> bool:
        return self.kind in NOT_UNDERSTOOD

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "kind": self.kind, "message": self.message}

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.kind}: {self.message}"


@dataclass
class Fork:
    """Where a session branches off its parent: at `sequence` when the reader knows
    it, else at the parent's commit that holds tool call `call_id`, or made the
    subagent `agent_id`, or (failing both) the parent's last commit at or before
    `started_ms`."""

    parent: str
    sequence: int | None = None
    call_id: str | None = None
    agent_id: str | None = None
    started_ms: int | None = None


@dataclass
class Op:
    """One commit of one session: a fork (sequence 0, nothing else) or a save."""

    session_id: str
    sequence: int
    line: int | None
    offset: int  # bytes of the file consumed once this op is applied
    sha256: str  # of those bytes
    timestamp_ms: int
    items: list[Any] = field(default_factory=list)
    context: list[Any] = field(default_factory=list)  # appended to the context
    rewrite: bool = False  # the context is replaced by `context`, in a new epoch
    events: list[TimestampedEvent] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)  # open tool calls
    meta: dict[str, Any] = field(default_factory=dict)  # session metadata updates
    first_user_message: str | None = None
    model_route: str | None = None
    findings: list[Finding] = field(default_factory=list)
    fork: Fork | None = None
    call_ids: list[str] = field(default_factory=list)  # tool calls this op makes
    agent_ids: list[str] = field(default_factory=list)  # subagents it names
    targets: list[dict[str, int]] = field(default_factory=list)  # its items' addresses
    ends_commit: bool = False  # it starts a subagent: the commit ends with it (a fork point)


class SessionState:
    """What a reader keeps of one session between its lines."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.sequence = -1
        self.pending: dict[str, dict[str, Any]] = {}
        self.turn_id: str | None = None
        self.last_ms = 0
        self.titled = False  # first_user_message given
        self.meta: dict[str, Any] = {}  # the session metadata given so far


class Draft:
    """The op one line makes in one session."""

    def __init__(self, state: SessionState, line: int, offset: int, sha: str, ms: int | None):
        state.sequence += 1
        self.prev_ms = state.last_ms  # the time of the session's line before this one
        if ms is not None and ms >= 0:
            state.last_ms = ms
        self.state = state
        self.op = Op(state.session_id, state.sequence, line, offset, sha, state.last_ms)

    @property
    def ms(self) -> int:
        return self.op.timestamp_ms

    def item(self, value: Any, *, context: bool = True) -> dict[str, int]:
        """Add a transcript item (and, by default, a context item); its address."""
        self.op.items.append(value)
        if context:
            self.op.context.append(value)
        target = {"checkpoint_sequence": self.op.sequence, "batch_item_count": len(self.op.items)}
        self.op.targets.append(target)  # the writer moves it when it joins ops in one commit
        return target

    def event(self, msg: dict[str, Any], ms: int | None = None) -> None:
        at = self.ms if ms is None else max(ms, 0)
        self.op.events.append(TimestampedEvent(recorded_at_ms=at, event=Event(msg=msg)))

    def call(
        self, call_id: str, name: str, arguments: Any, target: dict[str, int], **extra: Any
    ) -> None:
        """A tool call: a `tool_call_begin` event, and an open call until its result."""
        args, cut = capped(arguments)
        msg: dict[str, Any] = {
            "type": "tool_call_begin",
            "turn_id": self.state.turn_id,
            "call_id": call_id,
            "name": name,
            "arguments": args,
            "message_target": target,
            **extra,
        }
        if cut:
            msg["truncated"] = ["arguments"]
        self.event(msg)
        self.state.pending[call_id] = {"call_id": call_id, "name": name, "arguments": arguments}
        self.op.call_ids.append(call_id)
        if name in SPAWNING_TOOLS:
            self.op.ends_commit = True

    def result(
        self,
        path: str,
        call_id: str,
        output: Any,
        is_error: bool,
        target: dict[str, int],
        **extra: Any,
    ) -> None:
        """A tool result: a `tool_call_end` event naming the call it answers."""
        call = self.state.pending.pop(call_id, None)
        if call is None:
            self.op.findings.append(
                Finding(path, self.op.line, "unpaired_result", f"no earlier call {call_id!r}")
            )
        out, cut = capped(output)
        msg: dict[str, Any] = {
            "type": "tool_call_end",
            "turn_id": self.state.turn_id,
            "call_id": call_id,
            "name": call["name"] if call else None,
            "output": out,
            "is_error": is_error,
            "message_target": target,
            **extra,
        }
        if cut:
            msg["truncated"] = ["output"]
        self.event(msg)

    def rewrite(self, context: list[Any]) -> None:
        """Replace the context (compaction): a new epoch starting with `context`."""
        self.op.rewrite = True
        self.op.context = list(context)

    def meta(self, key: str, value: Any) -> None:
        """Set session metadata `key` (written only when it changes)."""
        if value is not None and self.state.meta.get(key) != value:
            self.state.meta[key] = value
            self.op.meta[key] = value

    def first_user_message(self, text: str) -> None:
        if not self.state.titled and text.strip():
            self.state.titled = True
            self.op.first_user_message = text[:1000]

    def finish(self) -> Op:
        self.op.pending = list(self.state.pending.values())
        return self.op


def fork_op(
    session_id: str, fork: Fork, offset: int, sha: str, ms: int, meta: dict[str, Any]
) -> tuple[SessionState, Op]:
    """A new session's first op: a fork of `fork.parent`, consuming nothing."""
    state = SessionState(session_id)
    state.sequence = 0
    state.last_ms = ms
    return state, Op(session_id, 0, None, offset, sha, ms, fork=fork, meta=dict(meta))


def capped(value: Any) -> tuple[Any, bool]:
    """`value` for an event: as it is, or its first EVENT_FIELD_LIMIT characters (of
    its JSON when it is not a string) and True."""
    if isinstance(value, str):
        if len(value) <= EVENT_FIELD_LIMIT:
            return value, False
        return value[:EVENT_FIELD_LIMIT], True
    if value is None or isinstance(value, (bool, int, float)):
        return value, False
    text = json.dumps(value, ensure_ascii=False)
    if len(text) <= EVENT_FIELD_LIMIT:
        return value, False
    return text[:EVENT_FIELD_LIMIT], True


def iso_ms(value: Any) -> int | None:
    """Unix milliseconds of an ISO 8601 time ("2026-01-20T11:57:17.716Z"), or None."""
    if not isinstance(value, str):
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        at = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.timezone.utc)
    ms = int(at.timestamp() * 1000)
    return ms if ms >= 0 else None


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its text blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, str):
            parts.append(block)
    return "\n".join(parts)

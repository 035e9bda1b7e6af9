"""Transcript items as a conversation: one shape for the item formats sessions hold.

A session's transcript (or, for a LangGraph thread, its checkpoint context, and for
an Agents SDK conversation, its `agents.items` events) is a list of loose JSON
items. `messages` turns them into `Message`s of one shape: a role, the text, the
tool calls an item makes and the call a tool result answers. `pair` then attaches
each tool result to the call it answers, so a page reads as a conversation.

Formats understood (anything else is shown as its raw JSON, role "item"):
- chat items: `{"role", "content"}`, content a string or a list of text blocks,
  `tool_calls` as OpenAI chat (`{"id", "function": {"name", "arguments"}}`) or
  LangChain (`{"id", "name", "args"}`), results as `{"role": "tool", "tool_call_id"}`;
- OpenAI Responses / Agents SDK items: `{"type": "message", "role", "content"}`,
  `{"type": "function_call", "call_id", "name", "arguments"}`,
  `{"type": "function_call_output", "call_id", "output"}`, `reasoning`, and other
  `*_call` / `*_call_output` items;
- LangGraph's serialised values: `["msgpack" | "json", base64]` as `JsonPlusSerializer`
  writes them, messages as LangChain's (`type` "human", "ai", "tool", "system").
  Decoding needs neither LangGraph nor LangChain: the msgpack extension types are
  read as `[module, class, fields, ...]`.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}
_ROLES.update({f"{k.capitalize()}Message": v for k, v in _ROLES.items() if k != "ai"})
_ROLES.update({"AIMessage": "assistant", "AIMessageChunk": "assistant", "developer": "system"})


@dataclass
class Call:
    """A tool call an item makes, and (after `pair`) the result that answers it."""

    call_id: str | None
    name: str
    arguments: str
    result: Message | None = None


@dataclass
class Message:
    role: str  # user, assistant, tool, system, reasoning, item
    text: str
    where: str  # the item's address, e.g. "batch 12 #2" or "event 40 #1"
    raw: Any  # the item as stored (decoded when it was serialised)
    calls: list[Call] = field(default_factory=list)
    answers: str | None = None  # the call id a tool result answers
    name: str | None = None  # a tool result's tool name, when given
    paired: bool = False  # shown under its call, not on its own

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "text": self.text,
            "where": self.where,
            "calls": [
                {
                    "call_id": c.call_id,
                    "name": c.name,
                    "arguments": c.arguments,
                    "result": c.result.to_json() if c.result else None,
                }
                for c in self.calls
            ],
            "answers": self.answers,
            "paired": self.paired,
            "raw": self.raw,
        }


def _ext(code: int, data: memoryview) -> Any:
    value = msgspec.msgpack.decode(data, ext_hook=_ext)
    if isinstance(value, list) and len(value) >= 3 and isinstance(value[2], dict):
        return {"_type": f"{value[0]}.{value[1]}", **value[2]}
    if isinstance(value, list) and len(value) >= 2 and isinstance(value[0], str):
        return {"_type": f"{value[0]}.{value[1]}", "args": value[2:] or None}
    return value


def decode_serialised(item: Any) -> Any:
    """A LangGraph-serialised value (`["msgpack" | "json", base64]`) decoded; any other
    item unchanged. A value that does not decode is returned as it is."""
    if not (isinstance(item, list) and len(item) == 2 and item[0] in ("msgpack", "json")):
        return item
    if not isinstance(item[1], str):
        return item
    try:
        data = base64.b64decode(item[1], validate=True)
        if item[0] == "json":
            return json.loads(data)
        return msgspec.msgpack.decode(data, ext_hook=_ext)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        return item


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif isinstance(block.get("refusal"), str):
                    parts.append("[refusal] " + block["refusal"])
                elif block.get("type") == "tool_use":
                    continue  # shown as the message's call (`_calls`)
                else:
                    parts.append(f"[{block.get('type', 'block')}]")
        return "\n".join(parts)
    return _json(content)


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _calls(item: dict[str, Any]) -> list[Call]:
    out = []
    for c in item.get("tool_calls") or []:
        if not isinstance(c, dict):
            continue
        fn = c.get("function")
        if isinstance(fn, dict):  # OpenAI chat
            out.append(Call(_id(c.get("id")), str(fn.get("name", "?")), _json(fn.get("arguments"))))
        else:  # LangChain, mobius
            args = c.get("args", c.get("arguments"))
            out.append(
                Call(_id(c.get("id", c.get("call_id"))), str(c.get("name", "?")), _json(args))
            )
    content = item.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_use":  # Anthropic
            out.append(
                Call(_id(block.get("id")), str(block.get("name", "?")), _json(block.get("input")))
            )
    return out


def _tool_results(item: dict[str, Any], where: str) -> list[Message] | None:
    """An Anthropic user message of `tool_result` blocks as one tool message per
    block, each answering its `tool_use_id` (None: not such a message)."""
    content = item.get("content")
    if item.get("role") != "user" or not isinstance(content, list) or not content:
        return None
    if not all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    return [
        Message("tool", _text(b.get("content")), where, b, answers=_id(b.get("tool_use_id")))
        for b in content
    ]


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def message(item: Any, where: str) -> Message:
    """One item as a `Message` (decoded first when it is LangGraph-serialised)."""
    item = decode_serialised(item)
    if not isinstance(item, dict):
        return Message("item", _json(item), where, item)
    kind = item.get("type")
    role = item.get("role")
    if isinstance(kind, str) and kind.endswith("_call_output"):
        out = item.get("output")
        return Message("tool", _text(out), where, item, answers=_id(item.get("call_id")))
    if isinstance(kind, str) and kind.endswith("_call"):
        name = item.get("name") or kind.removesuffix("_call")
        args = item.get("arguments", item.get("action", item.get("input")))
        call = Call(_id(item.get("call_id", item.get("id"))), str(name), _json(args))
        return Message("assistant", "", where, item, calls=[call])
    if kind == "reasoning":
        summary = item.get("summary")
        return Message("reasoning", _text(summary) or _text(item.get("content")), where, item)
    if role is None and isinstance(kind, str) and kind in _ROLES:
        role = _ROLES[kind]  # LangChain message
    if role is None and isinstance(item.get("_type"), str):
        role = _ROLES.get(item["_type"].rsplit(".", 1)[-1])
    if not isinstance(role, str):
        return Message("item", _json(item), where, item)
    role = _ROLES.get(role, role)
    msg = Message(role, _text(item.get("content")), where, item, calls=_calls(item))
    if role == "tool":
        msg.answers = _id(item.get("tool_call_id", item.get("call_id")))
        msg.name = _id(item.get("name"))
    return msg


def pair(messages: list[Message]) -> list[Message]:
    """Attach each tool result to the earlier call it answers (oldest first in,
    the same list out); a result whose call is not in the list stays on its own."""
    open_calls: dict[str, Call] = {}
    for m in messages:
        for c in m.calls:
            if c.call_id is not None:
                open_calls[c.call_id] = c
        if m.answers is not None and m.answers in open_calls:
            call = open_calls.pop(m.answers)
            if call.result is None:
                call.result = m
                m.paired = True
    return messages


def conversation(items: list[tuple[str, Any]]) -> list[Message]:
    """(address, item) pairs, oldest first, as paired messages."""
    out: list[Message] = []
    for where, item in items:
        results = _tool_results(item, where) if isinstance(item, dict) else None
        out += results if results is not None else [message(item, where)]
    return pair(out)

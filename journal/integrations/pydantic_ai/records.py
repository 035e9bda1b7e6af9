"""What a conversation looks like in a journal session: the record and the entries.

- The record (pydantic-ai's `ConversationRecord`) lives in the session's
  checkpoint metadata under `META_KEY`, with the location of its head and of each
  branch tip; `None` there is a deleted conversation whose session is kept for the
  forks that share its entries. Every write of a record is one checkpoint save
  whose sequence is the stored one plus one.
- Each entry is one journal event `{"type": ENTRY, "id", "parent_id",
  "parent_at", "message"}`; `parent_at` locates the parent entry: a positive
  integer is an event sequence of the same session, a negative one an offset back
  from this event (a parent stored by the same commit), `[session id, sequence]`
  an event of another session (an ancestor, for a fork), and `null` says this is
  the first entry of a history. An entry's location, `(session id, event
  sequence)`, never changes: the log only grows.

Messages are stored as pydantic-ai's `ModelMessagesTypeAdapter` dumps them in JSON
mode (its full-fidelity form), records as `pydantic.TypeAdapter(ConversationRecord)`
does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    UserPromptPart,
)

from journal import Checkpoint, CorruptionError

META_KEY = "pydantic_ai"
"""The checkpoint metadata key holding a conversation's record."""

ENTRY = "pydantic_ai.entry"
"""The event type of one conversation entry."""

ORIGIN_LABEL = "pydantic-ai"
"""The `session_context.origin_label` of every session this integration writes."""

FORMAT = 1

Location = tuple[str, int]
"""Where an entry is stored: (journal session id, event sequence)."""

_RECORD = pydantic.TypeAdapter(ConversationRecord)


@dataclass(frozen=True)
class Stored:
    """A session's conversation state: its record (None: deleted) and where it points."""

    record: ConversationRecord | None
    head_at: Location | None
    branches_at: dict[str, Location]


@dataclass(frozen=True)
class RawEntry:
    """One entry as read from the log, its message still JSON."""

    id: str
    parent_id: str | None
    parent_at: Location | None
    kind: str
    message: Any
    at: Location


def encode_location(loc: Location | None, here: str | None = None) -> Any:
    """A location as JSON: a bare sequence within `here`, else `[session, sequence]`."""
    if loc is None:
        return None
    if loc[0] == here:
        return loc[1]
    return [loc[0], loc[1]]


def decode_location(value: Any, here: str, what: str, at: int = 0) -> Location | None:
    """A location read from session `here` (`at`: the sequence of the event it is in)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return (here, value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < at + value < at:
        return (here, at + value)
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
        and value[1] > 0
    ):
        return (value[0], value[1])
    raise CorruptionError(f"session {here!r}: {what} is not an entry location: {value!r}")


def encode_meta(stored: Stored, session_id: str) -> dict[str, Any]:
    record = stored.record
    return {
        "v": FORMAT,
        "record": None if record is None else _RECORD.dump_python(record, mode="json"),
        "head_at": encode_location(stored.head_at, session_id),
        "branches_at": {
            tip: encode_location(loc, session_id) for tip, loc in stored.branches_at.items()
        },
    }


def decode_meta(cp: Checkpoint) -> Stored:
    """The conversation state a checkpoint holds (CorruptionError if it is not one)."""
    sid = cp.session_id
    meta = cp.metadata.get(META_KEY)
    if not isinstance(meta, dict) or meta.get("v") != FORMAT:
        raise CorruptionError(f"session {sid!r} holds no pydantic-ai conversation record")
    try:
        raw = meta.get("record")
        record = None if raw is None else _RECORD.validate_python(raw)
    except pydantic.ValidationError as exc:
        raise CorruptionError(
            f"session {sid!r}: its conversation record does not decode: {exc}"
        ) from None
    head_at = decode_location(meta.get("head_at"), sid, "the record's head")
    tips = meta.get("branches_at") or {}
    if not isinstance(tips, dict):
        raise CorruptionError(f"session {sid!r}: branches_at is not an object")
    branches_at: dict[str, Location] = {}
    for tip, value in tips.items():
        loc = decode_location(value, sid, f"branch tip {tip!r}")
        if loc is not None:
            branches_at[tip] = loc
    if record is not None and record.head_id is not None and head_at is None:
        raise CorruptionError(f"session {sid!r}: the record's head has no location")
    return Stored(record, head_at, branches_at)


def is_conversation(cp: Checkpoint) -> bool:
    return cp.session_context.origin_label == ORIGIN_LABEL and META_KEY in cp.metadata


def entry_event(
    entry_id: str, parent_id: str | None, parent_at: Any, kind: str, message: Any
) -> dict[str, Any]:
    """The event `msg` of one entry (`parent_at` encoded already, `message` as JSON)."""
    msg: dict[str, Any] = {
        "type": ENTRY,
        "id": entry_id,
        "parent_id": parent_id,
        "parent_at": parent_at,
        "message": message,
    }
    if kind != "message":
        msg["kind"] = kind
    return msg


def raw_entry(msg: Any, at: Location) -> RawEntry:
    """An entry event's content, checked for shape (CorruptionError otherwise)."""
    sid, seq = at
    if not isinstance(msg, dict) or msg.get("type") != ENTRY:
        raise CorruptionError(f"session {sid!r}: event {seq} is not a conversation entry")
    entry_id = msg.get("id")
    parent_id = msg.get("parent_id")
    if not isinstance(entry_id, str) or not (parent_id is None or isinstance(parent_id, str)):
        raise CorruptionError(f"session {sid!r}: event {seq} has a malformed entry id")
    parent_at = decode_location(msg.get("parent_at"), sid, f"event {seq}'s parent", seq)
    if (parent_id is None) != (parent_at is None):
        raise CorruptionError(f"session {sid!r}: event {seq} names a parent without its location")
    kind = msg.get("kind", "message")
    return RawEntry(entry_id, parent_id, parent_at, str(kind), msg.get("message"), at)


def dump_messages(messages: list[ModelMessage]) -> list[Any]:
    dumped: list[Any] = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    return dumped


def load_entries(raws: list[RawEntry]) -> list[ConversationEntry]:
    """The entries of `raws`, their messages decoded in one validation."""
    try:
        messages = ModelMessagesTypeAdapter.validate_python([raw.message for raw in raws])
    except pydantic.ValidationError as exc:
        where = ", ".join(f"{sid}@{seq}" for sid, seq in (raw.at for raw in raws[:3]))
        raise CorruptionError(f"conversation entries ({where}...) do not decode: {exc}") from None
    return [
        ConversationEntry(id=raw.id, parent_id=raw.parent_id, message=message, kind=raw.kind)  # type: ignore[arg-type]
        for raw, message in zip(raws, messages, strict=True)
    ]


def first_user_text(messages: list[ModelMessage]) -> str | None:
    """The first user prompt, when it is text: the session's title in `journal ls`."""
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content[:200] or None
    return None

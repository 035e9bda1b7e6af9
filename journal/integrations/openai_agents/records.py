"""The records a `JournalSession` writes, item positions, and strict decoding.

An `add_items` call is one event `{"type": ITEMS, "items": [...]}`, a pop one
`{"type": POP, "target": [depth, sequence, index]}`, a clear one `{"type": CLEAR}`,
a compaction's suffix replacement one `{"type": REPLACE, "drop": [[depth,
sequence, index], ...], "items": [...]}` (the dropped items go as if popped, in
the order listed, then the items are added, in one record).
A branch lists its ancestors in its checkpoint metadata under `META_KEY`. A
record of ours that does not decode raises `CorruptionError` naming the session
and the event: nothing is skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from journal import Checkpoint, CorruptionError

ITEMS = "agents.items"
"""Event type of one `add_items` call: `{"type": ITEMS, "items": [...]}`."""
POP = "agents.pop"
"""Event type of one `pop_item`: `{"type": POP, "target": [depth, sequence, index]}`."""
CLEAR = "agents.clear"
"""Event type of one `clear_session`: `{"type": CLEAR}`."""
REPLACE = "agents.replace"
"""Event type of one compaction replacement: `{"type": REPLACE, "drop": [target, ...],
"items": [...]}`; each target is a pop's, `items` (possibly empty) an add's."""

META_KEY = "journal.openai_agents"
"""Checkpoint metadata key: `{"v": 1, "chain": [[session_id, seq, index, events], ...]}`."""

# (depth in the chain, event sequence, index in the batch); newest first is
# depth ascending, then (sequence, index) descending.
Key = tuple[int, int, int]

ALL = 1 << 62
""""Every item of this event" as an index bound."""


def sort_key(key: Key) -> tuple[int, int, int]:
    """Sort key of an item position, ascending = oldest first (deeper ancestors first)."""
    return (-key[0], key[1], key[2])


def older(a: Key, b: Key) -> bool:
    """Whether item position `a` is older than `b`."""
    return sort_key(a) < sort_key(b)


@dataclass(frozen=True)
class Segment:
    """One session of a branch chain: its items up to (seq, index), its events up to `events`."""

    session_id: str
    item_seq: int | None = None  # None: no bound (the session itself)
    item_index: int = 0
    events: int | None = None


def chain_of(session_id: str, cp: Checkpoint | None) -> list[Segment]:
    """The branch chain of a session: itself, then the ancestors its checkpoint lists."""
    chain = [Segment(session_id)]
    if cp is None:
        return chain
    meta = cp.metadata.get(META_KEY)
    if meta is None:
        return chain
    try:
        entries = meta["chain"]
        for sid, seq, index, events in entries:
            if not (isinstance(sid, str) and all(is_count(v) for v in (seq, index, events))):
                raise TypeError
            chain.append(Segment(sid, seq, index, events))
    except (TypeError, KeyError, ValueError):
        raise CorruptionError(
            f"session {session_id!r}: checkpoint {cp.sequence} has malformed"
            f" {META_KEY!r} metadata: {meta!r}"
        ) from None
    return chain


def items_of(session_id: str, seq: int, msg: dict[str, Any], reading_for: str) -> list[Any]:
    """The items of an ITEMS event of `session_id`, read for the session `reading_for`."""
    items = msg.get("items")
    if not isinstance(items, list) or not items:
        raise damaged(session_id, seq, "no item list", reading_for)
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise damaged(session_id, seq, f"item {index} is not a JSON object", reading_for)
    return items


def target_of(session_id: str, seq: int, msg: dict[str, Any], depth: int, reading_for: str) -> Key:
    """The item a POP event at `depth` of the chain names, as a position in that chain."""
    t = msg.get("target")
    if not (isinstance(t, list) and len(t) == 3 and all(is_count(v) for v in t)):
        raise damaged(session_id, seq, f"bad pop target {t!r}", reading_for)
    return (depth + t[0], t[1], t[2])


def replaced_of(
    session_id: str, seq: int, msg: dict[str, Any], depth: int, reading_for: str
) -> tuple[list[Any], list[Key]]:
    """The items and the dropped positions of a REPLACE event at `depth` of the chain."""
    items = msg.get("items")
    drop = msg.get("drop")
    if not isinstance(items, list) or not isinstance(drop, list):
        raise damaged(session_id, seq, "no item or drop list", reading_for)
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise damaged(session_id, seq, f"item {index} is not a JSON object", reading_for)
    keys: list[Key] = []
    for t in drop:
        if not (isinstance(t, list) and len(t) == 3 and all(is_count(v) for v in t)):
            raise damaged(session_id, seq, f"bad drop target {t!r}", reading_for)
        if t[0] == 0 and t[1] >= seq:
            raise damaged(session_id, seq, f"drop target {t!r} is not older", reading_for)
        keys.append((depth + t[0], t[1], t[2]))
    return items, keys


def damaged(session_id: str, seq: int, what: str, reading_for: str) -> CorruptionError:
    return CorruptionError(
        f"session {session_id!r}, event {seq}: undecodable agents record ({what})"
        + ("" if session_id == reading_for else f" (read for {reading_for!r})")
    )


encode = msgspec.msgpack.Encoder().encode
"""An item as msgpack (the form the cache keeps)."""
decode = msgspec.msgpack.Decoder().decode
"""An item from its msgpack."""


def decode_all(vals: list[bytes]) -> list[Any]:
    """Decode many encoded items with one call (a msgpack array of them)."""
    n = len(vals)
    if n < 16:
        head = bytes([0x90 | n])
    elif n < 1 << 16:
        head = b"\xdc" + n.to_bytes(2, "big")
    else:
        head = b"\xdd" + n.to_bytes(4, "big")
    out: list[Any] = decode(head + b"".join(vals))
    return out


def all_dicts(items: list[Any]) -> bool:
    """Whether every item is a plain dict (the common single item checked first)."""
    if len(items) == 1:
        return type(items[0]) is dict
    return all(type(item) is dict for item in items)


def is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def first_user_text(items: list[Any]) -> str | None:
    """The start of the first user message's text (the catalog's `first_user_message`)."""
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content[:200]
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        return cast(str, part["text"])[:200]
    return None

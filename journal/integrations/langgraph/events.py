"""The events the saver writes: their messages, and what tells two of them apart."""

from __future__ import annotations

import os
import random
from typing import Any

from journal import JournalEvent

EV_CHECKPOINT = "langgraph_checkpoint"
EV_WRITES = "langgraph_writes"
EV_DELETE = "langgraph_delete"

# The nonce (`n`) of each event, which tells apart two events at the same sequence
# (`mark`). Not a secret: a generator seeded from the OS once, and again in a
# forked child (which must not repeat its parent's), instead of a `getrandom` call
# per event (`secrets.token_hex`).
_nonce_rng = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_nonce_rng.seed)


def nonce() -> str:
    """A new event's `n` field."""
    return f"{_nonce_rng.getrandbits(32):08x}"


def mark(ev: JournalEvent) -> str:
    """What tells this event from another one at the same sequence (a log deleted
    and created again, or cut by a repair, and written again)."""
    n = ev.event.msg.get("n")
    return f"{ev.sequence}:{ev.event.msg.get('type')}:{n if isinstance(n, str) else ''}"


def checkpoint_msg(
    checkpoint_id: str,
    parent: Any,
    ts: Any,
    metadata: dict[str, Any],
    header: list[str],
    channels: dict[str, list[str]],
    ctx_channel: str | None,
) -> dict[str, Any]:
    """A put's event; its `seq`, `ctx` ([channel, items, epoch]) and `fp` are set for
    the head it is saved on."""
    return {
        "type": EV_CHECKPOINT,
        "n": nonce(),
        "seq": 0,
        "id": checkpoint_id,
        "parent": parent,
        "ts": ts,
        "metadata": metadata,
        "header": header,
        "channels": channels,
        "ctx": [ctx_channel, 0, 0],
    }


def writes_msg(
    checkpoint_id: str, task_id: str, task_path: str, entries: list[list[Any]], fp: list[Any]
) -> dict[str, Any]:
    """A `put_writes`'s event: `entries` are `[idx, channel, [type, base64]]`."""
    return {
        "type": EV_WRITES,
        "n": nonce(),
        "id": checkpoint_id,
        "task": task_id,
        "path": task_path,
        "w": entries,
        "fp": fp,
    }


def delete_msg(ids: list[str], reason: str, fp: list[Any]) -> dict[str, Any]:
    """The event that hides the checkpoints `ids` (and their writes)."""
    return {"type": EV_DELETE, "n": nonce(), "ids": ids, "reason": reason, "fp": fp}

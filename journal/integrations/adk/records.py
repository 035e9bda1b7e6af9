"""What an ADK session's journal commits hold, and how they read back.

A checkpoint's metadata holds, under "adk", what ADK keeps in its sessions
table: the names, the session's own state (no `app:`, `user:` or `temp:`
keys), the creation and last update times (float seconds, as ADK's), a nonce
that tells incarnations of one id apart, the fork chain, and under "scoped" the
`app:`/`user:` values of the session's last commit that carried any, with
their clock and sequence (None when its last commit carried none; see
`scoped`). Each ADK event is
one journal event `{"type": "adk.event", "event": <the event as JSON>}` (the
JSON of `Event.model_dump_json(exclude_none=True)`, bytes as base64, as ADK's
SQLite service stores it), read back with `Event.model_validate_json`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import msgspec
from google.adk.events.event import Event as AdkEvent

from journal import CorruptionError, Event, JournalEvent

EVENT_TYPE = "adk.event"
META_KEY = "adk"
META_VERSION = 1

_json_encode = msgspec.json.encode


def new_meta(
    app_name: str,
    user_id: str,
    session_id: str,
    state: dict[str, Any],
    now: float,
    chain: list[list[Any]] | None = None,
) -> dict[str, Any]:
    """The metadata of a new session (or fork): its state, times, nonce and fork chain."""
    return {
        META_KEY: {
            "v": META_VERSION,
            "app": app_name,
            "user": user_id,
            "id": session_id,
            "nonce": uuid.uuid4().hex,
            "state": state,
            "created": now,
            "updated": now,
            "chain": chain or [],
            "scoped": None,
        }
    }


def meta_of(metadata: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """The ADK part of a session's checkpoint metadata, checked."""
    meta = None if metadata is None else metadata.get(META_KEY)
    if (
        not isinstance(meta, dict)
        or meta.get("v") != META_VERSION
        or not isinstance(meta.get("state"), dict)
        or not isinstance(meta.get("chain"), list)
    ):
        raise CorruptionError(f"journal session {key!r} has no ADK session metadata")
    return meta


def marker(meta: dict[str, Any], sequence: int) -> str:
    """The storage revision marker of a session as read: its incarnation and sequence."""
    return f"{meta['nonce']}:{sequence}"


def encode_event(event: AdkEvent) -> Event:
    """The journal event holding one ADK event."""
    return Event(
        msg={"type": EVENT_TYPE, "event": json.loads(event.model_dump_json(exclude_none=True))}
    )


def decode_event(jev: JournalEvent, key: str) -> AdkEvent:
    """The ADK event a journal event holds (CorruptionError if it holds none)."""
    msg = jev.event.msg
    data = msg.get("event")
    if msg.get("type") != EVENT_TYPE or not isinstance(data, dict):
        raise CorruptionError(
            f"journal session {key!r}: event {jev.sequence} is not an ADK event"
            f" (type {msg.get('type')!r})"
        )
    try:
        return AdkEvent.model_validate_json(_json_encode(data))
    except ValueError as exc:
        raise CorruptionError(
            f"journal session {key!r}: event {jev.sequence} does not decode as an ADK event: {exc}"
        ) from exc


def first_user_text(event: AdkEvent) -> str | None:
    """The text of a user's message, for the journal session's title."""
    if event.author != "user" or event.content is None or not event.content.parts:
        return None
    texts = [p.text for p in event.content.parts if p.text]
    return "".join(texts)[:512] or None

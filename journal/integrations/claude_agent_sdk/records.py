"""The records a `JournalSessionStore` writes, and their strict decoding.

One `append(key, entries)` is ONE journal event, its own commit:

    {"type": ENTRIES, "lines": ["<entry as JSON>", ...], "summary": {...}}
    {"type": ENTRIES, "lines": [...], "summary_at": N}

`lines` holds each entry as the JSON text `json.dumps` makes of it (no spaces,
non-ASCII kept as UTF-8; an entry holding a lone surrogate, which is not UTF-8,
is written with `\\u` escapes instead). `load` returns `json.loads` of each line:
exactly the round trip the SDK names as the one invariant, and it keeps what the
journal's own JSON values could not (integers beyond 64 bits, NaN, lone
surrogates, key order). `summary` is the main transcript's
`fold_session_summary` data after this batch, written when the batch changed it;
otherwise `summary_at` names the event that holds the current one. Subkeys carry
neither (the SDK folds only main transcripts).

A session's checkpoint (written once, when it is created) carries `META_KEY`:
the SDK key it holds, so tools can map a journal session back to its key.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from journal import CorruptionError, InvalidInputError, JournalEvent

ENTRIES = "claude_sdk.entries"
"""Event type of one `append` call (see the module docstring)."""

META_KEY = "journal.claude_agent_sdk"
"""Checkpoint metadata key: `{"key": {"project_key": ..., "session_id": ...[, "subpath": ...]}}`
(`"placeholder": true` on a main session made only to parent a subkey)."""


# Decodes exactly what `json.loads` does for what `json.dumps` writes, except NaN,
# Infinity and lone surrogates, which it refuses (and `decode_lines` then falls back).
_ARRAY = msgspec.json.Decoder()


def encode_entries(entries: list[Any], where: str) -> tuple[list[str], list[str | None]]:
    """Each entry's JSON line and its `uuid` (None without one); `InvalidInputError`
    naming the entry when one is not a JSON object."""
    lines: list[str] = []
    uuids: list[str | None] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InvalidInputError(
                f"{where}: entry {i} is a {type(entry).__name__}, not a JSON object"
            )
        try:
            text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: keep it as a \u escape
                text = json.dumps(entry, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"{where}: entry {i} is not JSON ({exc})") from None
        lines.append(text)
        uid = entry.get("uuid")
        uuids.append(uid if isinstance(uid, str) else None)
    return lines, uuids


def uuids_of(entries: list[dict[str, Any]]) -> list[Any]:
    """The `uuid` of each entry (None without one; `KeyState.apply` keeps the strings)."""
    return [e.get("uuid") for e in entries]


def entries_msg(
    lines: list[str], summary: dict[str, Any] | None, summary_at: int | None
) -> dict[str, Any]:
    """The event of one append: its lines and the summary (or where it is)."""
    msg: dict[str, Any] = {"type": ENTRIES, "lines": lines}
    if summary is not None:
        msg["summary"] = summary
    elif summary_at is not None:
        msg["summary_at"] = summary_at
    return msg


@dataclass
class Batch:
    """One decoded append event: its sequence, time, lines and summary fields."""

    sequence: int
    recorded_at_ms: int
    lines: list[str]
    summary: dict[str, Any] | None
    summary_at: int | None


def decode(journal_id: str, ev: JournalEvent) -> Batch | None:
    """The batch an event holds (None: not one of ours); `CorruptionError` naming the
    session and event when it is ours and malformed: nothing is skipped."""
    msg = ev.event.msg
    if msg.get("type") != ENTRIES:
        return None
    lines = msg.get("lines")
    summary = msg.get("summary")
    summary_at = msg.get("summary_at")
    # The lines themselves are checked where they are parsed (`decode_lines`).
    if (
        type(lines) is not list
        or (summary is not None and not isinstance(summary, dict))
        or (summary_at is not None and (type(summary_at) is not int or summary_at < 1))
    ):
        raise CorruptionError(
            f"session {journal_id!r}: event {ev.sequence} is a malformed {ENTRIES} record"
        )
    return Batch(ev.sequence, ev.recorded_at_ms, lines, summary, summary_at)


def decode_lines(journal_id: str, batch: Batch) -> list[Any]:
    """The entries of a batch, as `json.loads` gives them back."""
    lines = batch.lines
    out: Any = None
    # All lines in one call: several times faster than `json.loads` per line. It
    # refuses NaN, Infinity and \ud800 escapes (json.dumps writes them): the slow way.
    with contextlib.suppress(msgspec.DecodeError, TypeError):
        out = _ARRAY.decode("[" + ",".join(lines) + "]")
    if type(out) is not list or len(out) != len(lines):
        try:
            out = [json.loads(line) for line in lines]
        except (TypeError, ValueError):
            out = None
    if out is not None and all(type(e) is dict for e in out):
        return cast("list[Any]", out)
    raise CorruptionError(
        f"session {journal_id!r}: event {batch.sequence} holds a line that is not a JSON object"
    )


class Clock:
    """Unix milliseconds for `recorded_at_ms`, strictly increasing within this process
    (so back-to-back appends get distinct `mtime`s, as in the SDK's in-memory store)."""

    def __init__(self) -> None:
        self.last = 0
        self._guard = threading.Lock()

    def now_ms(self) -> int:
        with self._guard:
            now = int(time.time() * 1000)
            if now <= self.last:
                now = self.last + 1
            self.last = now
            return now

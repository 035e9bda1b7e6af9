"""A transcript file read as JSON lines: each line's number, end offset and prefix hash.

Both formats are JSON Lines that their CLI appends to. A line is complete when it
ends with a newline. The last line of a file may lack one: when it still parses it
is complete (a writer stopped right before its newline) and is read; when it does
not, it is a half-written line (the CLI was killed, or is writing it right now) and
is reported as `incomplete` and left for a later import, which reads it once it is
whole. Every other line that is not a JSON object is reported as `malformed`.

Each line carries the SHA-256 of the file's bytes up to its end: the importer
records the hash of what it consumed, and a later import of the same file checks
that those bytes are unchanged before it appends what follows them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from journal import InvalidInputError, check_json_value

READ_LIMIT = 1 << 30
"""The longest line read (1 GiB): a longer one is reported as malformed."""


@dataclass
class Line:
    """One line of a transcript file: its 1-based number, where it ends, the hash of
    the file up to that end, and what it holds (a JSON object, or an error)."""

    number: int
    start: int
    end: int
    sha256: str  # of the file's bytes before `end`
    start_sha256: str  # of the file's bytes before `start`
    entry: dict[str, Any] | None
    raw: bytes
    error: str | None = None  # why `entry` is None
    incomplete: bool = False  # the last line, without a newline, that does not parse


def read_lines(f: BinaryIO, limit: int | None = None) -> Iterator[Line]:
    """The lines of `f` from its start, up to byte `limit` (None: to its end)."""
    digest = hashlib.sha256()
    offset = 0
    number = 0
    while limit is None or offset < limit:
        cap = READ_LIMIT if limit is None else min(READ_LIMIT, limit - offset)
        raw = f.readline(cap)
        if not raw:
            return
        number += 1
        start, offset = offset, offset + len(raw)
        complete = raw.endswith(b"\n")
        entry, error = _decode(raw)
        before = digest.hexdigest()
        if not complete and entry is None:
            yield Line(number, start, start, before, before, None, raw, error, True)
            return
        digest.update(raw)
        yield Line(number, start, offset, digest.hexdigest(), before, entry, raw, error)


def _decode(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    text = raw.strip()
    if not text:
        return None, "an empty line"
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    except ValueError as exc:  # NaN or Infinity, which JSON values in journal cannot be
        return None, f"not JSON as journal stores it ({exc})"
    except RecursionError:
        return None, "not JSON (nested too deeply)"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    try:  # what the store would refuse (an integer beyond 64 bits, a lone surrogate)
        check_json_value(value, "line")
    except InvalidInputError as exc:
        return None, f"not JSON as journal stores it ({exc})"
    return value, None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def empty_sha256() -> str:
    """The hash of no bytes: what a session that consumed nothing of its file records."""
    return hashlib.sha256().hexdigest()

"""The committed bytes of a session log after a commit boundary, as stored.

`read_tail(directory, start)` reads the log's segment files from log position
`start` (a commit boundary: the end of a commit, or 0) and returns the bytes up
to the end of the last complete commit, one `Piece` per segment, exactly as the
files hold them (checksummed frames, compressed as they are). It reads nothing
before `start`, so shipping after each commit costs what the commit wrote, not
what the log holds. It decides where the committed prefix ends as the local
readers do (FORMAT.md sections 3 and 5): a zero header, the end of the file, a
frame cut short or failing its CRC ends it, and only a commit-closing record
makes the bytes before it count. A sealed segment is followed into its successor
only when it ends exactly at the end of its file and the successor's base is its
end; a crash's leftovers never pass.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..errors import StorageError
from ..layout import IDENTITY_FILE, LOG_DIR
from ..record import END, FLAG_COMMIT, OK, parse_at
from ..segment import SEGMENT_HEADER_SIZE


class Piece(NamedTuple):
    """Committed log bytes within one segment."""

    segment_base: int
    start: int  # log position of body[0]
    end: int  # start + len(body): the end of a commit
    body: bytes
    commits: int


def _segments(directory: str) -> list[int]:
    """The bases of the log's segment files, in order."""
    try:
        names = os.listdir(os.path.join(directory, LOG_DIR))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {os.path.join(directory, LOG_DIR)}: {exc}") from exc
    bases = []
    for name in names:
        stem, dot, ext = name.partition(".")
        if dot and ext == "seg" and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def _read_from(path: str, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise StorageError(f"cannot read {path} at offset {offset}: {exc}") from exc


def read_tail(directory: str, start: int, *, limit_bytes: int | None = None) -> list[Piece]:
    """The committed bytes after log position `start` (see the module docstring).
    `limit_bytes`: stop at the first commit end at least that far past `start`."""
    bases = _segments(directory)
    older = [b for b in bases if b <= start]
    if not older:
        return []
    pieces: list[Piece] = []
    taken = 0
    i = bases.index(older[-1])
    pos = start
    while i < len(bases):
        base = bases[i]
        path = os.path.join(directory, LOG_DIR, f"{base:020d}.seg")
        offset = pos - base + SEGMENT_HEADER_SIZE
        data = _read_from(path, offset)
        off = 0
        committed = 0
        commits = 0
        outcome = END
        while off < len(data):
            outcome, _, flags, _, end = parse_at(data, off)
            if outcome != OK:
                break
            off = end
            if flags & FLAG_COMMIT:
                committed = off
                commits += 1
                if limit_bytes is not None and taken + committed >= limit_bytes:
                    break
        else:
            outcome = END
        if committed:
            pieces.append(Piece(base, pos, pos + committed, data[:committed], commits))
            taken += committed
        if limit_bytes is not None and taken >= limit_bytes:
            break
        # On into the next segment only past a whole sealed one.
        sealed_end = pos + len(data)
        if (
            i + 1 >= len(bases)
            or outcome != END
            or off != len(data)
            or committed != len(data)
            or bases[i + 1] != sealed_end
        ):
            break
        pos = sealed_end
        i += 1
    return pieces


def committed_end(directory: str, start: int = 0) -> int:
    """The end of the log's committed prefix, read from `start` (a commit boundary)."""
    end = start
    while True:
        pieces = read_tail(directory, end, limit_bytes=64 << 20)
        if not pieces:
            return end
        end = pieces[-1].end


def identity_bytes(directory: str) -> bytes:
    """The session directory's SESSION file, exactly as stored."""
    path = os.path.join(directory, IDENTITY_FILE)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise StorageError(f"cannot read the session identity {path}: {exc}") from exc

"""The committed bytes of a session log after a commit boundary, as stored.

`read_tail(directory, start)` reads the log's segment files from log position
`start` (a commit boundary: the end of a commit, or 0) and returns the bytes up
to the end of the last complete commit, one `Piece` per segment, exactly as the
files hold them (checksummed frames, compressed as they are). It reads nothing
before `start`, and of the bytes after it only what it parses plus one block
(64 KiB, growing as records need), never the whole preallocated space: shipping
after each commit costs what the commit wrote, not what the log holds.

It decides where the committed prefix ends as the local readers do (FORMAT.md
sections 3 and 5): a zero header, the end of the file, a frame cut short or
failing its CRC ends it, and only a commit-closing record makes the bytes before
it count. A segment is followed into its successor only when its bytes end
exactly at the end of its file and the successor's base is that end (a SEAL's
successor, or a format-1 segment sealed without one); a crash's leftovers never
pass. In a segment that has a successor (sealed: never written again but for its
SEAL) anything else is damage, or `compact` rewrote the segment so that `start`
is no record boundary any more (compaction keeps the positions of pinned records
and stretch ends only, FORMAT.md section 11): a `CorruptionError` then, never
a silent stop.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..errors import CorruptionError, StorageError
from ..layout import IDENTITY_FILE, LOG_DIR
from ..record import END, FLAG_COMMIT, HEADER_SIZE, OK, SHORT, parse_at
from ..segment import SEAL_SIZE, SEGMENT_HEADER_SIZE, SEGMENT_SUFFIX, segment_name

BLOCK = 64 << 10  # the first read of a segment's bytes after `start`


class Piece(NamedTuple):
    """Committed log bytes within one segment."""

    segment_base: int
    start: int  # log position of body[0]
    end: int  # start + len(body): the end of a commit
    body: bytes
    commits: int  # commit-closing records in body (SEAL and DICT records count)


def segment_bases(directory: str) -> list[int]:
    """The bases of the session log's segment files, in order."""
    log_dir = os.path.join(directory, LOG_DIR)
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {log_dir}: {exc.strerror}") from exc
    bases = []
    for name in names:
        stem = name[: -len(SEGMENT_SUFFIX)]
        if name.endswith(SEGMENT_SUFFIX) and stem.isdigit() and segment_name(int(stem)) == name:
            bases.append(int(stem))
    return sorted(bases)


class _Scan(NamedTuple):
    data: bytes  # the bytes read from `start`'s offset (a prefix of the file's rest)
    committed: int  # bytes of `data` up to the end of its last complete commit
    commits: int
    clean_end: bool  # parsing ended exactly at the end of the file, all committed
    stop: int  # offset (from `start`'s) where parsing stopped
    rest: int  # file bytes from `stop` to the end of the file


def _scan_segment(path: str, offset: int, want: int | None) -> _Scan:
    """Parse the frames of `path` from file offset `offset` (see the module doc).
    `want`: stop at the first commit end at least that many bytes in."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return _Scan(b"", 0, 0, False, 0, 0)
    except OSError as exc:
        raise StorageError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        buf = b""
        at_eof = False

        def more(need: int) -> None:
            nonlocal at_eof, buf
            step = max(need, BLOCK, len(buf))
            try:
                got = os.pread(fd, step, offset + len(buf))
            except OSError as exc:
                raise StorageError(
                    f"read failed on {path} at offset {offset + len(buf)}: {exc.strerror}"
                ) from exc
            buf += got  # (grows at least twofold: copies stay linear in the bytes read)
            at_eof = len(got) < step or offset + len(buf) >= size

        more(0)
        off = committed = commits = 0
        outcome = END
        while True:
            if not at_eof and len(buf) - off < HEADER_SIZE:
                more(HEADER_SIZE)
                continue
            outcome, _, flags, _, end = parse_at(buf, off)
            if outcome == SHORT and not at_eof and len(buf) < end <= size - offset:
                more(end - len(buf))
                continue
            if outcome != OK:
                break
            off = end
            if flags & FLAG_COMMIT:
                committed, commits = off, commits + 1
                if want is not None and committed >= want:
                    break
        data = buf[:committed]
        clean = outcome == END and at_eof and off == len(buf) == committed
        return _Scan(data, committed, commits, clean, off, max(size - offset - off, 0))
    finally:
        os.close(fd)


def _read(directory: str, start: int, limit: int | None) -> list[Piece]:
    bases = segment_bases(directory)
    older = [b for b in bases if b <= start]
    if not older:
        return []
    i = bases.index(older[-1])
    pieces: list[Piece] = []
    pos = start
    taken = 0
    while True:
        base = bases[i]
        path = os.path.join(directory, LOG_DIR, segment_name(base))
        want = None if limit is None else max(limit - taken, 1)
        scan = _scan_segment(path, pos - base + SEGMENT_HEADER_SIZE, want)
        if scan.committed:
            pieces.append(Piece(base, pos, pos + scan.committed, scan.data, scan.commits))
            taken += scan.committed
        if limit is not None and taken >= limit:
            return pieces
        has_successor = i + 1 < len(bases)
        if not scan.clean_end:
            # What a roll in progress, or one a crash cut short, leaves: at most a
            # SEAL's bytes after the last commit (FORMAT.md section 3).
            unsealed = scan.stop == scan.committed and scan.rest <= SEAL_SIZE
            if has_successor and not unsealed:
                raise CorruptionError(
                    f"log position {pos + scan.stop} of a sealed segment is no record"
                    f" boundary (read from position {start}): the segment is damaged, or"
                    " `compact` rewrote it and moved the commit that ended there",
                    path=path,
                    offset=pos - base + SEGMENT_HEADER_SIZE + scan.stop,
                )
            return pieces
        end = pos + scan.committed
        if not has_successor or bases[i + 1] != end:
            return pieces  # the newest segment, or a roll not finished yet
        pos, i = end, i + 1


def read_tail(directory: str, start: int, *, limit_bytes: int | None = None) -> list[Piece]:
    """The committed bytes after log position `start` (see the module docstring).
    `limit_bytes`: stop at the first commit end at least that far past `start`."""
    return _read(directory, start, limit_bytes)


def committed_end(directory: str, start: int = 0) -> int:
    """The end of the log's committed prefix, read from `start` (a commit boundary;
    the cost is the bytes after it, held 64 MiB at a time)."""
    end = start
    while True:
        pieces = _read(directory, end, 64 << 20)
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
        raise StorageError(f"cannot read the session identity {path}: {exc.strerror}") from exc

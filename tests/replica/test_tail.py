"""tail.read_tail on real logs written by journal: the committed bytes after a commit
boundary, one Piece per segment, each ending at a commit, byte-equal to the files;
torn and damaged tails end it as the local readers decide; appends racing it."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
from helpers import checkpoint, incompressible, item

import journal
from journal import Event
from journal.compact import compact_session
from journal.errors import CorruptionError
from journal.inspect import replay
from journal.layout import IDENTITY_FILE, LOG_DIR
from journal.record import DICT, SEAL
from journal.replica.tail import Piece, committed_end, identity_bytes, read_tail
from journal.segment import SEAL_RECORD, SEGMENT_HEADER_SIZE, segment_name


def _write(
    store: journal.Store, sid: str, turns: int, *, big: bool = False, first: int = 1
) -> None:
    for t in range(first, first + turns):
        items = [item(i, _noise(i, 700) if big else f"item {i}") for i in range(t + 1)]
        store.save(checkpoint(sid, t, items))
        store.append_event(sid, 1000 + t, Event(msg={"type": "note", "text": f"n{t}"}))


def _noise(seed: int, n: int) -> str:
    """`n` incompressible characters, the same for the same seed."""
    out = b""
    block = str(seed).encode()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return out.hex()[:n]


def _commit_ends(directory: str) -> list[int]:
    """The end of every commit, as the local readers see the log."""
    return [c[-1].pos + c[-1].size for c in replay(directory)]


def _commit_types(directory: str) -> set[int]:
    return {r.rtype for c in replay(directory) for r in c}


def _file_bytes(directory: str, p: Piece) -> bytes:
    path = os.path.join(directory, LOG_DIR, segment_name(p.segment_base))
    with open(path, "rb") as f:
        f.seek(p.start - p.segment_base + SEGMENT_HEADER_SIZE)
        return f.read(p.end - p.start)


def _check(directory: str, pieces: list[Piece], start: int) -> None:
    """Pieces are contiguous from `start`, each ends at a commit, each holds the
    file's bytes, and their commit counts are the log's."""
    ends = _commit_ends(directory)
    pos = start
    for p in pieces:
        assert p.start == pos or p.start == p.segment_base == pos
        assert p.end == p.start + len(p.body)
        assert p.end in ends
        assert p.body == _file_bytes(directory, p)
        assert p.commits == sum(1 for e in ends if p.start < e <= p.end)
        assert p.commits > 0
        pos = p.end


def test_reads_every_commit_across_segments(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "root", segment_bytes=4096)
    try:
        _write(store, "s", 40, big=True)
        directory = store.session_dir("s")
        ends = _commit_ends(directory)
        segments = sorted(os.listdir(os.path.join(directory, LOG_DIR)))
        assert len(segments) >= 4
        assert SEAL in _commit_types(directory)
        pieces = read_tail(directory, 0)
        _check(directory, pieces, 0)
        assert pieces[-1].end == ends[-1] == committed_end(directory)
        assert len({p.segment_base for p in pieces}) == len(pieces) == len(segments)
        # From every commit boundary: the same bytes as the full read, from there.
        whole = {p.segment_base: p for p in pieces}
        for boundary in [0, *ends]:
            got = read_tail(directory, boundary)
            _check(directory, got, boundary)
            assert (got[-1].end if got else boundary) == ends[-1]
            for p in got:
                full = whole[p.segment_base]
                assert p.body == full.body[p.start - full.start :]
        # limit_bytes: stops at the first commit end at least that far.
        for limit in (1, 500, 5000):
            got = read_tail(directory, 0, limit_bytes=limit)
            _check(directory, got, 0)
            assert got[-1].end == min(e for e in ends if e >= limit)
        assert identity_bytes(directory) == (Path(directory) / IDENTITY_FILE).read_bytes()
    finally:
        store.close()


def test_reads_nothing_before_start(tmp_path: Path) -> None:
    """Bytes before `start` are never read: damage there does not change the answer."""
    store = journal.open(tmp_path / "root")
    try:
        _write(store, "s", 6)
        directory = store.session_dir("s")
        ends = _commit_ends(directory)
        before = read_tail(directory, ends[2])
        seg = os.path.join(directory, LOG_DIR, segment_name(0))
        with open(seg, "r+b") as f:
            f.seek(SEGMENT_HEADER_SIZE + 3)
            f.write(b"\xff\xff\xff")  # inside the first commit
        assert read_tail(directory, ends[2]) == before
        _check_bytes = before[-1].end == ends[-1]
        assert _check_bytes
    finally:
        store.close()


def test_a_torn_or_damaged_tail_ends_the_committed_bytes(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "root")
    _write(store, "s", 5)
    directory = store.session_dir("s")
    store.close()
    ends = _commit_ends(directory)
    seg = os.path.join(directory, LOG_DIR, segment_name(0))
    size = os.path.getsize(seg)
    assert size - SEGMENT_HEADER_SIZE == ends[-1]
    # A record cut short after the last commit (a torn write).
    with open(seg, "ab") as f:
        f.write(b"\x01\x02\x03\x04\x40\x00\x00\x00\x04\x02" + b"x" * 20)
    assert read_tail(directory, 0)[-1].end == ends[-1]
    assert read_tail(directory, ends[-1]) == []
    # A byte flipped inside the last commit: the committed bytes end before it.
    with open(seg, "r+b") as f:
        f.seek(SEGMENT_HEADER_SIZE + ends[-2] + 12)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x55]))
    got = read_tail(directory, 0)
    assert got[-1].end == ends[-2]
    assert read_tail(directory, ends[-2]) == []


def test_a_log_with_a_dictionary(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "root")
    try:
        store.save(checkpoint("s", 0, [item(0)]))
        words = "the build failed because the linker could not find libssl so we pinned it"
        for n in range(260):
            msg = {"type": "note", "text": f"{words} {n} " + words[n % 30 :]}
            store.append_event("s", 1000 + n, Event(msg=msg))
            if n == 200:
                store.spares.wait()  # the dictionary is trained and committed
        directory = store.session_dir("s")
        assert DICT in _commit_types(directory)
        pieces = read_tail(directory, 0)
        _check(directory, pieces, 0)
        assert pieces[-1].end == _commit_ends(directory)[-1]
    finally:
        store.close()


def test_a_concurrent_appender_is_read_only_commit_by_commit(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "root", segment_bytes=4096)
    store.save(checkpoint("s", 1, [item(0)]))
    directory = store.session_dir("s")
    done = threading.Event()

    def appender() -> None:
        try:
            for n in range(400):
                text = incompressible(40 + n % 90)
                store.append_event("s", 2000 + n, Event(msg={"type": "note", "text": text}))
        finally:
            done.set()

    thread = threading.Thread(target=appender)
    thread.start()
    got: list[Piece] = []
    end = 0
    try:
        while True:
            finished = done.is_set()
            pieces = read_tail(directory, end)
            got += pieces
            if pieces:
                end = pieces[-1].end
            if finished and not pieces:
                break
    finally:
        thread.join()
        store.close()
    ends = set(_commit_ends(directory))
    assert all(p.end in ends for p in got)
    assert end == max(ends)
    _check(directory, got, 0)
    # Reassembled, the pieces are the segment files' data, byte for byte.
    by_segment: dict[int, bytes] = {}
    for p in got:
        by_segment[p.segment_base] = by_segment.get(p.segment_base, b"") + p.body
    for base, data in by_segment.items():
        seg = Path(directory, LOG_DIR, segment_name(base)).read_bytes()
        assert seg[SEGMENT_HEADER_SIZE:].rstrip(b"\0") == data.rstrip(b"\0")
        assert seg[SEGMENT_HEADER_SIZE : SEGMENT_HEADER_SIZE + len(data)] == data


def test_what_compact_does_to_commit_ends(tmp_path: Path) -> None:
    """What compaction does to shipped ranges (FORMAT.md section 11): it seals the
    newest segment first, so the log's end before it (where a shipper that is up to
    date stands) stays a commit boundary, and the rewritten segment keeps its base and
    length. Commits inside a packed stretch move down, though: a position shipped up
    to before the compact may be no record boundary after it, and reading on from
    there raises instead of stopping silently."""
    store = journal.open(tmp_path / "root")
    try:
        _write(store, "s", 12, big=True)
        directory = store.session_dir("s")
        before = read_tail(directory, 0)
        ends_before = _commit_ends(directory)
        compact_session(directory, "s", keep=1)
        ends_after = _commit_ends(directory)
        assert ends_before[-1] in ends_after  # the end a synced shipper stands at
        sealed = ends_before[-1] + len(SEAL_RECORD) + SEGMENT_HEADER_SIZE
        assert os.path.getsize(os.path.join(directory, LOG_DIR, segment_name(0))) == sealed
        moved = [e for e in ends_before if e not in ends_after]
        assert moved  # intermediate commit ends moved
        after = read_tail(directory, 0)
        _check(directory, after, 0)
        assert after[0].body[: len(before[0].body)] != before[0].body
        rest = read_tail(directory, ends_before[-1])
        _check(directory, rest, ends_before[-1])
        assert rest[0].body[:10] == SEAL_RECORD
        with pytest.raises(CorruptionError, match="no record boundary"):
            read_tail(directory, moved[0])
        _write(store, "s", 2, big=True, first=13)
        more = read_tail(directory, ends_after[-1])
        _check(directory, more, ends_after[-1])
        assert more[-1].end == _commit_ends(directory)[-1]
    finally:
        store.close()


@pytest.mark.parametrize("start", [0, 7])
def test_an_empty_or_absent_log(tmp_path: Path, start: int) -> None:
    assert read_tail(str(tmp_path / "nothing"), start) == []
    store = journal.open(tmp_path / "root")
    try:
        store.save(checkpoint("s", 1, [item(0)]))
        end = committed_end(store.session_dir("s"))
        assert read_tail(store.session_dir("s"), end) == []
    finally:
        store.close()

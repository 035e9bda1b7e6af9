"""Damaged bytes and files: detected and located, the prefix stays readable, caches heal.

Every test builds the same small store (one session whose log spans several
segments, caches flushed by `close`), damages one kind of file, reopens it and
checks what the brief demands:

- damage to the log raises `CorruptionError` naming the file (`.path`) and the
  offset of the damaged record (`.offset`); reads of the committed prefix before
  it keep working; no read ever returns data that differs from the undamaged
  store (it either matches or raises);
- a torn tail (cut-off last record, or a last record failing its checksum with
  only zeros after it) is cut silently on the next write, and the store goes on;
- damaged or missing caches (index files, snapshot) are rebuilt from the log and
  every read equals the undamaged store's.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zstandard
from faults import flip_byte, truncate_file, zero_range
from helpers import (
    all_events,
    all_executions,
    checkpoint,
    execution,
    observe,
    session_findings,
    warning,
)

# reaches inside: damages chosen records, found by walking the frames; races verify's scan
import journal
import journal.scan as scan_module
from journal import CorruptionError, EventPageRequest
from journal.payloads import checkpoint_decoder, event_decoder
from journal.record import CHECKPOINT, EVENT, EXECUTION, FLAG_COMMIT, FLAG_ZSTD, OK, parse_at
from journal.segment import Segment

SEGMENT_BYTES = 4096
SAVES = 24
SID = "s"


# ------------------------------------------------------------------ the store under test
def build(root: str) -> None:
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    ctx: list[Any] = []
    for seq in range(SAVES):
        ctx = [*ctx, {"n": seq, "text": f"context item {seq} " + "x" * 60}]
        store.save_with_events(
            checkpoint(SID, seq, ctx),
            [{"t": seq, "k": k} for k in range(seq % 3)],
            execution(SID, seq) if seq % 2 else None,
            [warning(f"save {seq} event {k}") for k in range(2)],
        )
        store.append_event(SID, 1_700_000_000_000 + seq, warning(f"append {seq}").event)
    n = 0
    while len(records(segments(root)[-1])) < 10:  # several commits in the newest segment
        store.append_event(SID, 1_800_000_000_000 + n, warning(f"tail {n}").event)
        n += 1
    store.save_state(SID, "cursor", {"n": 1})
    store.save_state("other", "cursor", {"n": 2})
    store.close()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    root = str(tmp_path_factory.mktemp("pristine") / "store")
    build(root)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        expected = observe(store, [SID], [(SID, "cursor"), ("other", "cursor")])
    finally:
        store.close()
    return root, expected


@pytest.fixture
def copy(pristine: tuple[str, dict[str, Any]], tmp_path: Any) -> tuple[str, dict[str, Any]]:
    root = str(tmp_path / "store")
    shutil.copytree(pristine[0], root)
    # A copied store re-checks all its sessions once when first opened (as after a
    # reboot); do that now, so the damage below is found by the reads under test.
    journal.open(root, segment_bytes=SEGMENT_BYTES).close()
    return root, pristine[1]


def session_dir(root: str) -> str:
    (path,) = glob.glob(os.path.join(root, "sessions", "*", "SESSION"))
    return os.path.dirname(path)


def segments(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(session_dir(root), "log", "*.seg")))


class Rec(msgspec.Struct):
    path: str
    offset: int  # file offset of the record's first byte
    size: int
    rtype: int
    flags: int
    payload: bytes


def records(path: str) -> list[Rec]:
    """The records of one segment file, as the format describes them."""
    with open(path, "rb") as f:
        data = f.read()
    out, off = [], 32
    while True:
        outcome, rtype, flags, start, end = parse_at(data, off)
        if outcome != OK:
            return out
        payload = data[start:end]
        if flags & FLAG_ZSTD:
            payload = zstandard.ZstdDecompressor().decompress(payload)
        out.append(Rec(path, off, end - off, rtype, flags, payload))
        off = end


def event_record(root: str, sequence: int) -> Rec:
    for seg in segments(root):
        for r in records(seg):
            if r.rtype == EVENT and event_decoder.decode(r.payload).sequence == sequence:
                return r
    raise AssertionError(f"no record for event {sequence}")


def checkpoint_record(root: str, sequence: int) -> Rec:
    for seg in segments(root):
        for r in records(seg):
            if r.rtype == CHECKPOINT and checkpoint_decoder.decode(r.payload).sequence == sequence:
                return r
    raise AssertionError(f"no record for checkpoint {sequence}")


def first_at_or_after(root: str, path: str, offset: int) -> tuple[int, int]:
    """(first event, first checkpoint) sequence of the commits from the one holding a byte on.

    Commits are all or nothing, so damage to one record hides its whole commit.
    """
    start = 32
    for r in records(path):
        if r.offset > offset:
            break
        if r.flags & FLAG_COMMIT and r.offset + r.size <= offset:
            start = r.offset + r.size
    ev, cp = None, None
    for seg in segments(root):
        if seg < path:
            continue
        for r in records(seg):
            if seg == path and r.offset < start:
                continue
            if r.rtype == EVENT and ev is None:
                ev = event_decoder.decode(r.payload).sequence
            if r.rtype == CHECKPOINT and cp is None:
                cp = checkpoint_decoder.decode(r.payload).sequence
    return ev or 1_000_000, SAVES if cp is None else cp


def events_in(rec_path: str) -> list[int]:
    return [event_decoder.decode(r.payload).sequence for r in records(rec_path) if r.rtype == EVENT]


def checkpoints_in(rec_path: str) -> list[int]:
    return [
        checkpoint_decoder.decode(r.payload).sequence
        for r in records(rec_path)
        if r.rtype == CHECKPOINT
    ]


# ------------------------------------------------------------------------- probes
def reads(store: journal.Store) -> dict[str, Callable[[], Any]]:
    """Every read the API offers on the session, each as a thunk returning plain data."""
    b = msgspec.to_builtins
    calls: dict[str, Callable[[], Any]] = {
        "load": lambda: b(store.load(SID)),
        "events": lambda: b(all_events(store, SID)),
        "newest events": lambda: b(store.event_page(SID, EventPageRequest(limit=5)).events),
        "events_after": lambda: b(store.events_after(SID, 0, 1000)),
        "state": lambda: store.load_state(SID, "cursor"),
    }
    for s in range(SAVES):
        calls[f"checkpoint_at {s}"] = lambda s=s: b(store.checkpoint_at(SID, s))
    return calls


def expected_reads(expected: dict[str, Any]) -> dict[str, Any]:
    sess = expected[SID]
    out = {
        "load": sess["checkpoint"],
        "events": sess["events"],
        "newest events": sess["events"][::-1][:5],
        "events_after": sess["events"],
        "state": expected[f"state:{SID}:cursor"],
    }
    for s in range(SAVES):
        out[f"checkpoint_at {s}"] = sess["history"][s]
    return out


def probe(root: str, expected: dict[str, Any]) -> dict[str, CorruptionError]:
    """Run every read; each must match the undamaged store or raise CorruptionError."""
    want = expected_reads(expected)
    errors: dict[str, CorruptionError] = {}
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        for name, call in reads(store).items():
            try:
                got = call()
            except CorruptionError as exc:
                errors[name] = exc
                continue
            assert got == want[name], f"{name}: a read after damage returned wrong data"
    finally:
        store.close()
    return errors


def same_file(a: str | None, b: str) -> bool:
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


def assert_locates(exc: CorruptionError, rec: Rec) -> None:
    assert same_file(exc.path, rec.path), f"error names {exc.path}, damage is in {rec.path}"
    assert exc.offset == rec.offset, f"error says offset {exc.offset}, damage at {rec.offset}"
    assert os.path.basename(rec.path) in str(exc) and str(rec.offset) in str(exc)


def check_prefix(root: str, expected: dict[str, Any], first_bad_event: int, first_bad_cp: int):
    """Events and checkpoints committed before the damage are still readable."""
    sess = expected[SID]
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        page = store.event_page(SID, EventPageRequest(limit=1000, before_sequence=first_bad_event))
        assert msgspec.to_builtins(page.events) == sess["events"][: first_bad_event - 1][::-1]
        for s in range(first_bad_cp):
            assert msgspec.to_builtins(store.checkpoint_at(SID, s)) == sess["history"][s]
    finally:
        store.close()


# ----------------------------------------------------------------- sealed segments
DAMAGES: dict[str, Callable[[Rec], None]] = {
    "flip payload": lambda r: flip_byte(r.path, r.offset + r.size - 3),
    "flip header": lambda r: flip_byte(r.path, r.offset + 5),
    "flip type": lambda r: flip_byte(r.path, r.offset + 8, 0x01),
    "zero record": lambda r: zero_range(r.path, r.offset, r.size),
    "zero inside": lambda r: zero_range(r.path, r.offset + 12, 8),
}


def test_the_store_under_test_has_sealed_segments(copy: tuple[str, dict[str, Any]]) -> None:
    root, expected = copy
    assert len(segments(root)) >= 4
    assert len(expected[SID]["events"]) >= SAVES * 3
    assert probe(root, expected) == {}


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("caches", ["with caches", "without caches"])
def test_damaged_sealed_segment(copy: tuple[str, dict[str, Any]], damage: str, caches: str):
    root, expected = copy
    seg = segments(root)[1]
    target = event_record(root, events_in(seg)[2])
    bad_event, bad_cp = first_at_or_after(root, seg, target.offset)
    if caches == "without caches":
        drop_caches(root)
    DAMAGES[damage](target)

    errors = probe(root, expected)
    assert errors, "damage in a sealed segment went unnoticed"
    assert "events" in errors and "events_after" in errors
    for exc in errors.values():
        assert_locates(exc, target)
    # what was committed before the damaged record is still there
    check_prefix(root, expected, bad_event, bad_cp)
    # and the error is stable: asking again reports the same place
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        for _ in range(2):
            with pytest.raises(CorruptionError) as info:
                store.events_after(SID, 0, 1000)
            assert_locates(info.value, target)
    finally:
        store.close()


def test_store_opens_after_reboot_with_a_damaged_session(
    pristine: tuple[str, dict[str, Any]], tmp_path: Any
) -> None:
    """After a reboot or on a copy, opening re-checks every session: one damaged
    session must not keep the store from opening, nor hide the damage."""
    root, expected = str(tmp_path / "store"), pristine[1]
    shutil.copytree(pristine[0], root)  # not opened since: every session is re-checked
    seg = segments(root)[1]
    target = next(r for r in records(seg) if r.rtype == EXECUTION)  # what the re-check reads
    bad = first_at_or_after(root, seg, target.offset)
    flip_byte(seg, target.offset + target.size - 3)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        assert store.load_state("other", "cursor") == {"n": 2}
        with pytest.raises(CorruptionError) as info:
            all_executions(store, SID)
        assert_locates(info.value, target)
    finally:
        store.close()
    check_prefix(root, expected, *bad)


def test_truncated_sealed_segment(copy: tuple[str, dict[str, Any]]) -> None:
    root, expected = copy
    seg = segments(root)[1]
    recs = records(seg)
    cut = recs[len(recs) // 2]
    bad = first_at_or_after(root, seg, cut.offset)
    truncate_file(seg, cut.offset + 4)
    errors = probe(root, expected)
    assert "events" in errors
    for exc in errors.values():
        assert same_file(exc.path, seg) and exc.offset == cut.offset
    check_prefix(root, expected, *bad)


def test_missing_sealed_segment(copy: tuple[str, dict[str, Any]]) -> None:
    root, expected = copy
    segs = segments(root)
    bad = first_at_or_after(root, segs[1], 0)
    os.unlink(segs[1])
    errors = probe(root, expected)
    assert "events" in errors
    for exc in errors.values():
        assert exc.path is not None and os.path.dirname(os.path.realpath(exc.path)) == (
            os.path.realpath(os.path.dirname(segs[1]))
        )
        assert "missing" in str(exc)
    check_prefix(root, expected, *bad)


def test_missing_first_segment(copy: tuple[str, dict[str, Any]]) -> None:
    root, expected = copy
    segs = segments(root)
    os.unlink(segs[0])
    errors = probe(root, expected)
    assert "events" in errors and "checkpoint_at 0" in errors
    for exc in errors.values():
        assert exc.path is not None and "missing" in str(exc)


# ------------------------------------------------------------------- newest segment
def newest_records(root: str) -> list[Rec]:
    recs = records(segments(root)[-1])
    assert len(recs) >= 6, "the newest segment should hold several commits"
    return recs


def drop_caches(root: str) -> None:
    for f in glob.glob(os.path.join(session_dir(root), "*.idx")):
        os.unlink(f)
    os.unlink(os.path.join(session_dir(root), "snapshot"))


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("caches", ["with caches", "without caches"])
def test_damaged_newest_segment_mid_data(
    copy: tuple[str, dict[str, Any]], damage: str, caches: str
) -> None:
    """Damage followed by committed data is corruption, never a torn tail to cut silently."""
    root, expected = copy
    recs = newest_records(root)
    target = recs[len(recs) // 2 - 1]
    seg = segments(root)[-1]
    first_bad = first_at_or_after(root, seg, target.offset)
    if caches == "without caches":
        drop_caches(root)
    DAMAGES[damage](target)
    with open(seg, "rb") as f:
        damaged = f.read()

    errors = probe(root, expected)
    assert "events" in errors
    for exc in errors.values():
        assert_locates(exc, target)
    check_prefix(root, expected, *first_bad)

    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        if caches == "without caches":
            # the first write scans the whole unverified tail: it must refuse to go on
            with pytest.raises(CorruptionError) as info:
                store.append_event(SID, 1, warning("after damage").event)
            assert_locates(info.value, target)
            with pytest.raises(CorruptionError):
                store.save_with_events(checkpoint(SID, SAVES, []), [], None, [])
        else:
            # caches vouch for the log up to its end, so a write only scans past it
            # and may go on; the damage stays where it is and is still reported
            store.append_event(SID, 1, warning("after damage").event)
            with pytest.raises(CorruptionError) as info:
                store.events_after(SID, 0, 10_000)
            assert_locates(info.value, target)
    finally:
        store.close()
    with open(seg, "rb") as f:
        now = f.read()
    if caches == "without caches":
        assert now == damaged, "a failed write must not cut or change the damaged log"
    else:
        end = recs[-1].offset + recs[-1].size
        assert now[:end] == damaged[:end], "a write must not cut or change the damaged log"


def test_truncated_newest_segment_is_a_torn_tail(copy: tuple[str, dict[str, Any]]) -> None:
    """A newest segment cut inside a record, with no file recording that record as
    durable, looks exactly like a crash: cut and go on. (With such a file, it is a
    loss: tests/test_loss.py.)"""
    root, expected = copy
    drop_caches(root)  # no file records these commits as durable: as after a crash
    recs = newest_records(root)
    target = recs[len(recs) // 2]
    seg = segments(root)[-1]
    truncate_file(seg, target.offset + target.size // 2)
    kept = [r for r in recs if r.offset + r.size <= target.offset]
    last_commit = max(k for k, r in enumerate(kept) if r.flags & FLAG_COMMIT)
    kept_events = [
        event_decoder.decode(r.payload).sequence
        for r in kept[: last_commit + 1]
        if r.rtype == EVENT
    ]
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        have = msgspec.to_builtins(all_events(store, SID))
        assert have == expected[SID]["events"][: kept_events[-1]]
        ev = store.append_event(SID, 1, warning("after the cut").event)
        assert ev.sequence == kept_events[-1] + 1
        assert msgspec.to_builtins(all_events(store, SID))[:-1] == have
    finally:
        store.close()


def test_missing_newest_segment(copy: tuple[str, dict[str, Any]]) -> None:
    """A lost newest segment is a loss: the seal of the one before it names it.

    What must hold: writes raise, reads of what remains work, and no sequence of
    the lost segment is handed out again.
    """
    root, expected = copy
    segs = segments(root)
    kept = [
        event_decoder.decode(r.payload).sequence
        for s in segs[:-1]
        for r in records(s)
        if r.rtype == EVENT
    ]
    os.unlink(segs[-1])
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        events = msgspec.to_builtins(store.events_after(SID, 0, len(kept)))
        assert events == expected[SID]["events"][: len(kept)]
        with pytest.raises(CorruptionError) as info:
            store.append_event(SID, 1, warning("after").event)
        assert info.value.path == segs[-2]
        with pytest.raises(CorruptionError):
            store.load(SID)
    finally:
        store.close()


@pytest.mark.parametrize(
    "how", ["cut inside last record", "cut inside last header", "bad checksum then zeros"]
)
def test_torn_tail_is_cut_silently(tmp_path: Any, how: str) -> None:
    root = str(tmp_path / "store")
    store = journal.open(root)
    ctx = [{"n": 0}]
    store.save_with_events(checkpoint(SID, 0, ctx), [{"t": 0}], None, [warning("e1")])
    store.append_event(SID, 1, warning("e2").event)
    before = observe(store, [SID])
    # The caches as a crash during the next commit leaves them: written before it.
    store.flush()
    saved = {n: Path(session_dir(root), n).read_bytes() for n in CACHE_FILES}
    store.save_with_events(
        checkpoint(SID, 1, [*ctx, {"n": 1}]), [{"t": 1}], None, [warning("e3"), warning("e4")]
    )
    store.close()
    for name, data in saved.items():
        with open(os.path.join(session_dir(root), name), "wb") as f:
            f.write(data)
    seg = segments(root)[-1]
    last = records(seg)[-1]
    if how == "cut inside last record":
        truncate_file(seg, last.offset + last.size - 2)
    elif how == "cut inside last header":
        truncate_file(seg, last.offset + 6)
    else:
        flip_byte(seg, last.offset + last.size - 1)  # the zeros of preallocation follow
    store = journal.open(root)
    try:
        assert observe(store, [SID]) == before
        store.save_with_events(
            checkpoint(SID, 1, [*ctx, {"n": "again"}]), [{"t": 1}], None, [warning("e3 again")]
        )
        ev = store.append_event(SID, 1, warning("e4 again").event)
        assert ev.sequence == 4
        seen = observe(store, [SID])
    finally:
        store.close()
    store = journal.open(root)
    try:
        assert observe(store, [SID]) == seen
        msgs = [e.event.msg["message"] for e in all_events(store, SID)]
        assert msgs == ["e1", "e2", "e3 again", "e4 again"]
        assert store.load(SID).context == [{"n": 0}, {"n": "again"}]
    finally:
        store.close()


# ------------------------------------------------------------------------ caches
CACHE_FILES = ["events.idx", "checkpoints.idx", "transcripts.idx", "executions.idx", "snapshot"]
CACHE_DAMAGES: dict[str, Callable[[str], None]] = {
    "flip header": lambda p: flip_byte(p, 20),
    "flip entry": lambda p: flip_byte(p, os.path.getsize(p) - 20, 0x01),
    "flip entry high": lambda p: flip_byte(p, os.path.getsize(p) - 14, 0x80),
    "flip low bit everywhere": lambda p: [
        flip_byte(p, off, 0x01) for off in range(48, os.path.getsize(p), 7)
    ],
    "zero tail": lambda p: zero_range(p, os.path.getsize(p) // 2, os.path.getsize(p) // 2),
    "zero all": lambda p: zero_range(p, 0, os.path.getsize(p)),
    "truncate": lambda p: truncate_file(p, os.path.getsize(p) * 2 // 3),
    "empty": lambda p: truncate_file(p, 0),
    "missing": os.unlink,
}


@pytest.mark.parametrize("damage", list(CACHE_DAMAGES))
@pytest.mark.parametrize("name", CACHE_FILES)
def test_damaged_cache_is_rebuilt(copy: tuple[str, dict[str, Any]], name: str, damage: str):
    root, expected = copy
    path = os.path.join(session_dir(root), name)
    assert os.path.getsize(path) > 48
    CACHE_DAMAGES[damage](path)
    assert probe(root, expected) == {}, "a damaged cache must never surface as an error"
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        assert observe(store, [SID], [(SID, "cursor"), ("other", "cursor")]) == expected
        ev = store.append_event(SID, 1, warning("after").event)
        assert ev.sequence == len(expected[SID]["events"]) + 1
    finally:
        store.close()
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        events = msgspec.to_builtins(all_events(store, SID))
        assert events[:-1] == expected[SID]["events"]
    finally:
        store.close()


# --------------------------------------------------------------- whole-file records
META_DAMAGES: dict[str, Callable[[str], None]] = {
    "flip magic": lambda p: flip_byte(p, 2),
    "flip payload": lambda p: flip_byte(p, os.path.getsize(p) - 1),
    "zero": lambda p: zero_range(p, 0, os.path.getsize(p)),
    "truncate": lambda p: truncate_file(p, os.path.getsize(p) - 3),
    "truncate header": lambda p: truncate_file(p, 7),
}
META_OFFSETS = {"flip magic": 0, "flip payload": 20, "zero": 0}


@pytest.mark.parametrize("damage", [*META_DAMAGES, "missing"])
def test_damaged_session_identity(copy: tuple[str, dict[str, Any]], damage: str) -> None:
    root, _ = copy
    path = os.path.join(session_dir(root), "SESSION")
    if damage == "missing":  # (a deleted session's whole directory is gone instead)
        os.unlink(path)
    else:
        META_DAMAGES[damage](path)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        with pytest.raises(CorruptionError) as info:
            store.append_event(SID, 1, warning("x").event)
        assert same_file(info.value.path, path)
        for name, call in reads(store).items():
            if name == "state":
                continue
            with pytest.raises(CorruptionError) as info:
                call()
            assert same_file(info.value.path, path), name
            if damage in META_OFFSETS:
                assert info.value.offset == META_OFFSETS[damage]
        # other data of the store is unaffected
        assert store.load_state("other", "cursor") == {"n": 2}
    finally:
        store.close()


@pytest.mark.parametrize("damage", [*META_DAMAGES, "missing"])
def test_damaged_store_manifest(copy: tuple[str, dict[str, Any]], damage: str) -> None:
    root, _ = copy
    path = os.path.join(root, "JOURNAL")
    if damage == "missing":
        os.unlink(path)
    else:
        META_DAMAGES[damage](path)
    with pytest.raises(journal.JournalError) as info:
        journal.open(root)
    assert "JOURNAL" in str(info.value)
    if damage != "missing":
        assert isinstance(info.value, CorruptionError)
        assert same_file(info.value.path, path)
        if damage in META_OFFSETS:
            assert info.value.offset == META_OFFSETS[damage]
    # nothing was overwritten by the failed open
    assert os.path.exists(os.path.join(session_dir(root), "SESSION"))
    assert os.path.exists(path) == (damage != "missing")


@pytest.mark.parametrize("damage", list(META_DAMAGES))
def test_damaged_state_file(copy: tuple[str, dict[str, Any]], damage: str) -> None:
    root, expected = copy
    (path,) = [
        p
        for p in glob.glob(os.path.join(root, "state", "*", "*"))
        if os.path.basename(os.path.dirname(p)).startswith(SID)
    ]
    META_DAMAGES[damage](path)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        with pytest.raises(CorruptionError) as info:
            store.load_state(SID, "cursor")
        assert same_file(info.value.path, path)
        if damage in META_OFFSETS:
            assert info.value.offset == META_OFFSETS[damage]
        # the rest of the store is unaffected, and the value can be written again
        assert store.load_state("other", "cursor") == {"n": 2}
        assert msgspec.to_builtins(store.load(SID)) == expected[SID]["checkpoint"]
        store.save_state(SID, "cursor", {"n": 3})
        assert store.load_state(SID, "cursor") == {"n": 3}
    finally:
        store.close()


def test_missing_log_directory(copy: tuple[str, dict[str, Any]]) -> None:
    root, _ = copy
    log = os.path.join(session_dir(root), "log")
    shutil.rmtree(log)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        with pytest.raises(CorruptionError) as info:
            store.load(SID)
        assert same_file(info.value.path, log)
    finally:
        store.close()


def test_verify_racing_a_live_writer_is_not_damage(tmp_path: Any, monkeypatch: Any) -> None:
    """verify reads zeros where the writer is about to append; by the time it looks at
    what follows, the writer has written there: a commit in progress, not "zeroed bytes
    followed by data" (seen once in CI with `journal verify` against a live writer)."""
    # reaches inside: the live writer appends in the middle of verify's scan

    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(checkpoint("a", 0, []))
        for n in range(5):
            store.append_event("a", 1_700_000_000_000 + n, warning(f"e{n}").event)
        # reaches inside: the writer must append between the scan's two looks
        original = scan_module._all_zero
        raced: list[int] = []

        def writer_gets_there_first(fd: int, seg: Segment, start: int, end: int) -> bool:
            if not raced:  # once: the live writer appends at `start` right now
                raced.append(start)
                store.append_event("a", 1_700_000_001_000, warning("raced").event)
                end = start + 4096  # and the data it wrote is what the look finds
            return original(fd, seg, start, end)

        monkeypatch.setattr(scan_module, "_all_zero", writer_gets_there_first)
        findings = session_findings(store.session_dir("a"))
        assert raced, "the scan never looked past the zeros at the end"
        assert findings == [], findings
    finally:
        store.close()

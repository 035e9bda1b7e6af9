"""Lost commits are reported, never passed off as a torn tail (FORMAT.md section 5).

A session whose files show that committed data existed beyond what its log now
holds is *damaged*: its writes raise `CorruptionError`, no sequence is handed out
twice, and what remains readable stays readable. Each test damages real files of
a real store the way a person or a failing disk would, then opens it afresh.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from faults import truncate_file
from helpers import all_events, checkpoint, session_findings, warning

# reaches inside: damages and checks segments frame by frame; races verify's scan
import journal
import journal.scan as scan_module
from journal import CorruptionError, EventPageRequest
from journal.record import EVENT, OK, SEAL, parse_at
from journal.segment import SEAL_RECORD, SEAL_SIZE

SID = "s"
SEGMENT_BYTES = 4096


def session_dir(root: str) -> str:
    (path,) = glob.glob(os.path.join(root, "sessions", "*", "SESSION"))
    return os.path.dirname(path)


def segments(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(session_dir(root), "log", "*.seg")))


def last_record_type(path: str) -> int:
    data = Path(path).read_bytes()
    off, last = 32, 0
    while True:
        outcome, rtype, _, _, end = parse_at(data, off)
        if outcome != OK:
            return last
        last, off = rtype, end


def first_record_of(data: bytes, rtype: int) -> int:
    """The file offset of the first record of type `rtype` in a segment's bytes."""
    off = 32
    while True:
        outcome, got, _, _, end = parse_at(data, off)
        assert outcome == OK, f"no record of type {rtype}"
        if got == rtype:
            return off
        off = end


def build(root: str, *, saves: int = 30, segment_bytes: int = SEGMENT_BYTES) -> int:
    """A session of several segments, closed cleanly; returns its last event sequence."""
    store = journal.open(root, segment_bytes=segment_bytes)
    ctx: list[Any] = []
    last = 0
    try:
        for seq in range(saves):
            ctx = [*ctx, {"n": seq, "text": "item " + "x" * 80}]
            evs = store.save_with_events(
                checkpoint(SID, seq, ctx), ctx[-1:], None, [warning(f"save {seq}")]
            )
            ev = store.append_event(SID, 1_700_000_000_000 + seq, warning(f"a{seq}").event)
            last = max(evs[-1].sequence, ev.sequence)
    finally:
        store.close()
    return last


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    root = str(tmp_path_factory.mktemp("loss") / "store")
    last = build(root)
    return root, last


def settle_copy(root: str) -> None:
    """Open a copied store and use the session, as its next user would: a store
    rewrites the caches of a copy for its own directory (FORMAT.md section 5), after
    which they are evidence there."""
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        store.load(SID)
    finally:
        store.close()


@pytest.fixture
def copy(pristine: tuple[str, int], tmp_path: Any) -> tuple[str, int]:
    root = str(tmp_path / "store")
    shutil.copytree(pristine[0], root)
    settle_copy(root)
    return root, pristine[1]


def test_sealed_segments_end_with_a_seal_record(copy: tuple[str, int]) -> None:
    root, _ = copy
    segs = segments(root)
    assert len(segs) >= 4
    for seg in segs[:-1]:
        assert last_record_type(seg) == SEAL
        with open(seg, "rb") as f:
            assert f.read()[-SEAL_SIZE:] == SEAL_RECORD
    assert last_record_type(segs[-1]) != SEAL


def assert_damaged_and_refuses_writes(root: str, last: int) -> None:
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        with pytest.raises(CorruptionError) as info:
            store.append_event(SID, 1, warning("after the loss").event)
        assert info.value.path
        with pytest.raises(CorruptionError):
            store.save(checkpoint(SID, 10_000, [{"n": 0}]), [])
        # the newest page needs what was lost
        with pytest.raises(CorruptionError):
            store.event_page(SID, EventPageRequest(limit=5))
    finally:
        store.close()
    again = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:  # still refused by a fresh process's view: nothing was cut or re-issued
        with pytest.raises(CorruptionError):
            again.append_event(SID, 1, warning("after the loss").event)
    finally:
        again.close()


def test_deleted_newest_segment_is_a_loss(copy: tuple[str, int]) -> None:
    root, last = copy
    os.unlink(segments(root)[-1])
    assert_damaged_and_refuses_writes(root, last)


def test_deleted_newest_segment_without_caches_is_a_loss(copy: tuple[str, int]) -> None:
    """The seal of the segment before it names it: no cache is needed to see the loss."""
    root, last = copy
    os.unlink(segments(root)[-1])
    for name in ["events.idx", "checkpoints.idx", "transcripts.idx", "executions.idx", "snapshot"]:
        os.unlink(os.path.join(session_dir(root), name))
    assert_damaged_and_refuses_writes(root, last)


def test_deleted_newest_two_segments_is_a_loss(copy: tuple[str, int]) -> None:
    root, last = copy
    for seg in segments(root)[-2:]:
        os.unlink(seg)
    assert_damaged_and_refuses_writes(root, last)


@pytest.mark.parametrize("keep", [40, 200, 1000])
def test_truncated_newest_segment_after_a_clean_close_is_a_loss(
    copy: tuple[str, int], keep: int
) -> None:
    """A clean close records the whole log as durable: a shorter log lost commits."""
    root, last = copy
    truncate_file(segments(root)[-1], keep)
    assert_damaged_and_refuses_writes(root, last)


def test_truncated_single_segment_log_is_a_loss(tmp_path: Any) -> None:
    root = str(tmp_path / "store")
    last = build(root, saves=8, segment_bytes=64 << 20)
    (seg,) = segments(root)
    truncate_file(seg, os.path.getsize(seg) // 2)
    assert_damaged_and_refuses_writes(root, last)


def test_readable_prefix_stays_readable_after_a_loss(copy: tuple[str, int]) -> None:
    root, last = copy
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        before = msgspec.to_builtins(all_events(store, SID))
    finally:
        store.close()
    os.unlink(segments(root)[-1])
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        # the oldest events are there, exactly as written
        first = store.events_after(SID, 0, 5)
        assert msgspec.to_builtins(first) == before[:5]
        with pytest.raises(CorruptionError):
            store.events_after(SID, 0, last)  # asks for what was lost
        assert store.checkpoint_at(SID, 0) is not None
    finally:
        store.close()


def test_interrupted_roll_is_finished_not_reported(tmp_path: Any) -> None:
    """A crash between creating the next segment and sealing the old one loses nothing."""
    root = str(tmp_path / "store")
    last = build(root, saves=12)
    segs = segments(root)
    newest = segs[-1]
    # Rewind to the moment after the roll created the newest segment: the segment
    # before it loses its SEAL, the new one holds only its header.
    sealed = segs[-2]
    data = Path(sealed).read_bytes()
    assert data.endswith(SEAL_RECORD)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        before = [e.sequence for e in all_events(store, SID)]
    finally:
        store.close()
    # The events of the newest segment go, and the caches written after them: the
    # state a crash right after the roll's new file was made leaves behind.
    for name in ["events.idx", "checkpoints.idx", "transcripts.idx", "executions.idx", "snapshot"]:
        os.unlink(os.path.join(session_dir(root), name))
    with open(sealed, "r+b") as f:
        f.truncate(len(data) - SEAL_SIZE)
    with open(newest, "r+b") as f:
        f.truncate(32)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        have = [e.sequence for e in all_events(store, SID)]
        assert have and have == before[: len(have)]
        ev = store.append_event(SID, 1, warning("after the roll").event)
        assert ev.sequence == have[-1] + 1
    finally:
        store.close()
    assert Path(sealed).read_bytes().endswith(SEAL_RECORD)
    assert last > have[-1]


# ------------------------------------------------------------------ accepting a loss
def test_accept_loss_continues_numbering_after_everything_handed_out(
    copy: tuple[str, int],
) -> None:
    from journal.inspect import accept_loss, loss_notes

    root, last = copy
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        last_cp = store.load(SID).sequence
    finally:
        store.close()
    newest = segments(root)[-1]
    lost_bytes = Path(newest).read_bytes()
    os.unlink(newest)
    report = accept_loss(session_dir(root), SID)
    assert not report.refused
    assert report.payload is not None
    assert report.payload.events_through == last
    assert report.payload.checkpoints_through == last_cp
    assert report.payload.events_kept < last
    # every cut byte is kept: here the whole newest segment was gone already, and the
    # seal that named it is what was cut
    assert report.kept
    assert all(os.path.exists(os.path.join(session_dir(root), k)) for k in report.kept)
    notes = loss_notes(session_dir(root))
    assert len(notes) == 1 and notes[0].events_through == last
    assert [r.kept_as for r in notes[0].ranges] == report.kept  # the record says where
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        ev = store.append_event(SID, 1, warning("after the loss").event)
        assert ev.sequence == last + 1  # never a sequence handed out before
        with pytest.raises(journal.ContractViolationError):
            store.save(checkpoint(SID, last_cp, [{"n": 0}]), [])
        cp = store.load(SID)
        assert cp is not None and cp.sequence < last_cp
        cp.sequence = last_cp + 1
        store.save(cp, [])
        page = store.event_page(SID, EventPageRequest(limit=3))
        assert page.events[0].sequence == last + 1
        kept = report.payload.events_kept
        assert [e.sequence for e in store.events_after(SID, kept - 2, 3)] == [
            kept - 1,
            kept,
            last + 1,
        ]
    finally:
        store.close()
    del lost_bytes
    # a fresh process sees the same, and verify is satisfied
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        assert store.append_event(SID, 2, warning("again").event).sequence == last + 2
    finally:
        store.close()


def test_accept_loss_refuses_a_healthy_session(copy: tuple[str, int]) -> None:
    from journal.inspect import accept_loss

    root, _ = copy
    before = {p: Path(p).read_bytes() for p in segments(root)}
    report = accept_loss(session_dir(root), SID)
    assert "not damaged" in report.refused
    assert {p: Path(p).read_bytes() for p in segments(root)} == before


def test_accept_loss_of_a_middle_segment_keeps_the_later_ones_aside(
    copy: tuple[str, int],
) -> None:
    from journal.inspect import accept_loss

    root, last = copy
    segs = segments(root)
    middle = segs[len(segs) // 2]
    later = {os.path.basename(p): Path(p).read_bytes() for p in segs[len(segs) // 2 + 1 :]}
    os.unlink(middle)
    report = accept_loss(session_dir(root), SID)
    assert report.payload is not None and report.payload.events_through == last
    kept = {os.path.basename(k): Path(session_dir(root), k).read_bytes() for k in report.kept}
    for name, data in later.items():
        assert kept[name] == data
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        assert store.append_event(SID, 1, warning("x").event).sequence == last + 1
    finally:
        store.close()


# ------------------------------------------------------------------------ salvage
def test_salvage_copies_commits_after_a_hole(copy: tuple[str, int]) -> None:
    """A flipped byte mid-log: salvage copies the commits before and after it."""
    from journal.inspect import salvage_session

    root, last = copy
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        before = [e.event.msg["message"] for e in all_events(store, SID)]
        final = store.load(SID)
    finally:
        store.close()
    segs = segments(root)
    victim = segs[len(segs) // 2]
    data = bytearray(Path(victim).read_bytes())
    data[first_record_of(bytes(data), EVENT) + 12] ^= 0x5A  # an event of a sealed segment
    Path(victim).write_bytes(bytes(data))
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        with pytest.raises(CorruptionError) as info:
            store.events_after(SID, 0, last)  # a read that needs the damaged record
        assert info.value.path == victim
        with pytest.raises(CorruptionError):  # from then on, writes wait for a person
            store.append_event(SID, 1, warning("x").event)
        report = salvage_session(store, SID, "s-saved")
        assert report.skipped and victim.rsplit("/", 1)[1] in report.skipped[0]
        copied = [e.event.msg["message"] for e in all_events(store, "s-saved")]
        # what was copied is the original order with a gap, nothing invented
        assert copied and len(copied) < len(before)
        it = iter(before)
        assert all(m in it for m in copied)
        assert copied[-1] == before[-1]  # the commits after the hole came across
        saved = store.load("s-saved")
        assert saved is not None and saved.context == final.context
        assert report.events == len(copied)
        # the copy is a healthy session of its own
        assert store.append_event("s-saved", 1, warning("go on").event).sequence == len(copied) + 1
    finally:
        store.close()


def test_salvage_refuses_an_existing_target(copy: tuple[str, int]) -> None:
    from journal.inspect import salvage_session

    root, _ = copy
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        with pytest.raises(journal.InvalidInputError):
            salvage_session(store, SID, SID)
        with pytest.raises(journal.NotFoundError):
            salvage_session(store, "nobody", "x")
    finally:
        store.close()


def test_numbering_survives_export_import_and_compaction_after_a_loss(
    copy: tuple[str, int], tmp_path: Path
) -> None:
    """The LOSS record travels with the log: a copy elsewhere never re-issues either."""
    from journal.inspect import accept_loss, compact_session, export_sessions, import_bundle

    root, last = copy
    os.unlink(segments(root)[-1])
    report = accept_loss(session_dir(root), SID)
    assert report.payload is not None
    floor = report.payload.checkpoints_through
    compact_session(session_dir(root), SID, keep=1)
    store = journal.open(root, segment_bytes=SEGMENT_BYTES)
    try:
        assert store.append_event(SID, 1, warning("after compaction").event).sequence == last + 1
    finally:
        store.close()
    bundle = str(tmp_path / "s.jb")
    export_sessions(root, [SID], bundle)
    other = str(tmp_path / "other")
    journal.open(other).close()
    import_bundle(other, bundle)
    store = journal.open(other)
    try:
        assert store.append_event(SID, 1, warning("in the copy").event).sequence == last + 2
        cp = store.load(SID)
        assert cp is not None
        with pytest.raises(journal.ContractViolationError):
            store.save(msgspec.structs.replace(cp, sequence=floor), [])
        store.save(msgspec.structs.replace(cp, sequence=floor + 1), [])
    finally:
        store.close()


# reaches inside: the child counts file-system steps at the seam, to die before each
KILLED_ACCEPT = r"""
import os, signal, sys
from journal import fsio
from journal.inspect import accept_loss

budget = int(sys.argv[3])
calls = 0

def counted(fn):
    def call(*args, **kwargs):
        global calls
        calls += 1
        if calls == budget:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash just before this step
        return fn(*args, **kwargs)
    return call

for name in ("write_file", "rename", "sync_dir", "unlink", "truncate", "pwrite",
             "sync_file", "sync_data"):
    setattr(fsio, name, counted(getattr(fsio, name)))
report = accept_loss(sys.argv[1], sys.argv[2])
print("finished" if not report.refused else report.refused)
"""


@pytest.mark.skipif(os.name != "posix", reason="needs SIGKILL")
def test_accept_loss_killed_at_every_step_is_finished_by_the_next_run(
    pristine: tuple[str, int], tmp_path: Path
) -> None:
    """kill -9 before each file operation of accept_loss: the session never looks
    healthy with its evidence gone, and the next run finishes the job."""
    import subprocess
    import sys

    from journal.inspect import accept_loss

    src, last = pristine
    finished_at = None
    for budget in range(1, 60):
        root = str(tmp_path / f"store-{budget}")
        shutil.copytree(src, root)
        os.unlink(segments(root)[-1])
        proc = subprocess.run(
            [sys.executable, "-c", KILLED_ACCEPT, session_dir(root), SID, str(budget)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode == 0:
            assert "finished" in proc.stdout, proc.stdout + proc.stderr
            finished_at = budget
            break
        assert proc.returncode == -9, proc.stderr
        store = journal.open(root, segment_bytes=SEGMENT_BYTES)
        try:
            try:
                ev = store.append_event(SID, 1, warning("too early").event)
            except CorruptionError:
                pass  # still damaged, as it must be until a run finishes
            else:
                assert ev.sequence == last + 1, f"killed before step {budget}: re-issued"
        finally:
            store.close()
        report = accept_loss(session_dir(root), SID)
        store = journal.open(root, segment_bytes=SEGMENT_BYTES)
        try:
            got = store.append_event(SID, 1, warning("after").event).sequence
            assert got > last, f"killed before step {budget}: sequence {got} re-issued"
            assert report.refused == "" or "not damaged" in report.refused
        finally:
            store.close()
    assert finished_at is not None and finished_at > 5, "the kills landed inside the run"


def test_salvage_copies_transcripts_and_executions(tmp_path: Path) -> None:
    from helpers import all_batches, all_executions, execution

    from journal.inspect import salvage_session

    root = str(tmp_path / "store")
    store = journal.open(root)
    try:
        ctx: list[Any] = []
        for seq in range(6):
            ctx = [*ctx, {"role": "user", "content": f"turn {seq}"}]
            store.save_with_events(
                checkpoint(SID, seq, ctx), ctx[-1:], execution(SID, seq), [warning(f"e{seq}")]
            )
        report = salvage_session(store, SID, "copy")
        assert report.skipped == [] and report.saves == 6 and report.events == 6
        assert report.renumbered == [(1, 6, 1)]
        old = msgspec.to_builtins(all_executions(store, SID))
        new = msgspec.to_builtins(all_executions(store, "copy"))
        assert [{**e, "session_id": SID} for e in new] == old
        assert [b.items for b in all_batches(store, "copy")] == [
            b.items for b in all_batches(store, SID)
        ]
        assert store.load("copy").context == ctx  # type: ignore[union-attr]
    finally:
        store.close()


def test_a_store_open_across_an_accepted_loss_refuses_its_writes(tmp_path: Path) -> None:
    """A long-lived store whose session a person repaired meanwhile (the log cut,
    a LOSS record appended, by another process under the session's lock) must not
    append at its old end: that left a hole after the LOSS record."""
    from journal.inspect import accept_loss

    root = str(tmp_path / "store")
    store = journal.open(root, segment_bytes=1 << 20)
    try:
        store.save_with_events(checkpoint(SID, 0, [{"n": 0}]), [{"n": 0}], None, [warning("s")])
        for i in range(40):
            store.append_event(SID, 1_700_000_000_000 + i, warning(f"a{i}").event)
        store.flush()
        (seg,) = segments(root)
        data = Path(seg).read_bytes().rstrip(b"\0")
        truncate_file(seg, len(data) - 1500)
        assert accept_loss(session_dir(root), SID).payload is not None
        repaired = Path(seg).read_bytes().rstrip(b"\0")
        with pytest.raises(CorruptionError) as info:
            store.append_event(SID, 1, warning("after the repair").event)
        assert info.value.path == seg
        assert Path(seg).read_bytes().rstrip(b"\0") == repaired  # nothing written
    finally:
        store.close()
    again = journal.open(root, segment_bytes=1 << 20)
    try:  # a fresh open writes after the LOSS record, numbering after everything
        assert again.append_event(SID, 1, warning("fresh").event).sequence == 42
    finally:
        again.close()


def test_a_reader_racing_a_roll_sees_no_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan that read a full segment's size before the writer appended its SEAL,
    and looks at the next segment after the writer committed into it, reads the
    segment again instead of reporting missing positions."""
    # reaches inside: the writer rolls in the middle of verify's scan
    from journal.inspect import SEVERITY_DATA

    root = str(tmp_path / "store")
    build(root, saves=12)
    sealed, newest = segments(root)[-2:]
    full_sealed, full_newest = Path(sealed).read_bytes(), Path(newest).read_bytes()
    assert len(full_newest) > 32
    # the moment after the roll made the next segment, before the SEAL
    truncate_file(sealed, len(full_sealed) - SEAL_SIZE)
    truncate_file(newest, 32)
    for name in ["events.idx", "checkpoints.idx", "transcripts.idx", "executions.idx", "snapshot"]:
        os.unlink(os.path.join(session_dir(root), name))
    # reaches inside: the roll must land between the scan's two looks
    real = scan_module._just_created
    fired: list[bool] = []

    def writer_goes_on(seg: Any) -> bool:
        if not fired:  # meanwhile the writer writes the SEAL, then commits into the next
            fired.append(True)
            Path(sealed).write_bytes(full_sealed)
            Path(newest).write_bytes(full_newest)
        return real(seg)

    monkeypatch.setattr(scan_module, "_just_created", writer_goes_on)
    findings = session_findings(session_dir(root))
    assert fired
    assert [f for f in findings if f.severity == SEVERITY_DATA] == []


@pytest.mark.parametrize("damage", ["newest segment removed", "log truncated"])
def test_plain_repair_refuses_a_loss_and_keeps_its_evidence(
    copy: tuple[str, int], damage: str
) -> None:
    """Issue 15, case 1: repair said "nothing to cut" and deleted the caches, the one
    piece of evidence, after which verify said ok and sequences were handed out again."""
    from journal.inspect import SEVERITY_DATA, repair_session

    root, last = copy
    if damage == "newest segment removed":
        os.unlink(segments(root)[-1])
    else:
        truncate_file(segments(root)[-1], 100)
    caches = sorted(p.name for p in Path(session_dir(root)).iterdir() if p.is_file())
    report = repair_session(session_dir(root), SID)
    assert "--accept-loss" in report.refused and "salvage" in report.refused
    assert sorted(p.name for p in Path(session_dir(root)).iterdir() if p.is_file()) == caches
    findings = session_findings(session_dir(root))
    assert [f.severity for f in findings] == [SEVERITY_DATA]  # one damage, one finding
    assert_damaged_and_refuses_writes(root, last)

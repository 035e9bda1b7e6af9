"""`compact` drops superseded checkpoint data without touching the journals, crash-safely."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

import journal
from journal import (
    Checkpoint,
    Event,
    EventPageRequest,
    ExecutionPageRequest,
    TimestampedEvent,
    TranscriptPageRequest,
)
from journal.inspect import compact_session, dir_name, first_damage

SID = "long-session"


def _build(root: Path, saves: int = 60) -> list[Checkpoint]:
    store = journal.open(root, segment_bytes=64 << 10)
    saved = []
    cp = Checkpoint.empty(SID, owner_id="me")
    cp.first_user_message = "the very first question"
    cp.metadata = {"blob": "m" * 3000}
    for seq in range(saves):
        if seq == saves // 2:  # an epoch bump: the old context is dead weight afterwards
            cp = msgspec.structs.replace(cp, context_epoch=1, context=[{"summary": "compacted"}])
        cp = msgspec.structs.replace(
            cp,
            sequence=seq,
            context=[*cp.context, {"turn": seq, "text": random.Random(seq).randbytes(300).hex()}],
            metadata={"blob": random.Random(-seq).randbytes(12000).hex()},
            first_user_message=None if seq else cp.first_user_message,
        )
        ev = TimestampedEvent(
            recorded_at_ms=seq, event=Event(msg={"type": "warning", "message": f"e{seq}"})
        )
        store.save_with_events(cp, [{"t": seq}], None, [ev])
        saved.append(cp)
    store.close()
    return saved


def _journals(root: Path) -> tuple[object, ...]:
    store = journal.open(root)
    try:
        return (
            store.load(SID),
            store.event_page(SID, EventPageRequest(limit=10_000)),
            store.transcript_page(SID, TranscriptPageRequest(max_batches=10_000)),
            store.execution_page(SID, ExecutionPageRequest(limit=100)),
            store.session_summary(SID).first_user_message,  # type: ignore[union-attr]
        )
    finally:
        store.close()


def _sealed_bytes(root: Path) -> int:
    log = root / "sessions" / dir_name(SID) / "log"
    segs = sorted(log.iterdir())[:-1]
    return sum(os.stat(s).st_blocks * 512 for s in segs)


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _build(root)
    log = root / "sessions" / dir_name(SID) / "log"
    before = {p.name: p.read_bytes() for p in log.iterdir()}
    report = compact_session(str(root / "sessions" / dir_name(SID)), SID, keep=3, dry_run=True)
    assert report.compacted and report.segments_rewritten == 0
    assert {p.name: p.read_bytes() for p in log.iterdir()} == before


def test_compact_keeps_journals_and_retained_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "s"
    saved = _build(root)
    before = _journals(root)
    disk_before = _sealed_bytes(root)
    directory = str(root / "sessions" / dir_name(SID))
    report = compact_session(directory, SID, keep=5)
    assert report.retained == [c.sequence for c in saved[-5:]]
    assert report.segments_rewritten > 0
    assert _sealed_bytes(root) < disk_before * 0.8, (disk_before, _sealed_bytes(root))
    assert _journals(root) == before
    store = journal.open(root)
    try:
        for cp in saved[-5:]:
            assert store.checkpoint_at(SID, cp.sequence) == cp
        compacted = report.compacted[0]
        with pytest.raises(journal.NotFoundError, match="compacted"):
            store.checkpoint_at(SID, compacted)
        nxt = msgspec.structs.replace(
            saved[-1], sequence=saved[-1].sequence + 1, context=[*saved[-1].context, {"more": 1}]
        )
        store.save(nxt)
        assert store.load(SID) == nxt
    finally:
        store.close()
    assert first_damage(directory) is None
    # a second pass re-stubs nothing: only the checkpoint that the save above pushed
    # out of the newest five is new to drop
    # (it stays when it lies in the newest segment, which compact never touches)
    again = compact_session(directory, SID, keep=5)
    assert set(again.compacted) <= {saved[-5].sequence}
    assert not set(again.compacted) & set(report.compacted)


COMPACTOR = """
import sys
from journal.inspect import compact_session
print("go", flush=True)
compact_session(sys.argv[1], sys.argv[2], keep=int(sys.argv[3]))
print("done", flush=True)
"""


def test_compact_survives_sigkill(tmp_path: Path) -> None:
    seed = int(os.environ.get("JOURNAL_COMPACT_SEED", random.randrange(1 << 30)))
    print(f"compact kill seed {seed}")
    rng = random.Random(seed)
    root = tmp_path / "s"
    _build(root, saves=80)
    directory = str(root / "sessions" / dir_name(SID))
    before = _journals(root)
    for round_ in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", COMPACTOR, directory, SID, str(40 - 2 * round_)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(rng.uniform(0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert _journals(root) == before, f"round {round_} (seed {seed})"
        found = first_damage(directory)
        assert found is None, found

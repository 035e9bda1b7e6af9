"""A store copied with `cp -a` while a writer is busy is a valid store on its own.

Sealed segments are immutable and every cache is checked against the log, so
a plain recursive copy taken at any moment must open (`journal.open(copy)`)
and hold every session as it was at some commit: no torn commit, no cache
that claims more than the copied log holds. A writer process (forked from the
test) saves checkpoints with transcript batches, execution records and events,
appends events and forks sessions, with small segments so that segments are
sealed and created during the copies.

Each copy is checked: `load`, every historical `checkpoint_at`, newest-first
paging of events, transcript and executions, gapless event sequences, the
listing equal to what the sessions say, and new writes. The copy is also
independent of the original: writes to one do not show in the other.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    T0,
    labelled_checkpoint,
    labelled_execution,
    session_identities,
    stamped,
    warning_event,
)

# reaches inside: a copy that caught a segment roll ends a segment with a SEAL
import journal
from journal import (
    Checkpoint,
    EventPageRequest,
    ExecutionPageRequest,
    SessionPageRequest,
    SessionSummary,
    TranscriptPageRequest,
)
from journal.segment import SEAL_RECORD

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not hasattr(os, "fork") or shutil.which("cp") is None, reason="needs os.fork and cp"
    ),
]

SEED = int(os.environ.get("JOURNAL_COPY_SEED", str(random.SystemRandom().randrange(1 << 32))))
COPIES = 6
SEGMENT_BYTES = 4096


def item(sid: str, seq: int, k: int = 0) -> dict[str, Any]:
    return {"t": sid, "seq": seq, "k": k, "text": "x" * (k * 40)}


def writer(root: Path, seed: int) -> None:
    """Child process: write until killed."""
    code = 1
    try:
        rng = random.Random(seed)
        store = journal.open(
            root, segment_bytes=SEGMENT_BYTES, durability=rng.choice(["fsync", "os"])
        )
        state: dict[str, tuple[int, list[Any], int]] = {}
        for n in range(4):
            sid = f"root/{n}"
            state[sid] = (0, [item(sid, 0)], 0)
            store.save(labelled_checkpoint(sid, 0, state[sid][1]), [item(sid, 0)])
        forks = 0
        while True:
            r = rng.random()
            sid = rng.choice(sorted(state))
            seq, context, runs = state[sid]
            if r < 0.6:
                seq += 1
                delta = [item(sid, seq, k) for k in range(rng.randint(1, 3))]
                context = [*context, *delta]
                rec = (
                    labelled_execution(sid, seq, started=T0 + seq, elapsed=5)
                    if rng.random() < 0.4
                    else None
                )
                runs += rec is not None
                events = [
                    stamped(seq, warning_event(f"{sid}@{seq}")) for _ in range(rng.randint(0, 3))
                ]
                store.save_with_events(
                    labelled_checkpoint(sid, seq, context, runs=runs), delta, rec, events
                )
                state[sid] = (seq, context, runs)
            elif r < 0.9:
                store.append_event(sid, seq, warning_event(f"{sid}+"))
            elif forks < 12:
                child = f"{sid}/f{forks}"
                forks += 1
                pseq = rng.randint(0, seq)
                source = store.checkpoint_at(sid, pseq)
                assert source is not None
                store.fork(sid, pseq, labelled_checkpoint(child, 0, source.context))
                state[child] = (0, source.context, 0)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def copy_tree(src: Path, dst: Path) -> None:
    """`cp -a` of a live store, then what the README says to do when the copy caught a
    segment roll: copy again the segments that the copy's last SEALs name, and those it
    caught before their SEAL but followed by their successor. Such a copy holds a sealed
    segment but not the next one (made before the SEAL, but after cp listed the
    directory), or a segment cut short before the next one, and reads as a loss until
    it has them. Files that vanish
    while cp runs (temporary files renamed into place, directories being published)
    are expected; any other error is not."""
    proc = subprocess.run(["cp", "-a", str(src), str(dst)], capture_output=True, text=True)
    if proc.returncode != 0:
        bad = [ln for ln in proc.stderr.splitlines() if "No such file or directory" not in ln]
        assert not bad, f"cp -a failed: {proc.stderr}"
    for log in dst.glob("sessions/*/log"):
        # A segment copied while it was written, before its SEAL, then its successor
        # (made after the SEAL): the copy has a gap there until the segment is copied again.
        *before_last, _ = sorted(log.glob("*.seg")) or [None]
        for segment in before_last:
            if not segment.read_bytes().endswith(SEAL_RECORD):
                shutil.copy2(src / segment.relative_to(dst), segment)
        while True:
            last = max(log.glob("*.seg"))
            data = last.read_bytes()
            if not data.endswith(SEAL_RECORD):
                break
            base = int(last.name[:20]) + len(data) - 32
            name = f"{base:020d}.seg"
            source = src / log.relative_to(dst) / name
            assert source.exists(), f"{name} is missing in the source too: a real loss"
            shutil.copy2(source, log / name)


def check_session(store: journal.Store, sid: str) -> tuple[int, int]:
    """Everything of one session reads back as one consistent history; (sequence, events)."""
    latest = store.load(sid)
    assert latest is not None, f"{sid!r} has a directory but no checkpoint"
    summary = store.session_summary(sid)
    assert summary is not None and summary.sequence == latest.sequence
    assert latest.session_context.workspace_label == f"seq-{latest.sequence}"
    # Checkpoints of the history, each extending the previous one's context. Every one
    # for a short history; for a longer one the first and last 20 and 20 in between:
    # `checkpoint_at` costs O(context chunks of the epoch), so checking all of them grew
    # with the square of the writer's speed (the writer runs while copies are checked).
    n = latest.sequence + 1
    if n <= 60:
        sample = list(range(n))
    else:
        middle = random.Random(f"{sid}/{n}").sample(range(20, n - 20), 20)
        sample = sorted({*range(20), *middle, *range(n - 20, n)})
    previous: Checkpoint | None = None
    for q in sample:
        cp = store.checkpoint_at(sid, q)
        assert cp is not None, f"{sid!r} lost checkpoint {q}"
        assert cp.sequence == q and cp.metadata == {"sequence": q}
        if previous is not None:
            assert cp.context[: len(previous.context)] == previous.context
        previous = cp
    assert previous == latest
    # Transcript: one batch per save, newest first, never past the latest checkpoint.
    batches: list[int] = []
    before: int | None = None
    while True:
        tp = store.transcript_page(
            sid, TranscriptPageRequest(before_sequence=before, max_batches=3)
        )
        for b in tp.batches:
            for it in b.items:
                if b.sequence > 0 or summary.parent_session_id is None:
                    assert (it["t"], it["seq"]) == (sid, b.sequence)
        batches.extend(b.sequence for b in tp.batches)
        if tp.next_before_sequence is None:
            break
        before = tp.next_before_sequence
    assert batches == list(range(latest.sequence, -1, -1)), f"{sid!r} transcript {batches}"
    # Executions: newest first, as many as the checkpoint counted.
    execs: list[int] = []
    before = None
    while True:
        ep = store.execution_page(sid, ExecutionPageRequest(before_sequence=before, limit=2))
        execs.extend(int(r.turn_id.rpartition("#")[2]) for r in ep.executions)
        if ep.next_before_sequence is None:
            break
        before = ep.next_before_sequence
    assert execs == sorted(execs, reverse=True) and all(q <= latest.sequence for q in execs)
    assert len(execs) == latest.execution_stats.run_count
    # Events: gapless from 1, the same through both readers.
    page = store.event_page(sid, EventPageRequest(limit=1))
    counter = page.latest_sequence
    after = [e.sequence for e in store.events_after(sid, 0, 1_000_000)]
    assert after == list(range(1, counter + 1)), f"{sid!r} event sequences have gaps"
    newest_first: list[int] = []
    before = None
    while True:
        ep2 = store.event_page(sid, EventPageRequest(before_sequence=before, limit=7))
        newest_first.extend(e.sequence for e in ep2.events)
        if ep2.next_before_sequence is None:
            break
        before = ep2.next_before_sequence
    assert newest_first == after[::-1]
    return latest.sequence, counter


def check_store(store: journal.Store, root: Path) -> dict[str, tuple[int, int]]:
    ids = sorted(session_identities(root))
    seen = {sid: check_session(store, sid) for sid in ids}
    page = store.list_sessions_page(SessionPageRequest(limit=1_000_000))
    listed: dict[str, SessionSummary] = {s.session_id: s for s in page.sessions}
    assert sorted(listed) == ids, "the copy's listing differs from its sessions"
    for sid, summary in listed.items():
        assert summary == store.session_summary(sid)
        if summary.parent_session_id is not None:
            assert summary.parent_session_id in listed
    recent = store.recent_executions(1_000_000)  # all of them: a busy writer makes > 1000
    assert sorted((r.session_id, r.turn_id) for r in recent) == sorted(
        (sid, r.turn_id)
        for sid in ids
        for r in store.execution_page(sid, ExecutionPageRequest(limit=1_000_000)).executions
    )
    return seen


def test_copy_of_live_store_is_valid(tmp_path: Path) -> None:
    print(f"JOURNAL_COPY_SEED={SEED}")
    rng = random.Random(SEED)
    root = tmp_path / "store"
    journal.open(root).close()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        writer(root, rng.randrange(1 << 32))
    copies: list[tuple[Path, dict[str, tuple[int, int]]]] = []
    try:
        for n in range(COPIES):
            time.sleep(rng.uniform(0.05, 0.3))
            done, status = os.waitpid(pid, os.WNOHANG)
            assert done == 0, f"the writer died on its own (status {status}, seed {SEED})"
            dst = tmp_path / f"copy-{n}"
            copy_tree(root, dst)
            copy = journal.open(dst)
            try:
                seen = check_store(copy, dst)
            finally:
                copy.close()
            copies.append((dst, seen))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert sum(len(seen) for _, seen in copies) > COPIES * 4
    # The copies grew with the writer and each is independent: write to one, the
    # original and the other copies do not change.
    original = journal.open(root)
    try:
        final = check_store(original, root)
        for _dst, seen in copies:
            for sid, (seq, _events) in seen.items():
                assert final[sid][0] >= seq
        dst, seen = copies[-1]
        copy = journal.open(dst)
        try:
            sid = sorted(seen)[0]
            cp = copy.load(sid)
            assert cp is not None
            # a jump no live writer reaches, so the original cannot have it by chance
            jump = cp.sequence + 10**12
            nxt = labelled_checkpoint(sid, jump, [*cp.context, item(sid, jump)])
            copy.save(nxt, [item(sid, jump)])
            got = copy.append_event(sid, 1, warning_event("copy"))
            assert got.sequence == seen[sid][1] + 1
            assert copy.fork_at(sid, jump, "copy-child").parent_session_id == sid
            assert copy.delete_sessions(["copy-child"]) is True
        finally:
            copy.close()
        loaded = original.load(sid)
        assert loaded is not None and loaded.sequence < jump
        assert original.load("copy-child") is None
    finally:
        original.close()

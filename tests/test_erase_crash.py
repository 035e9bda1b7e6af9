"""Compaction beside a live writer in another process, and compaction killed (-9)
at random points: no commit is lost or torn, every record not erased reads as it
was, and an erased one reads as it was or as its stub."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec

import journal
from journal import Checkpoint, Event, EventPageRequest
from journal.compact import compact_session
from journal.erase import ERASE_KEY, erase_declaration, is_erased
from journal.inspect import dir_name, first_damage

SID = "busy"
ROOT = Path(__file__).resolve().parent.parent


def text_of(i: int, size: int = 3000) -> str:
    return random.Random(i).randbytes(size // 2).hex()


def events_of(root: Path) -> list[journal.JournalEvent]:
    store = journal.open(root)
    try:
        return list(reversed(store.event_page(SID, EventPageRequest(limit=1 << 20)).events))
    finally:
        store.close()


def check_events(evs: list[journal.JournalEvent], declared_upto: int) -> int:
    """Every event is its note, its declaration, or (if a declaration named it) a stub."""
    erased = 0
    assert [e.sequence for e in evs] == list(range(1, len(evs) + 1))
    for e in evs:
        msg = e.event.msg
        if is_erased(e):
            assert e.sequence <= declared_upto and msg["erased_type"] == "note", e
            erased += 1
        elif msg["type"] == "note":
            assert msg["text"] == text_of(msg["i"]) and e.recorded_at_ms == msg["i"], e.sequence
        else:
            assert ERASE_KEY in msg
    return erased


WRITER = """
import sys, random
import journal
from journal import Event, EventPageRequest
from journal.erase import ERASE_KEY, erase_declaration
root, sid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def text_of(i, size=3000):
    return random.Random(i).randbytes(size // 2).hex()
store = journal.open(root)
print("go", flush=True)
last = 0
for i in range(n):
    ev = store.append_event(sid, i, Event(msg={"type": "note", "i": i, "text": text_of(i)}))
    print("acked", ev.sequence, i, flush=True)
    if i % 25 == 24:
        decl = erase_declaration(ranges=[(1, ev.sequence - 10)], types=["note"])
        d = store.append_event(sid, i, Event(msg={"type": "hide", ERASE_KEY: decl}))
        print("declared", d.sequence, ev.sequence - 10, flush=True)
    if i % 50 == 49:  # reads in between, with what this process already indexed
        page = store.event_page(sid, EventPageRequest(limit=1 << 20))
        assert [e.sequence for e in page.events] == list(range(page.latest_sequence, 0, -1))
page = store.event_page(sid, EventPageRequest(limit=1 << 20))
print("final", page.latest_sequence, flush=True)
store.close()
"""


def test_compaction_beside_a_writer_in_another_process(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty(SID, owner_id="me"))
    store.close()
    directory = str(root / "sessions" / dir_name(SID))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), SID, "300"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "go"
    acked: dict[int, int] = {}
    declared_upto = 0
    runs = erasing = 0
    lines: list[str] = []
    drain = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    drain.start()
    while proc.poll() is None:
        report = compact_session(directory, SID)
        runs += 1
        erasing += bool(report.erased_events)
    assert proc.wait() == 0
    drain.join()
    for line in lines:
        kind, *nums = line.split()
        if kind == "acked":
            acked[int(nums[0])] = int(nums[1])
        elif kind == "declared":
            declared_upto = max(declared_upto, int(nums[1]))
    print("compactions", runs, "erasing", erasing)
    assert len(acked) == 300 and erasing >= 2, (runs, erasing)
    compact_session(directory, SID)
    evs = events_of(root)
    by_seq = {e.sequence: e for e in evs}
    for seq, i in acked.items():
        msg = by_seq[seq].event.msg
        assert is_erased(by_seq[seq]) or msg["i"] == i
    assert check_events(evs, declared_upto) > 100
    assert first_damage(directory) is None


COMPACTOR = """
import sys
from journal.compact import compact_session
print("go", flush=True)
compact_session(sys.argv[1], sys.argv[2], keep=int(sys.argv[3]) or None)
print("done", flush=True)
"""


def test_compaction_survives_sigkill(tmp_path: Path) -> None:
    seed = int(os.environ.get("JOURNAL_ERASE_SEED", random.randrange(1 << 30)))
    print(f"erase kill seed {seed}")
    rng = random.Random(seed)
    root = tmp_path / "s"
    store = journal.open(root, segment_bytes=128 << 10)
    cp = Checkpoint.empty(SID, owner_id="me")
    store.save(cp)
    store.close()
    directory = str(root / "sessions" / dir_name(SID))
    i = 0
    declared_upto = 0
    done = 0
    for round_ in range(14):
        store = journal.open(root, segment_bytes=128 << 10)
        for _ in range(60):
            if i % 20 == 0:  # a save now and then: context chains across segments
                ctx = [*cp.context, {"i": i, "t": text_of(-i, 800)}]
                cp = msgspec.structs.replace(cp, sequence=cp.sequence + 1, context=ctx)
                store.save(cp)
            store.append_event(SID, i, Event(msg={"type": "note", "i": i, "text": text_of(i)}))
            i += 1
        latest_seq = store.event_page(SID, EventPageRequest(limit=1)).latest_sequence
        upto = latest_seq - 15
        decl = erase_declaration(ranges=[(1, upto)], types=["note"])
        store.append_event(SID, 0, Event(msg={"type": "hide", ERASE_KEY: decl}))
        declared_upto = upto
        store.close()
        before = events_of(root)
        keep = rng.choice([0, 0, 3])
        proc = subprocess.Popen(
            [sys.executable, "-c", COMPACTOR, directory, SID, str(keep)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(rng.uniform(0, 0.25))
        proc.send_signal(signal.SIGKILL)
        finished = "done" in (proc.stdout.read() or "")
        proc.wait()
        done += finished
        found = first_damage(directory)
        assert found is None, f"round {round_} (seed {seed}): {found}"
        after = events_of(root)
        assert len(after) == len(before), f"round {round_} (seed {seed})"
        for a, b in zip(after, before, strict=True):
            assert a == b or (is_erased(a) and not is_erased(b) and a.sequence <= declared_upto)
        check_events(after, declared_upto)
        store = journal.open(root)
        assert store.load(SID) == cp
        store.close()
    print(f"compactions finished before the kill: {done} of 14")
    compact_session(directory, SID)
    assert check_events(events_of(root), declared_upto) > 0.5 * i
    assert first_damage(directory) is None


def test_stale_readers_in_another_process_rebuild(tmp_path: Path) -> None:
    """A process that indexed the log before a compaction reads it right after."""
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty(SID, owner_id="me"))
    for i in range(80):
        store.append_event(SID, i, Event(msg={"type": "note", "i": i, "text": text_of(i)}))
    store.append_event(SID, 0, Event(msg={"type": "h", ERASE_KEY: {"ranges": [[1, 60]]}}))
    store.close()
    reader = """
import sys, json
import journal
from journal import EventPageRequest
store = journal.open(sys.argv[1])
def page():
    evs = store.event_page(sys.argv[2], EventPageRequest(limit=1000)).events
    return [[e.sequence, e.event.msg.get("type")] for e in evs]
print(json.dumps(page()), flush=True)
sys.stdin.readline()
print(json.dumps(page()), flush=True)
print(json.dumps(store.events_after(sys.argv[2], 50, 20)[0].event.msg.get("type")), flush=True)
store.close()
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", reader, str(root), SID],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    compact_session(str(root / "sessions" / dir_name(SID)), SID)
    proc.stdin.write("\n")
    proc.stdin.flush()
    second = json.loads(proc.stdout.readline())
    after_50 = json.loads(proc.stdout.readline())
    assert proc.wait() == 0
    assert [s for s, _ in first] == [s for s, _ in second]
    assert [t for s, t in second if s <= 60] == ["journal_erased"] * 60 or [
        t for s, t in second if s <= 60
    ] == ["note"] * 60  # its descriptors of the old file, or the new file
    assert after_50 in ("journal_erased", "note")

"""Several processes x several threads writing one store; readers paging meanwhile.

4 writer processes with 4 threads each append events (`append_event`) and save
checkpoints with events (`save_with_events`) to one session they all share and
to one session per process (shared by its threads). Checkpoint saves work like a
counter kept in the store: load, save sequence + 1 with one more context item,
retry on ContractViolationError. Every call that returns is logged with what it
returned. Afterwards:

- event sequences of each session are gapless from 1 and unique;
- every acknowledged event is stored exactly once, at the sequence it was given,
  with its own content (no lost commit, no interleaved or torn record); the
  events of one save have consecutive sequences;
- every checkpoint sequence of the shared counter was won by exactly one writer
  and its context is the previous one plus that writer's item (never a regress);
- a reader process paging all along only ever saw whole commits.
"""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import msgspec
import pytest

import journal
from journal import Checkpoint, Event, EventPageRequest, TranscriptPageRequest

PROCS = 4
THREADS = 4
OPS = int(os.environ.get("JOURNAL_CONCURRENCY_OPS", "30"))  # per thread
SHARED = "shared"

COMMON = r'''
import hashlib


def pad(text):
    """Deterministic filler, so records are of varied size and the log grows fast."""
    h = hashlib.sha256(text.encode()).hexdigest()
    return h * (1 + int(h[:2], 16) % 6)


def message(writer, n, part, parts):
    head = f"{writer}#{n}:{part}/{parts}"
    return head + "|" + pad(head)


def parse(text):
    head, filler = text.split("|")
    writer, rest = head.split("#")
    n, frac = rest.split(":")
    part, parts = frac.split("/")
    assert filler == pad(head), f"event content damaged: {text!r}"
    return writer, int(n), int(part), int(parts)


def context_item(writer, n):
    return {"by": writer, "n": n, "pad": pad(f"ctx {writer} {n}")}
'''

WRITER = (
    COMMON
    + r"""
import json, os, random, sys, threading, traceback
import msgspec
import journal
from journal import ContractViolationError, Event, EventPageRequest, TimestampedEvent

root, out = sys.argv[1], sys.argv[5]
proc, threads, ops, segment_bytes = (int(a) for a in sys.argv[2:5] + sys.argv[6:7])
store = journal.open(root, durability="fsync", segment_bytes=segment_bytes)
log = open(out, "w", buffering=1)  # a line per call, written when the call returned
log_lock = threading.Lock()
own = f"p{proc}"


def record(**entry):
    with log_lock:
        log.write(json.dumps(entry) + "\n")


def events(writer, n, parts):
    return [
        TimestampedEvent(
            recorded_at_ms=1_700_000_000_000 + n,
            event=Event(msg={"type": "warning", "message": message(writer, n, k, parts)}),
        )
        for k in range(parts)
    ]


def save(sid, writer, n, rng):
    parts = rng.randrange(4)
    retries = 0
    while True:
        cp = store.load(sid)
        seq = cp.sequence + 1
        context = [*cp.context, context_item(writer, n)]
        new = msgspec.structs.replace(cp, sequence=seq, context=context)
        try:
            got = store.save_with_events(new, [{"seq": seq, "by": writer, "n": n}], None,
                                         events(writer, n, parts))
        except ContractViolationError:
            retries += 1  # another writer saved first: load again
            continue
        record(kind="save", sid=sid, writer=writer, n=n, seq=seq, parts=parts,
               events=[e.sequence for e in got], retries=retries)
        return


def worker(t):
    writer = f"w{proc}.{t}"
    rng = random.Random(proc * 100 + t)
    try:
        for n in range(ops):
            r = rng.random()
            sid = SHARED if r < 0.7 else own
            if rng.random() < 0.55:
                got = store.append_event(sid, 1_700_000_000_000 + n, events(writer, n, 1)[0].event)
                record(kind="append", sid=sid, writer=writer, n=n, events=[got.sequence])
            else:
                save(sid, writer, n, rng)
    except BaseException:
        record(kind="error", writer=writer, error=traceback.format_exc())


def reader():
    # pages in this process while its writers commit (shares their Session objects)
    rng = random.Random(proc)
    try:
        while not done.is_set():
            sid = rng.choice([SHARED, own])
            page = store.event_page(sid, EventPageRequest(limit=rng.randrange(1, 300)))
            seqs = [e.sequence for e in page.events]
            want = list(range(page.latest_sequence, page.latest_sequence - len(seqs), -1))
            assert seqs == want, f"{sid}: page {seqs[:5]}... latest {page.latest_sequence}"
            for e in page.events:
                parse(e.event.msg["message"])
    except BaseException:
        record(kind="error", writer=f"reader{proc}", error=traceback.format_exc())


SHARED = "shared"
done = threading.Event()
ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
rt = threading.Thread(target=reader)
rt.start()
for t in ts:
    t.start()
for t in ts:
    t.join()
done.set()
rt.join()
log.close()
store.close()
"""
)

READER = (
    COMMON
    + r"""
import json, os, random, sys, traceback
import journal
from journal import EventPageRequest, TranscriptPageRequest

root, sessions, stop, out = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4]
segment_bytes = int(sys.argv[5])
rng = random.Random(5)
checks = 0
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


try:
    store = journal.open(root, durability="fsync", segment_bytes=segment_bytes)
    while not os.path.exists(stop) or checks < 20:
        sid = rng.choice(sessions)
        page = store.event_page(sid, EventPageRequest(limit=rng.randrange(1, 40)))
        seqs = [e.sequence for e in page.events]
        check(seqs == list(range(page.latest_sequence, page.latest_sequence - len(seqs), -1)),
              f"{sid}: newest page {seqs} latest {page.latest_sequence}")
        parsed = [parse(e.event.msg["message"]) for e in page.events]
        if parsed:
            # commits become visible whole: the newest event ends its save
            w, n, part, parts = parsed[0]
            check(part == parts - 1, f"{sid}: newest event is part {part} of {parts}")
        for a, b in zip(parsed[1:], parsed):  # older, newer
            if a[2] + 1 < a[3]:  # `a` is not the last of its save: `b` must continue it
                check(b[:2] == a[:2] and b[2] == a[2] + 1, f"{sid}: save interleaved {a} {b}")
        if page.latest_sequence > 5:
            after = rng.randrange(page.latest_sequence)
            got = store.events_after(sid, after, 25)
            check([e.sequence for e in got] == list(range(after + 1, after + 1 + len(got))),
                  f"{sid}: events_after({after}) not contiguous")
            for e in got:
                parse(e.event.msg["message"])
        cp = store.load(sid)
        check(len(cp.context) == cp.sequence + 1, f"{sid}: checkpoint {cp.sequence} has"
              f" {len(cp.context)} context items")
        tp = store.transcript_page(sid, TranscriptPageRequest(max_batches=5))
        for b in tp.batches:
            check(b.items[0]["seq"] == b.sequence, f"{sid}: batch {b.sequence} holds {b.items}")
        checks += 1
    store.close()
except BaseException:
    problems.append(traceback.format_exc())
with open(out, "w") as f:
    json.dump({"checks": checks, "problems": problems[:20]}, f)
"""
)

C: dict[str, Any] = {}
exec(compile(COMMON, "<concurrency common>", "exec"), C)


def all_events(store: journal.Store, sid: str) -> list[journal.JournalEvent]:
    out: list[journal.JournalEvent] = []
    before = None
    while True:
        page = store.event_page(sid, EventPageRequest(limit=97, before_sequence=before))
        out.extend(page.events)
        if page.next_before_sequence is None:
            return out[::-1]
        before = page.next_before_sequence


@pytest.mark.slow
@pytest.mark.parametrize(
    ("segment_bytes", "kill_one"),
    [(64 << 20, False), (32 << 10, False), (32 << 10, True)],
    ids=["one-segment", "rolling", "rolling-one-writer-killed"],
)
def test_processes_and_threads_write_one_store(
    tmp_path: Any, segment_bytes: int, kill_one: bool
) -> None:
    """With `kill_one`, writer 0 (4 threads) is killed with SIGKILL in the middle of it all:
    the others go on (recovering its torn tail), and its acknowledged calls stay."""
    root = str(tmp_path / "store")
    sessions = [SHARED] + [f"p{p}" for p in range(PROCS)]
    store = journal.open(root, segment_bytes=segment_bytes)
    for sid in sessions:
        cp = msgspec.structs.replace(
            Checkpoint.empty(sid, owner_id="t"), context=[C["context_item"]("init", 0)]
        )
        store.save_with_events(cp, [{"seq": 0, "by": "init", "n": 0}], None, [])
    store.close()

    writer_py, reader_py = tmp_path / "writer.py", tmp_path / "reader.py"
    writer_py.write_text(WRITER)
    reader_py.write_text(READER)
    stop = str(tmp_path / "stop")
    reader_out = str(tmp_path / "reader.json")
    seg = str(segment_bytes)
    reader = subprocess.Popen(
        [sys.executable, str(reader_py), root, ",".join(sessions), stop, reader_out, seg]
    )
    outs = [str(tmp_path / f"writer{p}.jsonl") for p in range(PROCS)]
    ops = [OPS * 20 if kill_one and p == 0 else OPS for p in range(PROCS)]
    writers = [
        subprocess.Popen(
            [sys.executable, str(writer_py), root, str(p), str(THREADS), str(ops[p]), outs[p], seg],
            stderr=subprocess.PIPE,
        )
        for p in range(PROCS)
    ]
    try:
        if kill_one:
            # once the victim is well into its work, at a moment that depends on the run
            deadline = time.monotonic() + 120
            while not os.path.exists(outs[0]) or os.path.getsize(outs[0]) < 4000:
                assert time.monotonic() < deadline and writers[0].poll() is None
                time.sleep(0.01)
            time.sleep(random.random() * 0.3)
            writers[0].send_signal(signal.SIGKILL)
            writers[0].wait(timeout=60)
        for p, w in enumerate(writers):
            if kill_one and p == 0:
                continue
            _, err = w.communicate(timeout=600)
            assert w.returncode == 0, f"writer {p} failed: {err.decode()}"
    finally:
        with open(stop, "w"):
            pass
        reader.wait(timeout=120)
        for w in writers:
            if w.poll() is None:
                w.kill()

    acks = []
    for out in outs:
        with open(out) as f:
            data = f.read()
        acks += [json.loads(line) for line in data.split("\n")[:-1]]  # (a cut last line)
    errors = [a["error"] for a in acks if a["kind"] == "error"]
    assert not errors, errors[0]
    if kill_one:
        assert sum(a["writer"].startswith("w0.") for a in acks) < PROCS * THREADS * ops[0]
        assert len(acks) > (PROCS - 1) * THREADS * OPS
    else:
        assert len(acks) == PROCS * THREADS * OPS

    store = journal.open(root, segment_bytes=segment_bytes)
    try:
        if segment_bytes < 1 << 20:
            segs = glob.glob(os.path.join(root, "sessions", "shared*", "log", "*.seg"))
            assert len(segs) > 3, "the shared log should have rolled"
        for sid in sessions:
            victim = "w0." if kill_one else None
            check_session(store, sid, [a for a in acks if a["sid"] == sid], victim)
        # and the store takes writes after all that
        store.append_event(SHARED, 1, Event(msg={"type": "warning", "message": "last"}))
    finally:
        store.close()

    with open(reader_out) as f:
        seen = json.load(f)
    assert not seen["problems"], seen["problems"]
    assert seen["checks"] >= 20


def check_session(
    store: journal.Store, sid: str, acks: list[dict[str, Any]], victim: str | None
) -> None:
    """`victim`: writer-name prefix of a killed process, whose unacknowledged calls (at
    most one per thread) may be there, whole, or not at all."""
    events = all_events(store, sid)
    seqs = [e.sequence for e in events]
    assert seqs == list(range(1, len(events) + 1)), f"{sid}: event sequences not gapless"
    stored = {e.sequence: C["parse"](e.event.msg["message"]) for e in events}
    assert len(set(stored.values())) == len(stored), f"{sid}: an event is stored twice"
    # every acknowledged event is stored, once, at its sequence, with its content
    expected: dict[int, tuple[str, int, int, int]] = {}
    for a in acks:
        parts = 1 if a["kind"] == "append" else a["parts"]
        assert len(a["events"]) == parts
        if parts:  # the events of one call have consecutive sequences
            assert a["events"] == list(range(a["events"][0], a["events"][0] + parts))
        for k, seq in enumerate(a["events"]):
            assert seq not in expected, f"{sid}: event {seq} given to two calls"
            expected[seq] = (a["writer"], a["n"], k, parts)
    for seq, want in expected.items():
        assert stored.get(seq) == want, f"{sid}: acknowledged event {seq} {want} is lost"
    # anything else is an in-flight call of the killed writer, with all its events
    unacked: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for seq, (writer, n, part, parts) in stored.items():
        if seq not in expected:
            assert victim and writer.startswith(victim), f"{sid}: event {seq} never acked"
            unacked.setdefault((writer, n), []).append((seq, part, parts))
    for (writer, n), got in unacked.items():
        parts = got[0][2]
        assert [p for _, p, _ in got] == list(range(parts)), f"{sid}: partial call {writer} {n}"
        assert [q for q, _, _ in got] == list(range(got[0][0], got[0][0] + parts))
    assert len({w for w, _ in unacked}) == len(unacked) <= THREADS

    # the checkpoint counter: each sequence won once, contexts chain, nothing lost
    saves = {a["seq"]: a for a in acks if a["kind"] == "save"}
    assert len(saves) == sum(a["kind"] == "save" for a in acks), f"{sid}: a sequence won twice"
    final = store.load(sid)
    assert final is not None
    assert set(saves) <= set(range(1, final.sequence + 1)), f"{sid}: acknowledged save lost"
    prev = store.checkpoint_at(sid, 0)
    assert prev is not None
    in_flight = 0
    for s in range(1, final.sequence + 1):
        cp = store.checkpoint_at(sid, s)
        assert cp is not None
        item = cp.context[-1]
        if s in saves:
            assert (item["by"], item["n"]) == (saves[s]["writer"], saves[s]["n"])
        else:
            assert victim and item["by"].startswith(victim), f"{sid}: save {s} never acked"
            in_flight += 1
        assert cp.context == [*prev.context, C["context_item"](item["by"], item["n"])]
        prev = cp
    assert in_flight <= THREADS
    if victim:
        print(
            f"{sid}: killed writer's unacknowledged calls found whole: {len(unacked)} with"
            f" events, {in_flight} saves"
        )
    assert msgspec.to_builtins(prev) == msgspec.to_builtins(final)
    batches = []
    before = None
    while True:
        page = store.transcript_page(
            sid, TranscriptPageRequest(max_batches=50, before_sequence=before)
        )
        batches.extend(page.batches)
        if page.next_before_sequence is None:
            break
        before = page.next_before_sequence
    assert [b.sequence for b in batches] == list(range(final.sequence, -1, -1))
    for b in batches:
        cp = store.checkpoint_at(sid, b.sequence)
        assert cp is not None
        by, n = cp.context[-1]["by"], cp.context[-1]["n"]
        assert b.items == [{"seq": b.sequence, "by": by, "n": n}]

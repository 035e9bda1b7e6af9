"""kill -9 at random moments of real writes: every acknowledged call survives, nothing partial.

A writer process runs `save_with_events` (checkpoints with growing context and
epoch changes, transcript deltas, execution records, several events),
`append_event` and `save_state` on a few sessions, and reports each call in an
ack file only after the call returned. The test kills it with SIGKILL at a
random moment, reopens the store, and checks:

- every acknowledged call is there (checkpoint sequence >= the last acked one,
  events up to the last acked one, with exactly the content that was written);
- at most the one call that was running when the process died is there
  beyond that, and wholly or not at all: its checkpoint, transcript batch,
  execution record and events all, or none (through load, checkpoint_at,
  transcript_page, execution_page, events_after/event_page);
- writing continues: the next writer appends to the same store (its first
  write recovers the torn tail).

To make hundreds of kills cheap, a "zygote" process imports journal once and
forks one writer per kill. Seed: JOURNAL_CRASH_SEED (printed); number of kills
in all: JOURNAL_CRASH_KILLS (default 200).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

import msgspec
import pytest

# reaches inside: a dead writer's half-done roll is made by hand, under its lock
import journal
from journal import Event, EventPageRequest, ExecutionPageRequest, TranscriptPageRequest
from journal.layout import LOCK_FILE
from journal.locks import FileLock
from journal.record import OK, parse_at
from journal.segment import SEAL_SIZE

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs fork and SIGKILL")

SEED = int(os.environ.get("JOURNAL_CRASH_SEED", str(random.SystemRandom().randrange(1 << 32))))
KILLS = int(os.environ.get("JOURNAL_CRASH_KILLS", "200"))
SESSIONS = ["alpha", "beta", "gamma"]

# The writer's workload. The content of everything it writes is a function of where it
# goes (session, checkpoint sequence, event sequence), so the checker can tell exactly
# what must be there. The test module runs this same text to share the definitions.
WORKLOAD = r'''
import os, random, sys, traceback
import msgspec
import journal
from journal import Checkpoint, Event, EventPageRequest, ExecutionRecord, TimestampedEvent

EPOCH_LEN = 9


def context_for(sid, seq):
    epoch = seq // EPOCH_LEN
    items = []
    for k in range(epoch * EPOCH_LEN, seq + 1):
        item = {"sid": sid, "k": k}
        if k % 4 == 2:  # big and compressible: commits span pages, zstd framing
            item["blob"] = (f"{sid}-{k}-" * 700)[:4000]
        items.append(item)
    return epoch, items


def transcript_for(sid, seq):
    return [] if seq % 4 == 3 else [{"sid": sid, "seq": seq, "j": j} for j in range(1 + seq % 3)]


def execution_for(sid, seq):
    if seq % 2 == 0:
        return None
    start = 1_700_000_000_000 + seq
    return ExecutionRecord(
        session_id=sid, submission_id=f"sub-{seq}", author={"user": sid}, turn_id=f"turn-{seq}",
        started_at_ms=start, finished_at_ms=start + 7, elapsed_ms=7, outcome="completed",
    )


def save_events(seq):
    return seq % 4  # how many events the save at `seq` carries


def event_text(sid, n, origin):
    return f"{sid}|#{n}|{origin}"


def checkpoint_for(sid, seq):
    epoch, ctx = context_for(sid, seq)
    cp = Checkpoint.empty(sid, owner_id="crash")
    return msgspec.structs.replace(
        cp, sequence=seq, context=ctx, context_epoch=epoch, metadata={"seq": seq}
    )


def run(cfg):
    rng = random.Random(cfg["seed"])
    ack = os.open(cfg["ack"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def say(line):
        os.write(ack, (line + "\n").encode())

    try:
        store = journal.open(cfg["root"], durability=cfg["durability"],
                             segment_bytes=cfg["segment_bytes"])
        seq, events, state = {}, {}, {}
        for sid in cfg["sessions"]:
            cp = store.load(sid)
            seq[sid] = -1 if cp is None else cp.sequence
            events[sid] = 0
            if cp is not None:
                events[sid] = store.event_page(sid, EventPageRequest(limit=1)).latest_sequence
            value = store.load_state(sid, "progress")
            state[sid] = 0 if value is None else value["n"]
        os.write(1, b"ready\n")
        while True:
            sid = rng.choice(cfg["sessions"])
            r = rng.random()
            if r < 0.55 or seq[sid] < 0:
                s = seq[sid] + 1
                evs = []
                for j in range(save_events(s)):
                    n = events[sid] + 1 + j
                    evs.append(TimestampedEvent(
                        recorded_at_ms=1_700_000_000_000 + n,
                        event=Event(msg={"type": "warning",
                                         "message": event_text(sid, n, f"cp{s}.{j}")})))
                got = store.save_with_events(checkpoint_for(sid, s), transcript_for(sid, s),
                                             execution_for(sid, s), evs)
                assert [e.sequence for e in got] == [events[sid] + 1 + j for j in range(len(evs))]
                seq[sid] = s
                events[sid] += len(evs)
                say(f"S {sid} {s} {events[sid]}")
            elif r < 0.6:
                store.flush()  # caches (index files, snapshot) written while we may die
            elif r < 0.9:
                n = events[sid] + 1
                got = store.append_event(sid, 1_700_000_000_000 + n, Event(
                    msg={"type": "warning", "message": event_text(sid, n, "ap")}))
                assert got.sequence == n
                events[sid] = n
                say(f"A {sid} {n}")
            else:
                state[sid] += 1
                store.save_state(sid, "progress", {"n": state[sid], "pad": "p" * (state[sid] % 50)})
                say(f"T {sid} {state[sid]}")
    except BaseException:
        say("E " + traceback.format_exc().replace("\n", "\\n"))
        os._exit(3)


def zygote():
    """Fork one writer per request line; report "pid N" and, when it is gone, "exit N status"."""
    for line in sys.stdin:
        cfg = __import__("json").loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            run(cfg)
            os._exit(0)
        sys.stdout.write(f"pid {pid}\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(f"exit {pid} {status}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    zygote()
'''

W: dict[str, Any] = {"__name__": "crash_workload"}
exec(compile(WORKLOAD, "<crash workload>", "exec"), W)


class Zygote:
    def __init__(self, tmp: str):
        script = os.path.join(tmp, "crash_writer.py")
        with open(script, "w") as f:
            f.write(WORKLOAD)
        self.err = open(os.path.join(tmp, "zygote.err"), "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            bufsize=0,
        )
        self.sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buf = b""

    def line(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                raise AssertionError("writer process did not answer in time")
            assert self.proc.stdout is not None
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                self.err.seek(0)
                raise AssertionError(f"zygote died: {self.err.read().decode(errors='replace')}")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def run_and_kill(self, cfg: dict[str, Any], delay: float) -> str:
        """Start a writer, kill it `delay` seconds after it is ready; return how it ended."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cfg) + "\n").encode())
        pid, ready = None, False
        try:
            while pid is None or not ready:
                words = self.line().split()
                if words[0] == "pid":
                    pid = int(words[1])
                elif words[0] == "ready":
                    ready = True
                elif words[0] == "exit":
                    pid = None
                    return f"writer exited before it was ready (status {words[2]})"
            time.sleep(delay)
        finally:
            if pid is not None:  # also when this test fails: never leave a writer running
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        words = self.line().split()
        assert words[0] == "exit" and int(words[1]) == pid, words
        status = int(words[2])
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            return "killed"
        return f"writer ended by itself (status {status})"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


class Model:
    """What must be in the store: the state after every acknowledged call (and checked)."""

    def __init__(self) -> None:
        self.seq = dict.fromkeys(SESSIONS, -1)  # checkpoint sequence
        self.events = dict.fromkeys(SESSIONS, 0)  # event counter
        self.state = dict.fromkeys(SESSIONS, 0)
        self.checked_seq = dict.fromkeys(SESSIONS, -1)  # verified in full up to here
        self.checked_events = dict.fromkeys(SESSIONS, 0)
        self.groups: dict[str, dict[int, list[int]]] = {s: {} for s in SESSIONS}

    def read_acks(self, path: str) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """The last acknowledged checkpoint / event / state per session in one run."""
        seq, events, state = dict(self.seq), dict(self.events), dict(self.state)
        with open(path, "rb") as f:
            data = f.read().decode()
        lines = data.split("\n")[:-1]  # a line without its newline was cut by the kill
        for line in lines:
            kind, rest = line[0], line[2:]
            if kind == "E":
                raise AssertionError("writer failed:\n" + rest.replace("\\n", "\n"))
            words = rest.split()
            if kind == "S":
                seq[words[0]], events[words[0]] = int(words[1]), int(words[2])
            elif kind == "A":
                events[words[0]] = int(words[1])
            elif kind == "T":
                state[words[0]] = int(words[1])
        return seq, events, state


def check_store(root: str, cfg: dict[str, Any], model: Model, ack_path: str) -> int:
    """Verify the store after a kill against the acks; return how many calls it shows."""
    acked_seq, acked_events, acked_state = model.read_acks(ack_path)
    store = journal.open(root, segment_bytes=cfg["segment_bytes"])
    beyond = 0  # calls visible beyond the acknowledged ones (at most the one in flight)
    calls = 0
    try:
        for sid in SESSIONS:
            cp = store.load(sid)
            seq = -1 if cp is None else cp.sequence
            assert seq >= acked_seq[sid], f"{sid}: acknowledged checkpoint {acked_seq[sid]} lost"
            beyond += seq - acked_seq[sid]
            if cp is not None:
                want = msgspec.to_builtins(W["checkpoint_for"](sid, seq))
                assert msgspec.to_builtins(cp) == want, f"{sid}: checkpoint {seq} differs"
            latest = 0
            if cp is not None:
                latest = store.event_page(sid, EventPageRequest(limit=1)).latest_sequence
            assert latest >= acked_events[sid], f"{sid}: acknowledged event {latest + 1} lost"
            if seq == acked_seq[sid] and latest > acked_events[sid]:
                beyond += 1  # an append in flight
                assert latest == acked_events[sid] + 1
            check_events(store, sid, seq, latest, model)
            check_history(store, sid, seq, model)
            value = store.load_state(sid, "progress")
            n = 0 if value is None else value["n"]
            assert n >= acked_state[sid], f"{sid}: acknowledged state {acked_state[sid]} lost"
            if value is not None:
                assert value == {"n": n, "pad": "p" * (n % 50)}
            beyond += n - acked_state[sid]
            calls += (seq - model.seq[sid]) + (n - model.state[sid])
            calls += latest - model.events[sid]
            model.seq[sid], model.events[sid], model.state[sid] = seq, latest, n
    finally:
        store.close()
    assert beyond <= 1, f"{beyond} unacknowledged calls are visible; only one was running"
    return calls


def check_events(store: journal.Store, sid: str, seq: int, latest: int, model: Model) -> None:
    """Events after the verified ones: gapless, each with its own content, saves whole."""
    start = model.checked_events[sid]
    got = store.events_after(sid, start, 100_000)
    assert [e.sequence for e in got] == list(range(start + 1, latest + 1)), f"{sid}: gap"
    groups = model.groups[sid]
    for e in got:
        text = e.event.msg["message"]
        owner, number, origin = text.split("|")
        assert owner == sid and number == f"#{e.sequence}", f"{sid}: event {e.sequence}: {text}"
        assert e.recorded_at_ms == 1_700_000_000_000 + e.sequence
        if origin != "ap":
            s, j = (int(x) for x in origin[2:].split("."))
            assert s <= seq, f"{sid}: event of checkpoint {s} visible, checkpoint is at {seq}"
            assert s > model.checked_seq[sid], f"{sid}: a second set of events of save {s}"
            groups.setdefault(s, []).append(j)
    for s in range(model.checked_seq[sid] + 1, seq + 1):
        # the events of one save: all of them, once, in order, next to each other
        assert groups.get(s, []) == list(range(W["save_events"](s))), (
            f"{sid}: checkpoint {s} has events {groups.get(s)}"
        )
    # newest-first paging agrees with catch-up reading
    if latest:
        page = store.event_page(sid, EventPageRequest(limit=3))
        assert [e.sequence for e in page.events] == list(range(latest, max(latest - 3, 0), -1))
        for e in page.events:
            assert e.event.msg["message"].startswith(f"{sid}|#{e.sequence}|")
    model.checked_events[sid] = latest


def check_history(store: journal.Store, sid: str, seq: int, model: Model) -> None:
    """Checkpoints, transcript batches and execution records of new saves; none beyond."""
    lo = model.checked_seq[sid]
    for s in range(lo + 1, seq + 1):
        cp = store.checkpoint_at(sid, s)
        assert cp is not None, f"{sid}: checkpoint_at({s}) is missing"
        assert msgspec.to_builtins(cp) == msgspec.to_builtins(W["checkpoint_for"](sid, s))
    assert store.checkpoint_at(sid, seq + 1) is None
    batches = store.transcript_page(sid, TranscriptPageRequest(max_batches=64)).batches
    want_batches = [s for s in range(seq, -1, -1) if W["transcript_for"](sid, s)][:64]
    assert [b.sequence for b in batches] == want_batches, f"{sid}: transcript batches"
    for b in batches:
        if b.sequence > lo:
            assert b.items == W["transcript_for"](sid, b.sequence)
    execs = store.execution_page(sid, ExecutionPageRequest(limit=64)).executions
    want_execs = [s for s in range(seq, -1, -1) if W["execution_for"](sid, s)][:64]
    assert [int(e.turn_id.split("-")[1]) for e in execs] == want_execs, f"{sid}: executions"
    for e in execs:
        want = W["execution_for"](sid, int(e.turn_id.split("-")[1]))
        assert msgspec.to_builtins(e) == msgspec.to_builtins(want)
    model.checked_seq[sid] = seq


CONFIGS = [
    # (name, durability, segment_bytes, share of the kills)
    ("fsync-small-segments", "fsync", 8192, 0.35),
    ("fsync", "fsync", 64 << 20, 0.25),
    ("fsync-mid-segments", "fsync", 64 << 10, 0.2),
    ("os", "os", 16384, 0.2),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "durability", "segment_bytes", "share"), CONFIGS)
def test_kill9_during_writes(
    tmp_path: Any, name: str, durability: str, segment_bytes: int, share: float
) -> None:
    seed = SEED + CONFIGS.index((name, durability, segment_bytes, share))
    kills = max(1, round(KILLS * share))
    print(f"JOURNAL_CRASH_SEED={SEED} ({name}: seed {seed}, {kills} kills)")
    rng = random.Random(seed)
    root = str(tmp_path / "store")
    journal.open(root, durability=durability, segment_bytes=segment_bytes).close()
    zygote = Zygote(str(tmp_path))
    model = Model()
    total_calls = 0
    outcomes: dict[str, int] = {}
    try:
        for k in range(kills):
            ack = str(tmp_path / f"ack{k:04d}")
            cfg = {
                "root": root,
                "durability": durability,
                "segment_bytes": segment_bytes,
                "seed": rng.randrange(1 << 32),
                "ack": ack,
                "sessions": SESSIONS,
            }
            # mostly anywhere in the first 80 ms; sometimes right at the first write,
            # which is also where the previous run's torn tail is recovered
            delay = rng.choice([0.0, 0.001, 0.003]) if rng.random() < 0.2 else rng.random() * 0.08
            how = zygote.run_and_kill(cfg, delay)
            outcomes[how] = outcomes.get(how, 0) + 1
            if how != "killed":
                model.read_acks(ack)  # raises with the writer's traceback if it failed
                pytest.fail(f"kill {k}: {how}")
            try:
                total_calls += check_store(root, cfg, model, ack)
            except AssertionError as exc:
                raise AssertionError(
                    f"after kill {k} (seed {seed}, delay {delay:.3f}s): {exc}"
                ) from exc
    finally:
        zygote.close()
    assert outcomes == {"killed": kills}
    # enough happened between the kills for them to land inside writes
    assert total_calls > kills, f"only {total_calls} calls in {kills} runs"
    # and the store still takes writes from this process, after the last kill
    store = journal.open(root, durability=durability, segment_bytes=segment_bytes)
    try:
        sid = SESSIONS[0]
        cp = store.load(sid)
        s = -1 if cp is None else cp.sequence
        store.save_with_events(W["checkpoint_for"](sid, s + 1), [], None, [])
        assert store.load(sid).sequence == s + 1
    finally:
        store.close()
    print(f"{name}: {total_calls} calls survived {kills} kills")


def _segments(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, "sessions", "*", "log", "*.seg")))


def _data_end(path: str) -> int:
    """File offset after the last record of a segment (preallocated zeros follow)."""
    with open(path, "rb") as f:
        data = f.read()
    off = 32
    while parse_at(data, off)[0] == OK:
        off = parse_at(data, off)[4]
    return off


@pytest.mark.parametrize("left", ["sealed only", "empty new segment", "partial header"])
def test_crashed_roll_seen_by_another_store(tmp_path: Any, left: str) -> None:
    """A writer dies inside a segment roll while other stores (processes) have the log open.

    `_roll` truncates the full segment and syncs it, creates the next one (named for
    the position after the SEAL record to come), then appends the SEAL. A kill in
    between leaves the full segment without its SEAL and maybe an empty or
    half-written new one. Store B has seen that leftover when store A recovers it (unlinks it) and
    rolls again, creating a new file under the same name. B must then see A's
    commits, and must not take the new file for the leftover.
    """
    root = str(tmp_path / "store")
    a = journal.open(root, segment_bytes=4096)
    b = journal.open(root, segment_bytes=4096)
    try:
        a.save_with_events(W["checkpoint_for"]("s", 0), [], None, [])
        n = 0
        while True:  # until the newest segment is full: the next commit rolls
            newest = _segments(root)[-1]
            end = _data_end(newest)
            if end - 32 >= 4096:
                break
            n += 1
            a.append_event("s", 1, Event(msg={"type": "warning", "message": f"a{n}"}))
        base = int(os.path.basename(newest)[:20])
        # the dead writer's half-done roll, under the session's lock as any writer's
        # (its holder line stays on file: A's next commit cannot take the lock for
        # quiet, and reads the log's end)
        dead = FileLock(os.path.join(os.path.dirname(os.path.dirname(newest)), LOCK_FILE), "x")
        dead.acquire(5)
        os.truncate(newest, end)
        nxt = os.path.join(os.path.dirname(newest), f"{base + end - 32 + SEAL_SIZE:020d}.seg")
        if left == "empty new segment":
            open(nxt, "wb").close()
        elif left == "partial header":
            with open(nxt, "wb") as f:
                f.write(b"JRNLSEG\0\1\0")
        dead.release()
        dead.close()
        assert len(b.events_after("s", 0, 10_000)) == n  # B has seen the leftover
        for _ in range(3):
            n += 1
            a.append_event("s", 1, Event(msg={"type": "warning", "message": f"a{n}"}))
        assert len(_segments(root)) == 2
        n += 1
        assert b.append_event("s", 1, Event(msg={"type": "warning", "message": "b"})).sequence == n
        assert [e.sequence for e in b.events_after("s", 0, 10_000)] == list(range(1, n + 1))
    finally:
        a.close()
        b.close()
    c = journal.open(root, segment_bytes=4096)
    try:
        msgs = [e.event.msg["message"] for e in c.events_after("s", 0, 10_000)]
        assert msgs == [f"a{k}" for k in range(1, n)] + ["b"]
    finally:
        c.close()

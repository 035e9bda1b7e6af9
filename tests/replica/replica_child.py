"""Child processes of the replica crash and handoff tests, and what those tests share
with them: the deterministic operations a writer makes, and a reader of everything
the public API shows of a store.

Run as a script (`python replica_child.py MODE ...`) it is one writer process; it
prints one JSON line per event on stdout, flushed at once, so that a test that kills
it with SIGKILL knows exactly which calls were acknowledged:

- `crash ROOT URL MODE LAG COUNT [PAD]`: writes op 1..COUNT (`op_call`) to session
  "c" with `replica_mode=MODE`; prints {"ack": i} after op i returned, and in async
  mode, every FLUSH_EVERY ops, {"flushed": i} after `flush()` returned. PAD: each
  op's events carry that many incompressible bytes (base64) instead of a little text.
- `host ROOT URL`: one host of the handoff test, with the store open in sync mode;
  prints {"ready": 1}, then takes commands on stdin, one a line, each answered by
  {"done": n} when it is done (n counts the commands):
  - `write TAG AFTER LIMIT PAUSE`: appends to session "h" (creating it first if the
    store has none), PAUSE seconds apart, until a call raises FencedError, then makes
    AFTER more calls (appends and saves), LIMIT calls in all at most; prints
    {"ok": text, "seq": n} or {"fenced": text} per call;
  - `take TAG COUNT`: `take_over("h")` ({"took": its latest event sequence}), then
    COUNT appends ({"ok": text, "seq": n});
  - `exit`: closes the store and ends.

Any other exception prints {"error": traceback} and exits 1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

import journal
from journal import (
    Checkpoint,
    Event,
    EventPageRequest,
    ExecutionPageRequest,
    FencedError,
    SessionContext,
    SessionPageRequest,
    Store,
    TimestampedEvent,
    TranscriptPageRequest,
)

T0 = 1_700_000_000_000
FLUSH_EVERY = 20  # async crash writer: a flush after every this many ops
CRASH_SESSION = "c"
HANDOFF_SESSION = "h"
_SAVE_EVERY = 4  # crash writer: op i is a save when i % _SAVE_EVERY == 1, else an append


# ------------------------------------------------------------------ the crash writer's ops
def _crash_checkpoint(saves: int) -> Checkpoint:
    """The checkpoint of the crash writer's `saves`-th save (sequence = saves)."""
    return Checkpoint(
        version=journal.CHECKPOINT_VERSION,
        session_id=CRASH_SESSION,
        sequence=saves,
        context=[{"role": "user", "content": f"turn {k}"} for k in range(saves)],
        session_context=SessionContext(owner_id="crash"),
        metadata={"saves": saves},
    )


def op_texts(i: int) -> list[str]:
    """The event texts op i writes, in sequence order."""
    if i % _SAVE_EVERY == 1:
        return [f"op{i}-a", f"op{i}-b"]
    return [f"op{i}"]


def saves_through(i: int) -> int:
    """How many saves ops 1..i make (the checkpoint sequence after op i)."""
    return sum(1 for k in range(1, i + 1) if k % _SAVE_EVERY == 1)


def expected_after(i: int) -> tuple[Checkpoint | None, list[str]]:
    """The checkpoint and event texts of session "c" after ops 1..i."""
    saves = saves_through(i)
    texts = [t for k in range(1, i + 1) for t in op_texts(k)]
    return (_crash_checkpoint(saves) if saves else None), texts


BIG = 0  # bytes of incompressible padding of each op (the `crash` mode's PAD sets it)


def _pad(i: int) -> str:
    if BIG:
        return base64.b64encode(random.Random(i).randbytes(BIG)).decode("ascii")
    return f"op {i} " + "the shipper puts each commit into the next chunk slot " * (i % 7)


def op_call(store: Store, i: int) -> None:
    """Make op i (ops are made in order 1, 2, ...)."""
    texts = op_texts(i)
    if i % _SAVE_EVERY == 1:
        saves = saves_through(i)
        store.save_with_events(
            _crash_checkpoint(saves),
            [{"role": "assistant", "content": f"reply {saves}"}],
            None,
            [
                TimestampedEvent(
                    recorded_at_ms=T0 + i,
                    event=Event(msg={"type": "note", "text": t, "pad": _pad(i)}),
                )
                for t in texts
            ],
        )
        return
    store.append_event(
        CRASH_SESSION, T0 + i, Event(msg={"type": "note", "text": texts[0], "pad": _pad(i)})
    )


def event_texts(store: Store, session_id: str) -> list[str]:
    """The texts of every event of a session, oldest first; asserts sequences 1..n."""
    got: list[tuple[int, str]] = []
    before = None
    while True:
        page = store.event_page(session_id, EventPageRequest(limit=100, before_sequence=before))
        got += [(e.sequence, str(e.event.msg.get("text"))) for e in page.events]
        if page.next_before_sequence is None:
            break
        before = page.next_before_sequence
    got.sort()
    assert [s for s, _ in got] == list(range(1, len(got) + 1)), [s for s, _ in got]
    return [t for _, t in got]


# ------------------------------------------------------------------ everything a store shows
def _paged(read: Any, field: str) -> list[Any]:
    out: list[Any] = []
    before = None
    while True:
        page = read(before)
        out.extend(getattr(page, field))
        if page.next_before_sequence is None:
            return out[::-1]
        before = page.next_before_sequence


def view(
    store: Store,
    session_ids: list[str],
    state_keys: Sequence[tuple[str, str]] = (),
    *,
    page: int = 7,
) -> dict[str, Any]:
    """Every read of the public API on these sessions, as plain data: load,
    checkpoint_at at every sequence up to one past the latest, events through pages of
    `page`, events_after, transcript and execution pages, summary, metadata, children,
    message receipts of the pending messages, the state keys, and the listing."""
    out: dict[str, Any] = {}
    for sid in session_ids:
        cp = store.load(sid)
        if cp is None:
            out[sid] = None
            continue
        events = _paged(
            lambda b, s=sid: store.event_page(s, EventPageRequest(limit=page, before_sequence=b)),
            "events",
        )
        out[sid] = {
            "checkpoint": msgspec.to_builtins(cp),
            "history": [
                msgspec.to_builtins(store.checkpoint_at(sid, s)) for s in range(cp.sequence + 2)
            ],
            "events": msgspec.to_builtins(events),
            "latest": store.event_page(sid, EventPageRequest(limit=1)).latest_sequence,
            "after": msgspec.to_builtins(store.events_after(sid, len(events) // 2, 10_000)),
            "batches": msgspec.to_builtins(
                _paged(
                    lambda b, s=sid: store.transcript_page(
                        s, TranscriptPageRequest(max_batches=3, before_sequence=b)
                    ),
                    "batches",
                )
            ),
            "executions": msgspec.to_builtins(
                _paged(
                    lambda b, s=sid: store.execution_page(
                        s, ExecutionPageRequest(limit=3, before_sequence=b)
                    ),
                    "executions",
                )
            ),
            "summary": msgspec.to_builtins(store.session_summary(sid)),
            "metadata": store.session_metadata(sid),
            "children": msgspec.to_builtins(store.child_sessions(sid)),
        }
    for scope, key in state_keys:
        out[f"state {scope} {key}"] = store.load_state(scope, key)
    listed: list[Any] = []
    cursor = None
    while True:
        got = store.list_sessions_page(SessionPageRequest(limit=2, cursor=cursor))
        listed += msgspec.to_builtins(got.sessions)
        if got.next_cursor is None:
            break
        cursor = got.next_cursor
    out["listed"] = listed
    out["recent"] = msgspec.to_builtins(store.recent_executions(1000))
    return out


def verified(root: str | os.PathLike[str]) -> None:
    """What `journal verify --root root` checks, in this process: it finds nothing."""
    from journal.inspect import verify_store

    findings = [f for _, found in verify_store(os.fspath(root)) for f in found]
    assert findings == [], findings


def restored_ops(url: str, root: str | os.PathLike[str]) -> tuple[int, list[str]]:
    """Restore the bucket at `url` into `root` (which must verify) and say how many of
    the crash writer's ops it holds; fails unless it holds exactly ops 1..m for some m.
    (m, the restored event texts)."""
    from journal.replica.objects import open_object_store
    from journal.replica.restore import restore
    from journal.replica.target import parse_replica_url

    target = parse_replica_url(url)
    objects = open_object_store(target)
    try:
        restore(objects, target.prefix, os.fspath(root))
    finally:
        objects.close()
    journal.open(root).close()  # an empty bucket restores nothing: the root exists anyway
    verified(root)
    with journal.open(root) as store:
        cp = store.load(CRASH_SESSION)
        texts = event_texts(store, CRASH_SESSION) if cp is not None else []
    # Which prefix of the ops is it? The last text names the last op (op<i> or op<i>-b).
    m = int(texts[-1][2:].split("-")[0]) if texts else 0
    want_cp, want_texts = expected_after(m)
    assert texts == want_texts, "the restored events are not the ops' events in order"
    assert cp == want_cp, f"the restored checkpoint is not the one of op {m}"
    return m, texts


# ------------------------------------------------------------------ the test's side
class Child:
    """A running child (`python replica_child.py args...`): its JSON lines, read by a
    thread as they come (`lines`), and SIGKILL on demand."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.done = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = json.loads(raw)
            line["_at"] = time.monotonic()  # when the test read it
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.done = True
            self.cond.notify_all()

    def count(self, key: str) -> int:
        with self.cond:
            return sum(1 for line in self.lines if key in line)

    def __len__(self) -> int:
        with self.cond:
            return len(self.lines)

    def wait_for(self, key: str, n: int = 1, *, since: int = 0, timeout: float = 120.0) -> None:
        """Until `n` lines with `key` came after the first `since` lines; fails on an
        error line, an exit, or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                errors = [line["error"] for line in self.lines if "error" in line]
                assert not errors, errors[0]
                if sum(1 for line in self.lines[since:] if key in line) >= n:
                    return
                left = deadline - time.monotonic()
                assert not self.done, f"the child ended before {n} {key!r} lines: {self.lines}"
                assert left > 0, f"no {n} {key!r} lines within {timeout} s: {self.lines[-5:]}"
                self.cond.wait(min(left, 1.0))

    def since(self, start: int) -> list[dict[str, Any]]:
        """The lines after the first `start`."""
        with self.cond:
            return list(self.lines[start:])

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.finish()

    def finish(self, timeout: float = 120.0) -> int:
        """Wait for the exit (and the last lines); the exit code."""
        code = self.proc.wait(timeout)
        self.reader.join(timeout)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return code


# ------------------------------------------------------------------ the processes
def _say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _crash(root: str, url: str, mode: str, lag: str, count: str, pad: str = "0") -> None:
    global BIG
    BIG = int(pad)
    store = journal.open(
        root,
        replica=url,
        replica_mode="sync" if mode == "sync" else "async",
        replica_lag=float(lag),
        durability="os",
    )
    _say(ready=1)
    for i in range(1, int(count) + 1):
        op_call(store, i)
        _say(ack=i)
        if mode == "async" and i % FLUSH_EVERY == 0:
            store.flush()
            _say(flushed=i)
    store.close()


def _write(store: Store, tag: str, after: int, limit: int, pause: float) -> None:
    """Append until a call raises FencedError, then `after` more calls (alternating
    appends and saves), `limit` calls at most."""
    if store.load(HANDOFF_SESSION) is None:
        store.save(Checkpoint.empty(HANDOFF_SESSION, owner_id="handoff"))
    left = -1  # calls still to make after the first FencedError
    i = 0
    while left != 0 and i < limit:
        if pause:
            time.sleep(pause)
        text = f"{tag}-{i}"
        i += 1
        try:
            if left > 0 and left % 2 == 0:
                cp = store.load(HANDOFF_SESSION)
                assert cp is not None
                cp.sequence += 1
                stamped = TimestampedEvent(
                    recorded_at_ms=T0 + i, event=Event(msg={"type": "note", "text": text})
                )
                seq = store.save_with_events(cp, [], None, [stamped])[0].sequence
            else:
                ev = Event(msg={"type": "note", "text": text})
                seq = store.append_event(HANDOFF_SESSION, T0 + i, ev).sequence
            _say(ok=text, seq=seq)
            if left > 0:
                left -= 1  # a write that should have failed: the test says so
        except FencedError:
            _say(fenced=text)
            left = after if left < 0 else left - 1


def _take(store: Store, tag: str, count: int) -> None:
    store.take_over(HANDOFF_SESSION)
    latest = store.event_page(HANDOFF_SESSION, EventPageRequest(limit=1)).latest_sequence
    _say(took=latest)
    for j in range(count):
        text = f"{tag}-take-{j}"
        got = store.append_event(HANDOFF_SESSION, T0 + j, Event(msg={"type": "note", "text": text}))
        _say(ok=text, seq=got.sequence)


def _host(root: str, url: str) -> None:
    """One host's process: commands on stdin, one a line, each answered by {"done": n}
    (n counts the commands): `write TAG AFTER LIMIT PAUSE`, `take TAG COUNT`, `exit`."""
    store = journal.open(root, replica=url, replica_mode="sync", durability="os")
    _say(ready=1)
    for done, line in enumerate(sys.stdin, 1):
        command, *args = line.split()
        if command == "exit":
            break
        if command == "write":
            _write(store, args[0], int(args[1]), int(args[2]), float(args[3]))
        elif command == "take":
            _take(store, args[0], int(args[1]))
        _say(done=done)
    store.close()


def main(argv: list[str]) -> int:
    modes: dict[str, Callable[..., None]] = {"crash": _crash, "host": _host}
    try:
        modes[argv[0]](*argv[1:])
    except BaseException:
        _say(error=traceback.format_exc())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

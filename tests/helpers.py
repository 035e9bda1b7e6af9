"""What the tests share: builders of valid values, readers of whole journals and
listings, and the plumbing of child processes (a process holding a lock, a live
writer, forked writers reporting on a pipe).

Test files import it as `from helpers import ...` (pytest puts tests/ on
`sys.path`); a child script started with `python -c` puts tests/ there itself.
The builders' defaults are plain values; a file that needs other ones passes them
(or binds them once with `functools.partial`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

import journal
from journal import (
    CHECKPOINT_VERSION,
    Checkpoint,
    Event,
    ExecutionRecord,
    ExecutionStats,
    JournalEvent,
    QueuedMessage,
    SessionContext,
    SessionSummary,
    Store,
    TimestampedEvent,
    TokenUsage,
    TranscriptBatch,
)

T0 = 1_700_000_000_000  # a wall-clock time in ms (November 2023) for recorded_at_ms & co.
TESTS = str(Path(__file__).resolve().parent)  # for a child script's sys.path


# ------------------------------------------------------------------ values
def checkpoint(
    session_id: Any,
    sequence: Any = 0,
    context: list[Any] | None = None,
    *,
    owner: str = "owner",
    epoch: int = 0,
    pending: Sequence[str] = (),
    **fields: Any,
) -> Checkpoint:
    """A valid idle checkpoint of `owner`. `context` is copied (the caller's list stays
    its own); `pending` lists submission ids of queued messages; `fields` sets any
    other field (`session_context` and `context_epoch` too)."""
    fields.setdefault("session_context", SessionContext(owner_id=owner))
    fields.setdefault("context_epoch", epoch)
    if pending:
        fields["pending_messages"] = [
            QueuedMessage(
                owner=owner,
                id=sub,
                boundary={"type": "queue"},
                author={"type": "user"},
                message={"text": f"message {sub}"},
            )
            for sub in pending
        ]
    return Checkpoint(
        version=CHECKPOINT_VERSION,
        session_id=session_id,
        sequence=sequence,
        context=[] if context is None else list(context),
        **fields,
    )


def labelled_checkpoint(
    session_id: str, sequence: int, context: list[Any], *, owner: str = "owner", runs: int = 0
) -> Checkpoint:
    """A checkpoint that says where it belongs: its workspace label and metadata name
    its sequence, and `run_count` counts the session's execution records."""
    return checkpoint(
        session_id,
        sequence,
        context,
        session_context=SessionContext(owner_id=owner, workspace_label=f"seq-{sequence}"),
        execution_stats=ExecutionStats(run_count=runs),
        metadata={"sequence": sequence},
    )


def item(n: int, text: str = "") -> dict[str, Any]:
    """A context/transcript item shaped like a mobius model input item."""
    return {
        "type": "message",
        "role": "user" if n % 2 == 0 else "assistant",
        "content": [{"type": "input_text", "text": text or f"item {n}"}],
    }


def event(kind: str = "warning", submission_id: str | None = None, **fields: Any) -> Event:
    return Event(submission_id=submission_id, msg={"type": kind, **fields})


def stamped(at: Any, ev: Event) -> TimestampedEvent:
    return TimestampedEvent(recorded_at_ms=at, event=ev)


def warning_event(text: str) -> Event:
    return Event(msg={"type": "warning", "message": text})


def warning(text: str, at_ms: int = T0) -> TimestampedEvent:
    """A warning event as `save_with_events` takes it."""
    return stamped(at_ms, warning_event(text))


def delta(text: str, step: str = "s1", phase: str = "answer") -> Event:
    """A streamed piece of a model step's answer."""
    msg = {"type": "assistant_content_delta", "model_step_id": step, "phase": phase}
    return Event(msg={**msg, "delta": text})


def execution(
    session_id: str, n: int, *, started: int | None = None, elapsed: int = 5, **fields: Any
) -> ExecutionRecord:
    """A finished turn (sub-n, turn-n) that started at `started` (T0 + n by default) and
    took `elapsed` ms; `fields` sets any other field."""
    start = T0 + n if started is None else started
    values: dict[str, Any] = {
        "session_id": session_id,
        "submission_id": f"sub-{n}",
        "author": {"user": "u"},
        "turn_id": f"turn-{n}",
        "started_at_ms": start,
        "finished_at_ms": start + elapsed,
        "elapsed_ms": elapsed,
        "outcome": "completed",
    }
    values.update(fields)
    return ExecutionRecord(**values)


def labelled_execution(
    session_id: str, sequence: int, *, started: int, elapsed: int
) -> ExecutionRecord:
    """An execution record whose turn id names its session and checkpoint sequence."""
    return execution(
        session_id,
        sequence,
        started=started,
        elapsed=elapsed,
        author={"type": "user"},
        turn_id=f"{session_id}#{sequence}",
    )


def fold(stats: ExecutionStats, rec: ExecutionRecord) -> ExecutionStats:
    """What the runtime does: add one finished turn into the checkpoint's stats."""
    usage = TokenUsage(
        input_tokens=stats.usage.input_tokens + rec.usage.input_tokens,
        output_tokens=stats.usage.output_tokens + rec.usage.output_tokens,
        total_tokens=stats.usage.total_tokens + rec.usage.total_tokens,
    )
    return ExecutionStats(
        run_count=stats.run_count + 1,
        failed_run_count=stats.failed_run_count + (rec.outcome == "failed"),
        aborted_run_count=stats.aborted_run_count + (rec.outcome == "aborted"),
        model_calls=stats.model_calls + rec.model_calls,
        tool_calls=stats.tool_calls + rec.tool_calls,
        failed_tool_calls=stats.failed_tool_calls + rec.failed_tool_calls,
        elapsed_ms=stats.elapsed_ms + rec.elapsed_ms,
        usage=usage,
    )


def active_execution(**changes: Any) -> dict[str, Any]:
    """A checkpoint's `active_execution` of a turn in its model phase, as JSON."""
    return {
        "submission_id": "sub-1",
        "author": {"type": "user"},
        "turn_id": "turn-1",
        "started_at_ms": 1_000,
        "model_calls": 0,
        "tool_calls": 0,
        "failed_tool_calls": 0,
        "usage": {},
        "next_model_step": 0,
        "stop_hook_active": False,
        "phase": {"type": "model"},
        **changes,
    }


def incompressible(n: int) -> str:
    """A string of about `4n/3` characters that zstd cannot shrink."""
    return base64.b64encode(os.urandom(n)).decode("ascii")


# ------------------------------------------------------------------ whole journals
def _oldest_first(page_before: Callable[[int | None], Any], field: str) -> list[Any]:
    """Every entry of a journal, oldest first, read through its newest-first pages
    (`page_before(before_sequence)` reads one; `field` names its entries)."""
    out: list[Any] = []
    before = None
    while True:
        page = page_before(before)
        out.extend(getattr(page, field))
        if page.next_before_sequence is None:
            return out[::-1]
        before = page.next_before_sequence


def all_events(store: Store, session_id: str, page: int = 7) -> list[JournalEvent]:
    """Every retained event, oldest first, read through newest-first pages."""
    return _oldest_first(
        lambda before: store.event_page(
            session_id, journal.EventPageRequest(limit=page, before_sequence=before)
        ),
        "events",
    )


def all_batches(store: Store, session_id: str, page: int = 5) -> list[TranscriptBatch]:
    return _oldest_first(
        lambda before: store.transcript_page(
            session_id, journal.TranscriptPageRequest(max_batches=page, before_sequence=before)
        ),
        "batches",
    )


def all_executions(store: Store, session_id: str, page: int = 5) -> list[ExecutionRecord]:
    return _oldest_first(
        lambda before: store.execution_page(
            session_id, journal.ExecutionPageRequest(limit=page, before_sequence=before)
        ),
        "executions",
    )


def observe(
    store: Store, session_ids: list[str], state_keys: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """Everything the public API shows about some sessions, as plain data."""
    out: dict[str, Any] = {}
    for sid in session_ids:
        cp = store.load(sid)
        if cp is None:
            out[sid] = None
            continue
        out[sid] = {
            "checkpoint": msgspec.to_builtins(cp),
            "events": msgspec.to_builtins(all_events(store, sid)),
            "batches": msgspec.to_builtins(all_batches(store, sid)),
            "executions": msgspec.to_builtins(all_executions(store, sid)),
            "history": {
                s: msgspec.to_builtins(store.checkpoint_at(sid, s)) for s in range(cp.sequence + 1)
            },
        }
    for scope, key in state_keys:
        out[f"state:{scope}:{key}"] = store.load_state(scope, key)
    return out


# ------------------------------------------------------------------ listings
def listed(store: Store) -> dict[str, SessionSummary]:
    """Every listed session by id, from one page (one answer of the catalog), which
    must hold them all, each once."""
    page = store.list_sessions_page(journal.SessionPageRequest(limit=1_000_000))
    assert page.next_cursor is None
    out = {s.session_id: s for s in page.sessions}
    assert len(out) == len(page.sessions), "a session listed twice"
    return out


def listed_ids(store: Store) -> set[str]:
    return set(listed(store))


def listed_sequences(store: Store) -> dict[str, int]:
    return {sid: s.sequence for sid, s in listed(store).items()}


def session_findings(directory: str) -> list[Any]:
    """What `journal verify` finds in one session directory, every severity."""
    from journal.inspect import verify_store

    sessions = os.path.dirname(directory)
    ((_, found),) = verify_store(os.path.dirname(sessions), [os.path.basename(directory)])
    return found


def session_identities(root: Path) -> dict[str, Any]:
    """Session id -> identity, for every directory under sessions/ (each identity must
    read): the sessions as the directories say, whatever the catalog lists."""
    # reaches inside: reads the identity files themselves, apart from the catalog
    from journal.layout import IDENTITY_FILE
    from journal.metafile import KIND_IDENTITY, read_meta
    from journal.sessiondir import SessionIdentity

    out = {}
    for name in os.listdir(root / "sessions"):
        path = root / "sessions" / name / IDENTITY_FILE
        ident = msgspec.msgpack.decode(read_meta(str(path), KIND_IDENTITY), type=SessionIdentity)
        out[ident.session_id] = ident
    return out


# ------------------------------------------------------------------ the command line
def run_cli(
    root: Path | str, *args: str, check_code: int | None = 0
) -> subprocess.CompletedProcess[str]:
    """`journal --root root args...` in a new process; its exit code must be
    `check_code` (None: any), and it must print no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "journal.cli", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check_code is not None:
        assert proc.returncode == check_code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def save_items(store: Store, sid: str, seq: int, n_items: int, events: int = 1) -> None:
    """Checkpoint `seq` of `sid` (owner "me") with `n_items` context items, one
    transcript item and `events` warnings."""
    cp = Checkpoint.empty(sid, owner_id="me")
    cp.sequence = seq
    cp.context = [{"i": i} for i in range(n_items)]
    evs = [warning(f"s{seq}e{k}", at_ms=1000 + seq) for k in range(events)]
    store.save_with_events(cp, [{"i": n_items}], None, evs)


# ------------------------------------------------------------------ other processes
def exit_code_of_child(pid: int, *, seconds: float, hung: str) -> int:
    """Wait for a forked child; kill it and fail with `hung` if it takes too long."""
    import pytest

    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(hung)
        time.sleep(0.01)


@contextlib.contextmanager
def child_script(code: str, *args: str, ready: str = "ready") -> Iterator[subprocess.Popen[str]]:
    """`python -c code args` running for the length of the block, which starts once
    the child printed the line `ready`; the child is killed when the block ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == ready
        yield child
    finally:
        child.kill()
        child.wait(10)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


_HOLD_LOCK = textwrap.dedent(
    """
    import fcntl, sys
    fd = open(sys.argv[1], "a+")
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.read()
    """
)


def lock_held_elsewhere(path: Path) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    """Another process holds the lock file at `path` (flock) until the block ends."""
    return child_script(_HOLD_LOCK, str(path), ready="held")


_LIVE_WRITER = textwrap.dedent(
    """
    import sys, time, journal
    from journal import Checkpoint, Event
    store = journal.open(sys.argv[1])
    store.save(Checkpoint.empty("live", owner_id=sys.argv[2]))
    print("ready", flush=True)
    for i in range(100000):
        store.append_event("live", i, Event(msg={"type": "warning", "message": f"m{i}"}))
        time.sleep(float(sys.argv[3]))
    """
)


def live_writer(
    root: Path, *, owner: str = "local", pause: float = 0.005
) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    """Another process appends warnings to session "live" of `root`, one every
    `pause` seconds, until the block ends."""
    return child_script(_LIVE_WRITER, str(root), owner, str(pause))


# ------------------------------------------------------------------ forked writers
class ReportPipe:
    """The test's end of a forked writer's pipe: lines "<op> <json>" (`lines`), read
    with a deadline. An "E" line carries the writer's traceback and fails the test."""

    def __init__(self, fd: int, *, seed: int, timeout: float = 60.0, who: str = "writer"):
        self.fd = fd
        self.seed = seed
        self.timeout = timeout
        self.who = who
        self.buf = b""
        self.lines: list[tuple[str, Any]] = []  # every line read, in order
        self.eof = False

    def poll(self, timeout: float = 0.0) -> bool:
        """Read what is there within `timeout`; whether anything was."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        while b"\n" in self.buf:
            raw, self.buf = self.buf.split(b"\n", 1)
            op, _, arg = raw.decode().partition(" ")
            self.lines.append((op, json.loads(arg)))
            if op == "E":
                raise AssertionError(f"{self.who} failed (seed {self.seed}):\n{json.loads(arg)}")
        return True

    def wait_for(self, op: str, count: int) -> None:
        """Read until `count` lines of kind `op` have been seen since now."""
        start = len(self.lines)
        deadline = time.monotonic() + self.timeout
        while sum(1 for o, _ in self.lines[start:] if o == op) < count:
            left = deadline - time.monotonic()
            if left <= 0 or self.eof:
                raise AssertionError(f"{self.who} stopped reporting (seed {self.seed})")
            self.poll(min(left, 1.0))

    def drain(self) -> None:
        while not self.eof:
            self.poll(5.0)


Report = Callable[[str], None]


def fork_writer(
    body: Callable[[Report], None], *, seed: int, timeout: float = 60.0, who: str = "writer"
) -> tuple[int, ReportPipe]:
    """Fork a child that runs `body(report)`, `report(line)` writing one line to the
    pipe; the child exits 0 if `body` returns, 1 (after an "E" line with its
    traceback) if it raises. Returns the child's pid and the test's end of the pipe."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(wfd)
        return pid, ReportPipe(rfd, seed=seed, timeout=timeout, who=who)
    # The child: never returns.
    os.close(rfd)
    code = 1
    try:

        def report(line: str) -> None:
            data = (line + "\n").encode()
            while data:
                data = data[os.write(wfd, data) :]

        body(report)
        code = 0
    except BaseException:
        with contextlib.suppress(OSError):
            os.write(wfd, ("E " + json.dumps(traceback.format_exc()) + "\n").encode())
    finally:
        os._exit(code)


def kill_writer(pid: int, pipe: ReportPipe) -> int:
    """SIGKILL a forked writer, read the rest of its lines, close the pipe; the
    writer's wait status."""
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    try:
        pipe.drain()
    finally:
        os.close(pipe.fd)
    return status


def writer_store(root: Path, rng: random.Random) -> Store:
    """A forked writer's store: either durability mode (a SIGKILL loses nothing the
    OS has, so both must pass), and a lock timeout past any other writer's turn."""
    return journal.open(root, lock_timeout=30, durability=rng.choice(["fsync", "os"]))

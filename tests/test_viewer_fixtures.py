"""The store the viewer's tests look at, built through the public API, and its server.

`build_store(root)` writes: a long session ("main": transcript with tool calls and
their results, a few hundred events of several types, execution records, state), a
fork of it and a fork of the fork, a session full of hostile markup (and one whose
id is a path escape), an Agents SDK conversation, bulk sessions of another owner,
and two damaged sessions, damaged for real on disk: "flipped" (a byte flipped in the
middle of its log, which only a verify finds) and "gone" (its log segments deleted,
which opening it finds). The tests in this file check that the damage is real.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helpers import T0

import journal
from journal import Checkpoint, Event, ExecutionRecord, TimestampedEvent, TokenUsage
from journal.inspect import first_damage, session_view
from journal.viewer.data import Data
from journal.viewer.server import ViewerServer

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">&amp;\''
ESCAPE_ID = "../../etc/passwd<i>"
MAIN_SAVES = 12
EVENTS_PER_SAVE = 22  # 12 x 22 = 264 events in "main"


def _events(seq: int, n: int) -> list[TimestampedEvent]:
    kinds = [
        "turn_started",
        "assistant_content_delta",
        "tool_call_begin",
        "warning",
        "turn_complete",
    ]
    out = []
    for k in range(n):
        kind = kinds[k % len(kinds)]
        msg: dict[str, Any] = {"type": kind, "turn_id": f"turn-{seq}"}
        if kind == "assistant_content_delta":
            msg["delta"] = f"word {seq}.{k} "
        elif kind == "warning":
            msg["message"] = f"slow step {seq}.{k}"
        out.append(TimestampedEvent(recorded_at_ms=T0 + seq * 100 + k, event=Event(msg=msg)))
    return out


def _record(sid: str, seq: int, elapsed: int, outcome: str = "completed") -> ExecutionRecord:
    return ExecutionRecord(
        session_id=sid,
        submission_id=f"sub-{seq}",
        author={"type": "user"},
        turn_id=f"turn-{seq}",
        started_at_ms=T0 + seq * 100,
        finished_at_ms=T0 + seq * 100 + elapsed,
        elapsed_ms=elapsed,
        outcome=outcome,
        model_calls=2,
        tool_calls=1,
        failed_tool_calls=1 if outcome == "failed" else 0,
        usage=TokenUsage(input_tokens=100 * seq, output_tokens=10 * seq, total_tokens=110 * seq),
    )


def _turn(seq: int, answer: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"question {seq}"}],
        },
        {
            "type": "function_call",
            "call_id": f"call-{seq}",
            "name": "shell",
            "arguments": f'{{"cmd": "ls {seq}"}}',
        },
        {"type": "function_call_output", "call_id": f"call-{seq}", "output": f"output of ls {seq}"},
        {"role": "assistant", "content": answer},
    ]


def _long_session(store: journal.Store, sid: str, saves: int, owner: str = "alice") -> None:
    cp = Checkpoint.empty(sid, owner_id=owner)
    cp.first_user_message = "question 0"
    for seq in range(saves):
        items = _turn(seq, f"answer {seq}")
        cp.sequence = seq
        cp.context = [*cp.context, *items]
        rec = _record(
            sid, seq, elapsed=50 + 40 * seq, outcome="failed" if seq == 3 else "completed"
        )
        store.save_with_events(cp, items, rec, _events(seq, EVENTS_PER_SAVE))


def build_store(root: Path) -> None:
    store = journal.open(root, durability="os")  # quicker to build; nothing here is about syncs
    try:
        _long_session(store, "main", MAIN_SAVES)
        store.save_state("main", "tasks.v1", {"open": 2, "note": HOSTILE})
        store.fork_at("main", 5, "main-fork")
        cp = store.load("main-fork")
        assert cp is not None
        cp.sequence += 1
        items = [
            {"role": "user", "content": "retry differently"},
            {"role": "assistant", "content": "other answer"},
        ]
        cp.context = [*cp.context, *items]
        store.save(cp, transcript_delta=items)
        store.fork_at("main-fork", cp.sequence, "main-fork-2")

        for sid in ("hostile", ESCAPE_ID):
            h = Checkpoint.empty(sid, owner_id="mallory")
            h.first_user_message = HOSTILE
            h.context = [
                {"role": "user", "content": HOSTILE},
                {"role": "assistant", "content": f"echo {HOSTILE}"},
            ]
            store.save_with_events(
                h,
                h.context,
                None,
                [
                    TimestampedEvent(
                        recorded_at_ms=T0, event=Event(msg={"type": "warning", "message": HOSTILE})
                    )
                ],
            )
        for i in range(6):
            b = Checkpoint.empty(f"bulk-{i}", owner_id="bob")
            b.first_user_message = f"bulk task {i}"
            store.save(b)
        _long_session(store, "flipped", 6, owner="carol")
        _long_session(store, "gone", 3, owner="carol")
        flipped, gone = store.session_dir("flipped"), store.session_dir("gone")
    finally:
        store.close()
    _sdk_conversation(root)
    _flip_mid_log(Path(flipped))
    for seg in (Path(gone) / "log").iterdir():
        seg.unlink()


def _sdk_conversation(root: Path) -> None:
    from journal.integrations.openai_agents import JournalSession

    async def write() -> None:
        s = JournalSession("conv-1", str(root))
        await s.add_items([{"role": "user", "content": "What city is the Golden Gate Bridge in?"}])
        await s.add_items(
            [
                {
                    "type": "function_call",
                    "call_id": "fc1",
                    "name": "lookup",
                    "arguments": '{"q": "golden gate"}',
                },
                {"type": "function_call_output", "call_id": "fc1", "output": "San Francisco"},
            ]
        )
        await s.add_items(
            [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "San Francisco.", "annotations": []}
                    ],
                }
            ]
        )
        s.close()

    asyncio.run(write())


def _flip_mid_log(directory: Path) -> None:
    seg = sorted((directory / "log").iterdir())[0]
    data = bytearray(seg.read_bytes())
    where = len(data.rstrip(b"\0")) // 2
    data[where] ^= 0xFF
    seg.write_bytes(bytes(data))


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under `root` with its size and mtime: what a reader
    that writes nothing leaves exactly as it was."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return out


@contextmanager
def serving(root: Path) -> Iterator[ViewerServer]:
    """The viewer of `root` in this process, on a free port, until the block ends."""
    data = Data(str(root))
    server = ViewerServer(data, "127.0.0.1", 0)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        data.close()


@contextmanager
def serving_process(root: Path) -> Iterator[str]:
    """`python -m journal.viewer` on `root` in its own process; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "journal.viewer", "--root", str(root), "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "no output"
        import json

        yield str(json.loads(line)["url"])
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


WRITER = """
import sys, time, journal
from journal import Event
store = journal.open(sys.argv[1])
print("ready", flush=True)
for i in range(int(sys.argv[3])):
    store.append_event(sys.argv[2], 1_700_000_000_000 + i,
                       Event(msg={"type": "warning", "message": f"live-{i}"}))
    time.sleep(0.05)
print("done", flush=True)
sys.stdin.read()
"""


def writer_process(root: Path, sid: str, count: int) -> subprocess.Popen[str]:
    """Another process that appends `count` warnings "live-N" to `sid`, one every
    50 ms, after printing "ready"; it waits for its stdin to close before exiting."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), sid, str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def stop_writer(proc: subprocess.Popen[str]) -> None:
    """Let a `writer_process` exit (it has written all it was to write) and reap it."""
    proc.communicate(timeout=60)


# ------------------------------------------------------------------ the store is what it says
def test_the_damage_is_real_and_of_two_kinds(tmp_path: Path) -> None:
    root = tmp_path / "store"
    build_store(root)
    store = journal.open(root, read_only=True)
    try:
        flipped = first_damage(store.session_dir("flipped"))
        assert flipped is not None and flipped.offset is not None
        # the flipped byte hides behind the caches: opening finds nothing
        assert session_view(store, "flipped") is not None
        try:
            session_view(store, "gone")
        except journal.JournalError:
            pass
        else:
            raise AssertionError("a session without its log opens")
        assert first_damage(store.session_dir("main")) is None
        assert store.load("main-fork-2") is not None
    finally:
        store.close()

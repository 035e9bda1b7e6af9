"""`journal demo`: a scripted agent session, a crash, recovery, a fork and a check.

It writes a realistic multi-turn session the way an agent runtime does (user
messages, streamed assistant deltas, tool calls written durably before they
run, checkpoints with a growing context, execution records, middleware state),
kills a second writer process with SIGKILL in the middle of a turn, reopens the
store to show that only whole commits survived, forks at an exact earlier
sequence, pages newest-first and verifies every byte.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from . import (
    Checkpoint,
    Event,
    EventPageRequest,
    ExecutionRecord,
    ExecutionStats,
    InvalidInputError,
    Store,
    TimestampedEvent,
    TokenUsage,
    TranscriptPageRequest,
)

SESSION = "demo-session"
CRASHED = "demo-crashed-writer"
FORK = f"{SESSION}-fork"
MARK = "journal_demo"  # in the metadata of every session the demo writes (forks inherit it)

TURNS = [
    (
        "Why is the build red on main?",
        "read_file",
        {"path": "ci.log"},
        "The linker cannot find libssl; the CI image lost its dev package.",
    ),
    (
        "Fix it, please.",
        "edit_file",
        {"path": "Dockerfile", "add": "libssl-dev"},
        "Added libssl-dev to the image; the build passes locally.",
    ),
    (
        "And write a test so it cannot regress.",
        "write_file",
        {"path": "tests/test_ssl.py"},
        "Added a test that imports ssl and opens a TLS context.",
    ),
]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ev(msg: dict[str, Any], submission: str | None = None) -> TimestampedEvent:
    return TimestampedEvent(
        recorded_at_ms=_now_ms(), event=Event(submission_id=submission, msg=msg)
    )


def run_turn(
    store: Store, cp: Checkpoint, turn: int, *, crash_after: Callable[[str], None]
) -> Checkpoint:
    """One user turn, persisted at each durable boundary as mobius's runtime does."""
    question, tool, args, answer = TURNS[turn % len(TURNS)]
    sub, turn_id, step = f"sub-{turn}", f"turn-{turn}", f"step-{turn}"
    started = _now_ms()
    user_item = {"role": "user", "content": question}
    cp = msgspec.structs.replace(
        cp,
        sequence=cp.sequence + 1,
        context=[*cp.context, user_item],
        first_user_message=cp.first_user_message or question,
        active_execution={
            "submission_id": sub,
            "turn_id": turn_id,
            "started_at_ms": started,
            "model_calls": 0,
            "tool_calls": 0,
            "failed_tool_calls": 0,
        },
    )
    store.save_with_events(
        cp,
        [user_item],
        None,
        [
            _ev({"type": "turn_started", "turn_id": turn_id}),
            _ev({"type": "message", "author": "user", "delivery": "turn", "text": question}, sub),
        ],
    )
    crash_after("turn started")
    for chunk in ("Let me ", "look at ", f"{args.get('path', 'that')}."):
        store.append_event(
            cp.session_id,
            _now_ms(),
            Event(
                msg={
                    "type": "assistant_content_delta",
                    "session_id": cp.session_id,
                    "turn_id": turn_id,
                    "model_step_id": step,
                    "delta": chunk,
                    "phase": "final_answer",
                }
            ),
        )
    call = {"call_id": f"call-{turn}", "name": tool, "arguments": args}
    cp = msgspec.structs.replace(
        cp, sequence=cp.sequence + 1, pending_tools=[call], active_model_step=None
    )
    store.save_with_events(
        cp, [], None, [_ev({"type": "tool_call_begin", "turn_id": turn_id, **call})]
    )
    crash_after("tool call written before it runs")
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}
    reply = {"role": "assistant", "content": answer}
    finished = _now_ms()
    usage = TokenUsage(
        input_tokens=900 + 40 * turn, output_tokens=120, total_tokens=1020 + 40 * turn
    )
    stats = cp.execution_stats
    stats = ExecutionStats(
        run_count=stats.run_count + 1,
        model_calls=stats.model_calls + 2,
        tool_calls=stats.tool_calls + 1,
        elapsed_ms=stats.elapsed_ms + finished - started,
        usage=TokenUsage(
            input_tokens=stats.usage.input_tokens + usage.input_tokens,
            output_tokens=stats.usage.output_tokens + usage.output_tokens,
            total_tokens=stats.usage.total_tokens + usage.total_tokens,
        ),
    )
    cp = msgspec.structs.replace(
        cp,
        sequence=cp.sequence + 1,
        context=[*cp.context, output, reply],
        pending_tools=[],
        active_execution=None,
        execution_stats=stats,
        total_usage=stats.usage,
        last_usage=usage,
    )
    record = ExecutionRecord(
        session_id=cp.session_id,
        submission_id=sub,
        author="user",
        turn_id=turn_id,
        started_at_ms=started,
        finished_at_ms=finished,
        elapsed_ms=finished - started,
        outcome="completed",
        model_calls=2,
        tool_calls=1,
        failed_tool_calls=0,
        usage=usage,
    )
    store.save_with_events(
        cp,
        [output, reply],
        record,
        [
            _ev(
                {
                    "type": "tool_call_end",
                    "turn_id": turn_id,
                    "call_id": call["call_id"],
                    "name": tool,
                    "output": "ok",
                    "is_error": False,
                }
            ),
            _ev(
                {
                    "type": "assistant_message",
                    "session_id": cp.session_id,
                    "turn_id": turn_id,
                    "model_step_id": step,
                    "content": [
                        {
                            "output_index": 0,
                            "part_index": 0,
                            "phase": "final_answer",
                            "text": answer,
                            "annotations": [],
                        }
                    ],
                }
            ),
            _ev({"type": "token_count", "info": {"total_token_usage": msgspec.to_builtins(usage)}}),
            _ev({"type": "turn_complete", "turn_id": turn_id}),
        ],
    )
    store.save_state(cp.session_id, "tasks.v1", {"done": turn + 1, "last": answer})
    return cp


def new_session(store: Store, session_id: str) -> Checkpoint:
    cp = Checkpoint.empty(session_id, owner_id="demo-user")
    cp.metadata = {"model": "demo-model", "cwd": "/src/app", MARK: True}
    cp.context = [{"role": "system", "content": "You are a careful coding agent."}]
    store.save_with_events(
        cp,
        cp.context,
        None,
        [
            _ev(
                {
                    "type": "session_configured",
                    "session_id": session_id,
                    "context": [],
                    "model": "demo-model",
                }
            ),
        ],
    )
    return cp


def crashing_writer(root: str) -> None:
    """Child process: write turns, announce each acknowledged commit, get killed mid-turn."""
    store = Store(root)
    cp = new_session(store, CRASHED)
    print("ack", cp.sequence, flush=True)

    def announce(what: str) -> None:
        print("ack", store.load(CRASHED).sequence, what, flush=True)  # type: ignore[union-attr]

    turn = 0
    while True:
        cp = run_turn(store, cp, turn, crash_after=announce)
        print("ack", cp.sequence, "turn complete", flush=True)
        turn += 1


def _clear_own_sessions(store: Store, root: str) -> None:
    """Delete what an earlier run of the demo wrote, and only that: a session under
    one of the demo's ids that the demo did not write stops the demo instead."""
    for sid in (SESSION, CRASHED, FORK):
        cp = store.load(sid)
        if cp is None:
            continue
        if cp.metadata.get(MARK) is not True:
            raise InvalidInputError(
                f"{root} holds a session {sid!r} that journal demo did not write;"
                " nothing was changed: run the demo in another directory"
            )
        store.delete_sessions([sid])


def main(root: str, out: Callable[[str], None] = print, command: str = "journal") -> int:
    """Run the demo in `root`; `command` is how the closing hints call `journal`."""
    from .inspect import SEVERITY_DATA, verify_store

    started = time.monotonic()
    if os.path.exists(root) and not os.path.isdir(root):
        raise InvalidInputError(f"{root} is a file; the demo needs a directory (new or its own)")
    os.makedirs(root, exist_ok=True)
    store = Store(root)
    try:
        _clear_own_sessions(store, root)
        out(f"journal demo: store at {os.path.abspath(root)}")
        cp = new_session(store, SESSION)
        for turn in range(3):
            cp = run_turn(store, cp, turn, crash_after=lambda _what: None)
        page = store.event_page(SESSION, EventPageRequest(limit=5))
        out(
            f"1. Wrote 3 agent turns to {SESSION!r}: checkpoint sequence {cp.sequence},"
            f" {page.latest_sequence} events (stream deltas compacted once each answer landed)."
        )

        out("2. Started a second writer process and killed it with SIGKILL mid-turn...")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"from journal.demo import crashing_writer; crashing_writer({root!r})",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        acked = -1
        for line in proc.stdout:
            if line.startswith("ack"):
                acked = int(line.split()[1])
                if acked >= 5 and "tool call" in line:
                    break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        store.close()
        store = Store(root)
        crashed = store.load(CRASHED)
        assert crashed is not None
        survived = crashed.sequence
        events = store.event_page(CRASHED, EventPageRequest(limit=3))
        extra = (
            " plus the commit it was writing when killed, which reached the disk whole"
            if survived > acked
            else ""
        )
        tool = (
            f"; its pending tool call {crashed.pending_tools[0]['name']!r} was durable"
            " before the tool ran"
            if crashed.pending_tools
            else ""
        )
        out(
            f"   last acknowledged checkpoint: {acked}; after reopening: {survived}"
            f" (every acknowledged commit is there{extra}; nothing half-written is visible{tool})."
            f" Newest event: #{events.events[0].sequence} {events.events[0].event.msg['type']}."
        )

        fork_at = 4
        child = store.fork_at(SESSION, fork_at, FORK)
        child_cp = store.load(child.session_id)
        assert child_cp is not None
        out(
            f"3. Forked {SESSION!r} at exact sequence {fork_at} into {child.session_id!r}:"
            f" {len(child_cp.context)} context items, exactly as saved at {fork_at}."
        )

        batches = store.transcript_page(SESSION, TranscriptPageRequest(max_batches=2))
        older = store.event_page(SESSION, EventPageRequest(limit=4))
        out(
            f"4. Newest-first paging: transcript batches {[b.sequence for b in batches.batches]},"
            f" events {[e.sequence for e in older.events]} (next page before"
            f" #{older.next_before_sequence})."
        )
    finally:
        store.close()
    problems = [f for _, found in verify_store(root) for f in found if f.severity == SEVERITY_DATA]
    out(f"5. Verified every checksum and commit: {problems or 'clean'}.")
    out(f"Done in {time.monotonic() - started:.1f}s. Explore it:")
    r = f" --root {root}" if os.path.normpath(root) != "journal-demo" else ""
    j = command
    for cmd in (
        f"{j}{r} ls",
        f"{j}{r} events {SESSION} --limit 10",
        f"{j}{r} tree",
        f"{j}{r} checkpoint {SESSION} --at 2",
        f"{j}{r} replay {CRASHED} | tail",
        f"{j}{r} verify",
    ):
        out(f"  {cmd}")
    return 0 if not problems else 1

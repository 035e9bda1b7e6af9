"""`JournalSessionService` under conflicting writers (threads and processes) and a
writer killed with SIGKILL mid-stream.

Run as a script, this file is the child process the tests start:
    python tests/test_adk_crash.py race ROOT READY_DIR GO_FILE ROUNDS
    python tests/test_adk_crash.py writer ROOT
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("google.adk")

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.events import Event, EventActions
from google.adk.sessions import Session
from google.genai import types

from journal.integrations.adk import JournalSessionService

APP, USER, SID = "app", "u", "s"
CHILD = [sys.executable, os.path.abspath(__file__)]


def event(text: str, n: int) -> Event:
    return Event(
        invocation_id=f"inv-{text}",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta={"n": n, f"by:{text}": True}),
    )


async def increment(svc: JournalSessionService, tag: str) -> int:
    """Append one event that adds 1 to the session's `n`, reloading when stale:
    the returned count is how many times it was refused."""
    refused = 0
    while True:
        s = await svc.get_session(app_name=APP, user_id=USER, session_id=SID)
        assert s is not None
        try:
            await svc.append_event(s, event(tag, s.state["n"] + 1))
            return refused
        except StaleSessionError:
            refused += 1


def test_threads_conflict_exactly_one_wins(tmp_path: Path) -> None:
    """Writers holding the same revision: one append lands, the others are refused."""
    svc = JournalSessionService(tmp_path / "store")
    asyncio.run(svc.create_session(app_name=APP, user_id=USER, session_id=SID, state={"n": 0}))
    writers = 6
    for rnd in range(5):
        loaded = [
            asyncio.run(svc.get_session(app_name=APP, user_id=USER, session_id=SID))
            for _ in range(writers)
        ]
        barrier = threading.Barrier(writers)
        results: list[str] = []

        def write(
            i: int,
            loaded: list[Session | None] = loaded,
            barrier: threading.Barrier = barrier,
            results: list[str] = results,
            rnd: int = rnd,
        ) -> None:
            s = loaded[i]
            assert s is not None
            barrier.wait()
            try:
                asyncio.run(svc.append_event(s, event(f"r{rnd}w{i}", s.state["n"] + 1)))
                results.append("ok")
            except StaleSessionError:
                results.append("stale")

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["ok"] + ["stale"] * (writers - 1)
    final = asyncio.run(svc.get_session(app_name=APP, user_id=USER, session_id=SID))
    assert final is not None
    assert final.state["n"] == 5 and len(final.events) == 5
    asyncio.run(svc.close())


def test_processes_lose_no_update(tmp_path: Path) -> None:
    """Processes incrementing one counter through read, append, reload-on-stale: every
    increment lands once (no lost update), and conflicts really happened."""
    root = tmp_path / "store"
    svc = JournalSessionService(root)
    asyncio.run(svc.create_session(app_name=APP, user_id=USER, session_id=SID, state={"n": 0}))
    asyncio.run(svc.close())
    ready, go = tmp_path / "ready", tmp_path / "go"
    ready.mkdir()
    procs, rounds = 4, 15
    children = [
        subprocess.Popen(
            [*CHILD, "race", str(root), str(ready), str(go), str(rounds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    deadline = time.monotonic() + 120
    while len(os.listdir(ready)) < procs:
        assert time.monotonic() < deadline, "children did not start"
        time.sleep(0.05)
    go.write_text("go")
    refused = 0
    for child in children:
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0
        refused += int(out.split()[-1])
    svc = JournalSessionService(root)
    final = asyncio.run(svc.get_session(app_name=APP, user_id=USER, session_id=SID))
    assert final is not None
    assert final.state["n"] == procs * rounds == len(final.events)
    assert [e.actions.state_delta["n"] for e in final.events] == list(range(1, procs * rounds + 1))
    assert refused > 0  # the writers did collide (each round they all start together)
    asyncio.run(svc.close())


def _race(root: str, ready: str, go: str, rounds: int) -> None:
    svc = JournalSessionService(root)
    Path(ready, str(os.getpid())).write_text("")
    while not os.path.exists(go):
        time.sleep(0.001)
    refused = 0
    for i in range(rounds):
        refused += asyncio.run(increment(svc, f"p{os.getpid()}-{i}"))
    asyncio.run(svc.close())
    print("refused", refused, flush=True)


def _writer(root: str) -> None:
    """Append events forever, printing each one's text once its append returned."""
    svc = JournalSessionService(root)

    async def run() -> None:
        s = await svc.get_session(app_name=APP, user_id=USER, session_id=SID)
        assert s is not None
        i = s.state["n"]
        while True:
            i += 1
            text = f"e{i}-" + "x" * random.randrange(0, 3000)
            ev = Event(
                invocation_id=f"inv-{i}",
                author="user",
                content=types.Content(role="user", parts=[types.Part(text=text)]),
                actions=EventActions(state_delta={"n": i, "user:n": i, "app:n": i}),
            )
            await svc.append_event(s, ev)
            print(text[: text.index("-")], flush=True)

    asyncio.run(run())


@pytest.mark.slow
def test_kill_9_writer_loses_no_acknowledged_event(tmp_path: Path) -> None:
    root = tmp_path / "store"
    svc = JournalSessionService(root)
    asyncio.run(svc.create_session(app_name=APP, user_id=USER, session_id=SID, state={"n": 0}))
    asyncio.run(svc.close())
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    acked_total: list[str] = []
    for _ in range(4):
        child = subprocess.Popen([*CHILD, "writer", str(root)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        want = rng.randrange(1, 25)
        for _ in range(want):
            line = child.stdout.readline()
            assert line, "writer died"
            acked_total.append(line.strip())
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        rest = child.stdout.read().split()  # acks printed before the kill landed
        acked_total += rest

        svc = JournalSessionService(root)
        s = asyncio.run(svc.get_session(app_name=APP, user_id=USER, session_id=SID))
        assert s is not None
        texts = [e.content.parts[0].text.split("-")[0] for e in s.events]  # type: ignore[union-attr]
        # Every acknowledged event is there, in order; at most one more (its append
        # was committed but not yet acknowledged when the kill landed).
        assert texts[: len(acked_total)] == acked_total
        assert len(texts) - len(acked_total) in (0, 1)
        acked_total = texts
        # The session's state is the fold of exactly the events that are there.
        assert s.state["n"] == len(texts)
        assert texts == [f"e{i}" for i in range(1, len(texts) + 1)]
        # The app/user values are those of the last event there, committed or not
        # yet acknowledged (a read rolls forward what a kill held back).
        assert s.state["user:n"] == len(texts) == s.state["app:n"]
        # A new writer goes on from there.
        asyncio.run(svc.append_event(s, event(f"e{len(texts) + 1}", len(texts) + 1)))
        acked_total.append(f"e{len(texts) + 1}")
        asyncio.run(svc.close())
    verify = subprocess.run(
        [str(Path(sys.executable).with_name("journal")), "--root", str(root), "verify"],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


if __name__ == "__main__":
    if sys.argv[1] == "race":
        _race(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1] == "writer":
        _writer(sys.argv[2])

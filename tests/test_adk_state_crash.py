"""`app:`/`user:` state of `JournalSessionService` stays consistent with the commits
when a writer is killed with SIGKILL between an event's commit and its state writes.

Run as a script, this file is the child process the tests start:
    python tests/test_adk_state_crash.py die-after-commit ROOT SID KEY VALUE
    python tests/test_adk_state_crash.py die-after-create ROOT SID VALUE
    python tests/test_adk_state_crash.py counter ROOT
The `die-*` children replace their store's commit call with one that kills the
process with SIGKILL right after the commit returns (a test-only patch made in the
child, not a hook of the service), so the kill lands between the commit and the
`app:`/`user:` writes every time.
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
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.events import Event, EventActions
from google.adk.sessions import Session
from google.genai import types

from journal import Store
from journal.integrations.adk import JournalSessionService, naming, scoped

APP, USER = "app", "u"
CHILD = [sys.executable, os.path.abspath(__file__)]
USER_SCOPE = naming.user_scope(APP, USER)
APP_SCOPE = naming.app_scope(APP)


def event(text: str, delta: dict[str, Any]) -> Event:
    return Event(
        invocation_id=f"inv-{text}",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


def raw(root: Path, scope: str, key: str) -> Any:
    """The stored value under (scope, key), read without the service (no roll forward)."""
    store = Store(root)
    try:
        stored = store.load_state(scope, key)
    finally:
        store.close()
    return None if stored is None else stored["v"]


def die_after(store: Store, name: str) -> None:
    """Make `store.<name>` kill this process with SIGKILL once the call has returned."""
    original = getattr(store, name)

    def commit_then_die(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(store, name, commit_then_die)


def _die_after_commit(root: str, sid: str, key: str, value: str) -> None:
    svc = JournalSessionService(root)
    die_after(svc.store, "save_with_events")

    async def run() -> None:
        s = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
        assert s is not None
        delta = {f"user:{key}": value, f"app:{key}": value, key: value}
        await svc.append_event(s, event(f"{sid}-{value}", delta))

    asyncio.run(run())
    raise SystemExit("the commit did not kill the process")


def _die_after_create(root: str, sid: str, value: str) -> None:
    svc = JournalSessionService(root)
    die_after(svc.store, "save")
    state = {"user:made": value, "app:made": value, "own": value}
    asyncio.run(svc.create_session(app_name=APP, user_id=USER, session_id=sid, state=state))
    raise SystemExit("the commit did not kill the process")


def run_child(*args: str) -> None:
    child = subprocess.run([*CHILD, *args], capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr


def create(root: Path, *sids: str, state: dict[str, Any] | None = None) -> None:
    async def run() -> None:
        async with JournalSessionService(root) as svc:
            for sid in sids:
                await svc.create_session(app_name=APP, user_id=USER, session_id=sid, state=state)

    asyncio.run(run())


async def read_back(svc: JournalSessionService, how: str, sid: str) -> dict[str, Any]:
    """The `app:`/`user:` state as one read path of the service returns it."""
    if how == "get_session":
        s = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
        assert s is not None
        return dict(s.state)
    if how == "list_sessions":
        listed = await svc.list_sessions(app_name=APP, user_id=USER)
        return dict(next(s for s in listed.sessions if s.id == sid).state)
    if how == "list_app_sessions":
        listed = await svc.list_sessions(app_name=APP)
        return dict(next(s for s in listed.sessions if s.id == sid).state)
    assert how == "get_user_state"
    return {
        f"user:{k}": v for k, v in (await svc.get_user_state(app_name=APP, user_id=USER)).items()
    }


@pytest.mark.parametrize(
    "how", ["get_session", "list_sessions", "list_app_sessions", "get_user_state"]
)
def test_read_rolls_forward_what_the_kill_held_back(tmp_path: Path, how: str) -> None:
    root = tmp_path / "store"
    create(root, "s", state={"user:k": "old", "app:k": "old"})
    run_child("die-after-commit", str(root), "s", "k", "new")
    # The kill landed between the commit and the state writes: the values are old.
    assert raw(root, USER_SCOPE, "k") == "old" and raw(root, APP_SCOPE, "k") == "old"

    async def check() -> None:
        async with JournalSessionService(root) as svc:
            state = await read_back(svc, how, "s")
            assert state["user:k"] == "new"
            if how != "get_user_state":
                assert state["app:k"] == "new"
            s = await svc.get_session(app_name=APP, user_id=USER, session_id="s")
            assert s is not None
            assert [e.content.parts[0].text for e in s.events] == ["s-new"]  # type: ignore[union-attr]
            assert s.state["k"] == "new" and s.state["app:k"] == "new"

    asyncio.run(check())
    assert raw(root, USER_SCOPE, "k") == "new" and raw(root, APP_SCOPE, "k") == "new"


def test_a_restarted_service_rolls_forward_the_users_other_sessions(tmp_path: Path) -> None:
    """S's append is killed after its commit; a new service's first read of the user,
    through another session T, shows S's values."""
    root = tmp_path / "store"
    create(root, "s", "t", state={"user:k": "old"})
    run_child("die-after-commit", str(root), "s", "k", "new")
    assert raw(root, USER_SCOPE, "k") == "old"

    async def check() -> None:
        async with JournalSessionService(root) as svc:
            t = await svc.get_session(app_name=APP, user_id=USER, session_id="t")
            assert t is not None and t.state["user:k"] == "new" and t.state["app:k"] == "new"

    asyncio.run(check())


def test_next_append_rolls_forward_first(tmp_path: Path) -> None:
    root = tmp_path / "store"
    create(root, "s", state={"user:k": "old"})
    run_child("die-after-commit", str(root), "s", "k", "new")
    assert raw(root, USER_SCOPE, "k") == "old"

    async def append() -> None:
        async with JournalSessionService(root) as svc:
            # A session object built by hand: no read of the service rolls forward.
            s = Session(app_name=APP, user_id=USER, id="s", last_update_time=time.time() + 60)
            await svc.append_event(s, event("next", {"user:other": 1}))

    asyncio.run(append())
    assert raw(root, USER_SCOPE, "k") == "new" and raw(root, USER_SCOPE, "other") == 1


def test_create_rolls_forward(tmp_path: Path) -> None:
    root = tmp_path / "store"
    run_child("die-after-create", str(root), "s", "v1")
    assert raw(root, USER_SCOPE, "made") is None

    async def check() -> None:
        async with JournalSessionService(root) as svc:
            s = await svc.get_session(app_name=APP, user_id=USER, session_id="s")
            assert s is not None
            assert s.state == {"own": "v1", "user:made": "v1", "app:made": "v1"}

    asyncio.run(check())


def test_late_roll_forward_does_not_undo_a_later_write(tmp_path: Path) -> None:
    """S commits user:k and dies; T then writes user:k and returns; reading S later
    applies S's values only where nothing later superseded them."""
    root = tmp_path / "store"
    create(root, "s", "t", state={"user:k": "old", "user:j": "old"})
    run_child("die-after-commit", str(root), "s", "k", "from-s")

    async def run() -> None:
        async with JournalSessionService(root) as svc:
            # Built by hand: no read of the service rolls S's record forward.
            t = Session(app_name=APP, user_id=USER, id="t", last_update_time=time.time() + 60)
            await svc.append_event(t, event("t", {"user:j": "from-t", "app:k": "from-t"}))
        assert raw(root, USER_SCOPE, "k") == "old"  # S's values are still held back
        async with JournalSessionService(root) as svc:
            s = await svc.get_session(app_name=APP, user_id=USER, session_id="s")
            assert s is not None
            # user:k: S's commit is the newest write; app:k: T's write came after it.
            assert s.state["user:k"] == "from-s" and s.state["user:j"] == "from-t"
            assert s.state["app:k"] == "from-t"

    asyncio.run(run())


def test_a_later_append_wins_whatever_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sequential appends from two sessions to one key: the later one wins even when
    the wall clock goes back between them (its stamp follows the one it read)."""
    clock = iter(range(10**18, 0, -(10**15)))  # every reading earlier than the last
    monkeypatch.setattr(scoped.time, "time_ns", lambda: next(clock))

    async def run() -> None:
        async with JournalSessionService(tmp_path / "store") as svc:
            for sid in ("a", "b", "a", "b"):
                s = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
                if s is None:
                    s = await svc.create_session(app_name=APP, user_id=USER, session_id=sid)
                await svc.append_event(s, event(sid, {"user:k": sid, "app:k": sid}))
                assert (await svc.get_user_state(app_name=APP, user_id=USER))["k"] == sid
                s = await svc.get_session(app_name=APP, user_id=USER, session_id="a")
                assert s is not None and s.state["app:k"] == sid

    asyncio.run(run())


def test_concurrent_roll_forwards_keep_the_greatest_stamp(tmp_path: Path) -> None:
    """Threads applying records of many stamps to one fresh scope at once (the first
    writes make its directory): each key ends with the greatest stamp's value."""
    store = Store(tmp_path / "store")
    stamps = list(range(1, 41))
    random.shuffle(stamps)
    barrier = threading.Barrier(len(stamps))

    def write(t: int) -> None:
        barrier.wait()
        record = {"t": t, "q": 1, "app": {}, "user": {"k": t, "j": -t}}
        scoped.apply(store, APP, USER, f"session-{t % 3}", record)

    threads = [threading.Thread(target=write, args=(t,)) for t in stamps]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert scoped.values(store, USER_SCOPE) == {"k": 40, "j": -40}
    store.close()


def _counter(root: str) -> None:
    """Increment `user:count` and `app:count` forever through two sessions taken in
    turn (read, add one, append), printing each increment once its append returned."""
    svc = JournalSessionService(root)

    async def run() -> None:
        i = 0
        while True:
            sid = "ab"[i % 2]
            s = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
            assert s is not None
            count = s.state["user:count"]
            assert s.state["app:count"] == count
            pad = "x" * random.randrange(0, 2000)
            delta = {"user:count": count + 1, "app:count": count + 1, "pad": pad}
            await svc.append_event(s, event(f"{sid}{count + 1}", delta))
            print(count + 1, flush=True)
            i += 1

    asyncio.run(run())


@pytest.mark.slow
def test_kill_9_at_random_times_keeps_counters_exact(tmp_path: Path) -> None:
    """Invariant after every kill: `user:count` and `app:count` equal the number of
    committed increments (every acknowledged one, at most one more), so no increment
    was lost or applied twice, whichever read comes first."""
    root = tmp_path / "store"
    create(root, "a", "b", state={"user:count": 0, "app:count": 0})
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    acked = 0
    for rnd in range(8):
        child = subprocess.Popen([*CHILD, "counter", str(root)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        for _ in range(rng.randrange(1, 15)):
            line = child.stdout.readline()
            assert line, "counter died"
            acked = int(line)
        time.sleep(rng.random() * 0.01)  # land anywhere in the next append
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        for line in child.stdout.read().split():
            acked = int(line)

        async def check(rnd: int = rnd, acked: int = acked) -> int:
            async with JournalSessionService(root) as svc:
                # A fresh service's first read, whichever it is and through either
                # session, applies what the kill held back.
                readers = ["get_session", "get_user_state", "list_sessions", "list_app_sessions"]
                first = await read_back(svc, readers[rnd % 4], rng.choice("ab"))
                events = []
                for sid in "ab":
                    s = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
                    assert s is not None
                    events += [e.actions.state_delta["user:count"] for e in s.events]
                committed = len(events)
                assert sorted(events) == list(range(1, committed + 1))
                assert committed - acked in (0, 1)
                assert first["user:count"] == committed
                user = await svc.get_user_state(app_name=APP, user_id=USER)
                assert user["count"] == committed
                s = await svc.get_session(app_name=APP, user_id=USER, session_id="a")
                assert s is not None and s.state["app:count"] == committed
                return committed

        acked = asyncio.run(check())


if __name__ == "__main__":
    if sys.argv[1] == "die-after-commit":
        _die_after_commit(*sys.argv[2:6])
    elif sys.argv[1] == "die-after-create":
        _die_after_create(*sys.argv[2:5])
    elif sys.argv[1] == "counter":
        _counter(sys.argv[2])

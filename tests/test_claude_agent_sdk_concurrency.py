"""Concurrent appends to one key from real threads and from two real processes.

Each writer appends batches holding its own entries and entries every writer
sends (same uuid, same content: a retried or re-imported batch). Afterwards the
key holds every entry exactly once, each writer's entries in its order, and the
stored summary is the SDK's fold of the entries in the order `load` returns
them: appends, dedupe and fold were serialized, across threads, store objects
and processes, by the conditional appends.

This file is also the writer process (`python thisfile.py writer ...`).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import SessionKey, fold_session_summary

from journal import EventPageRequest
from journal.inspect import verify_store
from journal.integrations.claude_agent_sdk import JournalSessionStore

KEY: SessionKey = {"project_key": "proj", "session_id": "5e1d0000-0000-4000-8000-00000000c0c0"}
BATCHES = 25


def own(tag: str, i: int) -> dict[str, Any]:
    # every writer renames the session now and then: the fold's last-wins fields then
    # depend on the commit order, which the check below recomputes
    e: dict[str, Any] = {"type": "user", "uuid": f"{tag}-{i}", "w": tag, "i": i}
    if i % 5 == 0:
        e["customTitle"] = f"{tag} at {i}"
    return e


def shared(i: int) -> dict[str, Any]:
    return {"type": "assistant", "uuid": f"shared-{i}", "i": i}


def batch(tag: str, i: int) -> list[dict[str, Any]]:
    return [own(tag, i), shared(i), {"type": "progress", "w": tag, "i": i}]  # the last: no uuid


def check(store: JournalSessionStore, tags: list[str]) -> list[Any]:
    got = anyio.run(store.load, KEY)
    assert got is not None
    uuids = [e["uuid"] for e in got if "uuid" in e]
    assert len(uuids) == len(set(uuids)), "an entry was stored twice"
    assert sorted(uuids) == sorted(
        [f"{t}-{i}" for t in tags for i in range(BATCHES)] + [f"shared-{i}" for i in range(BATCHES)]
    )
    for t in tags:
        mine = [e["i"] for e in got if e.get("w") == t and "uuid" in e]
        assert mine == list(range(BATCHES)), f"writer {t}'s entries out of order"
        progress = [e["i"] for e in got if e.get("w") == t and e["type"] == "progress"]
        assert progress == list(range(BATCHES))  # uuid-less entries: each once, in order
    [summary] = anyio.run(store.list_session_summaries, KEY["project_key"])
    assert summary["data"] == fold_session_summary(None, KEY, got)["data"]
    return got


def _append_all(store: JournalSessionStore, tag: str, lockstep: int = 0) -> None:
    """Append every batch; with `lockstep=n`, the first `n` rounds wait until all `n`
    writers appended the round's batch, so in each round all but the first writer
    append on a stale view of the log (their conditional append is refused, they
    catch up, and skip the shared entries now stored): contention that does not
    depend on how the machine schedules the writers."""

    async def go() -> None:
        for i in range(BATCHES):
            await store.append(KEY, batch(tag, i))
            await store.append({**KEY, "subpath": f"subagents/agent-{tag}"}, [own(tag, i)])
            if i < BATCHES // 2 and lockstep:
                while (await anyio.to_thread.run_sync(_latest, store)) < lockstep * (i + 1):
                    await anyio.sleep(0.001)

    anyio.run(go)  # each thread its own event loop


def _latest(store: JournalSessionStore) -> int:
    jid = f"{KEY['project_key']}/{KEY['session_id']}"
    return store.store.event_page(jid, EventPageRequest(limit=1)).latest_sequence


@pytest.mark.parametrize("objects", [1, 3])
def test_threads_append_to_one_key(tmp_path: Path, objects: int) -> None:
    """8 threads, on one store object (its per-session lock serializes them) or on
    three objects over one directory (their conditional appends do)."""
    root = tmp_path / "s"
    stores = [JournalSessionStore(root) for _ in range(objects)]
    tags = [f"t{n}" for n in range(8)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            _append_all(stores[n % objects], tags[n])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(tags))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    try:
        check(stores[0], tags)
        subkeys = anyio.run(stores[-1].list_subkeys, KEY)
        assert subkeys == sorted(f"subagents/agent-{t}" for t in tags)
        for t in tags:
            sub = anyio.run(stores[0].load, {**KEY, "subpath": f"subagents/agent-{t}"})
            assert sub == [own(t, i) for i in range(BATCHES)]
    finally:
        for s in stores:
            s.close()
    assert not [f for _r, found in verify_store(str(root)) for f in found]


def test_two_processes_append_to_one_key(tmp_path: Path) -> None:
    root = tmp_path / "s"
    go = tmp_path / "go"
    tags = ["p0", "p1"]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "writer", str(root), tag, str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for tag in tags
    ]
    try:
        for p in procs:  # both have opened the store and wait at the barrier
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()
        for p in procs:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0 and out.strip() == "done"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    with JournalSessionStore(root) as store:
        got = check(store, tags)
        writers = [e["w"] for e in got if "w" in e and "uuid" in e]
        switches = sum(1 for a, b in itertools.pairwise(writers) if a != b)
        assert switches >= BATCHES // 2  # the lockstep rounds interleave them
    assert not [f for _r, found in verify_store(str(root)) for f in found]


def _writer(root: str, tag: str, go: str) -> None:
    store = JournalSessionStore(root)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    _append_all(store, tag, lockstep=2)
    store.close()
    print("done", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["writer"]:
    _writer(*sys.argv[2:5])

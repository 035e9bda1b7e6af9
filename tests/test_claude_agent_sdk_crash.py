"""Crash safety of `JournalSessionStore.append`: SIGKILL a writer process many times.

A child process appends batches to a main transcript and to a subagent subkey
(whose first append forks it, so kills land inside forks too), and acknowledges
each batch on stdout only after `append` returned. The parent kills it with
SIGKILL at random moments, also mid-write, and starts the next writer on the same
directory. Each writer first re-sends its predecessor's in-flight batch, as the
SDK's retry or a re-import would: whether or not that batch had landed, it must
end up stored once. At the end: every acknowledged batch is there, whole, in
order, once; an unacknowledged one is whole or absent; every entry is exactly
what was sent (no torn entry); and `journal verify` finds nothing.

This file is also the writer process (`python thisfile.py writer ...`).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import SessionKey

from journal.inspect import verify_store
from journal.integrations.claude_agent_sdk import JournalSessionStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name != "posix", reason="needs SIGKILL")]

KILLS = 20
MAIN: SessionKey = {"project_key": "crash", "session_id": "c0ffee00-0000-4000-8000-000000000000"}


def sub(tag: int) -> SessionKey:
    return {**MAIN, "subpath": f"subagents/agent-{tag}"}


def batch(tag: int, i: int) -> list[dict[str, Any]]:
    """Batch i of writer `tag`: 1-4 entries, each padded so a write spans pages."""
    return [
        {"type": "user", "uuid": f"{tag}:{i}:{j}", "pad": f"{tag}-{i}-{j}-" * (50 + 40 * j)}
        for j in range(1 + (tag + i) % 4)
    ]


def _writer(root: str, tag: int, prev_tag: int, prev_acked: int) -> None:
    store = JournalSessionStore(root)

    async def go() -> None:
        if prev_tag >= 0:  # the predecessor's in-flight batch, sent again
            await store.append(MAIN, batch(prev_tag, prev_acked))
        i = 0
        while True:
            key = sub(tag) if i % 3 == 2 else MAIN
            await store.append(key, batch(tag, i))
            print(f"ack {tag} {i}", flush=True)
            i += 1

    anyio.run(go)


def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    rng = random.Random(19)
    acked: dict[int, int] = {}  # writer -> how many batches it acknowledged
    prev = (-1, 0)
    for tag in range(KILLS):
        proc = subprocess.Popen(
            [sys.executable, __file__, "writer", root, str(tag), str(prev[0]), str(prev[1])],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        want = rng.randrange(0, 7)
        got = 0
        while got < want:
            line = proc.stdout.readline()
            assert line.startswith(f"ack {tag} "), line
            got += 1
        time.sleep(rng.random() * 0.01)  # land the kill anywhere, also inside a write
        proc.kill()
        proc.wait()
        assert proc.returncode == -9
        got += sum(1 for line in proc.stdout if line.startswith("ack"))  # sent before the kill
        proc.stdout.close()
        acked[tag] = got
        # the next writer re-sends this one's in-flight batch (a main-transcript one)
        prev = (tag, got) if got % 3 != 2 else (-1, 0)
    assert sum(acked.values()) > KILLS  # the test did append things

    with JournalSessionStore(root) as store:
        main = anyio.run(store.load, MAIN) or []
        subs = {tag: anyio.run(store.load, sub(tag)) or [] for tag in acked}
        subkeys = anyio.run(store.list_subkeys, MAIN)

    def batches_of(entries: list[Any]) -> list[tuple[int, int]]:
        """The (writer, batch) sequence of stored entries, each batch checked whole."""
        out: list[tuple[int, int]] = []
        pos = 0
        while pos < len(entries):
            tag, i, j = map(int, entries[pos]["uuid"].split(":"))
            want = batch(tag, i)
            assert j == 0, f"batch {tag}:{i} is partial (starts at entry {j})"
            assert entries[pos : pos + len(want)] == want, f"batch {tag}:{i} torn or partial"
            out.append((tag, i))
            pos += len(want)
        return out

    stored_main = batches_of(main)
    assert len(stored_main) == len(set(stored_main)), "a batch was stored twice"
    for tag, n in acked.items():
        mine = [i for t, i in stored_main if t == tag]
        expected = [i for i in range(n) if i % 3 != 2]
        assert mine[: len(expected)] == expected, f"writer {tag}: acknowledged batches lost"
        assert len(mine) - len(expected) <= 1  # at most the one in flight at the kill
        sub_stored = [i for t, i in batches_of(subs[tag]) if t == tag]
        sub_expected = [i for i in range(n) if i % 3 == 2]
        assert sub_stored[: len(sub_expected)] == sub_expected
        assert len(sub_stored) - len(sub_expected) <= 1
        if sub_stored:
            assert f"subagents/agent-{tag}" in subkeys
    findings = [f for _report, found in verify_store(root) for f in found]
    assert not findings, findings


if __name__ == "__main__" and sys.argv[1:2] == ["writer"]:
    _writer(sys.argv[2], *map(int, sys.argv[3:6]))

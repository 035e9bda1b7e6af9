"""Crash safety of `JournalSession.add_items`: SIGKILL a writer process many times.

A child process adds batches of items in a loop and acknowledges each batch
only after `add_items` returned. The parent kills it with SIGKILL at random
moments (also mid-write), starts the next writer on the same directory, and at
the end checks: every acknowledged batch is there, whole and in order; an
unacknowledged batch is either whole or absent (never partial); nothing else is
there; and `journal verify` finds nothing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import time
from pathlib import Path

import pytest

pytest.importorskip("agents")

from openai_agents_crash_child import add_until_killed

from journal.inspect import verify_store
from journal.integrations.openai_agents import JournalSession

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs fork and SIGKILL")

KILLS = 30


def test_acknowledged_adds_survive_sigkill(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    ctx = multiprocessing.get_context("forkserver")
    # imported once by the fork server, not by each of the writers
    ctx.set_forkserver_preload(
        [
            "agents.memory.session_settings",
            "journal.integrations.openai_agents",
            "openai_agents_crash_child",
        ]
    )
    rng = random.Random(1234)
    acked: dict[int, list[tuple[int, int]]] = {}
    for tag in range(KILLS):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=add_until_killed, args=(root, "crash", tag, send))
        proc.start()
        send.close()
        got: list[tuple[int, int]] = []
        want = rng.randrange(0, 6)
        deadline = time.monotonic() + 20
        while len(got) < want and time.monotonic() < deadline:
            if recv.poll(0.05):
                _t, i, n = recv.recv()
                got.append((i, n))
        time.sleep(rng.random() * 0.01)  # land the kill anywhere, also inside a write
        proc.kill()
        proc.join()
        assert proc.exitcode == -9
        while True:  # acknowledgements already in the pipe were sent before the kill
            try:
                _t, i, n = recv.recv()
            except EOFError:
                break
            got.append((i, n))
        recv.close()
        acked[tag] = got
    assert sum(len(v) for v in acked.values()) > KILLS  # the test did add things

    async def read() -> list[str]:
        async with JournalSession("crash", root) as s:
            return [item["content"] for item in await s.get_items()]

    contents = asyncio.run(read())
    batches: list[tuple[int, int, int]] = []  # (tag, i, size) in stored order
    for c in contents:
        tag, i, j = map(int, c.split(":"))
        if j == 0:
            batches.append((tag, i, 1))
        else:
            last = batches[-1]
            assert last[:2] == (tag, i) and last[2] == j, f"item {c} out of place"
            batches[-1] = (tag, i, j + 1)
    for tag, i, size in batches:
        assert size == 1 + (tag + i) % 4, f"batch {tag}:{i} is partial ({size} items)"
    assert batches == sorted(batches)  # writers' batches in order, writer after writer
    stored = {(tag, i) for tag, i, _ in batches}
    for tag, got in acked.items():
        for i, _n in got:
            assert (tag, i) in stored, f"acknowledged batch {tag}:{i} was lost"
        # at most one unacknowledged (in-flight) batch per writer reached the disk
        extra = [i for t, i, _ in batches if t == tag and i >= len(got)]
        assert extra in ([], [len(got)])
    findings = [f for _report, found in verify_store(root) for f in found]
    assert not findings, findings

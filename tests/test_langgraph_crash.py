"""kill -9 a JournalSaver writer mid-put, mid-put_writes, again and again.

A zygote (tests/langgraph_crash_writer.py) forks writers that `put` checkpoints
(growing message lists and time-travel branches, so context epochs change) and
`put_writes` (some twice) on one thread, acknowledging each call in a file
only after it returned. The test kills each writer with SIGKILL after a random
delay, then opens a fresh saver and checks:

- every acknowledged put is there, with exactly the acknowledged message list;
- every acknowledged put_writes is there, exactly once per (task, channel);
- nothing is duplicated: checkpoint ids in `list` are unique, and so are the
  pending writes of each checkpoint;
- the next writer continues the same thread, and `journal verify` is clean.

Kills: JOURNAL_LG_CRASH_KILLS (default 24); seed: JOURNAL_LG_CRASH_SEED.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from journal.integrations.langgraph import JournalSaver

HERE = Path(__file__).resolve().parent
THREAD = "crash-thread"


def read_acks(path: Path) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    puts: dict[str, list[str]] = {}
    writes: dict[str, set[str]] = {}
    if not path.exists():
        return puts, writes
    for line in path.read_text().splitlines():
        if not line.endswith("}"):
            continue  # a line torn by the kill was never acknowledged
        rec = json.loads(line)
        if rec["op"] == "put":
            puts[rec["id"]] = rec["msgs"]
        else:
            writes.setdefault(rec["id"], set()).add(rec["task"])
    return puts, writes


def check(
    root: Path,
    puts: dict[str, list[str]],
    writes: dict[str, set[str]],
    sample: list[str],
    in_flight: int,
    full: bool,
) -> int:
    saver = JournalSaver(root, durability="os")
    try:
        cfg: Any = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        count = -1
        if full:
            listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg)]
            assert len(listed) == len(set(listed)), "a checkpoint is listed twice"
            missing = set(puts) - set(listed)
            assert not missing, f"acknowledged puts lost: {sorted(missing)[:3]}"
            # Beyond the acks, at most the one put each killed writer had in flight.
            assert len(listed) <= len(puts) + in_flight
            count = len(listed)
        for cid in sample:
            tup = saver.get_tuple({"configurable": {**cfg["configurable"], "checkpoint_id": cid}})
            assert tup is not None, cid
            got = [m.content for m in tup.checkpoint["channel_values"]["messages"]]
            assert got == puts[cid], (cid, got, puts[cid])
            assert tup.pending_writes is not None
            keys = Counter((w[0], w[1]) for w in tup.pending_writes)
            assert all(n == 1 for n in keys.values()), f"duplicated writes at {cid}: {keys}"
            for task in writes.get(cid, ()):
                assert keys[(task, "messages")] == 1 and keys[(task, "step")] == 1, (cid, task)
                step = [w[2] for w in tup.pending_writes if w[0] == task and w[1] == "step"]
                assert step == [int(task.rsplit("-", 1)[1])]
        return count
    finally:
        saver.close()


def test_kill9_during_put_and_put_writes(tmp_path: Path) -> None:
    kills = int(os.environ.get("JOURNAL_LG_CRASH_KILLS", "24"))
    seed = int(os.environ.get("JOURNAL_LG_CRASH_SEED", str(random.randrange(1 << 30))))
    print(f"JOURNAL_LG_CRASH_SEED={seed}")
    rng = random.Random(seed)
    root = tmp_path / "store"
    ackfile = tmp_path / "acks.jsonl"
    zygote = subprocess.Popen(
        [sys.executable, str(HERE / "langgraph_crash_writer.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    try:
        last_count = 0
        for k in range(kills):
            zygote.stdin.write(f"{root} w{k} {rng.randrange(1 << 30)} {ackfile}\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            time.sleep(rng.uniform(0.02, 0.2))
            os.kill(pid, signal.SIGKILL)
            assert zygote.stdout.readline().strip() == "done"
            puts, writes = read_acks(ackfile)
            newest = list(puts)[-12:]
            sample = newest + rng.sample(list(puts), min(12, len(puts)))
            count = check(root, puts, writes, sample, k + 1, full=k % 6 == 5)
            if count >= 0:
                assert count >= last_count
                last_count = count
        puts, writes = read_acks(ackfile)
        assert len(puts) > kills, "the writers made too little progress to mean anything"
        check(root, puts, writes, list(puts), kills, full=True)
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=30)
    verify = subprocess.run(
        [sys.executable, "-m", "journal.cli", "--root", str(root), "verify"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr

"""Processes and threads creating, saving, forking, deleting and reading a few ids at once.

Every call may lose a race (a session deleted under it, an id created by someone
else first), so `NotFoundError` and `ContractViolationError` are expected answers;
anything else is a bug. Afterwards no file may be damaged (`journal verify`), no
lock holder line may have landed in a data file, and the tree must be whole: every
session listed loads, and every child's parent exists. So a session closed under a
running call (a reused descriptor then writing a lock holder line over a segment
header) fails it, and so does a delete race reported as damage.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import journal
from journal.inspect import SEVERITY_DATA, verify_store

SEED = int(os.environ.get("JOURNAL_STRESS_SEED", random.randrange(1 << 30)))
PROCS, THREADS, SECONDS = 3, 3, 4.0

WORKER = r"""
import json, random, sys, threading, time, traceback
import journal
from journal import Checkpoint, ContractViolationError, NotFoundError

root, out = sys.argv[1], sys.argv[5]
seed, threads, seconds = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
IDS = [f"s{i}" for i in range(4)]
store = journal.open(root, lock_timeout=30)
unexpected, calls = [], [0]

def loop(k):
    rnd = random.Random(seed * 100 + k)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sid = rnd.choice(IDS)
        op = rnd.random()
        calls[0] += 1
        try:
            if op < 0.35:
                cur = store.load(sid)
                cp = Checkpoint.empty(sid) if cur is None else cur
                if cur is not None:
                    cp.sequence = cur.sequence + 1
                cp.context = [{"role": "user", "content": "x" * rnd.choice([10, 9000])}]
                store.save(cp)
            elif op < 0.6:
                store.load(sid)
                store.session_summary(sid)
            elif op < 0.75:
                child = Checkpoint.empty(f"{rnd.choice(IDS)}c{rnd.randrange(3)}")
                child.context = [{"role": "user", "content": "c"}]
                store.fork(sid, 0, child)
            elif op < 0.85:
                store.delete_sessions([sid])
            else:
                store.list_sessions_page(journal.SessionPageRequest(limit=50))
        except (NotFoundError, ContractViolationError):
            continue
        except Exception as exc:
            unexpected.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1200:]}")

workers = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
store.close()
with open(out, "w") as f:
    json.dump({"unexpected": unexpected, "calls": calls[0]}, f)
"""


def test_processes_and_threads_racing_on_few_ids_leave_a_whole_tree(tmp_path: Path) -> None:
    print(f"JOURNAL_STRESS_SEED={SEED}")
    root = tmp_path / "store"
    journal.open(root).close()
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    outs = [tmp_path / f"out{p}.json" for p in range(PROCS)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(worker),
                str(root),
                str(SEED + p),
                str(THREADS),
                str(SECONDS),
                str(outs[p]),
            ],
            stderr=subprocess.PIPE,
        )
        for p in range(PROCS)
    ]
    for p, proc in enumerate(procs):
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"worker {p} failed: {err.decode()[-2000:]}"
    results = [json.loads(out.read_text()) for out in outs]
    unexpected = [e for r in results for e in r["unexpected"]]
    assert unexpected == [], f"{len(unexpected)} unexpected errors; the first:\n{unexpected[0]}"
    assert sum(r["calls"] for r in results) > 100, "the workers hardly ran"

    damaged = [
        str(f)
        for _, findings in verify_store(str(root))
        for f in findings
        if f.severity == SEVERITY_DATA
    ]
    assert damaged == []
    for directory, _, files in os.walk(root):
        for name in files:
            if name in ("LOCK", "tree.lock") or name.endswith(".lock"):
                continue
            with open(os.path.join(directory, name), "rb") as f:
                assert not f.read(4).startswith(b"pid="), f"a lock line in {directory}/{name}"

    store = journal.open(root)
    try:
        listed = store.list_sessions_page(journal.SessionPageRequest(limit=1000)).sessions
        for summary in listed:
            assert store.load(summary.session_id) is not None, summary.session_id
            parent = summary.parent_session_id
            if parent is not None:
                assert store.session_summary(parent) is not None, (
                    f"{summary.session_id} outlived its parent {parent}"
                )
    finally:
        store.close()

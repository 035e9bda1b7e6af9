"""What a retention run costs: planning (a dry run reads the whole catalog page by
page) and deleting, per session and per tree, over a store of N sessions.

    python benchmarks/bench_retention.py [--sessions 10000] [--repeat 3]

Builds the store in os mode (the build is not what is measured), one tenth of the
sessions forked from another, then times `prune(dry_run=True)` (the plan) and
`prune(keep_last=N/2, dry_run=False)` (the plan plus deleting half the store).
Prints medians and spreads; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import journal
from journal import Checkpoint


def build(root: str, n: int) -> None:
    with journal.open(root, durability="os") as store:
        for i in range(n):
            sid = f"s{i:07d}"
            if i % 10 == 9:
                store.fork_at(f"s{i - 1:07d}", 0, sid)
            else:
                store.save(Checkpoint.empty(sid, owner_id="bench"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-retention-")
    plans: list[float] = []
    deletes: list[float] = []
    deleted = 0
    try:
        for r in range(args.repeat):
            root = os.path.join(base, f"store{r}")
            build(root, args.sessions)
            with journal.open(root) as store:
                t0 = time.perf_counter()
                report = store.prune(keep_last=0)
                plans.append(time.perf_counter() - t0)
                assert len(report.deleted) == args.sessions
                t0 = time.perf_counter()
                report = store.prune(keep_last=args.sessions // 2, dry_run=False)
                deletes.append(time.perf_counter() - t0)
                deleted = len(report.deleted)
            shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def show(name: str, xs: list[float], per: int) -> None:
        med = statistics.median(xs)
        print(
            f"{name}: median {med:.3f} s ({min(xs):.3f}-{max(xs):.3f}),"
            f" {med / per * 1e6:.1f} us per session"
        )

    print(f"{args.sessions} sessions, {args.repeat} runs")
    show("plan (dry run, whole catalog)", plans, args.sessions)
    show(f"prune deleting {deleted} sessions (durable)", deletes, deleted)


if __name__ == "__main__":
    main()

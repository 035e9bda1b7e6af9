"""Compaction's replacement of items: `JournalSession` against the SDK's `SQLiteSession`.

    python benchmarks/bench_openai_agents_compaction.py [--items N] [--runs R] [--dir DIR]

What `OpenAIResponsesCompactionSession` asks of the store it wraps, without the
Responses API call (which costs the same on both):

- suffix replacement (the Runner's automatic compaction): take the snapshot of
  the newest 8 items and replace the last 7 with 2 compacted items
  (`_get_compaction_snapshot(8)` then `replace_suffix(1, ...)`), then the next
  turns' adds (untimed), 30 times; on both stores one durable commit, checked
  against the stored suffix (journal: a conditional append; SQLite: a transaction);
- whole-history replacement (manual `run_compaction()`): journal's
  `_atomic_replace_items` (one checkpoint save) against what the SDK does on
  `SQLiteSession`, which has no such hook: `clear_session()` then `add_items()`
  (two commits), 10 times;
- bytes on disk (du of the store, after close) after filling the session, and
  after the replacements: journal appends the replacements (the replaced items
  stay in the log until a clear or `delete()`), SQLite deletes rows and reuses
  their pages.

Both durable: journal's default durability ("fsync"), SQLiteSession's default
(WAL, synchronous=FULL). Each run builds both stores afresh in one directory,
the order alternating between runs. Ratios are SQLite / journal (> 1: journal
faster or smaller), medians over runs with their range. Nothing asserts timings.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from agents import SQLiteSession

from journal.integrations.openai_agents import JournalSession, drop_caches

SUFFIX_ROUNDS = 30
WHOLE_ROUNDS = 10
WINDOW = 8


def item(i: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": f"message {i} " + "lorem ipsum " * 8}


def du(path: str) -> int:
    if os.path.isfile(path):
        extra = [path + x for x in ("-wal", "-shm") if os.path.exists(path + x)]
        return os.path.getsize(path) + sum(os.path.getsize(p) for p in extra)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


async def suffix_rounds(s: Any) -> list[float]:
    out = []
    for r in range(SUFFIX_ROUNDS):
        compacted = [
            {"role": "user", "content": f"q{r}"},
            {"type": "compaction", "encrypted_content": "x" * 200},
        ]
        t = time.perf_counter()
        snap = await s._get_compaction_snapshot(WINDOW)
        ok = await snap.replace_suffix(1, compacted)
        out.append(time.perf_counter() - t)
        assert ok
        for k in range(3):  # the next turns
            await s.add_items([item(10_000 + 2 * r + k), item(20_000 + 2 * r + k)])
    return out


async def whole_rounds(s: Any, atomic: bool) -> list[float]:
    out = []
    history = await s.get_items()
    compacted = [*history[:-10], {"type": "compaction", "encrypted_content": "x" * 200}]
    for _ in range(WHOLE_ROUNDS):
        t = time.perf_counter()
        if atomic:
            assert await s._atomic_replace_items(compacted)
        else:  # the SDK's path for a store without `_atomic_replace_items`
            await s.clear_session()
            await s.add_items(compacted)
        out.append(time.perf_counter() - t)
    return out


async def one_run(base: str, order: tuple[str, ...], n: int) -> dict[str, tuple[float, ...]]:
    d = tempfile.mkdtemp(prefix="bench-oai-compaction-", dir=base)
    res: dict[str, tuple[float, ...]] = {}
    for name in order:
        path = os.path.join(d, "ref.db" if name == "sqlite" else "journal")
        make: Callable[[str, str], Any] = SQLiteSession if name == "sqlite" else JournalSession
        s = make("c", path)
        for i in range(0, n, 2):
            await s.add_items([item(i), item(i + 1)])
        s.close()
        drop_caches()
        filled = du(path)
        s = make("c", path)
        sfx = await suffix_rounds(s)
        whole = await whole_rounds(s, atomic=name == "journal")
        s.close()
        drop_caches()
        res[name] = (statistics.median(sfx), statistics.median(whole), filled, du(path))
    shutil.rmtree(d)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=500, help="items in the session (default 500)")
    ap.add_argument("--runs", type=int, default=5, help="runs, order alternating (default 5)")
    ap.add_argument("--dir", default=None, help="where the stores go (default: the temp dir)")
    args = ap.parse_args(argv)
    runs = []
    for r in range(args.runs):
        order = ("sqlite", "journal") if r % 2 == 0 else ("journal", "sqlite")
        runs.append(asyncio.run(one_run(args.dir or tempfile.gettempdir(), order, args.items)))
    print(
        f"{args.items} items; per run {SUFFIX_ROUNDS} suffix and {WHOLE_ROUNDS} whole"
        f" replacements; {args.runs} runs"
    )
    rows = [
        ("suffix replacement (snapshot + replace_suffix)", 0, "ms", 1e3),
        ("whole replacement (SQLite: clear + add; journal: one save)", 1, "ms", 1e3),
        ("disk after filling, closed", 2, "KiB", 1 / 1024),
        ("disk after the replacements, closed", 3, "KiB", 1 / 1024),
    ]
    for label, idx, unit, scale in rows:
        q = [run["sqlite"][idx] * scale for run in runs]
        j = [run["journal"][idx] * scale for run in runs]
        ratios = sorted(a / b for a, b in zip(q, j, strict=True))
        print(
            f"{label}: SQLite {statistics.median(q):.2f} {unit} ({min(q):.2f}-{max(q):.2f}),"
            f" journal {statistics.median(j):.2f} {unit} ({min(j):.2f}-{max(j):.2f}),"
            f" SQLite/journal {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

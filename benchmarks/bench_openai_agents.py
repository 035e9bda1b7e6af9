"""`JournalSession` against the OpenAI Agents SDK's `SQLiteSession` (file-backed).

    python benchmarks/bench_openai_agents.py [--quick] [--turns N] [--dir DIR] [--json out.json]

Both sessions get the same scripted conversation, built before any timed loop:
per turn the items the SDK's Runner adds, in the calls it makes (measured with
the Runner: `[user message]`, then for a tool turn `[function_call,
function_call_output]`, then `[assistant message]`). Two item profiles:
"chat" (short messages, no tools) and "tools" (every second turn calls a tool
whose JSON output is 2-8 KiB). Both stores are durable: journal's default
durability ("fsync") against SQLiteSession's default (WAL, synchronous=FULL:
every commit is fsynced), in fresh directories on one file system.

Figures (median of the per-call times, runs alternating journal and SQLite):
- `add_items` per call and per turn while the conversation grows;
- `get_items(limit=50)` and `get_items()` at the end of a long session;
- a page of 50 items deep in the history (journal: `get_items_page(before=cursor)`;
  SQLite: the same keyset query on SQLiteSession's table, as a user would write it);
- "new session object": a new session object per read on the same store (journal
  shares the process's cache of the session); "nothing cached": the first reads of
  the session in a process (journal: its caches dropped, untimed; SQLite: a new
  SQLiteSession, which opens a new connection), including a whole turn as a
  stateless server runs it (get_items() without a limit, then the turn's adds);
- `pop_item` at the end of a long session;
- bytes on disk after the turns (du of the store directory; SQLite with its WAL
  while open, and after close, when it has checkpointed the WAL away).

Ratios are SQLite / journal, so > 1 means journal is faster or smaller.
Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agents import SQLiteSession  # noqa: E402
from harness.disk import disk_usage  # noqa: E402  (what `du` reports)

from journal.integrations.openai_agents import JournalSession, drop_caches  # noqa: E402

Item = dict[str, Any]
KIB = 1024

TEXT = (
    "the build failed because the linker could not find libssl on the runner image so "
    "we pinned the version and reran the pipeline which then timed out on the integration "
    "tests that talk to the staging database over a flaky connection"
)
WORDS = TEXT.split(" ")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_turns(turns: int, profile: str, seed: int = 7) -> list[list[list[Item]]]:
    """Per turn, the item lists of its add_items calls (as the Runner makes them)."""
    rng = random.Random(seed)
    out: list[list[list[Item]]] = []
    for t in range(turns):
        calls: list[list[Item]] = [[{"role": "user", "content": sentence(rng, rng.randint(8, 40))}]]
        if profile == "tools" and t % 2 == 0:
            call_id = f"call_{t:06d}"
            rows = [
                {
                    "id": i,
                    "status": rng.choice(["ok", "failed", "skipped"]),
                    "detail": sentence(rng, 6),
                }
                for i in range(rng.randint(20, 70))
            ]
            calls.append(
                [
                    {
                        "id": f"fc_{t:06d}",
                        "type": "function_call",
                        "call_id": call_id,
                        "name": "query_ci",
                        "arguments": json.dumps({"job": t, "verbose": True}),
                        "status": "completed",
                    },
                    {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": json.dumps({"rows": rows}),
                    },
                ]
            )
        calls.append(
            [
                {
                    "id": f"msg_{t:06d}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {
                            "type": "output_text",
                            "text": sentence(rng, rng.randint(20, 120)),
                            "annotations": [],
                            "logprobs": [],
                        }
                    ],
                }
            ]
        )
        out.append(calls)
    return out


def apparent(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def json_bytes(turns: list[list[list[Item]]]) -> int:
    return sum(len(json.dumps(i)) for calls in turns for items in calls for i in items)


class Side:
    """One store under test: a session factory and where its bytes live."""

    def __init__(self, name: str, base: Path):
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))

    def open(self, sid: str) -> Any:
        if self.name == "journal":
            return JournalSession(sid, self.dir / "store")
        return SQLiteSession(sid, self.dir / "sessions.db")

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


async def timed(
    fn: Callable[[], Awaitable[Any]], setup: Callable[[], object] | None = None
) -> float:
    """Seconds `fn` takes; `setup` runs first, untimed."""
    if setup is not None:
        setup()
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def grow(session: Any, turns: list[list[list[Item]]]) -> tuple[list[float], list[float]]:
    per_call: list[float] = []
    per_turn: list[float] = []
    for calls in turns:
        total = 0.0
        for items in calls:
            t = await timed(lambda items=items: session.add_items(items))
            per_call.append(t)
            total += t
        per_turn.append(total)
    return per_call, per_turn


async def deep_page_sqlite(
    conn: sqlite3.Connection, session: SQLiteSession, before_id: int, limit: int
) -> list[Any]:
    def run() -> list[Any]:
        rows = conn.execute(
            f"SELECT id, message_data FROM {session.messages_table} "
            "WHERE session_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (session.session_id, before_id, limit),
        ).fetchall()
        return [json.loads(r[1]) for r in rows]

    return await asyncio.to_thread(run)


@dataclass
class Reads:
    """One side's read workloads after the turns (see `measure`)."""

    deep: Callable[[], Awaitable[Any]]  # a page of 50 about halfway down the history
    fresh50: Callable[[], Awaitable[Any]]  # a new session object per read
    cold50: Callable[[], Awaitable[Any]]  # nothing cached
    cold_deep: Callable[[], Awaitable[Any]]
    cold_turn: Callable[[list[list[Item]]], Awaitable[None]]
    cold_setup: Callable[[], object] | None  # untimed, before each "nothing cached" read
    close: Callable[[], None]


async def journal_reads(s: JournalSession, sid: str, n_items: int) -> Reads:
    page = await s.get_items_page(n_items // 2)
    cursor = page.next_before

    async def deep() -> Any:
        return await s.get_items_page(50, before=cursor)

    # A fresh session object per request (e.g. a web server), one store per
    # process: it shares the process's cache of the session.
    async def fresh50() -> Any:
        return await JournalSession(sid, s.store).get_items(50)

    async def cold_deep() -> Any:
        return await JournalSession(sid, s.store).get_items_page(50, before=cursor)

    async def cold_turn(calls: list[list[Item]]) -> None:
        fresh = JournalSession(sid, s.store)
        await fresh.get_items()
        for items in calls:
            await fresh.add_items(items)

    # The first read of the session in a process: nothing cached (`drop_caches`,
    # untimed, forgets what this process read; a new process has nothing to drop).
    return Reads(deep, fresh50, fresh50, cold_deep, cold_turn, drop_caches, lambda: None)


def sqlite_reads(s: SQLiteSession, sid: str, n_items: int) -> Reads:
    conn = sqlite3.connect(str(s.db_path), check_same_thread=False)
    ids = [
        r[0]
        for r in conn.execute(
            f"SELECT id FROM {s.messages_table} WHERE session_id = ? ORDER BY id",
            (sid,),
        )
    ]
    before_id = ids[len(ids) - n_items // 2]

    async def deep() -> Any:
        return await deep_page_sqlite(conn, s, before_id, 50)

    async def fresh50() -> Any:
        fresh = SQLiteSession(sid, s.db_path)
        try:
            return await fresh.get_items(50)
        finally:
            fresh.close()

    async def cold_turn(calls: list[list[Item]]) -> None:
        fresh = SQLiteSession(sid, s.db_path)
        try:
            await fresh.get_items()
            for items in calls:
                await fresh.add_items(items)
        finally:
            fresh.close()

    async def cold_deep() -> Any:
        fresh = SQLiteSession(sid, s.db_path)
        try:
            c = sqlite3.connect(str(s.db_path), check_same_thread=False)
            try:
                return await deep_page_sqlite(c, fresh, before_id, 50)
            finally:
                c.close()
        finally:
            fresh.close()

    # A new SQLiteSession opens a new connection: nothing cached.
    return Reads(deep, fresh50, fresh50, cold_deep, cold_turn, None, conn.close)


async def measure(
    side: Side, turns: list[list[list[Item]]], reads: int, more_turns: list[list[list[Item]]]
) -> dict[str, Any]:
    sid = "bench-session"
    s = side.open(sid)
    res: dict[str, Any] = {}
    per_call, per_turn = await grow(s, turns)
    res["add_call"] = statistics.median(per_call)
    res["add_turn"] = statistics.median(per_turn)
    res["add_p95"] = statistics.quantiles(per_call, n=20)[-1]
    n_items = len(await s.get_items())
    res["items"] = n_items
    res["get50"] = statistics.median([await timed(lambda: s.get_items(50)) for _ in range(reads)])
    res["get_all"] = statistics.median(
        [await timed(lambda: s.get_items()) for _ in range(max(3, reads // 10))]
    )
    if side.name == "journal":
        w = await journal_reads(s, sid, n_items)
    else:
        w = sqlite_reads(s, sid, n_items)
    cold = w.cold_setup
    res["deep50"] = statistics.median([await timed(w.deep) for _ in range(reads)])
    res["fresh50"] = statistics.median([await timed(w.fresh50) for _ in range(reads)])
    res["cold50"] = statistics.median([await timed(w.cold50, cold) for _ in range(reads)])
    res["cold_deep50"] = statistics.median([await timed(w.cold_deep, cold) for _ in range(reads)])
    # A turn as a stateless server runs it with nothing cached: a new session object
    # reads the whole conversation (the Runner's get_items() without a limit), then
    # adds the turn's items (the conversation grows by these turns).
    res["cold_turn"] = statistics.median(
        [await timed(lambda calls=calls: w.cold_turn(calls), cold) for calls in more_turns]
    )
    w.close()
    # Disk while open (SQLite: db + WAL + shm), then pops, then after close.
    res["disk_open"] = disk_usage(side.dir)
    pops = [await timed(lambda: s.pop_item()) for _ in range(min(50, n_items))]
    res["pop"] = statistics.median(pops)
    s.close()
    res["disk_closed"] = disk_usage(side.dir)
    res["apparent_closed"] = apparent(side.dir)
    return res


def used(path: Path) -> int:
    """File bytes without the zeros journal preallocates at the end of its newest
    segments (written ahead so a commit's fdatasync need not persist a new size)."""
    total = 0
    for p in path.rglob("*"):
        if not p.is_file():
            continue
        size = p.stat().st_size
        if p.suffix == ".seg":
            size = len(p.read_bytes().rstrip(b"\0"))
        total += size
    return total


async def disk_only(side: Side, turns: list[list[list[Item]]], sessions: int = 1) -> dict[str, int]:
    opened = [side.open(f"bench-session-{k}") for k in range(sessions)]
    if side.name == "journal" and sessions > 1:  # one store per process, as documented
        for k, sess in enumerate(opened[1:], start=1):
            sess.close()
            opened[k] = JournalSession(f"bench-session-{k}", opened[0].store)
    for calls in turns:
        for items in calls:
            for sess in opened:
                await sess.add_items(items)
    open_bytes = disk_usage(side.dir)
    for sess in reversed(opened):
        sess.close()
    return {
        "disk_open": open_bytes,
        "disk_closed": disk_usage(side.dir),
        "apparent_closed": apparent(side.dir),
        "used_closed": used(side.dir),
    }


def fmt_t(s: float) -> str:
    return f"{s * 1e6:8.0f} us" if s < 0.01 else f"{s * 1e3:8.2f} ms"


def fmt_b(b: float) -> str:
    return f"{b / KIB / KIB:8.2f} MiB" if b >= KIB * KIB else f"{b / KIB:8.1f} KiB"


ROWS = [
    ("add_items, per call (median)", "add_call"),
    ("add_items, per call (p95)", "add_p95"),
    ("add_items, per turn (median)", "add_turn"),
    ("get_items(limit=50), long session", "get50"),
    ("get_items() (all), long session", "get_all"),
    ("page of 50, halfway down the history", "deep50"),
    ("new session object: get_items(50)", "fresh50"),
    ("nothing cached: get_items(50)", "cold50"),
    ("nothing cached: page of 50, halfway", "cold_deep50"),
    ("nothing cached: turn (get_items, adds)", "cold_turn"),
    ("pop_item, long session", "pop"),
]


def disk_rows(
    disk: dict[str, dict[str, int]], rows: list[tuple[str, str]], section: dict[str, Any]
) -> None:
    """Print the byte rows journal against SQLite and add them to `section`."""
    for label, key in rows:
        j, q = disk["journal"][key], disk["sqlite"][key]
        print(f"{label:40} {fmt_b(j):>12} {fmt_b(q):>12} {q / j:14.2f}x")
        section[key] = {"journal": j, "sqlite": q, "ratio": q / j}


def run_latency(
    profile: str, args: argparse.Namespace, turns: list[list[list[Item]]], reps: int
) -> dict[str, list[dict[str, Any]]]:
    """The `measure` runs of both sides, alternating which goes first."""
    reads = 30 if args.quick else 100
    cold_turns = 20 if args.quick else 50
    turns_n = len(turns)
    more_turns = make_turns(cold_turns, profile, seed=8)
    runs: dict[str, list[dict[str, Any]]] = {"journal": [], "sqlite": []}
    for rep in range(reps):
        order = ("journal", "sqlite") if rep % 2 == 0 else ("sqlite", "journal")
        for name in order:
            side = Side(name, args.dir)
            try:
                print(
                    f"[{profile}] {name}: {turns_n} turns (rep {rep + 1}/{reps})",
                    file=sys.stderr,
                    flush=True,
                )
                runs[name].append(asyncio.run(measure(side, turns, reads, more_turns)))
            finally:
                side.cleanup()
    return runs


def run_profile(profile: str, args: argparse.Namespace, turns_n: int, reps: int) -> dict[str, Any]:
    """One item profile: latency rows, then bytes after exactly 1,000 turns."""
    turns = make_turns(turns_n, profile)
    runs = run_latency(profile, args, turns, reps)
    turns_1k = turns if turns_n == 1000 else make_turns(1000, profile)
    disk: dict[str, dict[str, int]] = {}
    for name in ("journal", "sqlite"):
        side = Side(name, args.dir)
        try:
            print(f"[{profile}] {name}: bytes after 1,000 turns", file=sys.stderr, flush=True)
            disk[name] = asyncio.run(disk_only(side, turns_1k))
        finally:
            side.cleanup()

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    items = runs["journal"][0]["items"]
    print(
        f"\n== profile {profile!r}: {turns_n} turns, {items} items, "
        f"{fmt_b(json_bytes(turns)).strip()} of item JSON =="
    )
    print(f"{'workload':40} {'journal':>12} {'SQLite':>12} {'SQLite/journal':>15}")
    section: dict[str, Any] = {}
    for label, key in ROWS:
        j, q = med("journal", key), med("sqlite", key)
        print(f"{label:40} {fmt_t(j):>12} {fmt_t(q):>12} {q / j:14.2f}x")
        section[key] = {"journal": j, "sqlite": q, "ratio": q / j}
    json1k = json_bytes(turns_1k)
    print(f"bytes on disk after 1,000 turns ({fmt_b(json1k).strip()} of item JSON):")
    disk_rows(
        disk,
        [
            ("  while open (SQLite: db + WAL + shm)", "disk_open"),
            ("  after close (du)", "disk_closed"),
            ("  after close (file sizes)", "apparent_closed"),
            ("  after close (without preallocation)", "used_closed"),
        ],
        section,
    )
    section["item_json_bytes_1k"] = json1k
    return section


def run_many_sessions(args: argparse.Namespace) -> dict[str, Any]:
    """The other shape: many short sessions (journal's per-session files and
    preallocated segment start weigh here; SQLite shares one file and one WAL)."""
    n_sessions, short = (20, 5) if args.quick else (100, 10)
    turns = make_turns(short, "chat")
    disk = {}
    for name in ("journal", "sqlite"):
        side = Side(name, args.dir)
        try:
            print(f"[many] {name}: {n_sessions} sessions x {short} turns", file=sys.stderr)
            disk[name] = asyncio.run(disk_only(side, turns, sessions=n_sessions))
        finally:
            side.cleanup()
    print(
        f"\n== {n_sessions} sessions of {short} chat turns each "
        f"({fmt_b(n_sessions * json_bytes(turns)).strip()} of item JSON) =="
    )
    section: dict[str, Any] = {}
    disk_rows(
        disk,
        [
            ("  while open (SQLite: db + WAL + shm)", "disk_open"),
            ("  after close (du)", "disk_closed"),
            ("  after close (without preallocation)", "used_closed"),
        ],
        section,
    )
    return section


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="300 turns for latency (1,000 for bytes), 1 rep"
    )
    ap.add_argument("--turns", type=int, default=None, help="turns for the latency runs")
    ap.add_argument("--reps", type=int, default=None, help="alternating repetitions")
    ap.add_argument("--dir", type=Path, default=HERE / "out", help="where to make stores")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    turns_n = args.turns or (300 if args.quick else 1000)
    reps = args.reps or (1 if args.quick else 3)
    args.dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"turns": turns_n, "reps": reps}
    for profile in ("chat", "tools"):
        report[profile] = run_profile(profile, args, turns_n, reps)
    report["many_sessions"] = run_many_sessions(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

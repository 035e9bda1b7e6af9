"""`JournalSessionService` against ADK's `SqliteSessionService` and `InMemorySessionService`.

    python benchmarks/bench_adk.py [--quick] [--turns N] [--runs R] [--dir DIR] [--json out.json]

Every service gets the same scripted conversation, built before any timed loop:
per turn the four events ADK's Runner appends for a turn with one tool call (the
user's message, the model's function call, the tool's 1-4 KiB JSON result, the
model's answer, whose `output_key` puts the answer in the session state), plus a
`user:` counter and an `app:` value in the tool's state delta. Durable against
durable: journal's default ("fsync": every append is synced before it returns)
against `SqliteSessionService` (aiosqlite, SQLite's default rollback journal with
synchronous=FULL: every commit is synced); journal with durability "os" and the
in-memory service are there for scale. Fresh directories on one file system.

Figures, per run (runs alternate the services' order), then the median over runs
and the spread (min-max):
- `append_event`: median time per call over a whole conversation;
- `get_session` at the end: the whole session, and `num_recent_events=20`;
- `list_sessions` of one user with `--sessions` sessions of two turns each;
- bytes on disk after the conversation (du: allocated blocks), and for journal
  the bytes its files hold (without the preallocated tail of its newest segment).

Ratios are SQLite / journal, so > 1 means journal is faster or smaller. Nothing
here asserts on timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from google.adk.events import Event, EventActions  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.sessions.base_session_service import (  # noqa: E402
    BaseSessionService,
    GetSessionConfig,
)
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.genai import types  # noqa: E402
from harness.disk import disk_usage, used_bytes  # noqa: E402

from journal.integrations.adk import JournalSessionService  # noqa: E402

APP, USER = "bench", "user"
WORDS = [
    *("the", "build", "fails", "on", "the", "runner", "because", "the", "cache"),
    *("key", "changed", "after", "a", "dependency", "bump"),
]
SIDES = ["journal", "journal-os", "sqlite", "memory"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_turns(turns: int, seed: int = 7) -> list[list[Event]]:
    """The events of each turn, as the Runner appends them (fixed ids and times)."""
    rng = random.Random(seed)
    out = []
    t = 1_800_000_000.0
    for i in range(turns):
        inv = f"inv-{i}"
        call_id = f"call-{i}"
        rows = [{"id": j, "line": sentence(rng, 8)} for j in range(rng.randrange(8, 32))]
        answer = sentence(rng, rng.randrange(20, 80))

        def ev(
            author: str, part: types.Part, delta: dict[str, Any] | None = None, inv: str = inv
        ) -> Event:
            nonlocal t
            t += 0.25
            role = "user" if author == "user" else "model"
            return Event(
                invocation_id=inv,
                author=author,
                timestamp=t,
                content=types.Content(role=role, parts=[part]),
                actions=EventActions(state_delta=delta or {}),
            )

        out.append(
            [
                ev("user", types.Part(text=sentence(rng, rng.randrange(8, 30)))),
                ev(
                    "agent",
                    types.Part(
                        function_call=types.FunctionCall(
                            id=call_id, name="search_logs", args={"query": sentence(rng, 5)}
                        )
                    ),
                ),
                ev(
                    "agent",
                    types.Part(
                        function_response=types.FunctionResponse(
                            id=call_id, name="search_logs", response={"rows": rows}
                        )
                    ),
                    {"user:searches": i + 1, "app:last_query_turn": i},
                ),
                ev("agent", types.Part(text=answer), {"reply": answer, "turns": i + 1}),
            ]
        )
    return out


def make_service(side: str, base: Path) -> BaseSessionService:
    if side == "memory":
        return InMemorySessionService()
    if side == "sqlite":
        return SqliteSessionService(str(base / "sessions.db"))
    return JournalSessionService(
        base / "store", durability="os" if side == "journal-os" else "fsync"
    )


async def close(svc: BaseSessionService) -> None:
    if isinstance(svc, (SqliteSessionService, JournalSessionService)):
        await svc.close()


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def journal_used(root: Path) -> int:
    """Bytes journal's files hold: segments without their preallocated zero tail."""
    total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            total += used_bytes(path) if name.endswith(".seg") else os.path.getsize(path)
    return total


async def one_run(
    side: str, base: Path, turns: list[list[Event]], sessions: int
) -> dict[str, float]:
    base.mkdir(parents=True)
    svc = make_service(side, base)
    s = await svc.create_session(app_name=APP, user_id=USER, session_id="long")
    appends = []
    for turn in turns:
        for event in turn:
            e = event.model_copy(deep=True)
            appends.append(await timed(lambda e=e: svc.append_event(s, e)))
    reads_all, reads_recent = [], []
    for _ in range(7):
        reads_all.append(
            await timed(lambda: svc.get_session(app_name=APP, user_id=USER, session_id="long"))
        )
        reads_recent.append(
            await timed(
                lambda: svc.get_session(
                    app_name=APP,
                    user_id=USER,
                    session_id="long",
                    config=GetSessionConfig(num_recent_events=20),
                )
            )
        )
    got = await svc.get_session(app_name=APP, user_id=USER, session_id="long")
    assert got is not None and len(got.events) == 4 * len(turns)
    out = {
        "append": statistics.median(appends),
        "get_all": statistics.median(reads_all),
        "get_recent20": statistics.median(reads_recent),
    }
    await close(svc)
    if side == "sqlite":
        out["disk"] = disk_usage(base)
    elif side.startswith("journal"):
        out["disk"] = disk_usage(base / "store")
        out["used"] = journal_used(base / "store")
    # Many short sessions: listing, and what each costs on disk.
    many = base / "many"
    many.mkdir()
    svc = make_service(side, many)
    for i in range(sessions):
        m = await svc.create_session(app_name=APP, user_id=USER, session_id=f"s{i}")
        for event in turns[0] + turns[1 % len(turns)]:
            await svc.append_event(m, event.model_copy(deep=True))
    lists = [await timed(lambda: svc.list_sessions(app_name=APP, user_id=USER)) for _ in range(5)]
    out["list"] = statistics.median(lists)
    await close(svc)
    if side == "sqlite":
        out["disk_many"] = disk_usage(many)
    elif side.startswith("journal"):
        out["disk_many"] = disk_usage(many / "store")
    return out


def fmt_t(s: float) -> str:
    return f"{s * 1e6:.0f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def fmt_b(b: float) -> str:
    return f"{b / 1024:.0f} KiB" if b < 1 << 20 else f"{b / (1 << 20):.2f} MiB"


def summarize(results: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Per metric and side: median and spread over runs; ratios SQLite/journal per run."""
    summary: dict[str, Any] = {"sides": {}, "ratios": {}}
    for side in SIDES:
        per: dict[str, Any] = {}
        for key in results[0][side]:
            values = [r[side][key] for r in results]
            per[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        summary["sides"][side] = per
    for key in ("append", "get_all", "get_recent20", "list", "disk", "disk_many"):
        ratios = [r["sqlite"][key] / r["journal"][key] for r in results]
        summary["ratios"][key] = {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
        }
    return summary


def report(summary: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"ADK session services: {args.turns} turns ({4 * args.turns} events), "
        f"{args.sessions} short sessions, {args.runs} runs (median [min-max])",
        "",
        "| metric | journal (fsync) | journal (os) | SQLite | in-memory | SQLite / journal |",
        "|---|---|---|---|---|---|",
    ]
    names = {
        "append": "append_event, per call",
        "get_all": f"get_session, all {4 * args.turns} events",
        "get_recent20": "get_session, num_recent_events=20",
        "list": f"list_sessions, {args.sessions} sessions",
        "disk": "disk after the conversation (du)",
        "disk_many": f"disk, {args.sessions} sessions of 2 turns (du)",
    }
    for key, name in names.items():
        cells = []
        for side in SIDES:
            v = summary["sides"][side].get(key)
            if v is None:
                cells.append("-")
                continue
            f = fmt_b if key.startswith("disk") else fmt_t
            cells.append(f"{f(v['median'])} [{f(v['min'])}-{f(v['max'])}]")
        r = summary["ratios"][key]
        cells.append(f"{r['median']:.2f}x [{r['min']:.2f}-{r['max']:.2f}]")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    used = summary["sides"]["journal"]["used"]["median"]
    lines += ["", f"journal's files hold {fmt_b(used)} of the conversation's allocated blocks."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--sessions", type=int, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=HERE / "out", help="where to make stores")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.turns = args.turns or (10 if args.quick else 100)
    args.sessions = args.sessions or (5 if args.quick else 50)
    args.runs = args.runs or (2 if args.quick else 5)
    turns = make_turns(args.turns)
    args.dir.mkdir(parents=True, exist_ok=True)
    results = []
    for run in range(args.runs):
        order = SIDES if run % 2 == 0 else SIDES[::-1]
        tmp = Path(tempfile.mkdtemp(prefix="bench-adk-", dir=args.dir))
        try:
            res = {}
            for side in order:
                res[side] = asyncio.run(one_run(side, tmp / side, turns, args.sessions))
            results.append(res)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    summary = summarize(results)
    print(report(summary, args))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args), "runs": results, "summary": summary},
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`JournalConversationStore` against pydantic-ai's `InMemoryConversationStore`.

    python benchmarks/bench_pydantic_ai.py [--quick] [--turns N] [--reps R] [--dir DIR]
                                           [--json out.json]

pydantic-ai 2.68 ships one `ConversationStore` backend, in memory: it is not
durable (a process exit loses everything), so the ratios say what durability and
a directory on disk cost, not which store to pick. Both stores get the same
scripted conversation, built before any timed loop: per turn a user prompt
(100-300 characters), an answer (0.5-1.5 KB), and every third turn a tool call
with a 1-4 KiB JSON return in between (the messages an `Agent` run adds; no model
runs, so only the store is timed).

Figures, per repetition (fresh directories; journal "fsync", its default, and
"os"), then the median over repetitions with the min-max spread:
- a turn as a server handles it: `load`, append the turn's messages, `save`
  (median over the turns while the conversation grows);
- `load` at the end of the conversation: warm (the same store object) and cold
  (a new store object on the same directory: nothing cached in the process);
- `load(limit=10)` at the end, and `fork` at the end;
- bytes on disk after the turns (`du` of the store directory), per message, and
  the JSON of the messages as pydantic-ai dumps them, for scale.

Ratios are journal time / in-memory time (< 1: journal is faster; the in-memory
store deep-copies every record and message it stores or returns).
Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
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

from harness.disk import disk_usage  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from journal.integrations.pydantic_ai import JournalConversationStore  # noqa: E402

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
_PHRASE = (
    "the build failed because a dependency moved its headers and the linker could not"
    " find the symbol we need so we pin the version and rerun the job on a clean cache"
)
WORDS = _PHRASE.split()


def text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(WORDS))
    return " ".join(out)


def make_turns(turns: int, seed: int = 7) -> list[list[ModelMessage]]:
    rng = random.Random(seed)
    out = []
    for n in range(turns):
        at = T0 + datetime.timedelta(seconds=n)
        msgs: list[ModelMessage] = [
            ModelRequest(
                parts=[UserPromptPart(content=text(rng, rng.randint(100, 300)), timestamp=at)]
            )
        ]
        if n % 3 == 2:
            call = ToolCallPart("search", {"query": text(rng, 40)}, tool_call_id=f"call-{n}")
            msgs.append(ModelResponse(parts=[call], timestamp=at))
            rows = [
                {"title": text(rng, 30), "body": text(rng, 200)} for _ in range(rng.randint(4, 16))
            ]
            ret = ToolReturnPart("search", rows, tool_call_id=f"call-{n}", timestamp=at)
            msgs.append(ModelRequest(parts=[ret]))
        msgs.append(
            ModelResponse(parts=[TextPart(text(rng, rng.randint(500, 1500)))], timestamp=at)
        )
        out.append(msgs)
    return out


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t = time.perf_counter()
    await fn()
    return time.perf_counter() - t


async def measure(
    store: ConversationStore,
    turns: list[list[ModelMessage]],
    reopen: Callable[[], ConversationStore] | None,
) -> dict[str, float]:
    per_turn: list[float] = []
    for msgs in turns:

        async def one_turn(msgs: list[ModelMessage] = msgs) -> None:
            conversation = await store.load("bench") or Conversation(conversation_id="bench")
            conversation.messages.extend(msgs)
            await store.save(conversation)

        per_turn.append(await timed(one_turn))
    out = {"turn": statistics.median(per_turn)}
    loads = [await timed(lambda: store.load("bench")) for _ in range(5)]
    out["load_warm"] = statistics.median(loads)
    tails = [await timed(lambda: store.load("bench", limit=10)) for _ in range(5)]
    out["load_limit10"] = statistics.median(tails)
    forks = []
    for k in range(3):
        forks.append(await timed(lambda k=k: store.fork("bench", new_conversation_id=f"fork-{k}")))  # type: ignore[misc]
    out["fork"] = statistics.median(forks)
    if reopen is None:
        out["load_cold"] = out["load_warm"]
    else:
        colds = []
        for _ in range(3):
            fresh = reopen()
            colds.append(await timed(lambda fresh=fresh: fresh.load("bench")))  # type: ignore[misc]
            fresh.close()  # type: ignore[attr-defined]
        out["load_cold"] = statistics.median(colds)
    return out


async def one_rep(base: Path, turns: list[list[ModelMessage]]) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    results["memory"] = await measure(InMemoryConversationStore(), turns, None)
    for durability in ("fsync", "os"):
        root = base / f"journal-{durability}"
        shutil.rmtree(root, ignore_errors=True)
        store = JournalConversationStore(root, durability=durability)
        try:
            results[durability] = await measure(
                store,
                turns,
                lambda root=root: JournalConversationStore(root),  # type: ignore[misc]
            )
        finally:
            store.close()
        if durability == "fsync":
            fresh = base / "disk"
            shutil.rmtree(fresh, ignore_errors=True)
            async with JournalConversationStore(fresh, durability="os") as s:
                conversation = Conversation(conversation_id="bench")
                for msgs in turns:
                    conversation.messages.extend(msgs)
                    await s.save(conversation)
            results["disk"] = {"bytes": float(disk_usage(fresh)), "used": float(used(fresh))}
    return results


def used(path: Path) -> int:
    """File bytes without the zeros journal preallocates at the end of its newest
    segments (written ahead so that a commit's fdatasync need not persist a new size)."""
    total = 0
    for p in path.rglob("*"):
        if p.is_file():
            total += len(p.read_bytes().rstrip(b"\0")) if p.suffix == ".seg" else p.stat().st_size
    return total


def fmt_t(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} µs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="40 turns, 3 repetitions")
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument(
        "--dir", type=Path, default=None, help="where to make stores (default: a temp dir)"
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    n_turns = args.turns or (40 if args.quick else 150)
    reps = args.reps or (3 if args.quick else 5)
    turns = make_turns(n_turns)
    messages = [m for t in turns for m in t]
    json_bytes = len(ModelMessagesTypeAdapter.dump_json(messages))
    base = Path(tempfile.mkdtemp(prefix="bench-pydantic-ai-", dir=args.dir))
    runs = []
    try:
        for _ in range(reps):
            runs.append(asyncio.run(one_rep(base, turns)))
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(f"{n_turns} turns, {len(messages)} messages, {reps} repetitions; median [min-max]\n")
    print("| workload | in-memory | journal fsync | ratio | journal os | ratio |")
    print("|---|---|---|---|---|---|")
    report: dict[str, Any] = {"turns": n_turns, "messages": len(messages), "reps": reps, "rows": {}}
    for key, label in [
        ("turn", "turn: load + save (per turn)"),
        ("load_warm", f"load, {len(messages)} messages, warm"),
        ("load_cold", f"load, {len(messages)} messages, cold (new store object)"),
        ("load_limit10", "load(limit=10)"),
        ("fork", "fork at the end"),
    ]:
        cells = [label]
        row: dict[str, Any] = {}
        mem = [r["memory"][key] for r in runs]
        cells.append(fmt_t(statistics.median(mem)))
        row["memory"] = mem
        for d in ("fsync", "os"):
            vals = [r[d][key] for r in runs]
            ratios = [r[d][key] / r["memory"][key] for r in runs]
            row[d] = vals
            cells.append(fmt_t(statistics.median(vals)))
            cells.append(f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")
        report["rows"][key] = row
        print("| " + " | ".join(cells) + " |")
    disk = [r["disk"]["bytes"] for r in runs]
    file_bytes = [r["disk"]["used"] for r in runs]
    print(
        f"\ndisk after {len(messages)} messages: {statistics.median(disk) / 1024:.0f} KiB allocated"
        f" ({statistics.median(disk) / len(messages):.0f} B per message), of which"
        f" {statistics.median(file_bytes) / 1024:.0f} KiB written"
        f" ({statistics.median(file_bytes) / len(messages):.0f} B per message);"
        f" the messages' JSON: {json_bytes / 1024:.0f} KiB ({json_bytes / len(messages):.0f} B per"
        f" message); in-memory: nothing on disk, nothing durable"
    )
    report["disk_bytes"] = disk
    report["file_bytes"] = file_bytes
    report["json_bytes"] = json_bytes
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

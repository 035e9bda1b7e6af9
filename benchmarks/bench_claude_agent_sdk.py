"""`JournalSessionStore` against what the Claude Agent SDK has: JSONL files and memory.

    python benchmarks/bench_claude_agent_sdk.py [--quick] [--turns N] [--reps R]
        [--dir DIR] [--json out.json]

The SDK ships one `SessionStore`, `InMemorySessionStore` (no disk: a speed
reference only). What the CLI itself keeps is a JSONL file per transcript
(`~/.claude/projects/<project>/<session>.jsonl`, subagents in a directory beside
it), one line appended per entry. The "jsonl" sides here are that layout as a
`SessionStore`: an append writes the batch's lines with one `write` to the
key's file opened for appending, then `fsync`s it ("jsonl+fsync", against
journal's default `durability="fsync"`) or not ("jsonl", against
`durability="os"`); a load reads the file and parses each line.

The transcript is built before any timed loop, in the shape the CLI writes (each
line carries the CLI's envelope: uuid, parentUuid, timestamp, sessionId, cwd,
version, ...): per turn a queue operation, the prompt, two attachments, a tool
call, its result (1-8 KiB), the answer and a last-prompt marker: 8 entries. Two
append patterns, the SDK's two flush modes: "batched" (the default: one
`append` per turn) and "eager" (one `append` per entry).

Figures, per run: the median append call; `load` of the whole session from an
open store and from a new one (journal: a new `journal.Store`; jsonl: nothing to
open); bytes on disk (`du`) after the turns. Each ratio is computed inside one
run (jsonl / journal, so > 1 means journal is faster or smaller); the table
gives the median over runs and the range. Sides alternate which goes first.
Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from claude_agent_sdk import InMemorySessionStore, SessionKey, SessionStore  # noqa: E402
from harness.disk import disk_usage  # noqa: E402  (what `du` reports)

from journal.integrations.claude_agent_sdk import JournalSessionStore  # noqa: E402

Entry = dict[str, Any]
KEY: SessionKey = {"project_key": "-home-dev-repo", "session_id": str(uuid.UUID(int=7))}
WORDS = [
    "the",
    "build",
    "failed",
    "because",
    "the",
    "linker",
    "could",
    "not",
    "find",
    "libssl",
    "on",
    "the",
    "runner",
    "image",
    "so",
    "we",
    "pinned",
    "the",
    "version",
    "and",
    "reran",
    "the",
    "pipeline",
    "which",
    "then",
    "timed",
    "out",
    "on",
    "the",
    "integration",
    "tests",
]


def make_turns(turns: int, seed: int = 19) -> list[list[Entry]]:
    """Per turn, its entries in the CLI's shape."""
    rng = random.Random(seed)
    ids = (str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in iter(int, 1))
    envelope = {
        "isSidechain": False,
        "userType": "external",
        "entrypoint": "sdk-py",
        "cwd": "/home/dev/repo",
        "sessionId": KEY["session_id"],
        "version": "2.1.332",
        "gitBranch": "main",
    }
    clock = 1_790_000_000.0
    parent: str | None = None

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    def line(kind: str, **fields: Any) -> Entry:
        nonlocal parent, clock
        clock += rng.random()
        e = {"parentUuid": parent, **envelope, "type": kind, **fields}
        e["uuid"] = next(ids)
        e["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(clock))
        parent = e["uuid"]
        return e

    def usage() -> dict[str, Any]:
        return {
            "input_tokens": rng.randint(10, 9000),
            "output_tokens": rng.randint(5, 900),
            "cache_read_input_tokens": rng.randint(0, 50000),
            "service_tier": "standard",
        }

    out: list[list[Entry]] = []
    for t in range(turns):
        prompt = text(8, 40)
        call = f"toolu_{t:08d}"
        tool_out = "\n".join(text(6, 14) for _ in range(rng.randint(12, 90)))  # 1-8 KiB
        out.append([
            {"type": "queue-operation", "operation": "enqueue", "timestamp": "x", "content": prompt,
             "sessionId": KEY["session_id"]},
            line("user", message={"role": "user", "content": prompt}, promptId=next(ids),
                 permissionMode="default"),
            line("attachment", attachment={"type": "skill_listing", "content": text(40, 200)}),
            line("attachment", attachment={"type": "todo_reminder", "content": text(10, 60)}),
            line("assistant", message={"id": f"msg_{t}", "type": "message", "role": "assistant",
                 "model": "claude-opus", "content": [{"type": "tool_use", "id": call,
                 "name": "Bash", "input": {"command": f"make test-{t}",
                 "description": text(3, 8)}}], "stop_reason": "tool_use", "usage": usage()},
                 requestId=next(ids)),
            line("user", message={"role": "user", "content": [{"type": "tool_result",
                 "tool_use_id": call, "content": tool_out}]},
                 toolUseResult={"stdout": tool_out[:200]}),
            line("assistant", message={"id": f"msg_{t}b", "type": "message", "role": "assistant",
                 "model": "claude-opus", "content": [{"type": "text", "text": text(20, 120)}],
                 "stop_reason": "end_turn", "usage": usage()}, requestId=next(ids)),
            {"type": "last-prompt", "lastPrompt": prompt[:200], "sessionId": KEY["session_id"]},
        ])  # fmt: skip
    return out


class JsonlStore(SessionStore):
    """The CLI's own layout as a `SessionStore`: one JSONL file per key, appended to."""

    def __init__(self, root: Path, *, fsync: bool) -> None:
        self.root = root
        self.fsync = fsync

    def _path(self, key: SessionKey) -> Path:
        base = self.root / key["project_key"]
        sub = key.get("subpath")
        return (
            (base / key["session_id"] / f"{sub}.jsonl")
            if sub
            else (base / f"{key['session_id']}.jsonl")
        )

    def append_sync(self, key: SessionKey, entries: list[Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(
            json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in entries
        )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data.encode())
            if self.fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)

    def load_sync(self, key: SessionKey) -> list[Any] | None:
        try:
            text = self._path(key).read_text()
        except FileNotFoundError:
            return None
        return [json.loads(line) for line in text.splitlines() if line]

    async def append(self, key: SessionKey, entries: list[Any]) -> None:  # type: ignore[override]
        await anyio.to_thread.run_sync(self.append_sync, key, entries)

    async def load(self, key: SessionKey) -> list[Any] | None:  # type: ignore[override]
        return await anyio.to_thread.run_sync(self.load_sync, key)


SIDES = {
    "journal": lambda d: JournalSessionStore(d / "store"),
    "journal-os": lambda d: JournalSessionStore(d / "store", durability="os"),
    "jsonl+fsync": lambda d: JsonlStore(d / "projects", fsync=True),
    "jsonl": lambda d: JsonlStore(d / "projects", fsync=False),
    "memory": lambda d: InMemorySessionStore(),
}
PAIRS = [("jsonl+fsync", "journal"), ("jsonl", "journal-os"), ("memory", "journal-os")]


def run_side(name: str, base: Path, turns: list[list[Entry]], mode: str) -> dict[str, float]:
    """One side, one append mode: append every turn, then load, then measure the disk."""
    d = Path(tempfile.mkdtemp(prefix=f"claude-bench-{name}-", dir=base))
    store: Any = SIDES[name](d)
    calls: list[float] = []

    async def go() -> dict[str, float]:
        for batch in turns:
            for part in [batch] if mode == "batched" else [[e] for e in batch]:
                start = time.perf_counter()
                await store.append(KEY, part)
                calls.append(time.perf_counter() - start)
        loads = []
        for _ in range(5):
            start = time.perf_counter()
            got = await store.load(KEY)
            loads.append(time.perf_counter() - start)
        assert got is not None and len(got) == sum(len(b) for b in turns)
        return {"append": statistics.median(calls), "load": statistics.median(loads)}

    try:
        out = anyio.run(go)
        if isinstance(store, JournalSessionStore):
            store.close()
            start = time.perf_counter()  # a new process's first load: open the store, read
            with JournalSessionStore(d / "store") as again:
                anyio.run(again.load, KEY)
            out["cold_load"] = time.perf_counter() - start
        else:
            out["cold_load"] = out["load"]
        out["disk"] = float(disk_usage(d)) if name != "memory" else float("nan")
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def fmt_t(s: float) -> str:
    return f"{s * 1e6:9.0f} us" if s < 0.01 else f"{s * 1e3:9.2f} ms"


def summarize(
    runs: list[dict[str, dict[str, float]]], metric: str, a: str, b: str
) -> dict[str, Any]:
    ratios = [r[a][metric] / r[b][metric] for r in runs]
    return {
        a: statistics.median(r[a][metric] for r in runs),
        b: statistics.median(r[b][metric] for r in runs),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer turns and runs")
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=HERE / "out")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    turns_n = args.turns or (60 if args.quick else 200)
    reps = args.reps or (3 if args.quick else 5)
    args.dir.mkdir(parents=True, exist_ok=True)
    turns = make_turns(turns_n)
    raw = sum(len(json.dumps(e, separators=(",", ":"))) + 1 for b in turns for e in b)
    print(f"{turns_n} turns, {sum(len(b) for b in turns)} entries, {raw / 1024:.0f} KiB of JSONL")
    report: dict[str, Any] = {"turns": turns_n, "reps": reps, "jsonl_bytes": raw, "modes": {}}
    for mode in ("batched", "eager"):
        runs: list[dict[str, dict[str, float]]] = []
        for rep in range(reps):
            names = list(SIDES) if rep % 2 == 0 else list(SIDES)[::-1]
            run: dict[str, dict[str, float]] = {}
            for name in names:
                print(f"[{mode}] {name} (run {rep + 1}/{reps})", file=sys.stderr, flush=True)
                run[name] = run_side(name, args.dir, turns, mode)
            runs.append(run)
        section: dict[str, Any] = {}
        print(f"\n{mode}: one append per {'turn' if mode == 'batched' else 'entry'}")
        print(f"{'':28} {'other':>12} {'journal':>12} {'other/journal':>20}")
        metrics: list[tuple[str, str, Callable[[float], str]]] = [
            ("append", "append call", fmt_t),
            ("load", "load (open store)", fmt_t),
            ("cold_load", "load (new store)", fmt_t),
            ("disk", "bytes on disk", lambda b: f"{b / 1024:9.0f} KiB"),
        ]
        for a, b in PAIRS:
            for metric, label, fmt in metrics:
                if a == "memory" and metric in ("cold_load", "disk"):
                    continue
                s = summarize(runs, metric, a, b)
                section[f"{metric}:{a}/{b}"] = s
                spread = f"{s['ratio']:6.2f}x ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})"
                print(f"{label + ' ' + a:28} {fmt(s[a]):>12} {fmt(s[b]):>12} {spread:>20}")
        report["modes"][mode] = section
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

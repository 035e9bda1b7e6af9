"""journal import-transcripts: lines per second, and the store's disk use against the JSONL.

Builds a Claude Code session and a Codex rollout of the documented shapes
(docs/import-transcripts.md) with realistic proportions: prompts, assistant text,
tool calls whose inputs and outputs vary from a few bytes to tens of KiB, and the
per-line fields Claude Code repeats (cwd, version, gitBranch, toolUseResult).
Each run imports them into a fresh store, with --durability fsync and os, and
reports lines/s and `du` of the store against the files' size; medians and spreads
over the runs.

    .venv/bin/python benchmarks/bench_import.py [--lines 4000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import journal
from journal.transcripts import import_transcripts

SID = "0a6afc57-2f31-4cb4-8ff0-01247f50c64c"
WORDS = ["the", "build", "fails", "because", "libssl", "is", "missing", "so", "we", "add", "it"]


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def claude_session(path: str, lines: int, rng: random.Random) -> None:
    def base(kind: str, uuid: str, parent: str | None, i: int) -> dict[str, object]:
        return {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": "/home/me/proj",
            "sessionId": SID,
            "version": "2.1.12",
            "gitBranch": "main",
            "type": kind,
            "uuid": uuid,
            "timestamp": f"2026-01-20T11:{(i // 60) % 60:02d}:{i % 60:02d}.000Z",
        }

    with open(path, "w") as f:
        parent = None
        call = 0
        for i in range(lines):
            uuid = f"{i:08d}-0000-4000-8000-000000000000"
            pair, second = divmod(i, 2)
            prompt = pair % 20 == 0 or pair % 3 == 0  # a text answer, then the next prompt
            if second == 0 and prompt:
                line = base("assistant", uuid, parent, i)
                block: dict[str, object] = {"type": "text", "text": text(rng, rng.randint(10, 200))}
            elif second == 0:
                call += 1
                line = base("assistant", uuid, parent, i)
                block = {
                    "type": "tool_use",
                    "id": f"toolu_{call}",
                    "name": "Bash",
                    "input": {"command": text(rng, rng.randint(3, 40))},
                }
            if second == 0:
                line["message"] = {
                    "model": "claude-opus-4-5",
                    "id": f"msg_{i}",
                    "type": "message",
                    "role": "assistant",
                    "content": [block],
                    "stop_reason": None,
                    "usage": {"input_tokens": 1000 + i, "output_tokens": 50},
                }
                line["requestId"] = f"req_{i}"
            elif prompt:
                line = base("user", uuid, parent, i)
                line["message"] = {"role": "user", "content": text(rng, 30)}
            else:
                out = text(rng, rng.choice([5, 50, 500, 3000]))
                line = base("user", uuid, parent, i)
                line["message"] = {
                    "role": "user",
                    "content": [
                        {"tool_use_id": f"toolu_{call}", "type": "tool_result", "content": out}
                    ],
                }
                line["toolUseResult"] = {"stdout": out, "stderr": "", "interrupted": False}
            f.write(json.dumps(line) + "\n")
            parent = uuid


def codex_rollout(path: str, lines: int, rng: random.Random) -> None:
    with open(path, "w") as f:

        def put(i: int, kind: str, payload: dict[str, object]) -> None:
            stamp = f"2026-01-20T11:{(i // 60) % 60:02d}:{i % 60:02d}.000Z"
            f.write(json.dumps({"timestamp": stamp, "type": kind, "payload": payload}) + "\n")

        put(
            0,
            "session_meta",
            {
                "id": "019a0000-0000-7000-8000-000000000001",
                "cwd": "/p",
                "originator": "codex_cli_rs",
                "cli_version": "0.128.0",
                "source": "cli",
            },
        )
        for i in range(1, lines):
            k = i % 5
            if k == 0:
                put(
                    i,
                    "response_item",
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": text(rng, 30)}],
                    },
                )
            elif k == 1:
                put(
                    i,
                    "response_item",
                    {
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": text(rng, 40)}],
                        "encrypted_content": "gA" * 200,
                    },
                )
            elif k == 2:
                put(
                    i,
                    "response_item",
                    {
                        "type": "function_call",
                        "name": "shell",
                        "call_id": f"c{i}",
                        "arguments": json.dumps({"command": ["bash", "-lc", text(rng, 8)]}),
                    },
                )
            elif k == 3:
                put(
                    i,
                    "response_item",
                    {
                        "type": "function_call_output",
                        "call_id": f"c{i - 1}",
                        "output": text(rng, rng.choice([5, 50, 500, 3000])),
                    },
                )
            else:
                put(
                    i,
                    "event_msg",
                    {"type": "token_count", "info": {"total_token_usage": {"input_tokens": i}}},
                )


def du(path: str) -> int:
    out = subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) * 1024


def run(files: list[str], work: str, durability: str, lines: int) -> tuple[float, int]:
    root = os.path.join(work, f"store-{durability}")
    shutil.rmtree(root, ignore_errors=True)
    start = time.perf_counter()
    with journal.open(root, durability=durability) as store:
        report = import_transcripts(store, files)
    elapsed = time.perf_counter() - start
    assert not report.findings and not report.refused, [str(f) for f in report.findings[:5]]
    return lines / elapsed, du(root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=4000, help="lines per transcript")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="imp-bench-", dir="/tmp")
    try:
        rng = random.Random(7)
        cc = os.path.join(work, "claude", f"{SID}.jsonl")
        cx = os.path.join(
            work, "codex", "rollout-2026-01-20T11-00-00-019a0000-0000-7000-8000-000000000001.jsonl"
        )
        os.makedirs(os.path.dirname(cc))
        os.makedirs(os.path.dirname(cx))
        claude_session(cc, args.lines, rng)
        codex_rollout(cx, args.lines, rng)
        for name, path in (("claude-code", cc), ("codex", cx)):
            src = os.path.getsize(path)
            print(f"{name}: {args.lines} lines, {src / 1024:.0f} KiB of JSONL")
            for durability in ("os", "fsync"):
                speeds, sizes = [], []
                for _ in range(args.runs):
                    speed, size = run([path], work, durability, args.lines)
                    speeds.append(speed)
                    sizes.append(size)
                med = statistics.median(speeds)
                print(
                    f"  durability={durability}: {med:,.0f} lines/s (median of {args.runs},"
                    f" {min(speeds):,.0f}..{max(speeds):,.0f}); store du"
                    f" {statistics.median(sizes) / 1024:.0f} KiB ="
                    f" {statistics.median(sizes) / src:.2f}x the JSONL"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

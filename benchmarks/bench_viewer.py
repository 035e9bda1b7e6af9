"""The viewer's first pages, through its HTTP server, on two large stores.

    python benchmarks/bench_viewer.py [--dir DIR] [--events N] [--sessions N]
                                      [--repeat N] [--build-only] [--json out.json]

Two stores are built under DIR (default /tmp/viewer-bench) once and reused by later
runs (a marker file names what was built):
- `events/`: one session ("long") with N events (default 1,000,000), written by
  `save_with_events` in commits of 1,000 events, each commit also carrying two
  transcript items and an execution record; plus a small fork of it;
- `sessions/`: N sessions (default 100,000) of a few owners, each with a first user
  message and a couple of events, written in durability "os" (about 7 minutes).

The server is `python -m journal.viewer --root STORE --port 0`, a separate process
(read-only, as a user runs it); the client is `http.client` over one keep-alive
connection. For each page the first request after the server started (cold: nothing
of the session is open yet) is reported on its own, then the median, spread and
90th percentile of `--repeat` further requests, and how long the server took to
say it was serving (it reads the catalog before that). Nothing here asserts on
timings.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import journal  # noqa: E402
from journal import Checkpoint, Event, ExecutionRecord, TimestampedEvent, TokenUsage  # noqa: E402

T0 = 1_760_000_000_000
LONG = "long"


def _events(first: int, n: int) -> list[TimestampedEvent]:
    """`n` events of a plausible mix: turns, streamed text, tool calls."""
    kinds = []
    for i in range(first, first + n):
        k = i % 10
        if k == 0:
            msg: dict[str, Any] = {"type": "turn_started", "turn_id": f"t{i // 10}"}
        elif k < 6:
            msg = {"type": "assistant_content_delta", "delta": f"word {i} ", "phase": "answer"}
        elif k == 6:
            msg = {"type": "tool_call_started", "call_id": f"c{i}", "tool": "shell"}
        elif k == 7:
            msg = {"type": "tool_call_finished", "call_id": f"c{i - 1}", "ok": True}
        elif k == 8:
            msg = {"type": "warning", "message": f"slow step {i}"}
        else:
            msg = {"type": "turn_finished", "turn_id": f"t{i // 10}"}
        kinds.append(TimestampedEvent(recorded_at_ms=T0 + i, event=Event(msg=msg)))
    return kinds


def build_events(root: Path, total: int) -> None:
    store = journal.open(root, durability="os")
    try:
        cp = Checkpoint.empty(LONG, owner_id="bench")
        cp.first_user_message = "Find out why CI is red"
        written = 0
        seq = 0
        while written < total:
            n = min(1000, total - written)
            items = [
                {"role": "user", "content": f"question {seq}"},
                {"role": "assistant", "content": f"answer {seq}"},
            ]
            cp.sequence = seq
            cp.context = [*cp.context, *items]
            rec = ExecutionRecord(
                session_id=LONG,
                submission_id=f"sub-{seq}",
                author={"type": "user"},
                turn_id=f"turn-{seq}",
                started_at_ms=T0 + written,
                finished_at_ms=T0 + written + 900,
                elapsed_ms=900,
                outcome="completed",
                model_calls=2,
                tool_calls=1,
                usage=TokenUsage(input_tokens=1200, output_tokens=300, total_tokens=1500),
            )
            store.save_with_events(cp, items, rec, _events(written, n))
            written += n
            seq += 1
            if seq % 100 == 0:
                print(f"  events: {written:,}", file=sys.stderr, flush=True)
        store.fork_at(LONG, seq // 2, "long-fork")
    finally:
        store.close()


def build_sessions(root: Path, total: int) -> None:
    start = time.monotonic()
    done = 0
    while done < total:
        # A new Store every 1,000 sessions: a writing Store holds file descriptors of
        # the sessions it created (more than max_open_sessions would suggest).
        store = journal.open(root, durability="os")
        try:
            for i in range(done, min(total, done + 1000)):
                sid = f"s{i:06d}"
                cp = Checkpoint.empty(sid, owner_id=f"owner-{i % 7}")
                cp.first_user_message = f"task {i}: summarise ticket {i * 7919 % 100000}"
                cp.context = [{"role": "user", "content": cp.first_user_message}]
                store.save_with_events(cp, cp.context, None, _events(0, 2))
        finally:
            store.close()
        done = min(total, done + 1000)
        if done % 5000 == 0:
            rate = done / (time.monotonic() - start)
            print(f"  sessions: {done:,} ({rate:.0f}/s)", file=sys.stderr, flush=True)


def ensure_built(base: Path, events: int, sessions: int, only: str | None = None) -> list[Path]:
    base.mkdir(parents=True, exist_ok=True)
    out = []
    for name, n, build in (
        ("events", events, build_events),
        ("sessions", sessions, build_sessions),
    ):
        if only is not None and name != only:
            continue
        root = base / f"{name}-{n}"
        marker = root / "BUILT"
        if not marker.exists():
            if root.exists():
                raise SystemExit(f"{root} exists but is not finished: remove it and run again")
            t = time.monotonic()
            print(f"building {root} ...", file=sys.stderr, flush=True)
            build(root, n)
            marker.write_text(f"{n}\n")
            print(f"built {root} in {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
        out.append(root)
    return out


class Server:
    """`python -m journal.viewer` on a store, in its own process."""

    def __init__(self, root: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "journal.viewer", "--root", str(root), "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        started = time.perf_counter()
        line = self.proc.stdout.readline()  # "serving http://127.0.0.1:PORT/ ..."
        self.start_ms = (time.perf_counter() - started) * 1000
        self.port = int(line.split("127.0.0.1:")[1].split("/")[0])
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def get(self, path: str) -> tuple[float, int, int]:
        t = time.perf_counter()
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        body = resp.read()
        return (time.perf_counter() - t) * 1000, resp.status, len(body)

    def close(self) -> None:
        self.conn.close()
        self.proc.terminate()
        self.proc.wait(10)


def measure(root: Path, paths: list[str], repeat: int) -> dict[str, Any]:
    server = Server(root)
    rows = []
    try:
        for path in paths:
            cold, status, size = server.get(path)
            if status != 200:
                raise SystemExit(f"GET {path}: HTTP {status}")
            times = sorted(server.get(path)[0] for _ in range(repeat))
            rows.append(
                {
                    "path": path,
                    "bytes": size,
                    "cold_ms": round(cold, 2),
                    "median_ms": round(statistics.median(times), 2),
                    "min_ms": round(times[0], 2),
                    "p90_ms": round(times[int(len(times) * 0.9) - 1], 2),
                    "max_ms": round(times[-1], 2),
                }
            )
    finally:
        server.close()
    return {"start_ms": round(server.start_ms), "pages": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/viewer-bench")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--only", choices=["events", "sessions"], help="one of the two stores")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    roots = ensure_built(Path(args.dir), args.events, args.sessions, args.only)
    if args.build_only:
        return
    long_paths = [
        f"/s/{LONG}",
        f"/s/{LONG}/timeline",
        f"/s/{LONG}/conversation",
        f"/s/{LONG}/checkpoint",
        f"/s/{LONG}/tree",
        f"/s/{LONG}/executions",
        f"/api/sessions/{LONG}",
        f"/api/sessions/{LONG}/events?limit=50",
        f"/s/{LONG}/timeline?before={args.events // 2}",
    ]
    list_paths = [
        "/",
        "/api/sessions?limit=50",
        "/?owner=owner-3",
        "/?q=ticket+4242",
        "/s/s000123",
    ]
    results = {}
    for root in roots:
        name = root.name.split("-")[0]
        paths = long_paths if name == "events" else list_paths
        results[name] = {"store": str(root), **measure(root, paths, args.repeat)}
    print(f"{'page':<44} {'bytes':>8} {'cold':>8} {'median':>8} {'min':>7} {'p90':>7} {'max':>7}")
    for name, block in results.items():
        print(f"-- {name}: {block['store']} (server up in {block['start_ms']:.0f} ms)")
        for r in block["pages"]:
            print(
                f"{r['path']:<44} {r['bytes']:>8} {r['cold_ms']:>7.1f} {r['median_ms']:>7.1f}"
                f" {r['min_ms']:>7.1f} {r['p90_ms']:>7.1f} {r['max_ms']:>7.1f}  ms"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()

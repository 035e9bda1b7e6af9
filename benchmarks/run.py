"""Side-by-side benchmark: `journal` against mobius's SQLite schema and a tuned SQLite store.

    python benchmarks/run.py [--quick] [--only NAME,...] [--json out.json] [--markdown out.md]
                             [--profile] [--keep] [--sessions-100k]

Every store gets the same payloads (`payloads.py`: ~1 KiB events, ~50 KiB checkpoints, ~1 KiB
transcript items), built and converted before any timed loop, in fresh directories on one file
system. The stores: journal; `sqlite_mobius.py` (mobius's schema and statements, "mobius");
`sqlite_tuned.py` (SQLite written for speed, "tuned"). journal's durable mode ("fsync") runs
against SQLite `synchronous=FULL` and its OS-only mode ("os") against `synchronous=NORMAL`.
Where it means something, the floor runs alongside: the bare system calls of the operation with
no store (encode + one write + one fdatasync on an open file, for an append or a save). Each
figure is the median of several repetitions that alternate the stores (the machine is shared
and noisy). Every ratio is oriented so that > 1 means journal is better: journal/other for
throughput, other/journal for time, bytes and memory. Nothing here asserts on timings.

Workloads (names for --only): see WORKLOADS below; `later` selects sessions, transcript,
recent, fork and delete (API that journal may not have; "n/a (not implemented)" until it does).
The harness itself is the `harness` package next to this file.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import msgspec
from harness import costs, later, process, reads, writes
from harness.config import FULL, LATER, LATER_METHODS, QUICK
from harness.core import Harness
from harness.measure import Workdir
from harness.report import Section, header, markdown_table
from harness.sides import DURABLE, JOURNAL_OPTIONS, OS_ONLY

import journal

HERE = Path(__file__).resolve().parent

Workload = Callable[[Harness, Section], None]
WORKLOADS: dict[str, tuple[str, Workload]] = {
    "floor": ("1. Floor: one unbatched durable append without a store", writes.w_floor),
    "append": ("2. append_event, one writer", writes.w_append),
    "steps": ("2b. append_event into a long session (os mode)", writes.w_steps),
    "threads": ("3. append_event, 4 threads", writes.w_threads),
    "save": ("4. save_with_events", writes.w_save),
    "blob": ("4b. save_with_events of an opaque 50 KiB state", costs.w_blob),
    "bulk": ("4c. Creating many sessions", costs.w_bulk),
    "page": ("5. event_page latency vs history length", reads.w_page),
    "open": ("6. Cold open + load of a long session", reads.w_open),
    "cold": ("6b. Cold process: open, load, first event_page", process.w_cold),
    "bytes": ("7. Bytes on disk", reads.w_bytes),
    "disk": ("7b. Disk of many small sessions (du)", costs.w_disk),
    "memory": ("8. Memory while paging a whole session", reads.w_memory),
    "sessions": ("9a. list_sessions_page", later.w_sessions),
    "transcript": ("9b. transcript_page / execution_page", later.w_transcript),
    "recent": ("9c. recent_executions", later.w_recent),
    "fork": ("9d. fork", later.w_fork),
    "delete": ("9e. delete_sessions", later.w_delete),
    "state": ("10. save_state + load_state", costs.w_state),
    "startup": ("11. Start-up: import, journal ls", process.w_startup),
    "rss": ("12. RSS of a process working across many sessions", process.w_rss),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    parser.add_argument("--only", default="", help="comma-separated workload names (see above)")
    parser.add_argument("--json", type=Path, help="also write every sample to this JSON file")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown")
    parser.add_argument("--reps", type=int, help="repetitions per measurement")
    parser.add_argument("--profile", action="store_true", help="cProfile journal's append/save")
    parser.add_argument("--dir", type=Path, default=HERE / "out", help="where to make stores")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    parser.add_argument(
        "--sessions-100k",
        action="store_true",
        help="also build a catalog of 100,000 sessions (cold process, list, recent, ls, RSS)",
    )
    parser.add_argument(
        "--no-dictionary",
        action="store_true",
        help="journal.open(dictionary=False): no per-session zstd dictionary",
    )
    return parser.parse_args(argv)


def selected(only: str) -> list[str]:
    if not only:
        return list(WORKLOADS)
    names: list[str] = []
    for name in (n.strip() for n in only.split(",") if n.strip()):
        expanded = LATER if name == "later" else (name,)
        for item in expanded:
            if item not in WORKLOADS:
                raise SystemExit(f"unknown workload {item!r}; choose from {', '.join(WORKLOADS)}")
            if item not in names:
                names.append(item)
    return sorted(names, key=list(WORKLOADS).index)


def machine_info(work: Workdir) -> dict[str, Any]:
    fs = os.statvfs(work.path)
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "msgspec": msgspec.__version__,
        "journal": journal.__version__,
        "journal_path": str(Path(journal.__file__).parent),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "workdir": str(work.path),
        "fs_free_gib": round(fs.f_bavail * fs.f_frsize / 1024**3, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.no_dictionary:
        JOURNAL_OPTIONS["dictionary"] = False
    cfg = QUICK if args.quick else FULL
    if args.reps:
        cfg = replace(cfg, reps=args.reps)
    if args.sessions_100k and 100_000 not in cfg.catalog_sizes:
        cfg = replace(cfg, catalog_sizes=(*cfg.catalog_sizes, 100_000))
    names = selected(args.only)
    work = Workdir(args.dir, args.keep)
    info = machine_info(work)
    later_missing = [
        m for key in LATER for m in LATER_METHODS[key] if not hasattr(journal.Store, m)
    ]
    print(
        f"journal {info['journal']} vs SQLite {info['sqlite']} (mobius's schema; tuned) · "
        f"Python {info['python']} · msgspec {info['msgspec']} · {info['cpus']} CPUs · "
        f"{info['platform']}"
    )
    print(
        f"{'quick' if cfg.quick else 'full'} run, median of {cfg.reps} alternating repetitions "
        f"unless stated · stores under {work.path}"
    )
    print(
        "ratio: > 1 means journal is better (journal/other for ops/s; other/journal for "
        "time, bytes, memory), then min-max over paired repetitions"
    )
    print(f"journal imported from {info['journal_path']}")
    print(f"modes: {DURABLE.legend}; {OS_ONLY.legend}; reads do not depend on the mode")
    dictionaries = "off (--no-dictionary)" if JOURNAL_OPTIONS.get("dictionary") is False else "on"
    print(f"journal's per-session zstd dictionaries: {dictionaries}")
    if later_missing:
        print(f"not implemented in journal yet: {', '.join(sorted(set(later_missing)))}")
    print()
    print(header())
    harness = Harness(cfg, work, profile=args.profile)
    started = time.perf_counter()
    try:
        for name in names:
            title, body = WORKLOADS[name]
            harness.run(name, title, functools.partial(body, harness))
    finally:
        work.cleanup()
    total = time.perf_counter() - started
    print(f"\ntotal {total:.0f} s")
    for name, text in harness.profiles.items():
        print(f"\n── cProfile, journal side: {name}")
        print(text)
    if args.json:
        dump = {
            "meta": {**info, "config": asdict(cfg), "seconds": total},
            "sections": [
                {
                    "key": s.key,
                    "title": s.title,
                    "seconds": s.seconds,
                    "notes": s.notes,
                    "rows": [r.as_json() for r in s.rows],
                }
                for s in harness.sections
            ],
            "profiles": harness.profiles,
        }
        args.json.write_text(json.dumps(dump, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.markdown:
        args.markdown.write_text(markdown_table(harness.sections) + "\n")
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

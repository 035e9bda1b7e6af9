"""The scale run: one store of many sessions and one session of many events, journal against
the tuned SQLite store (issue 17). Not part of the test suite; nothing here asserts a timing.

    python benchmarks/scale.py [--sessions N] [--turns T] [--events E] [--sides journal,tuned]
                               [--dir DIR] [--keep] [--reps R] [--rss-touch K] [--json out.json]

Builds, in os mode / synchronous=NORMAL, N sessions (default 1,000,000) of T turns (default 3:
a 1 KiB checkpoint growing by 2 transcript items, 2 events and an execution record per turn),
through each store's best available path (journal: a loop of save_with_events; tuned:
save_many, 1,000 saves per transaction), then one session of E events (default 1,000,000;
save_with_events batches of 1,000). Then reports, at that size:

- build time and rate, du;
- a cold process: open the store, load one session, its first event_page(50);
- list_sessions_page(50): the first page and one in the middle; recent_executions(50);
- the first save of a new session, fork and delete_sessions (durable);
- event_page(50) newest and deep in the long session, with its tracemalloc peak;
- `journal ls`, `journal verify` of one session and of the whole store (SQLite: the same
  first page from a fresh process; PRAGMA integrity_check of the store);
- the peak RSS of a process that lists every session, then pages and appends to K of them.

journal currently creates a few hundred sessions per second, so 1,000,000 takes hours; pass
--sessions 10000 or 100000 for a run of minutes. Use --keep and --dir to keep the stores.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import payloads
from harness.config import BATCH, REOPEN_EVERY
from harness.core import catalog_id
from harness.measure import Workdir, alternate, progress, repeat, seek_sessions, timed
from harness.process import CWD, JOURNAL_CLI, child, child_env
from harness.report import Row, Section, header, markdown_table, print_section, print_section_header
from harness.sides import DURABLE, OS_ONLY, SIDES, Ev, Mode, Save, Side, typed_save

import journal

HERE = Path(__file__).resolve().parent
LONG_ID = "scale-long"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=1_000_000, help="sessions in the store")
    parser.add_argument("--turns", type=int, default=3, help="saves per session")
    parser.add_argument("--events", type=int, default=1_000_000, help="events of the long one")
    parser.add_argument("--sides", default="journal,tuned", help="stores: journal,mobius,tuned")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per figure")
    parser.add_argument(
        "--rss-touch",
        type=int,
        default=10_000,
        help="sessions the RSS child pages and appends to (it lists all of them)",
    )
    parser.add_argument("--dir", type=Path, default=HERE / "out", help="where to make stores")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    parser.add_argument("--json", type=Path, help="also write every sample to this JSON file")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown")
    return parser.parse_args(argv)


def session_saves(first: int, count: int, turns: int) -> list[Save]:
    """Every save of sessions `first` .. `first + count - 1`, session by session."""
    gen = payloads.PayloadGenerator(90_000 + first)
    saves = []
    for i in range(first, first + count):
        sim = payloads.SessionSim(
            gen,
            catalog_id(i),
            owner_id=f"owner-{i % 100}",
            context_bytes=1024,
            metadata_bytes=256,
            items=2,
            events=2,
        )
        saves += [typed_save(sim.next_save(execution=t > 0)) for t in range(turns)]
    return saves


class Scale:
    def __init__(self, args: argparse.Namespace, work: Workdir, sides: list[str]) -> None:
        self.args = args
        self.work = work
        self.sides = sides
        self.roots = {name: work.fresh(f"scale-{name}") for name in sides}
        self.sections: list[Section] = []

    @contextlib.contextmanager
    def opened(self, mode: Mode = OS_ONLY) -> Iterator[dict[str, Side]]:
        stores: dict[str, Side] = {}
        try:
            for name in self.sides:
                stores[name] = SIDES[name](self.roots[name], mode)
            yield stores
        finally:
            for store in stores.values():
                store.close()

    def section(self, title: str, body: Callable[[Section], None]) -> None:
        section = Section(title.split(".")[0], title)
        print_section_header(section)
        started = time.perf_counter()
        try:
            body(section)
        except Exception as error:  # one failing figure must not lose the others
            section.add(Row("failed", "x", text=f"error: {type(error).__name__}: {error}"))
        section.notes.append(f"section took {time.perf_counter() - started:.1f} s")
        print_section(section)
        self.sections.append(section)

    def calls(
        self, calls: Mapping[str, Callable[[], object]], n: int = 50
    ) -> dict[str, list[float]]:
        for call in calls.values():
            call()
        return alternate(self.args.reps, calls, lambda name, _: timed(repeat, calls[name], n) / n)

    # ---------------------------------------------------------------------------- the build

    def build(self, section: Section) -> None:
        n, turns = self.args.sessions, self.args.turns
        seconds = dict.fromkeys(self.sides, 0.0)
        chunk = REOPEN_EVERY
        report_every = max(chunk, n // 20)
        for first in range(0, n, chunk):
            saves = session_saves(first, min(chunk, n - first), turns)
            with self.opened() as stores:
                for name, store in stores.items():
                    seconds[name] += timed(store.bulk_create, saves)
                    store.settle()
            done = first + min(chunk, n - first)
            if done % report_every < chunk or done == n:
                rates = ", ".join(f"{k} {done / v:,.0f}/s" for k, v in seconds.items() if v)
                progress(f"{done:,} of {n:,} sessions ({rates})")
        section.add(
            Row(
                f"[os] build {n:,} sessions of {turns} turns",
                "s",
                {k: [v] for k, v in seconds.items()},
                better="lower",
            )
        )
        section.add(
            Row("  = sessions per second", "ops/s", {k: [n / v] for k, v in seconds.items()})
        )
        pool = payloads.PayloadGenerator(7)
        events = [
            Ev(0, e, payloads.convert(e, journal.Event))
            for e in (pool.event("long", "tool_call_end") for _ in range(BATCH))
        ]
        seed = typed_save(payloads.SessionSim(pool, LONG_ID, events=0).next_save(events=0))
        long_seconds = {}
        with self.opened() as stores:
            for name, store in stores.items():
                started = time.perf_counter()
                store.save(seed)
                clock = payloads.BASE_TIME_MS
                total = self.args.events
                for batch in range(1, (total + BATCH - 1) // BATCH + 1):
                    count = min(BATCH, total - (batch - 1) * BATCH)
                    chunk_events = [
                        Ev(clock + i, e.plain, e.typed) for i, e in enumerate(events[:count])
                    ]
                    clock += count
                    store.save_events(seed, batch, chunk_events)
                long_seconds[name] = [time.perf_counter() - started]
                progress(f"  {name}: the {total:,}-event session in {long_seconds[name][0]:.1f} s")
        label = f"[os] build one session of {self.args.events:,} events (batches of 1,000)"
        section.add(Row(label, "s", long_seconds, better="lower"))
        du = {}
        with self.opened() as stores:
            for name, store in stores.items():
                du[name] = [float(store.disk())]
        section.add(Row("du of the store", "B", du, better="lower"))
        per = {k: [v[0] / n] for k, v in du.items()}
        section.add(Row("  per session (long session included)", "B", per, better="lower"))
        section.notes.append(
            "a session: T saves of a ~2 KiB checkpoint (1 KiB context, growing by 2 ~1 KiB "
            "items per turn) with 2 ~1 KiB events each and, after the first, an execution "
            "record. journal: a loop of save_with_events, store reopened every 2,000 "
            "sessions; tuned: save_many of 1,000 saves per transaction"
        )

    # ---------------------------------------------------------------------------- per call

    def cold(self, section: Section) -> None:
        middle = catalog_id(self.args.sessions // 2)
        for name in self.sides:
            child("cold", name, self.roots[name], middle)
        walls: dict[str, list[float]] = {name: [] for name in self.sides}

        def run(name: str, _: int) -> float:
            elapsed, result = child("cold", name, self.roots[name], middle)
            walls[name].append(elapsed)
            seconds: float = result["seconds"]
            return seconds

        samples = alternate(self.args.reps, self.sides, run)
        section.add(
            Row("open + load + first event_page (fresh process)", "s", samples, better="lower")
        )
        section.add(Row("  process wall", "s", walls, better="lower"))

    def catalog(self, section: Section) -> None:
        n = self.args.sessions
        with self.opened() as stores:
            progress("seeking the middle of the catalog (untimed)")
            middle = {name: seek_sessions(s, n // 2) for name, s in stores.items()}
            for where, cursors in (("first", dict.fromkeys(stores)), ("middle", middle)):
                calls: dict[str, Callable[[], object]] = {
                    name: functools.partial(s.list_sessions_page, cursors[name], 50)
                    for name, s in stores.items()
                }
                label = f"list_sessions_page(50), {where} page"
                section.add(Row(label, "s", self.calls(calls), better="lower"))
            calls = {name: functools.partial(s.recent_executions, 50) for name, s in stores.items()}
            section.add(Row("recent_executions(50)", "s", self.calls(calls), better="lower"))
            sid = catalog_id(n // 3)
            calls = {name: functools.partial(s.load, sid) for name, s in stores.items()}
            section.add(
                Row("load() of one session (open store)", "s", self.calls(calls), better="lower")
            )
            long_calls = {}
            for where, before in (("newest", None), ("deep", self.args.events // 2)):
                long_calls = {
                    name: functools.partial(s.event_page, LONG_ID, before, 50)
                    for name, s in stores.items()
                }
                label = f"event_page(50), {self.args.events:,}-event session, {where}"
                section.add(Row(label, "s", self.calls(long_calls), better="lower"))
            peaks = {}
            for name, s in stores.items():
                s.event_page(LONG_ID, self.args.events // 3, 50)
                gc.collect()
                tracemalloc.start()
                s.event_page(LONG_ID, self.args.events // 3, 50)
                peaks[name] = [float(tracemalloc.get_traced_memory()[1])]
                tracemalloc.stop()
            section.add(
                Row("  tracemalloc peak of one deep event_page(50)", "B", peaks, better="lower")
            )

    def writes(self, section: Section) -> None:
        reps = self.args.reps
        gen = payloads.PayloadGenerator(5)
        news = {
            name: [
                typed_save(payloads.SaveArgs(gen.checkpoint(f"new-{name}-{r}"), [], None, []))
                for r in range(reps)
            ]
            for name in self.sides
        }
        parent = catalog_id(self.args.sessions // 4)
        sim = payloads.SessionSim(gen, parent, context_bytes=1024, metadata_bytes=256)
        sim.next_save()
        children = {
            name: [
                typed_save(
                    payloads.SaveArgs(
                        sim.fork_checkpoint(f"fork-{name}-{r}", items=1), [], None, []
                    )
                )
                for r in range(reps)
            ]
            for name in self.sides
        }
        for mode in (OS_ONLY, DURABLE):
            with self.opened(mode) as stores:

                def first_save(name: str, rep: int, stores: dict[str, Side] = stores) -> float:
                    elapsed = timed(stores[name].save, news[name][rep])
                    stores[name].settle()
                    return elapsed

                label = f"{mode.label} first save of a new session"
                section.add(
                    Row(label, "s", alternate(reps, self.sides, first_save), better="lower")
                )
                if mode is not DURABLE:
                    for name, store in stores.items():
                        store.delete_sessions([s.session_id for s in news[name]])
                    continue

                def fork(name: str, rep: int, stores: dict[str, Side] = stores) -> float:
                    elapsed = timed(stores[name].fork, parent, 0, children[name][rep])
                    stores[name].settle()
                    return elapsed

                def delete(name: str, rep: int, stores: dict[str, Side] = stores) -> float:
                    ids = [children[name][rep].session_id, news[name][rep].session_id]
                    return timed(stores[name].delete_sessions, ids)

                label = "[durable] fork (clean child at sequence 0)"
                section.add(Row(label, "s", alternate(reps, self.sides, fork), better="lower"))
                label = "[durable] delete_sessions([child, new session])"
                section.add(Row(label, "s", alternate(reps, self.sides, delete), better="lower"))

    def tools(self, section: Section) -> None:
        reps = self.args.reps
        commands: dict[str, dict[str, list[str]]] = {"ls": {}, "verify1": {}, "verify": {}}
        for name in self.sides:
            root = str(self.roots[name])
            if name == "journal":
                commands["ls"][name] = [JOURNAL_CLI, "ls", "--root", root]
                commands["verify1"][name] = [JOURNAL_CLI, "verify", "--root", root, LONG_ID]
                commands["verify"][name] = [JOURNAL_CLI, "verify", "--root", root]
            else:
                commands["ls"][name] = [
                    sys.executable,
                    str(CWD / "harness" / "child.py"),
                    "ls",
                    name,
                    root,
                ]
                db = str(self.roots[name] / f"{name}.sqlite")
                check = (
                    "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
                    "print(db.execute('PRAGMA integrity_check').fetchone())"
                )
                commands["verify"][name] = [sys.executable, "-c", check, db]

        def wall(command: list[str]) -> float:
            started = time.perf_counter()
            done = subprocess.run(command, env=child_env(), cwd=CWD, capture_output=True, text=True)
            elapsed = time.perf_counter() - started
            if done.returncode != 0:
                raise RuntimeError(f"{command[:3]} exited {done.returncode}: {done.stderr[-300:]}")
            return elapsed

        labels = {
            "ls": "`journal ls` (first 50), process wall",
            "verify1": f"`journal verify` of the {self.args.events:,}-event session",
            "verify": "`journal verify` of the whole store (SQLite: integrity_check)",
        }
        for key, label in labels.items():
            todo = commands[key]
            runs = reps if key == "ls" else 1

            def run(name: str, _: int, todo: dict[str, list[str]] = todo) -> float:
                return wall(todo[name])

            samples = alternate(runs, list(todo), run)
            section.add(Row(label, "s", samples, better="lower"))

    def rss(self, section: Section) -> None:
        touch = min(self.args.rss_touch, self.args.sessions)
        results = {}
        for name in self.sides:
            results[name] = child("rss", name, self.roots[name], str(touch))[1]
        for key, label in (
            ("rss", f"peak RSS: list all sessions, then page + append to {touch:,}"),
            ("rss_after_list", "  peak RSS after listing only"),
            ("rss_after_import", "  RSS after the imports"),
        ):
            values = {name: [float(r[key])] for name, r in results.items()}
            section.add(Row(label, "B", values, better="lower"))
        seconds = {name: [float(r["seconds"])] for name, r in results.items()}
        section.add(Row("  wall of that work", "s", seconds, better="lower"))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    for name in sides:
        if name not in SIDES:
            raise SystemExit(f"unknown side {name!r}; choose from {', '.join(SIDES)}")
    work = Workdir(args.dir, args.keep)
    print(
        f"scale run: {args.sessions:,} sessions of {args.turns} turns and one session of "
        f"{args.events:,} events; stores: {', '.join(sides)}; under {work.path}"
    )
    print(
        f"journal {journal.__version__} from {Path(journal.__file__).parent}; "
        f"median of {args.reps} unless stated; ratios > 1 mean journal is better"
    )
    print()
    print(header())
    scale = Scale(args, work, sides)
    started = time.perf_counter()
    try:
        scale.section("1. Build (os mode / synchronous=NORMAL)", scale.build)
        scale.section("2. Cold process", scale.cold)
        scale.section("3. Reads at this size", scale.catalog)
        scale.section("4. Writes at this size", scale.writes)
        scale.section("5. Tools", scale.tools)
        scale.section("6. Memory", scale.rss)
    except BaseException:
        work.cleanup()
        raise
    total = time.perf_counter() - started
    print(f"\ntotal {total:.0f} s")
    if args.json:
        dump = {
            "meta": {
                **vars(args),
                "dir": str(args.dir),
                "json": None,
                "markdown": None,
                "seconds": total,
            },
            "sections": [
                {"title": s.title, "notes": s.notes, "rows": [r.as_json() for r in s.rows]}
                for s in scale.sections
            ],
        }
        args.json.write_text(json.dumps(dump, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown_table(scale.sections) + "\n")
    progress("removing the stores (a store of many sessions takes a while)")
    work.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

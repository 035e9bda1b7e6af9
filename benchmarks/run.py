"""Side-by-side benchmark: `journal` against mobius's SQLite store (`sqlite_mobius.py`).

    python benchmarks/run.py [--quick] [--only NAME,...] [--json out.json] [--profile] [--keep]

Both stores get the same payloads (`payloads.py`: ~1 KiB events, ~50 KiB checkpoints, ~1 KiB
transcript items), built and converted before any timed loop, in fresh directories on one file
system. journal's durable mode ("fsync") runs against SQLite `synchronous=FULL` (mobius's
setting) and its OS-only mode ("os") against `synchronous=NORMAL`. Each figure is the median of
several repetitions that alternate journal and SQLite (the machine is shared and noisy). Every
ratio is oriented so that > 1 means journal is better: journal/sqlite for throughput,
sqlite/journal for time, bytes and memory. Nothing here asserts on timings.

Workloads (names for --only): floor, append, steps, threads, save, page, open, bytes, memory,
and the API that journal may not have yet (skipped with "n/a (not implemented)" until it
does): sessions, transcript, recent, fork, delete (`later` selects all five).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import json
import os
import platform
import pstats
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

import msgspec
import payloads
from sqlite_mobius import SqliteMobiusStore, Synchronous

import journal

HERE = Path(__file__).resolve().parent
KIB = 1024
MIB = 1024 * KIB
BATCH = 1000
"""Events per `save_with_events` when building long histories (one commit each)."""
REOPEN_EVERY = 2000
"""Sessions written per journal store object when building many sessions (open files)."""

Json = Any
T = TypeVar("T")
Better = Literal["higher", "lower"]
Unit = Literal["ops/s", "s", "B", "x"]

# ------------------------------------------------------------------------------ configuration


class Mode(NamedTuple):
    name: str
    durability: str  # journal.open(durability=...)
    synchronous: Synchronous  # SQLite PRAGMA synchronous

    @property
    def label(self) -> str:
        return f"[{self.name}]"

    @property
    def legend(self) -> str:
        return f"[{self.name}] = journal {self.durability!r} vs SQLite {self.synchronous}"


DURABLE = Mode("durable", "fsync", "FULL")
OS_ONLY = Mode("os", "os", "NORMAL")
MODES = (DURABLE, OS_ONLY)
# Store options beyond the mode (`--no-dictionary` sets dictionary=False)
JOURNAL_OPTIONS: dict[str, Any] = {}


@dataclass(frozen=True)
class Config:
    quick: bool
    reps: int
    floor_ops: int
    append_durable: int  # events per repetition, one writer
    append_os: int
    steps_deltas: int  # deltas of one open model step before the `steps` appends
    steps_appends: int
    thread_durable: int  # events per thread per repetition
    thread_os: int
    save_sessions: int  # sessions saved round-robin per repetition
    save_rounds: int  # timed saves per session per repetition
    new_sessions: int  # first saves of new sessions per repetition
    page_histories: tuple[int, int]
    page_calls: int  # calls per sample of a read (fewer when one call is slow)
    sample_seconds: float  # aim for this much time per sample of a read
    long_saves: int  # saves in the long session (open, transcript)
    bytes_events: int
    bytes_saves: int
    memory_histories: tuple[int, int]  # (large, small)
    scan_seconds: float  # cap on one SQLite scan (its deep pages are O(depth)); journal: 10x
    catalog_sessions: int  # sessions for list_sessions_page / recent_executions
    fork_parent_events: int


FULL = Config(
    quick=False,
    reps=5,
    floor_ops=400,
    append_durable=400,
    append_os=2_000,
    steps_deltas=20_000,
    steps_appends=300,
    thread_durable=100,
    thread_os=500,
    save_sessions=4,
    save_rounds=10,
    new_sessions=20,
    page_histories=(1_000, 100_000),
    page_calls=200,
    sample_seconds=0.3,
    long_saves=2_000,
    bytes_events=10_000,
    bytes_saves=100,
    memory_histories=(1_000_000, 100_000),
    scan_seconds=15,
    catalog_sessions=10_000,
    fork_parent_events=100_000,
)
QUICK = Config(
    quick=True,
    reps=3,
    floor_ops=200,
    append_durable=150,
    append_os=500,
    steps_deltas=5_000,
    steps_appends=100,
    thread_durable=30,
    thread_os=100,
    save_sessions=2,
    save_rounds=10,
    new_sessions=10,
    page_histories=(1_000, 100_000),
    page_calls=100,
    sample_seconds=0.1,
    long_saves=500,
    bytes_events=2_000,
    bytes_saves=40,
    memory_histories=(100_000, 10_000),
    scan_seconds=3,
    catalog_sessions=300,
    fork_parent_events=100_000,
)

LATER = ("sessions", "transcript", "recent", "fork", "delete")
LATER_METHODS = {
    "sessions": ("list_sessions_page",),
    "transcript": ("transcript_page", "execution_page"),
    "recent": ("recent_executions",),
    "fork": ("fork",),
    "delete": ("fork", "delete_sessions"),
}

# ----------------------------------------------------------------------------------- payloads


class Ev(NamedTuple):
    """One event, as plain JSON for SQLite and as a `journal.Event`."""

    at: int
    plain: dict[str, Json]
    typed: journal.Event


class Save(NamedTuple):
    """The arguments of one save, as plain JSON for SQLite and typed for journal."""

    plain: payloads.SaveArgs
    typed: tuple[Any, ...]

    @property
    def session_id(self) -> str:
        session_id: str = self.plain.checkpoint["session_id"]
        return session_id


def typed_save(args: payloads.SaveArgs) -> Save:
    return Save(
        args,
        args.convert(
            journal.Checkpoint,
            execution_type=journal.ExecutionRecord,
            timestamped_event_type=journal.TimestampedEvent,
        ),
    )


def make_events(
    gen: payloads.PayloadGenerator, session_id: str, n: int, kind: str | None = None
) -> list[Ev]:
    return [
        Ev(at, event, payloads.convert(event, journal.Event))
        for at, event in gen.timestamped_events(session_id, n, kind)
    ]


def json_size(value: Json) -> int:
    return len(msgspec.json.encode(value))


# ----------------------------------------------------------------------------------- adapters


class Side(Protocol):
    """The same calls on both stores (a thin adapter; results are reduced to small tuples)."""

    name: str

    def save(self, save: Save) -> None: ...
    def save_events(self, save: Save, sequence: int, events: Sequence[Ev]) -> None: ...
    def append(self, session_id: str, event: Ev) -> None: ...
    def event_page(self, session_id: str, before: int | None, limit: int) -> tuple[int, Any]: ...
    def load(self, session_id: str) -> int: ...
    def transcript_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]: ...
    def execution_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]: ...
    def list_sessions_page(self, cursor: Any, limit: int) -> tuple[int, Any]: ...
    def recent_executions(self, limit: int) -> int: ...
    def fork(self, parent: str, sequence: int, child: Save) -> None: ...
    def delete_sessions(self, session_ids: list[str]) -> bool: ...
    def settle(self) -> None: ...
    def close(self) -> None: ...


class JournalSide:
    name = "journal"

    def __init__(self, root: Path, mode: Mode) -> None:
        self.root = root
        self.store = journal.open(root, durability=mode.durability, **JOURNAL_OPTIONS)

    def save(self, save: Save) -> None:
        self.store.save_with_events(*save.typed)

    def save_events(self, save: Save, sequence: int, events: Sequence[Ev]) -> None:
        checkpoint = msgspec.structs.replace(save.typed[0], sequence=sequence)
        batch = [journal.TimestampedEvent(recorded_at_ms=e.at, event=e.typed) for e in events]
        self.store.save_with_events(checkpoint, [], None, batch)

    def append(self, session_id: str, event: Ev) -> None:
        self.store.append_event(session_id, event.at, event.typed)

    def event_page(self, session_id: str, before: int | None, limit: int) -> tuple[int, Any]:
        request = journal.EventPageRequest(limit=limit, before_sequence=before)
        page = self.store.event_page(session_id, request)
        return len(page.events), page.next_before_sequence

    def load(self, session_id: str) -> int:
        checkpoint = self.store.load(session_id)
        assert checkpoint is not None
        return len(checkpoint.context)

    def transcript_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        request = journal.TranscriptPageRequest(max_batches=n, before_sequence=before)
        page = self.store.transcript_page(session_id, request)
        return len(page.batches), page.next_before_sequence

    def execution_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        request = journal.ExecutionPageRequest(limit=n, before_sequence=before)
        page = self.store.execution_page(session_id, request)
        return len(page.executions), page.next_before_sequence

    def list_sessions_page(self, cursor: Any, limit: int) -> tuple[int, Any]:
        request = journal.SessionPageRequest(limit=limit, cursor=cursor)
        page = self.store.list_sessions_page(request)
        return len(page.sessions), page.next_cursor

    def recent_executions(self, limit: int) -> int:
        return len(self.store.recent_executions(limit))

    def fork(self, parent: str, sequence: int, child: Save) -> None:
        self.store.fork(parent, sequence, child.typed[0])

    def delete_sessions(self, session_ids: list[str]) -> bool:
        return bool(self.store.delete_sessions(session_ids))

    def settle(self) -> None:
        """Wait for background work (spare session directories being prepared after a
        fork or first save), untimed, so that it never overlaps the other side's turn or
        a timed section that follows untimed setup."""
        self.store.spares.wait()

    def close(self) -> None:
        self.store.close()


class SqliteSide:
    name = "sqlite"

    def __init__(self, root: Path, mode: Mode) -> None:
        self.root = root
        self.store = SqliteMobiusStore(root / "mobius.sqlite", mode.synchronous)

    def save(self, save: Save) -> None:
        self.store.save_with_events(*save.plain)

    def save_events(self, save: Save, sequence: int, events: Sequence[Ev]) -> None:
        checkpoint = dict(save.plain.checkpoint, sequence=sequence)
        self.store.save_with_events(checkpoint, [], None, [(e.at, e.plain) for e in events])

    def append(self, session_id: str, event: Ev) -> None:
        self.store.append_event(session_id, event.at, event.plain)

    def event_page(self, session_id: str, before: int | None, limit: int) -> tuple[int, Any]:
        page = self.store.event_page(session_id, before, limit)
        return len(page.events), page.next_before_sequence

    def load(self, session_id: str) -> int:
        checkpoint = self.store.load(session_id)
        assert checkpoint is not None
        return len(checkpoint["context"])

    def transcript_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        page = self.store.transcript_page(session_id, before, n)
        return len(page.batches), page.next_before_sequence

    def execution_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        page = self.store.execution_page(session_id, before, n)
        return len(page.executions), page.next_before_sequence

    def list_sessions_page(self, cursor: Any, limit: int) -> tuple[int, Any]:
        page = self.store.list_sessions_page(None, cursor, limit)
        return len(page.sessions), page.next_cursor

    def recent_executions(self, limit: int) -> int:
        return len(self.store.recent_executions(limit))

    def fork(self, parent: str, sequence: int, child: Save) -> None:
        self.store.fork(parent, sequence, child.plain.checkpoint)

    def delete_sessions(self, session_ids: list[str]) -> bool:
        return self.store.delete_sessions(session_ids)

    def settle(self) -> None:
        """Nothing runs in the background."""

    def close(self) -> None:
        self.store.close()


SideFactory = Callable[[Path, Mode], Side]
SIDES: dict[str, SideFactory] = {"journal": JournalSide, "sqlite": SqliteSide}

# ------------------------------------------------------------------------------------ results


@dataclass
class Row:
    label: str
    unit: Unit
    journal: list[float] = field(default_factory=list)
    sqlite: list[float] = field(default_factory=list)
    better: Better = "higher"
    note: str = ""
    ratio: bool = True
    text: str = ""  # a row without figures ("n/a (not implemented)", an error)

    def median(self, side: str) -> float | None:
        samples = self.journal if side == "journal" else self.sqlite
        return statistics.median(samples) if samples else None

    def _oriented(self, journal_value: float, sqlite_value: float) -> float:
        if self.better == "higher":
            return journal_value / sqlite_value if sqlite_value else float("inf")
        return sqlite_value / journal_value if journal_value else float("inf")

    def ratio_value(self) -> float | None:
        j, s = self.median("journal"), self.median("sqlite")
        if not self.ratio or j is None or s is None:
            return None
        return self._oriented(j, s)

    def ratio_range(self) -> tuple[float, float] | None:
        """Min and max of the ratio over paired repetitions (they ran back to back)."""
        if not self.ratio or len(self.journal) < 2 or len(self.journal) != len(self.sqlite):
            return None
        ratios = [self._oriented(j, s) for j, s in zip(self.journal, self.sqlite, strict=True)]
        return min(ratios), max(ratios)


@dataclass
class Section:
    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row


def growth_row(label: str, small: Row, large: Row) -> Row:
    """How much each side's median time grew from the `small` row to the `large` one."""
    return Row(
        label,
        "x",
        [statistics.median(large.journal) / statistics.median(small.journal)],
        [statistics.median(large.sqlite) / statistics.median(small.sqlite)],
        ratio=False,
        note="1.00x = flat",
    )


def fmt_time(seconds: float) -> str:
    for scale, unit in ((1e-6, "µs"), (1e-3, "ms"), (1.0, "s")):
        value = seconds / scale
        if value < 1000 or unit == "s":
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f} {unit}"
    raise AssertionError("unreachable")


def fmt_bytes(value: float) -> str:
    size = abs(value)
    if size < 10 * KIB:
        return f"{value:,.0f} B"
    if size < 10 * MIB:
        return f"{value / KIB:,.1f} KiB"
    if size < 10 * 1024 * MIB:
        return f"{value / MIB:,.1f} MiB"
    return f"{value / (1024 * MIB):,.2f} GiB"


def fmt_value(value: float | None, unit: Unit) -> str:
    if value is None:
        return "—"
    if unit == "ops/s":
        return f"{value:,.0f}/s" if value >= 100 else f"{value:.1f}/s"
    if unit == "s":
        return fmt_time(value)
    if unit == "B":
        return fmt_bytes(value)
    return f"{value:.2f}x"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x" if value < 100 else f"{value:,.0f}x"


WIDTHS = (58, 12, 12, 7, 14)
LINE = sum(WIDTHS) + len(WIDTHS)


def print_section_header(section: Section) -> None:
    print()
    print(f"── {section.title} " + "─" * max(0, LINE - len(section.title) - 4))


def print_row(row: Row) -> None:
    w_label, w_value, _, w_ratio, w_range = WIDTHS
    label = row.label if len(row.label) <= w_label else row.label[: w_label - 1] + "…"
    if row.text:
        print(f"{label:<{w_label}} {row.text}")
        return
    ratio = row.ratio_value()
    spread = row.ratio_range()
    ratio_text = fmt_ratio(ratio) if ratio is not None else ""
    range_text = f"[{fmt_ratio(spread[0])}-{fmt_ratio(spread[1])}]" if spread else ""
    j = fmt_value(row.median("journal"), row.unit)
    s = fmt_value(row.median("sqlite"), row.unit) if row.sqlite or row.ratio else ""
    line = (
        f"{label:<{w_label}} {j:>{w_value}} {s:>{w_value}} "
        f"{ratio_text:>{w_ratio}} {range_text:<{w_range}} {row.note}"
    )
    print(line.rstrip())


def print_section(section: Section) -> None:
    for row in section.rows:
        print_row(row)
    for note in section.notes:
        print(f"  · {note}")
    sys.stdout.flush()


# ------------------------------------------------------------------------------------ helpers


class Workdir:
    """A fresh directory for the whole run; every store gets its own subdirectory."""

    def __init__(self, base: Path, keep: bool) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix="run-", dir=base))
        self.keep = keep
        self._count = 0

    def fresh(self, name: str) -> Path:
        self._count += 1
        return self.path / f"{self._count:04d}-{name}"

    def cleanup(self) -> None:
        if not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def alternate(
    reps: int, names: Iterable[str], run: Callable[[str, int], float]
) -> dict[str, list[float]]:
    """`run(name, rep)` for every name, `reps` times, alternating the order (A B, B A, ...)."""
    order = list(names)
    samples: dict[str, list[float]] = {name: [] for name in order}
    for rep in range(reps):
        for name in order if rep % 2 == 0 else order[::-1]:
            gc.collect()
            samples[name].append(run(name, rep))
    return samples


def each(fn: Callable[[T], object], items: Iterable[T]) -> None:
    for item in items:
        fn(item)


def repeat(fn: Callable[[], object], n: int) -> None:
    for _ in range(n):
        fn()


def bind(sides: dict[str, Side], method: str, *args: Any) -> dict[str, Callable[[], object]]:
    """`side.method(*args)` for each side, as calls without arguments."""
    return {name: functools.partial(getattr(side, method), *args) for name, side in sides.items()}


def timed(fn: Callable[..., object], *args: Any) -> float:
    """Seconds taken by `fn(*args)`."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def disk_usage(root: Path) -> int:
    """Allocated bytes under `root`, directories included (what `du` reports)."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        total += os.stat(dirpath).st_blocks * 512
        for name in filenames:
            total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def used_bytes(path: str) -> int:
    """File size without the trailing zeros (journal preallocates its newest segment)."""
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        end = size
        while end > 0:
            start = max(0, end - MIB)
            file.seek(start)
            chunk = file.read(end - start).rstrip(b"\0")
            if chunk:
                return start + len(chunk)
            end = start
    return 0


@dataclass
class JournalDisk:
    allocated: int  # du
    caches: int  # du of snapshot and *.idx files
    log_used: int  # segment bytes without preallocated zeros

    @classmethod
    def of(cls, root: Path) -> JournalDisk:
        caches = log_used = 0
        for dirpath, _, filenames in os.walk(root):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if name == "snapshot" or name.endswith(".idx"):
                    caches += os.stat(path).st_blocks * 512
                elif name.endswith(".seg"):
                    log_used += used_bytes(path)
        return cls(disk_usage(root), caches, log_used)


# ------------------------------------------------------------------------------------ fixtures


@dataclass
class History:
    """One session with `events` retained events, built in batches of BATCH (one save each)."""

    events: int
    roots: dict[str, Path]
    session_id: str
    saves: int  # checkpoint sequences 0 .. saves - 1
    first: Save
    sim: payloads.SessionSim


@dataclass
class LongSession:
    roots: dict[str, Path]
    session_id: str
    saves: int
    checkpoint_bytes: int
    context_items: int
    executions: int


@dataclass
class Catalog:
    roots: dict[str, Path]
    sessions: int
    journal_fds_per_session: float


class Harness:
    def __init__(self, cfg: Config, work: Workdir, *, profile: bool) -> None:
        self.cfg = cfg
        self.work = work
        self.profile = profile
        self.sections: list[Section] = []
        self.profiles: dict[str, str] = {}
        self.single_rates: dict[tuple[str, str], float] = {}
        self._histories: dict[int, History] = {}
        self._long: LongSession | None = None
        self._catalog: Catalog | None = None
        self._pool: list[Ev] | None = None
        self._seed = 100

    # ---------------------------------------------------------------- plumbing

    def gen(self) -> payloads.PayloadGenerator:
        self._seed += 1
        return payloads.PayloadGenerator(self._seed)

    def seed_save(self, session_id: str) -> Save:
        """Sequence 0 of a session: a ~50 KiB checkpoint, its context as transcript batch 0."""
        return typed_save(payloads.SessionSim(self.gen(), session_id).next_save(events=0))

    @contextlib.contextmanager
    def opened(self, side: str, mode: Mode, name: str) -> Iterator[Side]:
        """A store of `side` in a fresh directory; closed and removed afterwards."""
        root = self.work.fresh(f"{name}-{side}-{mode.name}")
        store = SIDES[side](root, mode)
        try:
            yield store
        finally:
            store.close()
            remove(root)

    def run(self, key: str, title: str, body: Callable[[Section], None]) -> None:
        section = Section(key, title)
        print_section_header(section)
        started = time.perf_counter()
        missing = [m for m in LATER_METHODS.get(key, ()) if not hasattr(journal.Store, m)]
        try:
            if missing:
                label = f"journal.Store.{missing[0]}"
                section.add(Row(label, "x", text="n/a (not implemented)"))
            else:
                body(section)
        except Exception as error:  # a broken workload must not stop the others
            section.add(Row("workload failed", "x", text=f"error: {type(error).__name__}: {error}"))
        section.seconds = time.perf_counter() - started
        section.notes.append(f"section took {section.seconds:.1f} s")
        print_section(section)
        self.sections.append(section)

    def run_profile(self, name: str, fn: Callable[[], object], calls: int) -> None:
        """Profile one journal-side pass (outside the timed repetitions)."""
        profiler = cProfile.Profile()
        profiler.enable()
        fn()
        profiler.disable()
        self.profiles[name] = format_profile(profiler, calls)

    def event_pool(self) -> list[Ev]:
        """1,000 distinct ~1 KiB tool-call events, reused (new timestamps) to build histories."""
        if self._pool is None:
            gen = self.gen()
            self._pool = [
                Ev(0, event, payloads.convert(event, journal.Event))
                for event in (
                    gen.event("hist", "tool_call_begin" if i % 2 == 0 else "tool_call_end")
                    for i in range(BATCH)
                )
            ]
        return self._pool

    def history(self, events: int) -> History:
        """A session with `events` retained events on both sides, built in os/NORMAL mode."""
        if events in self._histories:
            return self._histories[events]
        session_id = f"hist-{events}"
        sim = payloads.SessionSim(self.gen(), session_id, events=0)
        first = typed_save(sim.next_save(events=0))
        pool = self.event_pool()
        roots = {side: self.work.fresh(f"history-{events}-{side}") for side in SIDES}
        progress(f"building a {events:,}-event history on both sides (os/NORMAL, batches)")
        batches = (events + BATCH - 1) // BATCH
        for side_name, factory in SIDES.items():
            started = time.perf_counter()
            with contextlib.closing(factory(roots[side_name], OS_ONLY)) as side:
                side.save(first)
                clock = payloads.BASE_TIME_MS
                for batch in range(1, batches + 1):
                    count = min(BATCH, events - (batch - 1) * BATCH)
                    chunk = [Ev(clock + i, e.plain, e.typed) for i, e in enumerate(pool[:count])]
                    clock += count
                    side.save_events(first, batch, chunk)
            progress(f"  {side_name}: {time.perf_counter() - started:.1f} s")
        history = History(events, roots, session_id, batches + 1, first, sim)
        self._histories[events] = history
        return history

    def long_session(self) -> LongSession:
        """A session of `long_saves` saves (2 items, 4 events each; a turn record every 5th;
        context compaction every 50th), built in os/NORMAL mode."""
        if self._long is not None:
            return self._long
        n = self.cfg.long_saves
        session_id = "long-1"
        sim = payloads.SessionSim(self.gen(), session_id, items=2, events=4)
        roots = {side: self.work.fresh(f"long-{side}") for side in SIDES}
        progress(f"building a {n:,}-save session on both sides (os/NORMAL)")
        last: payloads.SaveArgs | None = None
        executions = 0
        with self.both(roots, OS_ONLY) as sides:
            for i in range(n):
                if i and i % 50 == 0:
                    sim.compact(keep=40)
                last = sim.next_save(execution=i % 5 == 4)
                executions += last.execution is not None
                save = typed_save(last)
                for side in sides.values():
                    side.save(save)
        assert last is not None
        self._long = LongSession(
            roots,
            session_id,
            n,
            json_size(last.checkpoint),
            len(last.checkpoint["context"]),
            executions,
        )
        return self._long

    def catalog(self) -> Catalog:
        """`catalog_sessions` small sessions (one save with a turn record each), os/NORMAL.

        journal keeps the files of every session it has touched open until close(), so the
        builder reopens its store every REOPEN_EVERY sessions to stay under the fd limit.
        """
        if self._catalog is not None:
            return self._catalog
        n = self.cfg.catalog_sessions
        gen = self.gen()
        roots = {side: self.work.fresh(f"catalog-{side}") for side in SIDES}
        progress(f"building {n:,} sessions on both sides (os/NORMAL)")
        fds_per_session = 0.0
        for start in range(0, n, REOPEN_EVERY):
            count = min(REOPEN_EVERY, n - start)
            saves = []
            for i in range(start, start + count):
                session_id = f"cat-{i:06d}"
                checkpoint = gen.checkpoint(
                    session_id, owner_id=f"owner-{i % 10}", first_user_message=gen.text(100)
                )
                args = payloads.SaveArgs(checkpoint, [], gen.execution_record(session_id), [])
                saves.append(typed_save(args))
            with self.both(roots, OS_ONLY) as sides:
                for name, side in sides.items():
                    before = open_fds()
                    for save in saves:
                        side.save(save)
                    if name == "journal":
                        fds_per_session = (open_fds() - before) / count
        self._catalog = Catalog(roots, n, fds_per_session)
        return self._catalog

    # ------------------------------------------------------------------ 1. floor

    def w_floor(self, section: Section) -> None:
        events = [e.typed for e in make_events(self.gen(), "floor", self.cfg.floor_ops)]
        size = sum(len(msgspec.msgpack.encode(e)) for e in events) // len(events)

        variants = {"append": (True, False), "prealloc": (True, True), "nosync": (False, False)}

        def run(name: str, _: int) -> float:
            sync, prealloc = variants[name]
            return floor_rate(self.work.fresh("floor"), events, sync=sync, prealloc=prealloc)

        samples = alternate(self.cfg.reps, variants, run)
        label = "encode + os.write + os.fdatasync (file grows)"
        section.add(Row(label, "ops/s", samples["append"], ratio=False))
        label = "encode + os.pwrite into preallocated + os.fdatasync"
        section.add(Row(label, "ops/s", samples["prealloc"], ratio=False))
        label = "encode + os.write, no sync (floor for os mode)"
        section.add(Row(label, "ops/s", samples["nosync"], ratio=False))
        section.notes.append(
            f"{len(events)} events of ~{size} B msgpack; no store involved (the figures are in "
            "the journal column). Section 2 measures the first floor again, interleaved with "
            "the durable appends, and reports append_event as a fraction of it"
        )

    # ------------------------------------------------------------------ 2. append

    def w_append(self, section: Section) -> None:
        gen = self.gen()
        seed = self.seed_save("append-1")
        for mode in MODES:
            n = self.cfg.append_durable if mode is DURABLE else self.cfg.append_os
            events = make_events(gen, "append-1", n)

            typed = [e.typed for e in events]

            def run(
                name: str,
                _: int,
                mode: Mode = mode,
                events: list[Ev] = events,
                typed: list[journal.Event] = typed,
            ) -> float:
                if name == "floor":
                    return floor_rate(self.work.fresh("floor"), typed, sync=True, prealloc=False)
                with self.opened(name, mode, "append") as side:
                    side.save(seed)
                    side.settle()
                    gc.collect()
                    elapsed = timed(each, functools.partial(side.append, "append-1"), events)
                return len(events) / elapsed

            # durable: the floor runs interleaved too, as the disk's speed drifts over minutes
            names = [*SIDES, "floor"] if mode is DURABLE else list(SIDES)
            samples = alternate(self.cfg.reps, names, run)
            label = f"{mode.label} append_event, 1 writer, {n:,} events"
            section.add(Row(label, "ops/s", samples["journal"], samples["sqlite"]))
            for name in SIDES:
                self.single_rates[(name, mode.name)] = statistics.median(samples[name])
            if mode is DURABLE:
                floor = samples["floor"]
                fraction = {
                    name: [r / f for r, f in zip(samples[name], floor, strict=True)]
                    for name in SIDES
                }
                label = "  = fraction of the floor (encode+write+fdatasync)"
                row = Row(label, "x", fraction["journal"], fraction["sqlite"], ratio=False)
                row.note = f"floor measured alongside: {statistics.median(floor):,.0f}/s"
                section.add(row)
            if self.profile:
                self.profile_appends(seed, events, mode)
        section.notes.append(
            "events: the generator's default mix (60% assistant_content_delta of one model "
            "step, 40% tool calls), ~1 KiB each; fresh store per repetition, session created "
            "untimed by a 50 KiB save"
        )

    def profile_appends(self, seed: Save, events: list[Ev], mode: Mode) -> None:
        with self.opened("journal", mode, "profile") as side:
            side.save(seed)
            self.run_profile(
                f"append_event {mode.legend}, {len(events)} events",
                functools.partial(each, functools.partial(side.append, "append-1"), events),
                len(events),
            )

    # ------------------------------------------------------------- 2b. open steps

    def w_steps(self, section: Section) -> None:
        """append_event into a session already holding many events: tool calls vs deltas of
        one unfinished model step (journal keeps those deltas in its head state)."""
        cfg = self.cfg
        gen = self.gen()
        seed = self.seed_save("steps-1")
        events = make_events(gen, "steps-1", cfg.steps_appends, "tool_call_begin")
        for kind in ("tool_call_end", "assistant_content_delta"):
            pool = make_events(gen, "steps-1", BATCH, kind)
            roots = {name: self.work.fresh(f"steps-{name}") for name in SIDES}
            with self.both(roots, OS_ONLY) as sides:
                for side in sides.values():  # untimed prefill, one session
                    side.save(seed)
                    for batch in range(1, cfg.steps_deltas // BATCH + 1):
                        side.save_events(seed, batch, pool)

                def run(name: str, _: int, sides: dict[str, Side] = sides) -> float:
                    append = functools.partial(sides[name].append, "steps-1")
                    return timed(each, append, events) / len(events)

                samples = alternate(cfg.reps, sides, run)
            for root in roots.values():
                remove(root)
            what = "tool-call events" if kind == "tool_call_end" else "deltas of 1 open step"
            label = f"[os] append_event after {cfg.steps_deltas:,} {what}"
            section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))
        section.notes.append(
            f"per-call latency of {cfg.steps_appends} tool_call_begin appends per sample into "
            "one session prefilled untimed (batches of 1,000). journal's append_event copies "
            "EventRules, which holds every delta of every unfinished model step"
        )

    # ----------------------------------------------------------------- 3. threads

    def w_threads(self, section: Section) -> None:
        gen = self.gen()
        ids = [f"thr-{i}" for i in range(4)]
        seeds = [self.seed_save(sid) for sid in ids]
        for mode in MODES:
            per_thread = self.cfg.thread_durable if mode is DURABLE else self.cfg.thread_os
            for shared in (True, False):
                targets = [ids[0]] * 4 if shared else ids
                events = [make_events(gen, sid, per_thread + 1) for sid in targets]

                def run(
                    name: str,
                    _: int,
                    mode: Mode = mode,
                    targets: list[str] = targets,
                    events: list[list[Ev]] = events,
                ) -> float:
                    with self.opened(name, mode, "threads") as side:
                        for seed in seeds[: len(set(targets))]:
                            side.save(seed)
                        side.settle()
                        elapsed = run_threads(side, targets, events)
                    return sum(len(e) - 1 for e in events) / elapsed

                samples = alternate(self.cfg.reps, SIDES, run)
                where = "1 shared session" if shared else "4 sessions (1 each)"
                label = f"{mode.label} append_event, 4 threads, {where}"
                row = section.add(Row(label, "ops/s", samples["journal"], samples["sqlite"]))
                scaling = [
                    statistics.median(samples[name]) / self.single_rates[(name, mode.name)]
                    for name in SIDES
                    if (name, mode.name) in self.single_rates
                ]
                if len(scaling) == 2:
                    row.note = f"vs 1 writer: journal {scaling[0]:.2f}x, sqlite {scaling[1]:.2f}x"
        section.notes.append(
            "each thread appends its events after one untimed warm-up append (which opens "
            "SQLite's per-thread connection); the clock runs from a barrier to the last join"
        )

    # -------------------------------------------------------------------- 4. save

    def w_save(self, section: Section) -> None:
        cfg = self.cfg
        rounds = cfg.save_rounds
        # Start below 50 KiB so that the timed saves (3 items each) average about 50 KiB.
        context_bytes = (
            payloads.CHECKPOINT_BYTES - payloads.METADATA_BYTES - 2 * KIB - rounds * 3 * KIB // 2
        )
        firsts: list[Save] = []
        timed_saves: list[Save] = []
        for i in range(cfg.save_sessions):
            sim = payloads.SessionSim(
                self.gen(), f"save-{i}", items=3, events=10, context_bytes=context_bytes
            )
            firsts.append(typed_save(sim.next_save(events=0)))
            timed_saves += [typed_save(sim.next_save()) for _ in range(rounds)]
        # round-robin over the sessions, like a store serving several agents
        order = [timed_saves[i * rounds + r] for r in range(rounds) for i in range(len(firsts))]
        sizes = [json_size(s.plain.checkpoint) for s in order]
        new_gen = self.gen()
        new_sessions = [
            typed_save(
                payloads.SaveArgs(
                    new_gen.checkpoint(f"new-{i}", first_user_message=new_gen.text(100)),
                    [],
                    None,
                    [],
                )
            )
            for i in range(cfg.new_sessions)
        ]
        for mode in MODES:

            def run(name: str, _: int, mode: Mode = mode) -> float:
                with self.opened(name, mode, "save") as side:
                    each(side.save, firsts)
                    side.settle()
                    gc.collect()
                    elapsed = timed(each, side.save, order)
                return elapsed / len(order)

            samples = alternate(cfg.reps, SIDES, run)
            label = f"{mode.label} save_with_events: ckpt + 3 items + 10 events"
            section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))
            if self.profile:
                self.profile_saves(firsts, order, mode)

        for mode in MODES:

            def run_new(name: str, _: int, mode: Mode = mode) -> float:
                with self.opened(name, mode, "new") as side:
                    side.settle()
                    gc.collect()
                    elapsed = timed(each, side.save, new_sessions)
                return elapsed / len(new_sessions)

            samples = alternate(cfg.reps, SIDES, run_new)
            label = f"{mode.label} first save of a new session (1 KiB ckpt)"
            section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))
        first_commit = max(len(msgspec.msgpack.encode(s.typed[0])) for s in new_sessions)

        def run_floor(name: str, _: int) -> float:
            if name == "journal":
                root = self.work.fresh("creation-floor")
                try:
                    return creation_floor(root, first_commit, len(new_sessions))
                finally:
                    remove(root)
            with self.opened(name, DURABLE, "new") as side:
                gc.collect()
                return timed(each, side.save, new_sessions) / len(new_sessions)

        samples = alternate(cfg.reps, SIDES, run_floor)
        label = "  floor: bare durable steps of a new session (no store)"
        section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))
        section.notes.append(
            f"{len(order)} timed saves per repetition, round-robin over {len(firsts)} sessions; "
            f"checkpoint JSON {min(sizes) // KIB}-{max(sizes) // KIB} KiB "
            f"(mean {statistics.mean(sizes) / KIB:.0f} KiB), each with 3 new context/transcript "
            "items and 10 events; sessions created untimed. Floor: what journal must do to "
            f"make a new session durable (a {first_commit} B first commit and an identity file "
            "written into a prepared spare and synced, the rename, the sync of sessions/) as "
            "plain os calls, no store, against SQLite's durable first save: below 1.00x, no "
            "code above those steps can match SQLite"
        )

    def profile_saves(self, firsts: list[Save], order: list[Save], mode: Mode) -> None:
        with self.opened("journal", mode, "profile") as side:
            each(side.save, firsts)
            self.run_profile(
                f"save_with_events {mode.legend}, {len(order)} saves",
                functools.partial(each, side.save, order),
                len(order),
            )

    # ---------------------------------------------------------- shared measuring

    @contextlib.contextmanager
    def both(self, roots: dict[str, Path], mode: Mode) -> Iterator[dict[str, Side]]:
        """Both stores opened on existing directories; closed afterwards."""
        sides: dict[str, Side] = {}
        try:
            for name, factory in SIDES.items():
                sides[name] = factory(roots[name], mode)
            yield sides
        finally:
            for side in sides.values():
                side.close()

    def compare_calls(self, calls: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
        """Seconds per call: a warm-up call each, then alternating repetitions of n calls.

        n is `page_calls`, or fewer when a call is slow (about `sample_seconds` per sample);
        both sides get the same n.
        """
        n = self.cfg.page_calls
        for call in calls.values():
            call()
            n = min(n, max(3, int(self.cfg.sample_seconds / max(timed(call), 1e-9))))
        return alternate(self.cfg.reps, calls, lambda name, _: timed(repeat, calls[name], n) / n)

    # -------------------------------------------------------------------- 5. page

    def w_page(self, section: Section) -> None:
        limit = 50
        small, large = self.cfg.page_histories
        rows: dict[tuple[int, str], Row] = {}
        for events in self.cfg.page_histories:
            history = self.history(events)
            sid = history.session_id
            with self.both(history.roots, OS_ONLY) as sides:
                for where, before in (("newest", None), ("deep", events // 2)):
                    samples = self.compare_calls(bind(sides, "event_page", sid, before, limit))
                    position = "newest" if before is None else f"deep (before {before:,})"
                    label = f"event_page({limit}), {events:,} events, {position}"
                    row = Row(label, "s", samples["journal"], samples["sqlite"], better="lower")
                    rows[(events, where)] = section.add(row)
                    if self.profile and events == large:
                        call = functools.partial(sides["journal"].event_page, sid, before, limit)
                        self.run_profile(
                            f"event_page(limit={limit}), {events:,} events, {where}",
                            functools.partial(repeat, call, 200),
                            200,
                        )
        for where in ("newest", "deep"):
            label = f"  time growth {small:,} -> {large:,} events ({where})"
            section.add(growth_row(label, rows[(small, where)], rows[(large, where)]))
        section.notes.append(
            "histories built untimed in os/NORMAL mode with save_with_events batches of 1,000 "
            "~1 KiB tool-call events; reads are the same in both modes; warm page cache; "
            f"{self.cfg.page_calls} calls per sample"
        )

    # -------------------------------------------------------------------- 6. open

    def w_open(self, section: Section) -> None:
        long = self.long_session()
        sid = long.session_id

        def cold(name: str, drop_caches: bool = False) -> float:
            root = long.roots[name]
            if drop_caches:
                for path in journal_session_dir(root, sid).iterdir():
                    if path.name == "snapshot" or path.suffix == ".idx":
                        path.unlink()
            gc.collect()
            start = time.perf_counter()
            side = SIDES[name](root, OS_ONLY)
            items = side.load(sid)
            elapsed = time.perf_counter() - start
            side.close()
            assert items == long.context_items
            return elapsed

        samples = alternate(self.cfg.reps, SIDES, lambda name, _: cold(name))
        label = f"open store + load(), session of {long.saves:,} saves"
        section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))
        rebuilt = [cold("journal", drop_caches=True) for _ in range(max(1, self.cfg.reps // 2))]
        label = "  journal, snapshot and index files deleted first"
        section.add(Row(label, "s", rebuilt, ratio=False, better="lower"))
        if self.profile:
            opened: list[Side] = []

            def open_and_load() -> None:
                side = JournalSide(long.roots["journal"], OS_ONLY)
                opened.append(side)
                side.load(sid)

            self.run_profile(
                f"open store + load(), {long.saves:,}-save session",
                functools.partial(repeat, open_and_load, 3),
                3,
            )
            for side in opened:
                side.close()
        section.notes.append(
            "new store object / connection each time (close untimed); warm page cache "
            "(dropping it is not possible here); the session was built in os/NORMAL mode: "
            f"{long.saves:,} saves of 2 items + 4 events, a turn record every 5th, context "
            f"compaction every 50th; the loaded checkpoint is {long.checkpoint_bytes // KIB} "
            f"KiB ({long.context_items} context items)"
        )

    # ------------------------------------------------------------------- 7. bytes

    def w_bytes(self, section: Section) -> None:
        cfg = self.cfg
        gen = self.gen()
        seed = self.seed_save("bytes-1")
        events = make_events(gen, "bytes-1", cfg.bytes_events)
        sim_static = payloads.SessionSim(self.gen(), "bytes-1", items=3, events=0)
        static_first = typed_save(sim_static.next_save())
        static = [
            typed_save(sim_static.next_save(items=0)) for _ in range(cfg.bytes_saves)
        ]  # context unchanged, no transcript
        sim_grow = payloads.SessionSim(self.gen(), "bytes-1", items=3, events=0)
        grow_first = typed_save(sim_grow.next_save())
        grow = [typed_save(sim_grow.next_save()) for _ in range(cfg.bytes_saves)]

        def measure(first: Save, work: Callable[[Side], object], count: int) -> dict[str, float]:
            """Bytes per unit: (footprint after - footprint after `first`) / count."""
            out: dict[str, float] = {}
            for name in SIDES:
                with self.opened(name, OS_ONLY, "bytes") as side:
                    side.save(first)
                    before = footprint(side)
                    work(side)
                    after = footprint(side)
                for key in after:
                    out[f"{name}.{key}"] = (after[key] - before[key]) / count
            return out

        def footprint(side: Side) -> dict[str, int]:
            if isinstance(side, SqliteSide):
                size = side.store.disk_bytes()  # after a TRUNCATE checkpoint
                return {"all": size, "no_caches": size, "log": size}
            assert isinstance(side, JournalSide)
            side.store.close()  # flush snapshot and indexes
            disk = JournalDisk.of(side.root)
            side.store = journal.open(side.root, durability=OS_ONLY.durability, **JOURNAL_OPTIONS)
            return {
                "all": disk.allocated,
                "no_caches": disk.allocated - disk.caches,
                "log": disk.log_used,
            }

        results = {
            "event": measure(
                seed, lambda s: each(functools.partial(s.append, "bytes-1"), events), len(events)
            ),
            "static": measure(static_first, lambda s: each(s.save, static), len(static)),
            "grow": measure(grow_first, lambda s: each(s.save, grow), len(grow)),
        }
        what = {
            "event": f"per event ({len(events):,} append_event)",
            "static": f"per save, same 50 KiB ckpt ({len(static)} saves)",
            "grow": f"per save, 50 KiB ckpt + 3 new items ({len(grow)} saves)",
        }
        for key, result in results.items():
            for part, suffix in (
                ("all", "du"),
                ("no_caches", "without index/snapshot files"),
                ("log", "log data only (no preallocated zeros)"),
            ):
                label = f"{what[key]}, {suffix}" if part == "all" else f"  {suffix}"
                j, s = result[f"journal.{part}"], result[f"sqlite.{part}"]
                section.add(Row(label, "B", [j], [s], better="lower"))
        event_json = statistics.mean(json_size(e.plain) for e in events)
        item_json = statistics.mean(json_size(i) for s in grow for i in s.plain.transcript_delta)
        section.notes.append(
            f"raw JSON: event ~{event_json:.0f} B, transcript item ~{item_json:.0f} B, "
            f"checkpoint ~{json_size(grow[0].plain.checkpoint) // KIB} KiB. journal: "
            "du of the store after close() (caches flushed); 'log data' leaves out the "
            "zeros preallocated at the end of the newest segment. sqlite: database + WAL after "
            "wal_checkpoint(TRUNCATE) (its indexes are inside the database, so all three "
            "sqlite figures are the same). Written in os/NORMAL mode (same bytes either way)"
        )

    # ------------------------------------------------------------------ 8. memory

    def w_memory(self, section: Section) -> None:
        large, small = self.cfg.memory_histories
        limit = 100
        capped: list[str] = []
        for events in (small, large):
            history = self.history(events)
            sid = history.session_id
            budget = {"journal": self.cfg.scan_seconds * 10, "sqlite": self.cfg.scan_seconds}
            progress(f"paging through {events:,} events on both sides")
            per_page: dict[str, list[float]] = {}
            first: dict[str, list[float]] = {}
            rest: dict[str, list[float]] = {}
            for name in SIDES:
                with contextlib.closing(SIDES[name](history.roots[name], OS_ONLY)) as side:
                    gc.collect()
                    start = time.perf_counter()
                    pages, seen, complete = page_through(side, sid, limit, budget[name])
                    per_page[name] = [(time.perf_counter() - start) / pages]
                if not complete:
                    capped.append(f"{name} {events:,}: {seen / events:.0%} in {pages:,} pages")
                with contextlib.closing(SIDES[name](history.roots[name], OS_ONLY)) as side:
                    gc.collect()
                    traced = traced_page_through(side, sid, limit, budget[name])
                first[name], rest[name] = [traced[3]], [traced[4]]
                if traced[2] and traced[1] != events:
                    raise AssertionError(f"{name} paged {traced[1]} of {events} events")
            label = f"{events:,} events, open session + first page"
            section.add(Row(label, "B", first["journal"], first["sqlite"], better="lower"))
            label = "  then every other page, newest to oldest"
            section.add(Row(label, "B", rest["journal"], rest["sqlite"], better="lower"))
            label = "  time per page (untraced pass)"
            section.add(Row(label, "s", per_page["journal"], per_page["sqlite"], better="lower"))
        history = self.history(small)
        one: dict[str, list[float]] = {}
        with self.both(history.roots, OS_ONLY) as sides:
            for name, side in sides.items():
                side.event_page(history.session_id, None, limit)
                gc.collect()
                tracemalloc.start()
                side.event_page(history.session_id, None, limit)
                one[name] = [tracemalloc.get_traced_memory()[1]]
                tracemalloc.stop()
        label = f"one event_page(limit={limit}) on an open session"
        section.add(Row(label, "B", one["journal"], one["sqlite"], better="lower"))
        section.notes.append(
            f"peak tracemalloc bytes while paging with event_page(limit={limit}); the store "
            "object is opened before tracing, the session is opened by the first page; "
            "tracemalloc sees the Python heap only, not SQLite's page cache. Histories built "
            "untimed with save_with_events batches of 1,000 ~1 KiB events in os/NORMAL mode"
        )
        if capped:
            section.notes.append(
                f"scan stopped at the time cap ({self.cfg.scan_seconds:.0f} s for sqlite): "
                + "; ".join(capped)
                + ". SQLite's deep pages cost O(depth) (see section 5), so its time per page "
                "covers the newest pages only and is optimistic"
            )

    # ------------------------------------------------------------------- 9. later

    def w_sessions(self, section: Section) -> None:
        catalog = self.catalog()
        with self.both(catalog.roots, OS_ONLY) as sides:
            middle = {n: seek_sessions(side, catalog.sessions // 2) for n, side in sides.items()}
            for where, cursors in (("first page", dict.fromkeys(SIDES)), ("middle", middle)):
                samples = self.compare_calls(
                    {
                        name: functools.partial(side.list_sessions_page, cursors[name], 50)
                        for name, side in sides.items()
                    }
                )
                label = f"list_sessions_page(50), {catalog.sessions:,} sessions, {where}"
                section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))
        section.notes.append(
            "sessions: one save each (1 KiB checkpoint + turn record), built in os mode. "
            f"journal held {catalog.journal_fds_per_session:.1f} open files per session it "
            "had written until close() (the builder reopens the store every "
            f"{REOPEN_EVERY:,} sessions; this machine allows "
            f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]:,})"
        )

    def w_transcript(self, section: Section) -> None:
        long = self.long_session()
        sid = long.session_id
        with self.both(long.roots, OS_ONLY) as sides:
            for method, n in (("transcript_page", 20), ("execution_page", 50)):
                for before in (None, long.saves // 2):
                    samples = self.compare_calls(bind(sides, method, sid, before, n))
                    where = "newest" if before is None else f"deep (before {before:,})"
                    label = f"{method}({n}), {long.saves:,} saves, {where}"
                    row = Row(label, "s", samples["journal"], samples["sqlite"], better="lower")
                    section.add(row)
        section.notes.append(
            f"the long session of section 6 ({long.saves:,} saves with 2 transcript items each, "
            f"{long.executions} turn records); transcript_page asks for 20 batches"
        )

    def w_recent(self, section: Section) -> None:
        catalog = self.catalog()
        with self.both(catalog.roots, OS_ONLY) as sides:
            samples = self.compare_calls(bind(sides, "recent_executions", 50))
        label = f"recent_executions(50), {catalog.sessions:,} sessions"
        section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))

    def w_fork(self, section: Section) -> None:
        reps = self.cfg.reps
        rows: list[Row] = []
        small = self.cfg.page_histories[0]
        for events in (small, self.cfg.fork_parent_events):
            history = self.history(events)
            point = history.saves // 2
            children = {
                name: [fork_save(history.sim, f"fork-{name}-{rep}") for rep in range(reps)]
                for name in SIDES
            }
            with self.both(history.roots, DURABLE) as sides:

                def run(
                    name: str,
                    rep: int,
                    sides: dict[str, Side] = sides,
                    history: History = history,
                    point: int = point,
                    children: dict[str, list[Save]] = children,
                ) -> float:
                    child = children[name][rep]
                    elapsed = timed(lambda: sides[name].fork(history.session_id, point, child))
                    sides[name].settle()
                    return elapsed

                samples = alternate(reps, SIDES, run)
                if events == small:
                    floor = self.fork_floor(sides["sqlite"], history, point)
            label = f"fork at sequence {point} of a {history.events:,}-event parent"
            row = Row(label, "s", samples["journal"], samples["sqlite"], better="lower")
            rows.append(section.add(row))
        label = f"  time growth {small:,} -> {self.cfg.fork_parent_events:,} events"
        section.add(growth_row(label, *rows))
        section.add(floor)
        section.notes.append(
            f"{DURABLE.legend}; the child is a clean sequence-0 checkpoint with 10 of the "
            "parent's transcript items; parents built in os/NORMAL mode. journal prepares a "
            "spare session directory in the background after a fork; the harness waits for "
            "it (untimed) before the other side's turn. The first fork of each parent's "
            "store finds no spare. Floor: what journal must do to make the child durable (its "
            "uncompressed first commit and an identity file written into a prepared spare and "
            "synced, the rename, the sync of sessions/) as plain os calls, no store, against "
            "SQLite's fork at the 1k-event parent: below 1.00x, no code above those steps can "
            "match SQLite"
        )

    def fork_floor(self, sqlite: Side, history: History, point: int) -> Row:
        """The bare durable steps of a fork (`creation_floor`, with a first commit the size
        of the child's) alternating with SQLite's fork of the same parent."""
        children = [fork_save(history.sim, f"fork-floor-{rep}") for rep in range(self.cfg.reps)]
        cp = children[0].typed[0]
        commit = len(msgspec.msgpack.encode(cp)) + len(msgspec.msgpack.encode(cp.context))

        def run(name: str, rep: int) -> float:
            if name == "sqlite":
                return timed(lambda: sqlite.fork(history.session_id, point, children[rep]))
            root = self.work.fresh("fork-floor")
            try:
                return creation_floor(root, commit, 5)
            finally:
                remove(root)

        samples = alternate(self.cfg.reps, SIDES, run)
        label = "  floor: bare durable steps of a fork (no store), 1k"
        return Row(label, "s", samples["journal"], samples["sqlite"], better="lower")

    def w_delete(self, section: Section) -> None:
        gen = self.gen()
        reps = self.cfg.reps
        trees = [make_tree(gen, f"tree{rep}") for rep in range(reps)]
        events = make_events(gen, "tree", 100)
        roots = {name: self.work.fresh(f"delete-{name}") for name in SIDES}
        with self.both(roots, DURABLE) as sides:
            for side in sides.values():
                for root, forks in trees:
                    side.save(root)
                    for event in events:
                        side.append(root.session_id, event)
                    for parent, child in forks:
                        side.fork(parent, 0, child)
                side.settle()

            def run(name: str, rep: int) -> float:
                root_id = trees[rep][0].session_id
                return timed(lambda: sides[name].delete_sessions([root_id]))

            samples = alternate(reps, SIDES, run)
        label = "delete_sessions([root]) of a tree of 10 sessions"
        section.add(Row(label, "s", samples["journal"], samples["sqlite"], better="lower"))
        section.notes.append(
            f"{DURABLE.legend}; root: 50 KiB save + 100 events; 3 children and 6 grandchildren "
            f"forked at sequence 0; {reps} trees in one store, one deleted per repetition"
        )


def journal_session_dir(root: Path, session_id: str) -> Path:
    store = journal.open(root, durability=OS_ONLY.durability, **JOURNAL_OPTIONS)
    try:
        return Path(store.session_dir(session_id))
    finally:
        store.close()


def make_tree(gen: payloads.PayloadGenerator, prefix: str) -> tuple[Save, list[tuple[str, Save]]]:
    """A root save and 9 (parent_id, child checkpoint) forks: 3 children, 2 grandchildren each."""
    sim = payloads.SessionSim(gen, f"{prefix}-root")
    root = typed_save(sim.next_save(events=0))
    forks: list[tuple[str, Save]] = []
    for c in range(3):
        child_id = f"{prefix}-c{c}"
        forks.append((root.session_id, fork_save(sim, child_id)))
        for g in range(2):
            forks.append((child_id, fork_save(sim, f"{child_id}-g{g}")))
    return root, forks


def fork_save(sim: payloads.SessionSim, child_id: str) -> Save:
    return typed_save(payloads.SaveArgs(sim.fork_checkpoint(child_id, items=10), [], None, []))


def floor_rate(path: Path, events: list[journal.Event], *, sync: bool, prealloc: bool) -> float:
    """Appends per second of the bare minimum: msgspec-encode one event, write it, fdatasync."""
    encode = msgspec.msgpack.encode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if prealloc:
            os.pwrite(fd, bytes(sum(len(encode(e)) for e in events) + 4096), 0)
            os.fsync(fd)
        gc.collect()
        start = time.perf_counter()
        if prealloc:
            offset = 0
            for event in events:
                data = encode(event)
                os.pwrite(fd, data, offset)
                offset += len(data)
                os.fdatasync(fd)
        else:
            for event in events:
                os.write(fd, encode(event))
                if sync:
                    os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return len(events) / elapsed


def creation_floor(root: Path, commit_bytes: int, count: int) -> float:
    """Seconds per new session of the bare durable steps that journal's creation of a
    session takes (FORMAT.md section 9), with no store and no Python work around them:
    on a spare directory prepared and synced beforehand (untimed), write an identity
    file and a first commit of `commit_bytes`, sync both (concurrently), rename the
    directory into sessions/, sync sessions/. The least a durable fork or first save
    can cost on this disk, whatever the code above it does."""
    sessions, tmp = root / "sessions", root / "tmp"
    sessions.mkdir(parents=True)
    tmp.mkdir()

    def sync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    spares = []
    for i in range(count):
        spare = tmp / f"spare-{i}"
        (spare / "log").mkdir(parents=True)
        for name in ("SESSION", "LOCK"):
            (spare / name).touch()
        with open(spare / "log" / "00000000000000000000.seg", "wb") as f:
            f.write(bytes(32))
            f.flush()
            os.fsync(f.fileno())
        sync_dir(spare / "log")
        sync_dir(spare)
        spares.append(spare)
    sync_dir(tmp)
    identity, commit = b"i" * 100, b"c" * commit_bytes
    pool = ThreadPoolExecutor(1)
    sessions_fd = os.open(sessions, os.O_RDONLY)
    try:
        gc.collect()
        start = time.perf_counter()
        for i, spare in enumerate(spares):
            ident = os.open(spare / "SESSION", os.O_WRONLY)
            segment = os.open(spare / "log" / "00000000000000000000.seg", os.O_WRONLY)
            os.pwrite(ident, identity, 0)
            os.pwrite(segment, commit, 32)
            synced = pool.submit(os.fsync, ident)
            os.fdatasync(segment)
            synced.result()
            os.rename(spare, sessions / f"s-{i}")
            os.fsync(sessions_fd)
            os.close(ident)
            os.close(segment)
        elapsed = time.perf_counter() - start
    finally:
        os.close(sessions_fd)
        pool.shutdown()
    return elapsed / count


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def page_through(
    side: Side,
    session_id: str,
    limit: int,
    seconds: float,
    after_first: Callable[[], None] | None = None,
) -> tuple[int, int, bool]:
    """Page newest to oldest until the end or `seconds`; return (pages, events, complete)."""
    deadline = time.perf_counter() + seconds
    before: int | None = None
    pages = seen = 0
    while True:
        count, before = side.event_page(session_id, before, limit)
        pages += 1
        seen += count
        if pages == 1 and after_first is not None:
            after_first()
        if before is None:
            return pages, seen, True
        if time.perf_counter() > deadline:
            return pages, seen, False


def traced_page_through(
    side: Side, session_id: str, limit: int, seconds: float
) -> tuple[int, int, bool, int, int]:
    """`page_through` under tracemalloc, adding the peak bytes of the first page (which opens
    the session) and the peak of all later pages."""
    peaks: list[int] = []

    def after_first() -> None:
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.reset_peak()

    tracemalloc.start()
    try:
        pages, seen, complete = page_through(side, session_id, limit, seconds, after_first)
        peaks.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    return pages, seen, complete, peaks[0], peaks[-1]


def seek_sessions(side: Side, skip: int) -> Any:
    """The cursor after the first `skip` sessions of the catalog."""
    cursor: Any = None
    seen = 0
    while seen < skip:
        count, cursor = side.list_sessions_page(cursor, min(500, skip - seen))
        seen += count
        if cursor is None:
            break
    return cursor


def run_threads(side: Side, targets: list[str], events: list[list[Ev]]) -> float:
    """Each thread appends its events to its target; seconds from the barrier to the last join."""
    barrier = threading.Barrier(len(targets) + 1)
    errors: list[BaseException] = []

    def worker(session_id: str, own: list[Ev]) -> None:
        try:
            side.append(session_id, own[0])  # warm-up (SQLite opens this thread's connection)
            barrier.wait()
            for event in own[1:]:
                side.append(session_id, event)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [
        threading.Thread(target=worker, args=(sid, own))
        for sid, own in zip(targets, events, strict=True)
    ]
    for thread in threads:
        thread.start()
    gc.collect()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def format_profile(profiler: cProfile.Profile, calls: int, top: int = 18) -> str:
    """Top functions by own time, with cumulative time, per call of the profiled operation."""
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in entries.values())
    rows = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:top]
    lines = [
        f"total {total * 1e3:.0f} ms over {calls} calls = {total / calls * 1e6:.0f} µs/call "
        "(profiler overhead included)",
        f"{'own µs/call':>11} {'own %':>6} {'cum µs/call':>11} {'ncalls':>8}  function",
    ]
    root = str(HERE.parent) + os.sep
    for (filename, line, name), (_, ncalls, tt, ct, _) in rows:
        where = filename.replace(root, "") if filename != "~" else ""
        func = f"{where}:{line}({name})" if where else name
        lines.append(
            f"{tt / calls * 1e6:>11.1f} {tt / total * 100:>5.1f}% {ct / calls * 1e6:>11.1f} "
            f"{ncalls:>8}  {func}"
        )
    return "\n".join(lines)


# -------------------------------------------------------------------------------------- main


WORKLOADS: dict[str, tuple[str, Callable[[Harness, Section], None]]] = {
    "floor": ("1. Floor: one unbatched durable append without a store", Harness.w_floor),
    "append": ("2. append_event, one writer", Harness.w_append),
    "steps": ("2b. append_event into a long session (os mode)", Harness.w_steps),
    "threads": ("3. append_event, 4 threads", Harness.w_threads),
    "save": ("4. save_with_events", Harness.w_save),
    "page": ("5. event_page latency vs history length", Harness.w_page),
    "open": ("6. Cold open + load of a long session", Harness.w_open),
    "bytes": ("7. Bytes on disk", Harness.w_bytes),
    "memory": ("8. Memory while paging a whole session", Harness.w_memory),
    "sessions": ("9a. list_sessions_page", Harness.w_sessions),
    "transcript": ("9b. transcript_page / execution_page", Harness.w_transcript),
    "recent": ("9c. recent_executions", Harness.w_recent),
    "fork": ("9d. fork", Harness.w_fork),
    "delete": ("9e. delete_sessions", Harness.w_delete),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    parser.add_argument("--only", default="", help="comma-separated workload names (see above)")
    parser.add_argument("--json", type=Path, help="also write every sample to this JSON file")
    parser.add_argument("--reps", type=int, help="repetitions per measurement")
    parser.add_argument("--profile", action="store_true", help="cProfile journal's append/save")
    parser.add_argument("--dir", type=Path, default=HERE / "out", help="where to make stores")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
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
        cfg = Config(**{**asdict(cfg), "reps": args.reps})
    names = selected(args.only)
    work = Workdir(args.dir, args.keep)
    info = machine_info(work)
    later_missing = [
        m for key in LATER for m in LATER_METHODS[key] if not hasattr(journal.Store, m)
    ]
    print(
        f"journal {info['journal']} vs mobius-schema SQLite {info['sqlite']} · Python "
        f"{info['python']} · msgspec {info['msgspec']} · {info['cpus']} CPUs · {info['platform']}"
    )
    print(
        f"{'quick' if cfg.quick else 'full'} run, median of {cfg.reps} alternating repetitions "
        f"unless stated · stores under {work.path}"
    )
    print(
        "ratio: > 1 means journal is better (journal/sqlite for ops/s; sqlite/journal for "
        "time, bytes, memory); [min-max] over paired repetitions"
    )
    print(f"modes: {DURABLE.legend}; {OS_ONLY.legend}; reads do not depend on the mode")
    dictionaries = "off (--no-dictionary)" if JOURNAL_OPTIONS.get("dictionary") is False else "on"
    print(f"journal's per-session zstd dictionaries: {dictionaries}")
    if later_missing:
        print(f"not implemented in journal yet: {', '.join(sorted(set(later_missing)))}")
    print()
    header = (
        f"{'workload':<{WIDTHS[0]}} {'journal':>{WIDTHS[1]}} {'sqlite':>{WIDTHS[2]}} "
        f"{'ratio':>{WIDTHS[3]}} {'[range]':<{WIDTHS[4]}} note"
    )
    print(header)
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
                    "rows": [
                        {
                            **asdict(r),
                            "journal_median": r.median("journal"),
                            "sqlite_median": r.median("sqlite"),
                            "ratio_value": r.ratio_value(),
                            "ratio_range": r.ratio_range(),
                        }
                        for r in s.rows
                    ],
                }
                for s in harness.sections
            ],
            "profiles": harness.profiles,
        }
        args.json.write_text(json.dumps(dump, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The harness: configuration, the shared fixtures (long histories, a long session,
catalogs of many sessions), and how a workload section runs and compares calls."""

from __future__ import annotations

import contextlib
import cProfile
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import payloads

import journal

from .config import BATCH, LATER_METHODS, REOPEN_EVERY, Config
from .measure import (
    Workdir,
    alternate,
    format_profile,
    open_fds,
    progress,
    remove,
    repeat,
    timed,
)
from .report import Row, Section, print_section, print_section_header
from .sides import OS_ONLY, SIDES, Ev, Mode, Save, Side, json_size, typed_save


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
    build_seconds: dict[str, float]  # untimed-loop wall time of the build, per side


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
        self._catalogs: dict[int, Catalog] = {}
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
        """A session with `events` retained events on every side, built in os/NORMAL mode."""
        if events in self._histories:
            return self._histories[events]
        session_id = f"hist-{events}"
        sim = payloads.SessionSim(self.gen(), session_id, events=0)
        first = typed_save(sim.next_save(events=0))
        pool = self.event_pool()
        roots = {side: self.work.fresh(f"history-{events}-{side}") for side in SIDES}
        progress(f"building a {events:,}-event history on every side (os/NORMAL, batches)")
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
        progress(f"building a {n:,}-save session on every side (os/NORMAL)")
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

    def catalog(self, n: int) -> Catalog:
        """`n` small sessions (one save with a turn record and 2 events each), os/NORMAL.

        Built by copying the largest smaller catalog (closed, so its files are complete) and
        adding the rest, so that 1k, 2k and 10k cost 10k creations. journal keeps the files
        of every session it has touched open until close(), so the builder reopens its store
        every REOPEN_EVERY sessions to stay under the fd limit.
        """
        if n in self._catalogs:
            return self._catalogs[n]
        smaller = [size for size in self._catalogs if size < n]
        roots = {side: self.work.fresh(f"catalog-{n}-{side}") for side in SIDES}
        start = 0
        seconds = dict.fromkeys(SIDES, 0.0)
        if smaller:
            base = self._catalogs[max(smaller)]
            start = base.sessions
            for name in SIDES:
                shutil.copytree(base.roots[name], roots[name], symlinks=True)
                seconds[name] = base.build_seconds[name]
        progress(f"building {n - start:,} more sessions ({n:,} in all) on every side (os/NORMAL)")
        fds_per_session = 0.0
        for first in range(start, n, REOPEN_EVERY):
            count = min(REOPEN_EVERY, n - first)
            saves = catalog_saves(first, count)
            with self.both(roots, OS_ONLY) as sides:
                for name, side in sides.items():
                    before = open_fds()
                    started = time.perf_counter()
                    for save in saves:
                        side.save(save)
                    seconds[name] += time.perf_counter() - started
                    if name == "journal":
                        fds_per_session = (open_fds() - before) / count
        for name in SIDES:
            progress(f"  {name}: {seconds[name]:.1f} s for {n:,} sessions")
        catalog = Catalog(roots, n, fds_per_session, seconds)
        self._catalogs[n] = catalog
        return catalog

    @contextlib.contextmanager
    def both(self, roots: dict[str, Path], mode: Mode) -> Iterator[dict[str, Side]]:
        """Every store opened on its existing directory; closed afterwards."""
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


def catalog_saves(first: int, count: int) -> list[Save]:
    """The saves of catalog sessions `first` .. `first + count - 1`: the same data whichever
    catalog they go in (one generator per REOPEN_EVERY block)."""
    gen = payloads.PayloadGenerator(50_000 + first)
    saves = []
    for i in range(first, first + count):
        session_id = catalog_id(i)
        checkpoint = gen.checkpoint(
            session_id, owner_id=f"owner-{i % 10}", first_user_message=gen.text(100)
        )
        events = gen.timestamped_events(session_id, 2, "tool_call_begin")
        args = payloads.SaveArgs(checkpoint, [], gen.execution_record(session_id), events)
        saves.append(typed_save(args))
    return saves


def catalog_id(i: int) -> str:
    return f"cat-{i:07d}"

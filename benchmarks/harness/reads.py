"""Read workloads: event pages against history length, a cold open of a long session,
bytes on disk, and memory while paging a whole session."""

from __future__ import annotations

import contextlib
import functools
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import payloads

import journal

from .config import KIB
from .core import Harness
from .disk import JournalDisk
from .measure import alternate, bind, each, page_through, progress, repeat, traced_page_through
from .report import Row, Section, growth_row
from .sides import (
    JOURNAL_OPTIONS,
    OS_ONLY,
    SIDES,
    SQLITE_SIDES,
    JournalSide,
    Save,
    Side,
    json_size,
    make_events,
    typed_save,
)


def w_page(h: Harness, section: Section) -> None:
    limit = 50
    small, large = h.cfg.page_histories
    rows: dict[tuple[int, str], Row] = {}
    for events in h.cfg.page_histories:
        history = h.history(events)
        sid = history.session_id
        with h.both(history.roots, OS_ONLY) as sides:
            for where, before in (("newest", None), ("deep", events // 2)):
                samples = h.compare_calls(bind(sides, "event_page", sid, before, limit))
                position = "newest" if before is None else f"deep (before {before:,})"
                label = f"event_page({limit}), {events:,} events, {position}"
                row = Row(label, "s", samples, better="lower")
                rows[(events, where)] = section.add(row)
                if h.profile and events == large:
                    call = functools.partial(sides["journal"].event_page, sid, before, limit)
                    h.run_profile(
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
        f"{h.cfg.page_calls} calls per sample"
    )


# -------------------------------------------------------------------- 6. open


def w_open(h: Harness, section: Section) -> None:
    long = h.long_session()
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

    samples = alternate(h.cfg.reps, SIDES, lambda name, _: cold(name))
    label = f"open store + load(), session of {long.saves:,} saves"
    section.add(Row(label, "s", samples, better="lower"))
    rebuilt = [cold("journal", drop_caches=True) for _ in range(max(1, h.cfg.reps // 2))]
    label = "  journal, snapshot and index files deleted first"
    section.add(Row.one(label, "s", rebuilt, better="lower"))
    if h.profile:
        opened: list[Side] = []

        def open_and_load() -> None:
            side = JournalSide(long.roots["journal"], OS_ONLY)
            opened.append(side)
            side.load(sid)

        h.run_profile(
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


def w_bytes(h: Harness, section: Section) -> None:
    cfg = h.cfg
    gen = h.gen()
    seed = h.seed_save("bytes-1")
    events = make_events(gen, "bytes-1", cfg.bytes_events)
    sim_static = payloads.SessionSim(h.gen(), "bytes-1", items=3, events=0)
    static_first = typed_save(sim_static.next_save())
    static = [
        typed_save(sim_static.next_save(items=0)) for _ in range(cfg.bytes_saves)
    ]  # context unchanged, no transcript
    sim_grow = payloads.SessionSim(h.gen(), "bytes-1", items=3, events=0)
    grow_first = typed_save(sim_grow.next_save())
    grow = [typed_save(sim_grow.next_save()) for _ in range(cfg.bytes_saves)]

    def measure(first: Save, work: Callable[[Side], object], count: int) -> dict[str, float]:
        """Bytes per unit: (footprint after - footprint after `first`) / count."""
        out: dict[str, float] = {}
        for name in SIDES:
            with h.opened(name, OS_ONLY, "bytes") as side:
                side.save(first)
                before = footprint(side)
                work(side)
                after = footprint(side)
            for key in after:
                out[f"{name}.{key}"] = (after[key] - before[key]) / count
        return out

    def footprint(side: Side) -> dict[str, int]:
        if isinstance(side, SQLITE_SIDES):
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
            values = {name: [result[f"{name}.{part}"]] for name in SIDES}
            section.add(Row(label, "B", values, better="lower"))
    event_json = statistics.mean(json_size(e.plain) for e in events)
    item_json = statistics.mean(json_size(i) for s in grow for i in s.plain.transcript_delta)
    section.notes.append(
        f"raw JSON: event ~{event_json:.0f} B, transcript item ~{item_json:.0f} B, "
        f"checkpoint ~{json_size(grow[0].plain.checkpoint) // KIB} KiB. journal: "
        "du of the store after close() (caches flushed); 'log data' leaves out the "
        "zeros preallocated at the end of the newest segment. SQLite (both): database + WAL "
        "after wal_checkpoint(TRUNCATE) (its indexes are inside the database, so all three "
        "SQLite figures are the same). Written in os/NORMAL mode (same bytes either way)"
    )


# ------------------------------------------------------------------ 8. memory


def w_memory(h: Harness, section: Section) -> None:
    large, small = h.cfg.memory_histories
    limit = 100
    capped: list[str] = []
    for events in (small, large):
        history = h.history(events)
        sid = history.session_id
        budget = {name: h.cfg.scan_seconds for name in SIDES}
        budget["journal"] = h.cfg.scan_seconds * 10
        progress(f"paging through {events:,} events on every side")
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
        section.add(Row(label, "B", first, better="lower"))
        label = "  then every other page, newest to oldest"
        section.add(Row(label, "B", rest, better="lower"))
        label = "  time per page (untraced pass)"
        section.add(Row(label, "s", per_page, better="lower"))
    history = h.history(small)
    one: dict[str, list[float]] = {}
    with h.both(history.roots, OS_ONLY) as sides:
        for name, side in sides.items():
            side.event_page(history.session_id, None, limit)
            gc.collect()
            tracemalloc.start()
            side.event_page(history.session_id, None, limit)
            one[name] = [tracemalloc.get_traced_memory()[1]]
            tracemalloc.stop()
    label = f"one event_page(limit={limit}) on an open session"
    section.add(Row(label, "B", one, better="lower"))
    section.notes.append(
        f"peak tracemalloc bytes while paging with event_page(limit={limit}); the store "
        "object is opened before tracing, the session is opened by the first page; "
        "tracemalloc sees the Python heap only, not SQLite's page cache. Histories built "
        "untimed with save_with_events batches of 1,000 ~1 KiB events in os/NORMAL mode"
    )
    if capped:
        section.notes.append(
            f"scan stopped at the time cap ({h.cfg.scan_seconds:.0f} s for SQLite): "
            + "; ".join(capped)
            + ". mobius's deep pages cost O(depth) (see section 5), so its time per page "
            "covers the newest pages only and is optimistic"
        )


# ------------------------------------------------------------------- 9. later


def journal_session_dir(root: Path, session_id: str) -> Path:
    store = journal.open(root, durability=OS_ONLY.durability, **JOURNAL_OPTIONS)
    try:
        return Path(store.session_dir(session_id))
    finally:
        store.close()

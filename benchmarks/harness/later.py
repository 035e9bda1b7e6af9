"""Catalog and tree workloads: list_sessions_page, transcript/execution pages,
recent_executions, fork and delete_sessions."""

from __future__ import annotations

import functools
import resource

import msgspec
import payloads

from .config import REOPEN_EVERY
from .core import Harness, History
from .measure import alternate, bind, creation_floor, remove, seek_sessions, timed
from .report import Row, Section, growth_row
from .sides import DURABLE, OS_ONLY, SIDES, Save, Side, make_events, typed_save


def catalog_sizes(h: Harness) -> tuple[int, ...]:
    """The smallest and the largest catalog of the run (flatness between them)."""
    sizes = h.cfg.catalog_sizes
    return (sizes[0], sizes[-1]) if len(sizes) > 1 else sizes


def w_sessions(h: Harness, section: Section) -> None:
    rows: dict[tuple[int, str], Row] = {}
    fds = 0.0
    for n in catalog_sizes(h):
        catalog = h.catalog(n)
        fds = catalog.journal_fds_per_session
        with h.both(catalog.roots, OS_ONLY) as sides:
            middle = {name: seek_sessions(side, n // 2) for name, side in sides.items()}
            for where, cursors in (("first page", dict.fromkeys(SIDES)), ("middle", middle)):
                samples = h.compare_calls(
                    {
                        name: functools.partial(side.list_sessions_page, cursors[name], 50)
                        for name, side in sides.items()
                    }
                )
                label = f"list_sessions_page(50), {n:,} sessions, {where}"
                rows[(n, where)] = section.add(Row(label, "s", samples, better="lower"))
    sizes = catalog_sizes(h)
    if len(sizes) == 2:
        for where in ("first page", "middle"):
            label = f"  time growth {sizes[0]:,} -> {sizes[1]:,} sessions ({where})"
            section.add(growth_row(label, rows[(sizes[0], where)], rows[(sizes[1], where)]))
    section.notes.append(
        "sessions: one save each (1 KiB checkpoint + turn record + 2 events), built in os "
        f"mode. journal held {fds:.1f} open files per session it had written until close() "
        f"(the builder reopens the store every {REOPEN_EVERY:,} sessions; this machine "
        f"allows {resource.getrlimit(resource.RLIMIT_NOFILE)[0]:,})"
    )


def w_transcript(h: Harness, section: Section) -> None:
    long = h.long_session()
    sid = long.session_id
    with h.both(long.roots, OS_ONLY) as sides:
        for method, n in (("transcript_page", 20), ("execution_page", 50)):
            for before in (None, long.saves // 2):
                samples = h.compare_calls(bind(sides, method, sid, before, n))
                where = "newest" if before is None else f"deep (before {before:,})"
                label = f"{method}({n}), {long.saves:,} saves, {where}"
                row = Row(label, "s", samples, better="lower")
                section.add(row)
    section.notes.append(
        f"the long session of section 6 ({long.saves:,} saves with 2 transcript items each, "
        f"{long.executions} turn records); transcript_page asks for 20 batches"
    )


def w_recent(h: Harness, section: Section) -> None:
    rows = []
    for n in catalog_sizes(h):
        catalog = h.catalog(n)
        with h.both(catalog.roots, OS_ONLY) as sides:
            samples = h.compare_calls(bind(sides, "recent_executions", 50))
        label = f"recent_executions(50), {n:,} sessions"
        rows.append(section.add(Row(label, "s", samples, better="lower")))
    if len(rows) == 2:
        sizes = catalog_sizes(h)
        label = f"  time growth {sizes[0]:,} -> {sizes[1]:,} sessions"
        section.add(growth_row(label, *rows))


def w_fork(h: Harness, section: Section) -> None:
    reps = h.cfg.reps
    rows: list[Row] = []
    small = h.cfg.page_histories[0]
    for events in (small, h.cfg.fork_parent_events):
        history = h.history(events)
        point = history.saves // 2
        children = {
            name: [fork_save(history.sim, f"fork-{name}-{rep}") for rep in range(reps)]
            for name in SIDES
        }
        cp = children["journal"][0].typed[0]
        commit = len(msgspec.msgpack.encode(cp)) + len(msgspec.msgpack.encode(cp.context))
        with h.both(history.roots, DURABLE) as sides:

            def run(
                name: str,
                rep: int,
                sides: dict[str, Side] = sides,
                history: History = history,
                point: int = point,
                children: dict[str, list[Save]] = children,
                commit: int = commit,
            ) -> float:
                if name == "floor":
                    root = h.work.fresh("fork-floor")
                    try:
                        return creation_floor(root, commit, 5)
                    finally:
                        remove(root)
                child = children[name][rep]
                elapsed = timed(lambda: sides[name].fork(history.session_id, point, child))
                sides[name].settle()
                return elapsed

            names = [*SIDES, "floor"] if events == small else list(SIDES)
            samples = alternate(reps, names, run)
        label = f"fork at sequence {point} of a {history.events:,}-event parent"
        rows.append(section.add(Row(label, "s", samples, better="lower")))
    label = f"  time growth {small:,} -> {h.cfg.fork_parent_events:,} events"
    section.add(growth_row(label, *rows))
    section.notes.append(
        f"{DURABLE.legend}; the child is a clean sequence-0 checkpoint with 10 of the "
        "parent's transcript items; parents built in os/NORMAL mode. journal prepares a "
        "spare session directory in the background after a fork; the harness waits for "
        "it (untimed) before the next store's turn. The first fork of each parent's "
        "store finds no spare. Floor (1k row): what journal must do to make the child "
        "durable (its uncompressed first commit and an identity file written into a prepared "
        "spare and synced, the rename, the sync of sessions/) as plain os calls, no store"
    )


def w_delete(h: Harness, section: Section) -> None:
    gen = h.gen()
    reps = h.cfg.reps
    trees = [make_tree(gen, f"tree{rep}") for rep in range(reps)]
    events = make_events(gen, "tree", 100)
    roots = {name: h.work.fresh(f"delete-{name}") for name in SIDES}
    with h.both(roots, DURABLE) as sides:
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
    section.add(Row(label, "s", samples, better="lower"))
    section.notes.append(
        f"{DURABLE.legend}; root: 50 KiB save + 100 events; 3 children and 6 grandchildren "
        f"forked at sequence 0; {reps} trees in one store, one deleted per repetition"
    )


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

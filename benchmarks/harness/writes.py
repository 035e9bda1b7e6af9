"""Write workloads: the append floor, append_event (one writer, long sessions, threads)
and save_with_events (a 50 KiB checkpoint, a session's first save)."""

from __future__ import annotations

import functools
import gc
import statistics

import msgspec
import payloads

import journal

from .config import BATCH, KIB
from .core import Harness
from .measure import alternate, creation_floor, each, floor_rate, remove, run_threads, timed
from .report import Row, Section
from .sides import (
    DURABLE,
    MODES,
    OS_ONLY,
    SIDES,
    Ev,
    Mode,
    Save,
    Side,
    json_size,
    make_events,
    typed_save,
)


def w_floor(h: Harness, section: Section) -> None:
    events = [e.typed for e in make_events(h.gen(), "floor", h.cfg.floor_ops)]
    size = sum(len(msgspec.msgpack.encode(e)) for e in events) // len(events)

    variants = {"append": (True, False), "prealloc": (True, True), "nosync": (False, False)}

    def run(name: str, _: int) -> float:
        sync, prealloc = variants[name]
        return floor_rate(h.work.fresh("floor"), events, sync=sync, prealloc=prealloc)

    samples = alternate(h.cfg.reps, variants, run)
    label = "encode + os.write + os.fdatasync (file grows)"
    section.add(Row.one(label, "ops/s", samples["append"]))
    label = "encode + os.pwrite into preallocated + os.fdatasync"
    section.add(Row.one(label, "ops/s", samples["prealloc"]))
    label = "encode + os.write, no sync (floor for os mode)"
    section.add(Row.one(label, "ops/s", samples["nosync"]))
    section.notes.append(
        f"{len(events)} events of ~{size} B msgpack; no store involved (the figures are in "
        "the journal column). Section 2 measures the first floor again, interleaved with "
        "the durable appends, and reports append_event as a fraction of it"
    )


# ------------------------------------------------------------------ 2. append


def w_append(h: Harness, section: Section) -> None:
    gen = h.gen()
    seed = h.seed_save("append-1")
    for mode in MODES:
        n = h.cfg.append_durable if mode is DURABLE else h.cfg.append_os
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
                return floor_rate(h.work.fresh("floor"), typed, sync=True, prealloc=False)
            with h.opened(name, mode, "append") as side:
                side.save(seed)
                side.settle()
                gc.collect()
                elapsed = timed(each, functools.partial(side.append, "append-1"), events)
            return len(events) / elapsed

        # durable: the floor runs interleaved too, as the disk's speed drifts over minutes
        names = [*SIDES, "floor"] if mode is DURABLE else list(SIDES)
        samples = alternate(h.cfg.reps, names, run)
        label = f"{mode.label} append_event, 1 writer, {n:,} events"
        section.add(Row(label, "ops/s", samples))
        for name in SIDES:
            h.single_rates[(name, mode.name)] = statistics.median(samples[name])
        if mode is DURABLE:
            floor = samples["floor"]
            fraction = {
                name: [r / f for r, f in zip(samples[name], floor, strict=True)] for name in SIDES
            }
            label = "  = fraction of the floor (encode+write+fdatasync)"
            row = Row(label, "x", fraction, ratio=False)
            row.note = f"floor measured alongside: {statistics.median(floor):,.0f}/s"
            section.add(row)
        if h.profile:
            profile_appends(h, seed, events, mode)
    section.notes.append(
        "events: the generator's default mix (60% assistant_content_delta of one model "
        "step, 40% tool calls), ~1 KiB each; fresh store per repetition, session created "
        "untimed by a 50 KiB save"
    )


def profile_appends(h: Harness, seed: Save, events: list[Ev], mode: Mode) -> None:
    with h.opened("journal", mode, "profile") as side:
        side.save(seed)
        h.run_profile(
            f"append_event {mode.legend}, {len(events)} events",
            functools.partial(each, functools.partial(side.append, "append-1"), events),
            len(events),
        )


# ------------------------------------------------------------- 2b. open steps


def w_steps(h: Harness, section: Section) -> None:
    """append_event into a session already holding many events: tool calls vs deltas of
    one unfinished model step (journal keeps those deltas in its head state)."""
    cfg = h.cfg
    gen = h.gen()
    seed = h.seed_save("steps-1")
    events = make_events(gen, "steps-1", cfg.steps_appends, "tool_call_begin")
    for kind in ("tool_call_end", "assistant_content_delta"):
        pool = make_events(gen, "steps-1", BATCH, kind)
        roots = {name: h.work.fresh(f"steps-{name}") for name in SIDES}
        with h.both(roots, OS_ONLY) as sides:
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
        section.add(Row(label, "s", samples, better="lower"))
    section.notes.append(
        f"per-call latency of {cfg.steps_appends} tool_call_begin appends per sample into "
        "one session prefilled untimed (batches of 1,000). journal's append_event copies "
        "EventRules, which holds every delta of every unfinished model step"
    )


# ----------------------------------------------------------------- 3. threads


def w_threads(h: Harness, section: Section) -> None:
    gen = h.gen()
    ids = [f"thr-{i}" for i in range(4)]
    seeds = [h.seed_save(sid) for sid in ids]
    for mode in MODES:
        per_thread = h.cfg.thread_durable if mode is DURABLE else h.cfg.thread_os
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
                with h.opened(name, mode, "threads") as side:
                    for seed in seeds[: len(set(targets))]:
                        side.save(seed)
                    side.settle()
                    elapsed = run_threads(side, targets, events)
                return sum(len(e) - 1 for e in events) / elapsed

            samples = alternate(h.cfg.reps, SIDES, run)
            where = "1 shared session" if shared else "4 sessions (1 each)"
            label = f"{mode.label} append_event, 4 threads, {where}"
            row = section.add(Row(label, "ops/s", samples))
            scaling = [
                statistics.median(samples[name]) / h.single_rates[(name, mode.name)]
                for name in SIDES
                if (name, mode.name) in h.single_rates
            ]
            if len(scaling) == 2:
                row.note = f"vs 1 writer: journal {scaling[0]:.2f}x, sqlite {scaling[1]:.2f}x"
    section.notes.append(
        "each thread appends its events after one untimed warm-up append (which opens "
        "SQLite's per-thread connection); the clock runs from a barrier to the last join"
    )


# -------------------------------------------------------------------- 4. save


def w_save(h: Harness, section: Section) -> None:
    cfg = h.cfg
    rounds = cfg.save_rounds
    # Start below 50 KiB so that the timed saves (3 items each) average about 50 KiB.
    context_bytes = (
        payloads.CHECKPOINT_BYTES - payloads.METADATA_BYTES - 2 * KIB - rounds * 3 * KIB // 2
    )
    firsts: list[Save] = []
    timed_saves: list[Save] = []
    for i in range(cfg.save_sessions):
        sim = payloads.SessionSim(
            h.gen(), f"save-{i}", items=3, events=10, context_bytes=context_bytes
        )
        firsts.append(typed_save(sim.next_save(events=0)))
        timed_saves += [typed_save(sim.next_save()) for _ in range(rounds)]
    # round-robin over the sessions, like a store serving several agents
    order = [timed_saves[i * rounds + r] for r in range(rounds) for i in range(len(firsts))]
    sizes = [json_size(s.plain.checkpoint) for s in order]
    new_gen = h.gen()
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
            with h.opened(name, mode, "save") as side:
                each(side.save, firsts)
                side.settle()
                gc.collect()
                elapsed = timed(each, side.save, order)
            return elapsed / len(order)

        samples = alternate(cfg.reps, SIDES, run)
        label = f"{mode.label} save_with_events: ckpt + 3 items + 10 events"
        section.add(Row(label, "s", samples, better="lower"))
        if h.profile:
            profile_saves(h, firsts, order, mode)

    first_commit = max(len(msgspec.msgpack.encode(s.typed[0])) for s in new_sessions)
    for mode in MODES:

        def run_new(name: str, _: int, mode: Mode = mode) -> float:
            if name == "floor":
                root = h.work.fresh("creation-floor")
                try:
                    return creation_floor(root, first_commit, len(new_sessions))
                finally:
                    remove(root)
            with h.opened(name, mode, "new") as side:
                side.settle()
                gc.collect()
                elapsed = timed(each, side.save, new_sessions)
            return elapsed / len(new_sessions)

        names = [*SIDES, "floor"] if mode is DURABLE else list(SIDES)
        samples = alternate(cfg.reps, names, run_new)
        label = f"{mode.label} first save of a new session (1 KiB ckpt)"
        section.add(Row(label, "s", samples, better="lower"))
    section.notes.append(
        f"{len(order)} timed saves per repetition, round-robin over {len(firsts)} sessions; "
        f"checkpoint JSON {min(sizes) // KIB}-{max(sizes) // KIB} KiB "
        f"(mean {statistics.mean(sizes) / KIB:.0f} KiB), each with 3 new context/transcript "
        "items and 10 events; sessions created untimed. The floor of a first save: what "
        f"journal must do to make a new session durable (a {first_commit} B first commit and "
        "an identity file written into a prepared spare and synced, the rename, the sync of "
        "sessions/) as plain os calls, no store: where it is slower than SQLite's first save, "
        "no code above those steps can match SQLite"
    )


def profile_saves(h: Harness, firsts: list[Save], order: list[Save], mode: Mode) -> None:
    with h.opened("journal", mode, "profile") as side:
        each(side.save, firsts)
        h.run_profile(
            f"save_with_events {mode.legend}, {len(order)} saves",
            functools.partial(each, side.save, order),
            len(order),
        )


# ---------------------------------------------------------- shared measuring

"""Issue 17's write-side workloads: a save of an opaque 50 KiB state against its floor, creating
many sessions, the disk of many small sessions, and middleware state."""

from __future__ import annotations

import gc
import os
import statistics
import time
from pathlib import Path

import msgspec
import payloads

from .config import KIB
from .core import Harness
from .measure import alternate, each, progress, remove, timed
from .report import Row, Section
from .sides import DURABLE, MODES, OS_ONLY, SIDES, Mode, Save, json_size, typed_save

BLOB_BYTES = 50 * KIB
BLOB_SESSIONS = 2


def blob_saves(gen: payloads.PayloadGenerator, session_id: str, n: int) -> list[Save]:
    """Sequences 0..n of one session: each save carries a new ~50 KiB opaque state in
    `metadata` (a structured value: a tool catalog with descriptions), an empty context, 3
    transcript items, an execution record and 10 ~1 KiB events."""
    saves = []
    for sequence in range(n + 1):
        checkpoint = gen.checkpoint(
            session_id,
            sequence=sequence,
            metadata=gen.metadata(BLOB_BYTES),
            first_user_message=gen.text(100),
        )
        args = payloads.SaveArgs(
            checkpoint,
            gen.transcript_items(3),
            gen.execution_record(session_id),
            gen.timestamped_events(session_id, 10),
        )
        saves.append(typed_save(args))
    return saves


def save_floor(path: Path, saves: list[Save], *, sync: bool) -> float:
    """Seconds per save of the bare minimum: msgspec-encode the save's typed parts, one
    `os.write` to an open file, one `os.fdatasync` (none with `sync=False`)."""
    encode = msgspec.msgpack.encode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        gc.collect()
        start = time.perf_counter()
        for save in saves:
            os.write(fd, encode(save.typed))
            if sync:
                os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return elapsed / len(saves)


def w_blob(h: Harness, section: Section) -> None:
    """save_with_events of an opaque 50 KiB state, durable and os, with the floor alongside."""
    cfg = h.cfg
    rounds = max(1, cfg.blob_saves // BLOB_SESSIONS)
    sessions = [blob_saves(h.gen(), f"blob-{i}", rounds) for i in range(BLOB_SESSIONS)]
    firsts = [s[0] for s in sessions]
    order = [sessions[i][r] for r in range(1, rounds + 1) for i in range(BLOB_SESSIONS)]
    for mode in MODES:

        def run(name: str, _: int, mode: Mode = mode) -> float:
            if name == "floor":
                return save_floor(h.work.fresh("save-floor"), order, sync=mode is DURABLE)
            with h.opened(name, mode, "blob") as side:
                each(side.save, firsts)
                side.settle()
                gc.collect()
                elapsed = timed(each, side.save, order)
            return elapsed / len(order)

        samples = alternate(cfg.reps, [*SIDES, "floor"], run)
        label = f"{mode.label} save_with_events: 50 KiB state + 3 items + exec + 10 ev"
        section.add(Row(label, "s", samples, better="lower"))
    size = statistics.mean(json_size(s.plain.checkpoint) for s in order)
    encoded = statistics.mean(len(msgspec.msgpack.encode(s.typed)) for s in order)
    section.notes.append(
        f"{len(order)} timed saves per repetition, round-robin over {BLOB_SESSIONS} sessions "
        f"created untimed; checkpoint JSON ~{size / KIB:.0f} KiB (metadata: a new ~50 KiB "
        "structured value per save; context empty), 3 ~1 KiB transcript items, an execution "
        f"record and 10 ~1 KiB events. Floor: msgspec encode of the save (~{encoded / KIB:.0f} "
        "KiB msgpack) + one os.write + one os.fdatasync on an open file (durable), without the "
        "fdatasync (os)"
    )


def w_bulk(h: Harness, section: Section) -> None:
    """Creating many sessions through each store's best available path, os/NORMAL."""
    cfg = h.cfg
    n = cfg.bulk_sessions
    gen = h.gen()
    saves = []
    for i in range(n):
        session_id = f"bulk-{i:07d}"
        checkpoint = gen.checkpoint(
            session_id, owner_id=f"owner-{i % 10}", first_user_message=gen.text(100)
        )
        events = gen.timestamped_events(session_id, 2, "tool_call_begin")
        saves.append(typed_save(payloads.SaveArgs(checkpoint, [], None, events)))

    def run(name: str, _: int) -> float:
        with h.opened(name, OS_ONLY, "bulk") as side:
            side.settle()
            gc.collect()
            elapsed = timed(side.bulk_create, saves)
        return elapsed

    samples = alternate(cfg.bulk_reps, SIDES, run)
    label = f"[os] create {n:,} sessions (1 KiB ckpt + 2 events each)"
    section.add(Row(label, "s", samples, better="lower"))
    per_second = {name: [n / s for s in values] for name, values in samples.items()}
    section.add(Row("  = sessions per second", "ops/s", per_second))
    section.notes.append(
        "best available path of each store: journal has no bulk API, so a loop of "
        "save_with_events (store reopened every 2,000 sessions, included); mobius: a loop of "
        "save_with_events (one transaction each); tuned: save_many, 1,000 saves per "
        "transaction. os mode / synchronous=NORMAL"
    )


def w_disk(h: Harness, section: Section) -> None:
    """du of many small sessions of a few turns each, and of the long session."""
    cfg = h.cfg
    n, turns = cfg.disk_sessions, cfg.disk_turns
    gen = h.gen()
    saves: list[Save] = []
    for i in range(n):
        sim = payloads.SessionSim(
            gen,
            f"disk-{i:06d}",
            owner_id=f"owner-{i % 10}",
            context_bytes=2 * KIB,
            metadata_bytes=KIB,
            items=2,
            events=4,
        )
        saves += [typed_save(sim.next_save(execution=t > 0)) for t in range(turns)]
    values: dict[str, list[float]] = {}
    for name in SIDES:
        root = h.work.fresh(f"disk-{name}")
        side = SIDES[name](root, OS_ONLY)
        try:
            started = time.perf_counter()
            each(side.save, saves)
            side.settle()
            values[name] = [side.disk()]
            progress(f"  {name}: {len(saves):,} saves in {time.perf_counter() - started:.1f} s")
        finally:
            side.close()
            remove(root)
    label = f"du of {n:,} sessions of {turns} turns"
    section.add(Row(label, "B", values, better="lower"))
    long = h.long_session()
    long_du: dict[str, list[float]] = {}
    for name in SIDES:
        side = SIDES[name](long.roots[name], OS_ONLY)
        try:
            long_du[name] = [side.disk()]
        finally:
            side.close()
    label = f"du of the long session ({long.saves:,} saves, section 6)"
    section.add(Row(label, "B", long_du, better="lower"))
    turn = statistics.mean(json_size(s.plain.checkpoint) for s in saves)
    section.notes.append(
        f"a turn: one save_with_events of a ~{turn / KIB:.0f} KiB checkpoint (2 KiB base "
        "context, 1 KiB metadata, growing by the turn's items) with 2 new ~1 KiB transcript "
        "items, 4 ~1 KiB events and, after the first, an execution record; built in os/NORMAL "
        "mode. du: allocated blocks of every file and directory, journal after a clean close "
        "(caches written), SQLite after wal_checkpoint(TRUNCATE)"
    )


def w_state(h: Harness, section: Section) -> None:
    """save_state + load_state of a 1 KiB value, durable and os."""
    cfg = h.cfg
    gen = h.gen()
    values = [{"tasks": gen.text(KIB - 20), "n": i} for i in range(cfg.state_ops)]
    size = statistics.mean(json_size(v) for v in values)
    seed = h.seed_save("state-owner")
    for mode in MODES:

        def run(name: str, _: int, mode: Mode = mode) -> float:
            with h.opened(name, mode, "state") as side:
                side.save(seed)
                side.save_state("state-owner", "warm", {"x": 1})
                side.settle()
                gc.collect()
                start = time.perf_counter()
                for i, value in enumerate(values):
                    key = f"key-{i % 10}"
                    side.save_state("state-owner", key, value)
                    side.load_state("state-owner", key)
                elapsed = time.perf_counter() - start
            return elapsed / len(values)

        samples = alternate(cfg.reps, SIDES, run)
        label = f"{mode.label} save_state + load_state, 1 KiB value"
        section.add(Row(label, "s", samples, better="lower"))
    section.notes.append(
        f"{cfg.state_ops} pairs per repetition over 10 keys of one scope (a session's id), "
        f"values ~{size:.0f} B JSON; each save_state is durable on its own in the durable "
        "mode (journal: its state file; SQLite: one autocommit statement)"
    )

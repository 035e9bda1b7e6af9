"""Smoke check of `sqlite_tuned.SqliteTunedStore`: `python benchmarks/sqlite_tuned.py`.

Runs every method, checks the pragmas, the query plans (index ranges, no sorting), the
rejections, and, side by side with `SqliteMobiusStore` on the same payloads, that both stores
give the same answers (checkpoints, event pages with their compaction side effects, transcript
and execution pages, catalog pages, recent executions, fork, tree deletion, state).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import payloads
from sqlite_mobius import SqliteMobiusError, SqliteMobiusStore, Synchronous
from sqlite_tuned import _EVENT_PAGE, _LIST, SqliteTunedStore

Json = Any


def expect_error(message: str, call: Any, *args: Any) -> None:
    try:
        call(*args)
    except SqliteMobiusError as error:
        assert message in str(error), (message, str(error))
    else:
        raise AssertionError(f"expected {message!r}")


def plan(store: SqliteTunedStore, sql: str, params: tuple[Any, ...]) -> str:
    db = store._conn().db
    return " | ".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def events_of(page: Any) -> list[tuple[int, Json]]:
    return [(e["sequence"], e["event"]) for e in page.events]


def metrics_of(page: Any) -> list[Json]:
    return [sorted(e["stream_metrics"], key=lambda m: m["phase"]) for e in page.events]


def smoke() -> None:
    root = Path(tempfile.mkdtemp(prefix="sqlite-tuned-"))
    tuned = SqliteTunedStore(root / "nested" / "tuned.sqlite")
    mobius = SqliteMobiusStore(root / "mobius.sqlite")
    both = (tuned, mobius)
    db = tuned._conn().db
    pragmas = {
        name: db.execute(f"PRAGMA {name}").fetchone()[0]
        for name in (
            "journal_mode",
            "synchronous",
            "cache_size",
            "mmap_size",
            "temp_store",
            "foreign_keys",
            "auto_vacuum",
        )
    }
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 2,
        "cache_size": -65536,
        "mmap_size": 256 * 1024 * 1024,
        "temp_store": 2,
        "foreign_keys": 0,
        "auto_vacuum": 0,
    }, pragmas
    print(f"pragmas ok: {pragmas}")

    # Plans: every page is a range of a b-tree in its order, never a sort.
    plans = {
        "event_page": plan(tuned, _EVENT_PAGE, (1, 2, 3)),
        "list": plan(tuned, _LIST[(False, True)], (1, 2, "x", 3)),
        "list owner": plan(tuned, _LIST[(True, True)], ("o", 1, 2, "x", 3)),
        "recent": plan(
            tuned,
            "SELECT record FROM executions ORDER BY started_at_ms DESC, sid DESC, k DESC LIMIT ?",
            (5,),
        ),
    }
    assert "INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in plans["event_page"], plans
    assert "sessions_recent" in plans["list"], plans
    assert "sessions_owner" in plans["list owner"], plans
    assert "executions_recent" in plans["recent"], plans
    assert not any("TEMP B-TREE" in text for text in plans.values()), plans
    print(f"plans ok: {plans}")

    gen = payloads.PayloadGenerator(seed=7)
    sim = payloads.SessionSim(gen, "sess-a", owner_id="owner-a")
    first = sim.next_save(events=3)
    for store in both:
        assert store.save_with_events(*first) == [1, 2, 3]
        assert store.load("sess-a") == first.checkpoint
    executions = []
    last = first
    for n in range(1, 4):
        last = sim.next_save(events=2, execution=True, pending_message=n == 2)
        executions.append(last.execution)
        for store in both:
            assert store.save_with_events(*last) == [2 * n + 2, 2 * n + 3]
    assert tuned.load("sess-a") == mobius.load("sess-a") == last.checkpoint
    receipts = db.execute("SELECT submission_id FROM receipts").fetchall()
    assert len(receipts) == 1, receipts
    for sub in (receipts[0][0], "never-sent"):
        assert tuned.message_accepted("sess-a", sub) == mobius.message_accepted("sess-a", sub)
    assert tuned.message_accepted("sess-a", receipts[0][0])
    print("save_with_events/load ok: sequences 1..9, both stores load the same checkpoint")

    # Rejections, on both stores with the same messages; nothing changes.
    stale = dict(last.checkpoint)
    edited = dict(last.checkpoint, sequence=10, context=[{"edited": True}, *stale["context"][1:]])
    truncated = dict(last.checkpoint, sequence=10, context=stale["context"][:-1])
    for store in both:
        expect_error("did not advance", store.save_with_events, stale, [], None, [])
        expect_error("prefix changed", store.save_with_events, edited, [], None, [])
        expect_error("truncated", store.save_with_events, truncated, [], None, [])
        assert store.load("sess-a") == last.checkpoint
    # A new connection (no hint: the stored chunks are read and compared) accepts the tail;
    # a new connection also rejects a changed prefix.
    cold = SqliteTunedStore(tuned.path)
    expect_error("prefix changed", cold.save_with_events, edited, [], None, [])
    cold_save = sim.next_save(events=0)
    cold.save_with_events(*cold_save)
    cold.close()
    mobius.save_with_events(*cold_save)
    # This connection's hint is stale now (another connection wrote): it reads the rows.
    again = sim.next_save(events=0)
    for store in both:
        store.save_with_events(*again)
    assert tuned.load("sess-a") == mobius.load("sess-a") == again.checkpoint
    print("rejections ok: stale sequence, changed/truncated prefix; cold and stale hints ok")

    # Epoch: a higher one replaces the context, a lower one is rejected.
    sim.compact(keep=3)
    compacted = sim.next_save(events=0)
    for store in both:
        store.save_with_events(*compacted)
        assert store.load("sess-a") == compacted.checkpoint
        backwards = dict(compacted.checkpoint, sequence=99, context_epoch=0)
        expect_error("cannot move backwards", store.save_with_events, backwards, [], None, [])
    rows = db.execute("SELECT count(*) FROM context").fetchone()[0]
    assert rows == 1, rows
    print("context epoch ok: one chunk after the rewrite, no way back")

    # Events, with every side effect, compared with mobius.
    for _ in range(11):
        at, event = gen.tick(), gen.event("sess-a")
        assert tuned.append_event("sess-a", at, event) == mobius.append_event("sess-a", at, event)
    turn = gen.turn_events("sess-a", deltas=4)
    for at, event in turn:
        assert tuned.append_event("sess-a", at, event) == mobius.append_event("sess-a", at, event)
    batch = gen.turn_events("sess-a", deltas=3)
    batch.append((gen.tick(), gen.event("sess-a", "session_history")))
    save = sim.next_save(events=0)
    save = payloads.SaveArgs(save.checkpoint, save.transcript_delta, None, batch)
    assert tuned.save_with_events(*save) == mobius.save_with_events(*save)
    for limit in (1, 5, 7, 100):
        cursors: dict[str, Any] = {"t": None, "m": None}
        while True:
            pt = tuned.event_page("sess-a", cursors["t"], limit)
            pm = mobius.event_page("sess-a", cursors["m"], limit)
            assert pt.latest_sequence == pm.latest_sequence
            assert events_of(pt) == events_of(pm), (limit, events_of(pt)[:2])
            assert metrics_of(pt) == metrics_of(pm)
            assert pt.next_before_sequence == pm.next_before_sequence
            cursors = {"t": pt.next_before_sequence, "m": pm.next_before_sequence}
            if cursors["t"] is None:
                break
    latest = tuned.event_page("sess-a", None, 1).latest_sequence
    for after in (0, 5, latest - 3):
        got = tuned.events_after("sess-a", after, 10)
        want = mobius.events_after("sess-a", after, 10)
        assert [e["sequence"] for e in got] == [e["sequence"] for e in want]
    for store in both:
        expect_error("must be positive", store.event_page, "sess-a", None, 0)
        expect_error("does not exist", store.event_page, "nope", None, 1)
        expect_error("does not exist", store.append_event, "nope", 1, gen.event("nope"))
    kept = [e["event"]["msg"]["type"] for e in tuned.events_after("sess-a", 0, 1000)]
    print(f"events ok: {latest} sequences, {len(kept)} kept, same pages as mobius")

    # Transcript, executions, summaries, metadata.
    for before in (None, 5, 3, 1):
        for n in (1, 2, 100):
            t, m = (
                tuned.transcript_page("sess-a", before, n),
                mobius.transcript_page("sess-a", before, n),
            )
            assert [(b["sequence"], b["items"]) for b in t.batches] == [
                (b["sequence"], b["items"]) for b in m.batches
            ]
            assert t.next_before_sequence == m.next_before_sequence
            assert tuned.execution_page("sess-a", before, n) == mobius.execution_page(
                "sess-a", before, n
            )
    assert tuned.recent_executions(2) == mobius.recent_executions(2)
    assert tuned.recent_executions(2) == executions[:0:-1]
    summary_t, summary_m = tuned.session_summary("sess-a"), mobius.session_summary("sess-a")
    assert summary_t is not None and summary_m is not None
    for key in ("session_context", "sequence", "execution_stats", "first_user_message"):
        assert summary_t[key] == summary_m[key], key
    assert tuned.session_metadata("sess-a") == sim.metadata
    print("transcript/execution pages, recent executions, summary ok (same as mobius)")

    # Catalog: owner filter, exclusive row-value cursor, in the same order as mobius.
    for i in range(7):
        checkpoint = gen.checkpoint(f"list-{i}", owner_id=f"owner-{i % 2}")
        for store in both:
            store.save(checkpoint)
    for owner in (None, "owner-0", "owner-1"):
        for limit in (1, 3, 100):
            seen: dict[str, list[str]] = {}
            for name, store in (("t", tuned), ("m", mobius)):
                cursor = None
                ids: list[str] = []
                while True:
                    page = store.list_sessions_page(owner, cursor, limit)
                    ids += [s["session_id"] for s in page.sessions]
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                seen[name] = ids
            assert seen["t"] == seen["m"], (owner, limit, seen)
    for store in both:
        expect_error("cannot be empty", store.list_sessions_page, " ", None, 1)
    bulk = [payloads.SaveArgs(gen.checkpoint(f"bulk-{i}"), [], None, []) for i in range(3)]
    stale_bulk = [*bulk[:1], bulk[0]]
    expect_error("did not advance", tuned.save_many, stale_bulk)
    assert tuned.load("bulk-0") is None  # all or nothing
    assert tuned.save_many(bulk) == [[], [], []]
    assert [tuned.load(f"bulk-{i}") for i in range(3)] == [b.checkpoint for b in bulk]
    assert tuned.delete_sessions([f"bulk-{i}" for i in range(3)])
    print("list_sessions_page ok: same order and cursors as mobius, with and without owner")

    # Fork and delete.
    child = sim.fork_checkpoint("child-1", items=10)
    for store in both:
        summary = store.fork("sess-a", 1, child)
        assert (summary["parent_session_id"], summary["parent_sequence"]) == ("sess-a", 1)
        assert store.load("child-1") == child
        batches = store.transcript_page("child-1", None, 10).batches
        assert [b["sequence"] for b in batches] == [0] and batches[0]["items"] == child["context"]
        assert store.event_page("child-1", None, 10).events == []
        expect_error("newer than the parent", store.fork, "sess-a", 99, sim.fork_checkpoint("x"))
        expect_error("does not exist", store.fork, "missing", 0, sim.fork_checkpoint("x"))
        expect_error("cannot fork itself", store.fork, "x", 0, sim.fork_checkpoint("x"))
        dirty = dict(sim.fork_checkpoint("x"), sequence=1)
        expect_error("clean sequence-zero", store.fork, "sess-a", 0, dirty)
        store.save(dict(child, sequence=1))
        store.fork("child-1", 1, sim.fork_checkpoint("grandchild-1", items=2))
        for scope in ("sess-a", "child-1", "grandchild-1", "global"):
            store.save_state(scope, "tasks.v1", {"scope": scope})
        assert store.load_state("sess-a", "tasks.v1") == {"scope": "sess-a"}
        assert store.delete_sessions([]) is True
        assert store.delete_sessions(["child-1", "missing"]) is False
        assert store.load("child-1") is not None
        assert store.delete_sessions(["sess-a"]) is True
        for gone in ("sess-a", "child-1", "grandchild-1"):
            assert store.load(gone) is None and store.load_state(gone, "tasks.v1") is None
        assert store.load_state("global", "tasks.v1") == {"scope": "global"}
        assert store.delete_sessions(["sess-a"]) is False
    for table in ("events", "transcript", "executions", "context", "receipts"):
        left = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        assert left == 0, (table, left)  # only list-* remain, and they have none of these
    print("fork/delete ok: child at parent seq 1, tree of 3 removed with its state")

    # Threads: one connection each, gapless sequences on one shared session.
    events = gen.timestamped_events("list-0", 50)
    results: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        mine = [tuned.append_event("list-0", at, event) for at, event in events]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(1, 201)), "sequences not gapless and unique"
    print(f"threads ok: 4 writers x 50 events -> 1..200, {len(tuned._connections)} connections")
    tuned.close()
    mobius.close()
    expect_error("closed", tuned.load, "list-0")

    modes: tuple[Synchronous, ...] = ("FULL", "NORMAL")
    for mode in modes:
        timings = []
        for cls in (SqliteTunedStore, SqliteMobiusStore):
            with cls(root / f"timing-{cls.__name__}-{mode}.sqlite", mode) as timed:
                sim = payloads.SessionSim(payloads.PayloadGenerator(1), "t", events=0)
                saves = [sim.next_save(events=10, items=3) for _ in range(101)]
                appends = payloads.PayloadGenerator(2).timestamped_events("t", 300)
                timed.save_with_events(*saves[0])
                started = time.perf_counter()
                for args in saves[1:]:
                    timed.save_with_events(*args)
                save_s = (time.perf_counter() - started) / 100
                started = time.perf_counter()
                for at, event in appends:
                    timed.append_event("t", at, event)
                append_s = (time.perf_counter() - started) / 300
                timings.append(
                    f"{cls.__name__[6:-5]} save {save_s * 1e6:5.0f} us, "
                    f"append {append_s * 1e6:4.0f} us, {timed.disk_bytes() / 1024:.0f} KiB"
                )
        print(f"timing {mode:6}: " + " · ".join(timings))
    shutil.rmtree(root)
    print("smoke ok")


if __name__ == "__main__":
    smoke()

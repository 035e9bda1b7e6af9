"""The catalog and the journals across processes.

Writer processes (forked from the test) create, update, fork and delete
sessions while the test process, with its own `Store`, pages the catalog
(`list_sessions_page`) and the journals (`transcript_page`, `execution_page`).

Every value the writers store says where it belongs: a checkpoint's
`workspace_label` is `seq-<its sequence>`, each transcript item names its
session and checkpoint sequence, each execution record's turn id names its
session and sequence, and `execution_stats.run_count` counts the session's
execution records. So a reader can tell a coherent, committed page from a torn
or invented one:

- every page is ordered by its key (strictly descending), holds no duplicates,
  respects the owner filter and its limit, and has the right next cursor;
- every listed summary is one commit's summary (label matches sequence) of a
  committed checkpoint (`checkpoint_at` finds it), and every listed session is
  loadable or is deleted later by a writer;
- a session a writer has acknowledged appears in the reader's next listing,
  and an acknowledged delete has removed it.

Then writers are SIGKILLed at random moments, and on purpose right between a
session commit and its catalog append: a reopened store's listing must equal
the truth derived from the session directories, and so must the listing of a
store that stayed open through the kill.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    T0,
    Report,
    ReportPipe,
    fork_writer,
    kill_writer,
    labelled_checkpoint,
    labelled_execution,
    listed,
    session_identities,
    writer_store,
)

# reaches inside: kills right after a commit, before its catalog append; probes a lock
import journal
import journal.catalog
import journal.locks
import journal.registry
from journal import (
    ExecutionPageRequest,
    SessionCursor,
    SessionPageRequest,
    SessionSummary,
    TranscriptPageRequest,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
]

SEED = int(os.environ.get("JOURNAL_CATALOG_SEED", str(random.SystemRandom().randrange(1 << 32))))
OWNERS = ["x", "y"]
WRITER_OPS = 120
LINE_TIMEOUT = 60.0


# --- what writers store ------------------------------------------------------------------


def transcript(sid: str, seq: int) -> list[Any]:
    return [{"t": sid, "seq": seq, "k": k} for k in range(2)]


@dataclass
class Mine:
    owner: str
    seq: int
    runs: int
    context: list[Any]
    parent: str | None = None


def writer_body(
    store: journal.Store, rng: random.Random, report: Callable[[str], None], ops: int
) -> None:
    """Create, update, fork and delete sessions in this writer's own namespace."""
    tag = f"w{os.getpid()}-{rng.randrange(1 << 20):x}"
    mine: dict[str, Mine] = {}
    n = 0
    for _ in range(ops):
        r = rng.random()
        if r < 0.25 or not mine:
            sid = f"{tag}/{n}"
            n += 1
            m = Mine(rng.choice(OWNERS), 0, 0, [{"ctx": sid}])
            store.save(labelled_checkpoint(sid, 0, m.context, owner=m.owner), transcript(sid, 0))
            mine[sid] = m
            report(f"A {json.dumps([sid, 0])}")
        elif r < 0.75:
            sid = rng.choice(sorted(mine))
            m = mine[sid]
            seq = m.seq + rng.randint(1, 2)
            rec = (
                labelled_execution(sid, seq, started=T0 + seq * 1000, elapsed=10)
                if rng.random() < 0.5
                else None
            )
            runs = m.runs + (rec is not None)
            context = [*m.context, {"ctx": sid, "seq": seq}]
            store.save(
                labelled_checkpoint(sid, seq, context, owner=m.owner, runs=runs),
                transcript(sid, seq),
                rec,
            )
            m.seq, m.runs, m.context = seq, runs, context
            report(f"A {json.dumps([sid, seq])}")
        elif r < 0.88:
            parent = rng.choice(sorted(mine))
            pseq = rng.choice(
                [s for s in range(mine[parent].seq + 1) if store.checkpoint_at(parent, s)]
            )
            source = store.checkpoint_at(parent, pseq)
            assert source is not None
            sid = f"{tag}/{n}"
            n += 1
            m = Mine(rng.choice(OWNERS), 0, 0, source.context, parent)
            store.fork(parent, pseq, labelled_checkpoint(sid, 0, m.context, owner=m.owner))
            mine[sid] = m
            report(f"A {json.dumps([sid, 0])}")
        else:
            victim = rng.choice(sorted(mine))
            doomed = {victim}
            grew = True
            while grew:
                grew = False
                for sid, m in mine.items():
                    if m.parent in doomed and sid not in doomed:
                        doomed.add(sid)
                        grew = True
            report(f"D {json.dumps(sorted(doomed))}")
            assert store.delete_sessions([victim]) is True
            for sid in doomed:
                del mine[sid]
            report(f"d {json.dumps(sorted(doomed))}")


# --- processes -----------------------------------------------------------------------------


def spawn(root: Path, seed: int, ops: int, hook_catalog: bool) -> tuple[int, ReportPipe]:
    def body(report: Report) -> None:
        rng = random.Random(seed)
        if hook_catalog:
            # Announce each catalog append after the session commit it follows, so
            # the test can kill the writer right in between.
            # reaches inside: the catalog append is the moment the kill must hit
            real_append = journal.catalog.Catalog.append

            def append(self: Any, records: Any) -> None:
                records = list(records)
                report(f"C {json.dumps([r.session_id for r in records])}")
                time.sleep(rng.choice([0.0, 0.001, 0.003]))
                real_append(self, records)

            journal.catalog.Catalog.append = append  # type: ignore[method-assign]
        store = writer_store(root, rng)
        writer_body(store, rng, report, ops)
        store.close()
        report('Z "done"')

    return fork_writer(body, seed=SEED, timeout=LINE_TIMEOUT)


# --- checks ------------------------------------------------------------------------------


def key(s: SessionSummary) -> tuple[int, int, str]:
    return (s.updated_at, s.sequence, s.session_id)


@dataclass
class Knowledge:
    """What the writers have acknowledged, as read from their pipes."""

    acked: dict[str, int] = field(default_factory=dict)  # sid -> newest acked sequence
    deleting: set[str] = field(default_factory=set)  # delete announced (maybe not done)
    deleted: set[str] = field(default_factory=set)  # delete acknowledged

    def absorb(self, lines: list[tuple[str, Any]]) -> None:
        for op, arg in lines:
            if op == "A":
                sid, seq = arg
                self.acked[sid] = max(seq, self.acked.get(sid, -1))
            elif op == "D":
                self.deleting.update(arg)
            elif op == "d":
                self.deleted.update(arg)


@dataclass
class Stats:
    pages: int = 0
    summaries: int = 0
    fresh_checks: int = 0
    transcript_batches: int = 0
    executions: int = 0
    unloadable: set[str] = field(default_factory=set)


def check_summary(store: journal.Store, s: SessionSummary, stats: Stats) -> None:
    """One listed summary is one committed checkpoint's summary."""
    assert s.session_context.workspace_label == f"seq-{s.sequence}", f"torn summary {s}"
    stats.summaries += 1
    cp = store.checkpoint_at(s.session_id, s.sequence)
    loaded = store.load(s.session_id)
    if cp is None or loaded is None:
        # Only allowed if the session was deleted since it was listed.
        assert store.load(s.session_id) is None, f"listed uncommitted checkpoint {s}"
        stats.unloadable.add(s.session_id)
        return
    assert loaded.sequence >= s.sequence
    assert cp.session_context == s.session_context
    assert cp.execution_stats == s.execution_stats
    assert cp.catalog_visible == s.catalog_visible


def check_list_page(
    store: journal.Store,
    page: journal.SessionPage,
    owner: str | None,
    limit: int,
    cursor: SessionCursor | None,
    stats: Stats,
) -> None:
    rows = page.sessions
    stats.pages += 1
    assert len(rows) <= limit
    keys = [key(s) for s in rows]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys), keys
    ids = [s.session_id for s in rows]
    assert len(set(ids)) == len(ids), f"duplicate session in one page: {ids}"
    if cursor is not None:
        bound = (cursor.updated_at, cursor.sequence, cursor.session_id)
        assert all(k < bound for k in keys), "a row at or above the exclusive cursor"
    if owner is not None:
        assert all(s.session_context.owner_id == owner for s in rows)
    if page.next_cursor is not None:
        assert rows, "a next cursor on an empty page"
        last = rows[-1]
        assert page.next_cursor == SessionCursor(
            updated_at=last.updated_at, sequence=last.sequence, session_id=last.session_id
        )
    else:
        assert len(rows) <= limit
    for s in rows:
        check_summary(store, s, stats)


def check_journals(store: journal.Store, sid: str, stats: Stats) -> None:
    """Walk a session's executions, then its transcript, page by page; each page coherent.

    Executions are read first: every one of them was saved together with a
    transcript batch at its sequence, which the later transcript walk must find.
    """
    before: int | None = None
    last_seq: int | None = None
    exec_seqs: list[int] = []
    while True:
        ep = store.execution_page(sid, ExecutionPageRequest(before_sequence=before, limit=2))
        assert len(ep.executions) <= 2
        for rec in ep.executions:
            stats.executions += 1
            owner, _, seq_text = rec.turn_id.rpartition("#")
            assert owner == sid == rec.session_id
            seq = int(seq_text)
            assert last_seq is None or seq < last_seq
            assert before is None or seq < before
            exec_seqs.append(seq)
            last_seq = seq
        if ep.next_before_sequence is None:
            break
        assert ep.next_before_sequence == last_seq
        before = ep.next_before_sequence
    before = None
    seen: list[int] = []
    while True:
        tp = store.transcript_page(
            sid, TranscriptPageRequest(before_sequence=before, max_batches=2)
        )
        seqs = [b.sequence for b in tp.batches]
        assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs)
        assert len(seqs) <= 2
        if before is not None:
            assert all(q < before for q in seqs)
        for b in tp.batches:
            stats.transcript_batches += 1
            assert b.created_at > 0
            assert b.items, "every save here carries a transcript batch"
            for it in b.items:
                if "t" in it:
                    assert (it["t"], it["seq"]) == (sid, b.sequence), f"misplaced item {it}"
        seen.extend(seqs)
        if tp.next_before_sequence is None:
            break
        assert tp.next_before_sequence == seqs[-1]
        before = tp.next_before_sequence
    missing = set(exec_seqs) - set(seen)
    assert not missing or store.load(sid) is None, f"executions without their save: {missing}"


def truth(store: journal.Store, root: Path) -> dict[str, SessionSummary]:
    """The catalog as derived from the session directories themselves."""
    out = {}
    for sid in session_identities(root):
        summary = store.session_summary(sid)
        if summary is not None:
            assert store.load(sid) is not None
            out[sid] = summary
    return out


# --- tests -------------------------------------------------------------------------------


def test_reader_pages_while_writers_write(tmp_path: Path) -> None:
    print(f"JOURNAL_CATALOG_SEED={SEED}")
    rng = random.Random(f"{SEED}-concurrent")
    root = tmp_path / "store"
    reader = journal.open(root, lock_timeout=30)
    writers = [spawn(root, rng.randrange(1 << 32), WRITER_OPS, False) for _ in range(2)]
    know = Knowledge()
    stats = Stats()
    consumed = [0] * len(writers)
    try:
        running = True
        while running:
            for i, (_, pipe) in enumerate(writers):
                pipe.poll()
                know.absorb(pipe.lines[consumed[i] :])
                consumed[i] = len(pipe.lines)
            running = not all(any(op == "Z" for op, _ in p.lines) for _, p in writers)
            # Freshness: what was acknowledged before this listing is in it.
            acked = dict(know.acked)
            gone = set(know.deleted)
            now = listed(reader)
            # Unless a delete started meanwhile: a session under a delete intent is
            # already absent for readers. Writers announce a delete ("D") before
            # starting it, so every delete this listing can reflect is in the pipes now.
            for i, (_, pipe) in enumerate(writers):
                while pipe.poll():
                    pass
                know.absorb(pipe.lines[consumed[i] :])
                consumed[i] = len(pipe.lines)
            maybe_gone = set(know.deleting)
            stats.fresh_checks += 1
            for sid, seq in acked.items():
                if sid in maybe_gone:
                    continue
                assert sid in now, f"acknowledged session {sid!r} not listed (seed {SEED})"
                assert now[sid].sequence >= seq, f"listing older than acknowledged {sid!r}"
            assert not (gone & set(now)), f"deleted sessions still listed: {gone & set(now)}"
            # Paging with small limits, with and without an owner filter.
            owner = rng.choice([None, *OWNERS])
            limit = rng.randint(1, 4)
            cursor: SessionCursor | None = None
            for _ in range(rng.randint(1, 6)):
                page = reader.list_sessions_page(
                    SessionPageRequest(owner_id=owner, cursor=cursor, limit=limit)
                )
                check_list_page(reader, page, owner, limit, cursor, stats)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            if now:
                check_journals(reader, rng.choice(sorted(now)), stats)
        for pid, pipe in writers:
            _, status = os.waitpid(pid, 0)
            pipe.drain()
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        for pid, pipe in writers:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(pipe.fd)
    for i, (_, pipe) in enumerate(writers):
        know.absorb(pipe.lines[consumed[i] :])
    print(f"reader checked {stats}")
    assert stats.unloadable <= know.deleted, (
        "listed sessions that were never deleted failed to load"
    )
    assert stats.pages > 10 and stats.summaries > 10 and stats.transcript_batches > 10
    assert stats.executions > 0
    # Everything settled: the open reader, a fresh store and the sessions all agree.
    expected = truth(reader, root)
    assert listed(reader) == expected
    assert set(expected) == set(know.acked) - know.deleted
    for sid, seq in know.acked.items():
        if sid not in know.deleted:
            assert expected[sid].sequence == seq
    for sid in expected:
        check_journals(reader, sid, stats)
    reader.close()
    fresh = journal.open(root)
    try:
        assert listed(fresh) == expected
    finally:
        fresh.close()


def test_listing_matches_sessions_after_writer_killed(tmp_path: Path) -> None:
    print(f"JOURNAL_CATALOG_SEED={SEED}")
    rng = random.Random(f"{SEED}-kill")
    root = tmp_path / "store"
    survivor = journal.open(root, lock_timeout=30)  # stays open through every kill
    between = 0
    for _round in range(30):
        targeted = rng.random() < 0.7
        pid, pipe = spawn(root, rng.randrange(1 << 32), 10_000, hook_catalog=targeted)
        try:
            if targeted:
                # Kill right after a session commit, before (or while) its catalog append.
                pipe.wait_for("C", rng.randint(1, 12))
                between += 1
            else:
                pipe.wait_for("A", rng.randint(1, 12))
                time.sleep(rng.uniform(0, 0.02))
        finally:
            kill_writer(pid, pipe)
        store = journal.open(root, lock_timeout=30)
        try:
            expected = truth(store, root)
            assert listed(store) == expected, f"reopened listing differs (seed {SEED})"
            # The owner filter agrees with the truth as well.
            for owner in OWNERS:
                got = [
                    s.session_id
                    for s in store.list_sessions_page(
                        SessionPageRequest(owner_id=owner, limit=1_000_000)
                    ).sessions
                ]
                want = [s for s, v in expected.items() if v.session_context.owner_id == owner]
                assert sorted(got) == sorted(want)
            # recent_executions only names sessions that exist, newest first.
            recent = store.recent_executions(50)
            assert all(r.session_id in expected for r in recent)
            starts = [(r.started_at_ms, r.session_id) for r in recent]
            assert starts == sorted(starts, reverse=True)
        finally:
            store.close()
        # The store that stayed open converges too (dead writers are reconciled).
        deadline = time.monotonic() + 10
        while listed(survivor) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listed(survivor) == expected, f"open store did not reconcile (seed {SEED})"
    survivor.close()
    assert between > 0


def test_registration_never_found_unlocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store probing for dead writers must not take a live writer's registration.

    The writer's registration is what lets the catalog be corrected after the
    writer is killed. A probe that runs while a registration is being created
    (here: forced into that moment) must neither reconcile nor remove it.
    """
    root = tmp_path / "store"
    writer = journal.open(root)
    prober = journal.open(root)
    procs = str(root / "procs")
    found: list[Any] = []
    probing: list[bool] = []
    # reaches inside: the probe must run while a registration's lock is being made
    real_open = journal.locks.FileLock._open

    def probing_open(self: Any) -> int:
        fd = real_open(self)
        if self.path.startswith(procs) and not probing:
            probing.append(True)  # once, and not from inside the probe itself
            found.append(prober.registry.dead_registrations())
        return fd

    monkeypatch.setattr(journal.locks.FileLock, "_open", probing_open)
    writer.save(labelled_checkpoint("s", 0, [], owner="x"))
    monkeypatch.undo()
    assert found == [[]], "the probe saw the registration being created as a dead one"
    path = writer.registry.path
    assert os.path.exists(path)
    with open(path) as f:
        assert os.path.basename(writer.session_dir("s")) in f.read().split()
    assert prober.registry.dead_registrations() == []
    writer.close()
    prober.close()


def test_catalog_ahead_of_log_is_corrected_after_reboot(tmp_path: Path) -> None:
    """The catalog's unsynced bytes can outlive the log's (power loss in "os" mode).

    Simulated: a session directory is put back as it was one commit earlier
    while the catalog keeps the later summary, and the machine's boot id is
    made to differ. The reopened store must list what the log holds, not the
    catalog's newer, now nonexistent, commit (nor its execution).
    """
    root = tmp_path / "store"
    store = journal.open(root, durability="os")
    store.save(labelled_checkpoint("s", 0, [{"ctx": 0}], owner="x"), transcript("s", 0))
    store.save(labelled_checkpoint("keep", 0, [], owner="y"))
    store.close()
    session_dir = root / "sessions" / os.path.basename(store.session_dir("s"))
    saved = tmp_path / "before"
    shutil.copytree(session_dir, saved)
    store = journal.open(root, durability="os")
    store.save(
        labelled_checkpoint("s", 1, [{"ctx": 0}], owner="y", runs=1),
        transcript("s", 1),
        labelled_execution("s", 1, started=T0 + 1000, elapsed=10),
    )
    assert listed(store)["s"].sequence == 1
    assert [r.turn_id for r in store.recent_executions(5)] == ["s#1"]
    store.close()
    shutil.rmtree(session_dir)
    shutil.copytree(saved, session_dir)
    (root / "catalog" / journal.registry.BOOT_FILE).write_text("another-boot\n")

    reopened = journal.open(root)
    try:
        expected = truth(reopened, root)
        assert expected["s"].sequence == 0
        assert listed(reopened) == expected
        assert [
            s.session_id
            for s in reopened.list_sessions_page(
                SessionPageRequest(owner_id="x", limit=10)
            ).sessions
        ] == ["s"]
        assert reopened.recent_executions(5) == []
        # And the session continues from the commit it really has.
        reopened.save(labelled_checkpoint("s", 1, [{"ctx": 0}], owner="x"), transcript("s", 1))
        assert listed(reopened)["s"].sequence == 1
    finally:
        reopened.close()
    fresh = journal.open(root)
    try:
        assert listed(fresh) == truth(fresh, root)
    finally:
        fresh.close()

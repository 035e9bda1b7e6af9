"""SIGKILL during `fork` and during `delete_sessions`: the session tree stays consistent.

A worker process (forked from the test, so it starts in milliseconds with
`journal` already imported) forks sessions or builds and deletes session trees
in a loop. Before and after each operation it writes a line to a pipe. The test
reads those lines, picks an operation to interrupt, waits a random moment (from
nothing to a little longer than the operation takes) and SIGKILLs the worker.

After every kill the store is reopened and checked:
- the catalog listing equals the set of sessions whose `load()` returns a
  checkpoint, and every session directory has a readable identity and a
  committed checkpoint (so it is listed);
- no child outlives its parent; every child's first checkpoint holds exactly
  the parent's context at the fork point, as transcript batch 0 too;
- every acknowledged fork is there, every acknowledged delete is complete, and
  an interrupted delete is all or nothing (sessions and their state alike);
- the store accepts new writes (save, event, fork, delete).

The run is seeded: the seed is printed, and `JOURNAL_TREE_SEED` /
`JOURNAL_TREE_KILLS` override the seed and the number of kills per test.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helpers
import pytest
from helpers import Report, ReportPipe, fork_writer, kill_writer, session_identities, writer_store

# reaches inside: a delete intent left by a kill is looked for directly
import journal
from journal import Checkpoint, Event, EventPageRequest, SessionPageRequest, TranscriptPageRequest
from journal.tree import Tree

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
]

KILLS = int(os.environ.get("JOURNAL_TREE_KILLS", "100"))
SEED = int(os.environ.get("JOURNAL_TREE_SEED", str(random.SystemRandom().randrange(1 << 32))))
LINE_TIMEOUT = 60.0


# --- data --------------------------------------------------------------------------------


def checkpoint(session_id: str, sequence: int, context: list[Any]) -> Checkpoint:
    return helpers.checkpoint(session_id, sequence, context, metadata={"id": session_id})


def item(tag: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "text", "text": tag}]}


# --- the worker (runs in the forked child) -----------------------------------------------


def fork_body(store: journal.Store, rng: random.Random, report: Callable[[str], None]) -> None:
    """Fork children off random sessions at random historical sequences, forever."""
    page = store.list_sessions_page(SessionPageRequest(limit=10_000))
    known = {s.session_id: s.sequence for s in page.sessions}
    tag = f"{os.getpid()}-{rng.randrange(1 << 30):x}"
    n = 0
    while True:
        parent = rng.choice(sorted(known))
        seq = rng.randint(0, known[parent])
        child = f"f{tag}/{n}"
        n += 1
        report(f"F {json.dumps([child, parent, seq])}")
        if rng.random() < 0.5:
            store.fork_at(parent, seq, child)
        else:
            source = store.checkpoint_at(parent, seq)
            assert source is not None
            store.fork(parent, seq, checkpoint(child, 0, source.context))
        report(f"f {json.dumps(child)}")
        known[child] = 0
        if rng.random() < 0.3:
            cp = store.load(child)
            assert cp is not None
            store.save(checkpoint(child, 1, [*cp.context, item(child)]), [item(child)])
            known[child] = 1


def delete_body(store: journal.Store, rng: random.Random, report: Callable[[str], None]) -> None:
    """Build a small tree (root, children, grandchildren, their state) and delete it, forever."""
    tag = f"{os.getpid()}-{rng.randrange(1 << 30):x}"
    n = 0
    while True:
        root_id = f"d{tag}-{n}"
        n += 1
        members = [root_id]
        parents: dict[str, str] = {}
        store.save(checkpoint(root_id, 0, [item("r0")]), [item("r0")])
        store.save(checkpoint(root_id, 1, [item("r0"), item("r1")]), [item("r1")])
        store.append_event(root_id, 1, Event(msg={"type": "warning", "message": "x"}))
        for k in range(rng.randint(1, 4)):
            parent = rng.choice(members)
            child = f"{root_id}/c{k}"
            report(f"F {json.dumps([child, parent, 0])}")
            store.fork_at(parent, 0, child)
            report(f"f {json.dumps(child)}")
            members.append(child)
            parents[child] = parent
        for sid in members:
            store.save_state(sid, "tasks.v1", {"owner": sid})
        store.save_state(f"global-{root_id}", "k", 1)
        if rng.random() < 0.15:
            # An incomplete selection: must delete nothing even when interrupted.
            report(f"X {json.dumps(members)}")
            ok = store.delete_sessions([root_id, f"{root_id}-missing"])
            report(f"x {json.dumps(ok)}")
        # Select the root, or a subtree (its descendants go too), or several subtrees.
        if rng.random() < 0.6:
            selection = [root_id]
        else:
            selection = rng.sample(members, rng.randint(1, len(members)))
        doomed = _closure(selection, parents)
        report(f"D {json.dumps([selection, sorted(doomed), members])}")
        ok = store.delete_sessions(selection)
        report(f"d {json.dumps(ok)}")
        survivors = [m for m in members if m not in doomed]
        if survivors:
            roots = [m for m in survivors if parents.get(m) not in survivors]
            report(f"D {json.dumps([roots, sorted(survivors), members])}")
            ok = store.delete_sessions(roots)
            report(f"d {json.dumps(ok)}")


def _closure(selection: list[str], parents: dict[str, str]) -> set[str]:
    out = set(selection)
    changed = True
    while changed:
        changed = False
        for child, parent in parents.items():
            if parent in out and child not in out:
                out.add(child)
                changed = True
    return out


# --- the test side -----------------------------------------------------------------------


@dataclass
class History:
    """What the test knows from every worker's reports."""

    forks: dict[str, tuple[str, int]] = field(default_factory=dict)  # child -> (parent, seq)
    acked_forks: set[str] = field(default_factory=set)
    acked_deleted: set[str] = field(default_factory=set)
    in_flight_delete: list[set[str]] = field(default_factory=list)  # sets killed mid-delete
    in_flight_refused: list[set[str]] = field(default_factory=list)  # killed mid-refusal
    kills_in_op: dict[str, int] = field(default_factory=dict)
    left_intent: int = 0  # kills after a delete's commit point and before it finished
    left_tmp: int = 0  # kills while a fork was building its child in tmp/

    def absorb(self, lines: list[tuple[str, Any]]) -> tuple[str, Any] | None:
        """Record a worker's lines; return the operation it was in when killed (or None)."""
        open_op: tuple[str, Any] | None = None
        for op, arg in lines:
            if op == "F":
                child, parent, seq = arg
                self.forks[child] = (parent, seq)
                open_op = (op, arg)
            elif op == "f":
                self.acked_forks.add(arg)
                open_op = None
            elif op in ("D", "X"):
                open_op = (op, arg)
            elif op == "d":
                assert open_op is not None and open_op[0] == "D"
                assert arg is True, f"delete of present sessions returned False (seed {SEED})"
                self.acked_deleted.update(open_op[1][1])
                open_op = None
            elif op == "x":
                assert arg is False, f"incomplete selection was not refused (seed {SEED})"
                open_op = None
        if open_op is not None:
            self.kills_in_op[open_op[0]] = self.kills_in_op.get(open_op[0], 0) + 1
        return open_op


def spawn(body: Any, root: Path, seed: int) -> tuple[int, ReportPipe]:
    """A worker running `body` until killed (it exits 0 only if `body` returns)."""

    def run(report: Report) -> None:
        rng = random.Random(seed)
        body(writer_store(root, rng), rng, report)

    return fork_writer(run, seed=SEED, timeout=LINE_TIMEOUT, who="worker")


def kill(pid: int, pipe: ReportPipe) -> None:
    status = kill_writer(pid, pipe)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"worker exited on its own with status {status} (seed {SEED})"
    )


def check_store(store: journal.Store, root: Path, history: History, seed: int) -> set[str]:
    """Every invariant of the module docstring; returns the present session ids."""
    where = f"(seed {seed})"
    tree = Tree(str(root), 1.0)
    try:
        assert tree.intents() == [], f"a delete intent survived reopening {where}"
    finally:
        tree.close()
    dirs = session_identities(root)
    present = {sid for sid in dirs if store.load(sid) is not None}
    # A session directory is only ever published with its first commit (by a save
    # or a fork), so a kill can never leave one without a committed checkpoint.
    assert present == set(dirs), (
        f"session directories without a committed checkpoint: {set(dirs) - present} {where}"
    )
    page = store.list_sessions_page(SessionPageRequest(limit=100_000))
    listed = {s.session_id: s for s in page.sessions}
    assert len(listed) == len(page.sessions), f"duplicate rows in the listing {where}"
    assert set(listed) == present, (
        f"listing differs from the sessions: extra {set(listed) - present},"
        f" missing {present - set(listed)} {where}"
    )
    # Ids that the workers forked and that are gone must not load (no stray directory).
    for child in history.forks:
        if child not in present:
            assert store.load(child) is None
    for sid, summary in listed.items():
        assert store.session_summary(sid) == summary, f"summary of {sid!r} differs {where}"
        if summary.parent_session_id is None:
            continue
        parent = summary.parent_session_id
        assert parent in present, f"{sid!r} outlived its parent {parent!r} {where}"
        assert summary.parent_sequence is not None
        assert summary.parent_sequence <= listed[parent].sequence
        if sid in history.forks:
            assert history.forks[sid] == (parent, summary.parent_sequence), where
        source = store.checkpoint_at(parent, summary.parent_sequence)
        first = store.checkpoint_at(sid, 0)
        assert source is not None and first is not None, where
        assert first.context == source.context, f"{sid!r} does not start at its fork point {where}"
        batches = store.transcript_page(sid, TranscriptPageRequest(max_batches=100)).batches
        assert batches[-1].sequence == 0 and batches[-1].items == source.context, where
    maybe_deleted = set().union(*history.in_flight_delete)
    lost = history.acked_forks - history.acked_deleted - maybe_deleted - present
    assert not lost, f"acknowledged forks lost: {lost} {where}"
    resurrected = history.acked_deleted & present
    assert not resurrected, f"acknowledged deletes undone: {resurrected} {where}"
    for group in history.in_flight_delete:
        alive = group & present
        assert not alive or alive == group, (
            f"interrupted delete was partial: kept {alive} of {group} {where}"
        )
        states = {sid for sid in group if store.load_state(sid, "tasks.v1") is not None}
        assert states <= alive, f"state outlived its session: {states - alive} {where}"
    for group in history.in_flight_refused:
        gone = group - present - history.acked_deleted
        assert not gone, f"a refused delete removed {gone} {where}"
    return present


def delete_some(
    store: journal.Store, history: History, selection: list[str], present: set[str]
) -> set[str]:
    """Delete `selection` from the test side; record what went; return what is left."""
    assert store.delete_sessions(selection) is True
    left = {sid for sid in present if store.load(sid) is not None}
    history.acked_deleted.update(present - left)
    return left


def accepts_writes(store: journal.Store, present: set[str], rng: random.Random, cycle: int) -> None:
    probe = f"probe-{cycle}"
    store.save(checkpoint(probe, 0, [item(probe)]), [item(probe)])
    assert (
        store.append_event(probe, 1, Event(msg={"type": "warning", "message": "p"})).sequence == 1
    )
    store.fork_at(probe, 0, f"{probe}/child")
    if present:
        target = rng.choice(sorted(present))
        cp = store.load(target)
        assert cp is not None
        store.save(checkpoint(target, cp.sequence + 1, cp.context))
        latest = store.event_page(target, EventPageRequest(limit=1)).latest_sequence
        got = store.append_event(target, 1, Event(msg={"type": "warning", "message": "q"}))
        assert got.sequence == latest + 1
    assert store.delete_sessions([probe]) is True
    assert store.load(f"{probe}/child") is None


def run_kills(
    tmp_path: Path,
    body: Any,
    op: str,
    waits: int,
    max_delay: float,
    setup: Callable[[journal.Store], None] | None,
    trim: Callable[[journal.Store, History, set[str], random.Random], None],
) -> History:
    print(f"JOURNAL_TREE_SEED={SEED} JOURNAL_TREE_KILLS={KILLS}")
    rng = random.Random(f"{SEED}-{op}")
    root = tmp_path / "store"
    store = journal.open(root)
    if setup is not None:
        setup(store)
    store.close()
    history = History()
    seen_tmp: set[str] = set()
    for cycle in range(KILLS):
        pid, pipe = spawn(body, root, rng.randrange(1 << 32))
        try:
            pipe.wait_for(op, rng.randint(1, waits))
            delay = rng.choice([0.0, rng.uniform(0, max_delay), rng.uniform(0, max_delay / 4)])
            if delay:
                time.sleep(delay)
        finally:
            kill(pid, pipe)
        open_op = history.absorb(pipe.lines)
        if open_op is not None and open_op[0] == "D":
            history.in_flight_delete.append(set(open_op[1][1]))
        if open_op is not None and open_op[0] == "X":
            history.in_flight_refused.append(set(open_op[1]))
        tree = Tree(str(root), 1.0)
        try:
            history.left_intent += bool(tree.intents())
        finally:
            tree.close()
        building = {n for n in os.listdir(root / "tmp") if _building_a_child(root / "tmp" / n)}
        history.left_tmp += bool(building - seen_tmp)
        seen_tmp |= building
        store = journal.open(root, lock_timeout=30, durability="os")
        try:
            present = check_store(store, root, history, SEED)
            accepts_writes(store, present, rng, cycle)
            trim(store, history, present, rng)
        finally:
            store.close()
    return history


def _building_a_child(path: Path) -> bool:
    """A directory in tmp/ that a new session was being built in: built on the spot
    ("new-"), or a spare directory (prepared ahead) whose identity was written."""
    if path.name.startswith(("new-", "fork-")):
        return True
    identity = path / "SESSION"
    # (a spare's identity file holds zeros until then)
    return (
        path.name.startswith("spare-")
        and identity.exists()
        and bool(identity.read_bytes().strip(b"\0"))
    )


def test_sigkill_during_fork(tmp_path: Path) -> None:
    def setup(store: journal.Store) -> None:
        for r in range(3):
            sid = f"root-{r}"
            context: list[Any] = []
            for seq in range(4):
                context = [*context, item(f"{sid}-{seq}")]
                store.save(checkpoint(sid, seq, context), [context[-1]])

    def trim(store: journal.Store, history: History, present: set[str], rng: random.Random) -> None:
        # Keep the store small: delete random forked subtrees (never the roots).
        while len(present) > 25:
            victim = rng.choice(sorted(s for s in present if not s.startswith("root-")))
            present = delete_some(store, history, [victim], present)

    history = run_kills(tmp_path, fork_body, "F", 3, 0.03, setup, trim)
    print(f"kills inside an operation: {history.kills_in_op}, in tmp/: {history.left_tmp}")
    assert history.acked_forks, "no fork ever completed"
    assert history.kills_in_op.get("F", 0) >= KILLS // 2
    if KILLS >= 50:  # enough kills to be sure some landed while a child was being built
        assert history.left_tmp > 0


def test_sigkill_during_delete(tmp_path: Path) -> None:
    def trim(store: journal.Store, history: History, present: set[str], rng: random.Random) -> None:
        # Trees a kill left behind: delete them all, roots first half the time.
        if present and rng.random() < 0.5:
            roots = [s for s in present if "/" not in s]
            delete_some(store, history, roots, present)
        elif present:
            delete_some(store, history, sorted(present), present)

    history = run_kills(tmp_path, delete_body, "D", 2, 0.03, None, trim)
    print(f"kills inside an operation: {history.kills_in_op}, after commit: {history.left_intent}")
    assert history.acked_deleted, "no delete ever completed"
    # Most kills land inside a delete (54-59 of 100 in recent runs, 48 once): at least a
    # third must, or the test is not exercising deletes.
    assert history.kills_in_op.get("D", 0) >= KILLS // 3
    if KILLS >= 50:  # enough kills to be sure some landed after a delete's commit point
        assert history.left_intent > 0

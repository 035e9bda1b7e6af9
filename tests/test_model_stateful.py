"""Stateful property test: the public API driven against a plain model of the contract.

A hypothesis `RuleBasedStateMachine` runs one store (durability "os") through
random programs of: saves that grow the context, rewrite it under a new epoch, or
break a rule (a sequence that does not advance, a changed or truncated prefix, an
epoch going back, a blank owner, a negative event time, an execution record whose
times do not add up, an unsupported version, a Struct inside loose JSON); appends,
alone, with `expected_latest`, and from 2-4 threads at once; forks (`fork_at` and
`fork` with a caller-built child, clean or not); deletes of subtrees; state values;
close and reopen; a read-only store beside the writer; and a "crash": a child
process runs the next few writes (appends, saves, a new session, a fork, a delete),
reports each acknowledged one on a pipe, and is killed with SIGKILL, after which
the store is reopened. Each program first draws the store's options: small
segments (4 KiB: many per session) or not, at most 1 or 2 open sessions or the
default, no read cache or the default, no session dictionary or the default
(large context items make sessions train one). `tests/model_contract.py`
is the model.

Every write that must fail is checked to raise the error class the contract
names and to change nothing. After every step the invariant reads everything
back (load, checkpoint_at at every saved and some unsaved sequences,
session_summary, session_metadata, message_accepted, event_page paged to its end,
events_after, transcript_page, execution_page, recent_executions,
list_sessions_page paged to its end with and without an owner filter,
child_sessions, load_state) and compares it with the model.

Seed: JOURNAL_MODEL_SEED (printed; random when unset). Size:
JOURNAL_MODEL_EXAMPLES (default 15) programs of JOURNAL_MODEL_STEPS (default 40)
steps.
"""

from __future__ import annotations

import copy
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from model_contract import Model, SessionModel, clone_checkpoint

import journal
from journal import (
    Checkpoint,
    ContractViolationError,
    Event,
    EventPageRequest,
    ExecutionPageRequest,
    ExecutionRecord,
    ExecutionStats,
    InvalidInputError,
    JournalEvent,
    NotFoundError,
    QueuedMessage,
    SessionContext,
    SessionPageRequest,
    TimestampedEvent,
    TranscriptPageRequest,
)

SEED = int(os.environ.get("JOURNAL_MODEL_SEED", str(random.SystemRandom().randrange(1 << 32))))
EXAMPLES = int(os.environ.get("JOURNAL_MODEL_EXAMPLES", "15"))
STEPS = int(os.environ.get("JOURNAL_MODEL_STEPS", "40"))
CHILD = Path(__file__).with_name("model_crash_child.py")

SESSIONS = ["a", "b", "c", "d", "e"]
OWNERS = ["alice", "bob"]
SCOPES = [*SESSIONS, "global"]
KEYS = ["k1", "k2"]
SUBMISSIONS = ["m1", "m2", "m3"]
PAGE_ALL = 10_000

# --- strategies ----------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=5,
)
ITEM = (
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": TEXT}) | JSON
)
VOCABULARY = [
    f"{a}{b}"
    for a in ("tool", "call", "error", "retry", "libssl", "CI", "ok", "run")
    for b in range(32)
]


def big_item(n: int) -> dict[str, Any]:
    """About 1.5-6 KiB of text, 0.5-2 KiB compressed: a few such saves fill a 4 KiB
    segment, and a session reaches the 32 KiB after which it trains a dictionary."""
    rng = random.Random(n)
    words = rng.choices(VOCABULARY, k=rng.randint(200, 800))
    return {"role": "assistant", "content": " ".join(words), "n": n}


BIG_ITEM = st.integers(0, 2**32).map(big_item)
ITEMS = st.lists(ITEM | ITEM | BIG_ITEM, max_size=3)
TIMESTAMP = st.integers(0, 2**41)
SUB = st.sampled_from(["u1", "u2"]) | st.none()
EVENT = st.one_of(
    st.builds(lambda t: Event(msg={"type": "warning", "message": t}), TEXT),
    st.builds(lambda t: Event(msg={"type": "turn_started", "turn_id": t}), TEXT),
    st.just(Event(msg={"type": "session_history", "events": []})),  # transient
    st.builds(
        lambda n: Event(msg={"type": "token_count", "info": {"total": n}}), st.integers(0, 9)
    ),
    st.builds(
        lambda s, t: Event(submission_id=s, msg={"type": "message_delta", "text": t}), SUB, TEXT
    ),
    st.builds(
        lambda s, t: Event(submission_id=s, msg={"type": "message", "author": "user", "text": t}),
        SUB,
        TEXT,
    ),
)
TIMED_EVENTS = st.lists(
    st.builds(lambda at, ev: TimestampedEvent(recorded_at_ms=at, event=ev), TIMESTAMP, EVENT),
    max_size=3,
)
SAVE_MODES = [
    "grow",
    "grow",
    "grow",
    "rewrite",
    "stale_sequence",
    "changed_prefix",
    "truncated_prefix",
    "epoch_back",
    "blank_owner",
    "negative_time",
    "bad_execution",
    "bad_version",
    "struct_in_json",
]


def now() -> int:
    return int(time.time())


def execution_for(session_id: str, data: st.DataObject, *, consistent: bool) -> ExecutionRecord:
    started = data.draw(st.integers(0, 5), label="started_at_ms")
    elapsed = data.draw(st.integers(0, 3), label="elapsed_ms")
    return ExecutionRecord(
        session_id=session_id,
        submission_id=data.draw(st.sampled_from(SUBMISSIONS)),
        author={"kind": "user"},
        turn_id=data.draw(st.sampled_from(["t1", "t2"])),
        started_at_ms=started,
        finished_at_ms=started + elapsed,
        elapsed_ms=elapsed if consistent else elapsed + 1,
        outcome=data.draw(st.sampled_from(["completed", "aborted", "failed"])),
        tool_calls=2,
        failed_tool_calls=1,
    )


def summary_fields(summary: journal.SessionSummary) -> dict[str, Any]:
    return {
        "session_id": summary.session_id,
        "session_context": summary.session_context,
        "parent_session_id": summary.parent_session_id,
        "parent_sequence": summary.parent_sequence,
        "sequence": summary.sequence,
        "catalog_visible": summary.catalog_visible,
        "first_user_message": summary.first_user_message,
        "execution_stats": summary.execution_stats,
    }


def check_summary(model: Model, summary: journal.SessionSummary) -> None:
    s = model.sessions[summary.session_id]
    assert summary_fields(summary) == model.summary_fields(summary.session_id)
    assert s.created[0] <= summary.created_at <= s.created[1], (summary, s.created)
    assert s.updated[0] <= summary.updated_at <= s.updated[1], (summary, s.updated)


# --- the machine ---------------------------------------------------------------------


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="journal-model-")
        self.root = os.path.join(self.tmp, "store")
        self.options: dict[str, Any] = {"durability": "os"}
        self.store = journal.open(self.root, **self.options)
        self.model = Model()
        self.steps = 0

    @initialize(
        segment_bytes=st.sampled_from([None, 4096]),
        max_open_sessions=st.sampled_from([None, 1, 2]),
        read_cache_bytes=st.sampled_from([None, 0]),
        dictionary=st.sampled_from([None, False]),
    )
    def options_of_the_store(
        self,
        segment_bytes: int | None,
        max_open_sessions: int | None,
        read_cache_bytes: int | None,
        dictionary: bool | None,
    ) -> None:
        """Small segments (many per session), few open sessions, no read cache, no
        session dictionary: or not."""
        drawn = {
            "segment_bytes": segment_bytes,
            "max_open_sessions": max_open_sessions,
            "read_cache_bytes": read_cache_bytes,
            "dictionary": dictionary,
        }
        self.options.update({k: v for k, v in drawn.items() if v is not None})
        self.reopen()

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def existing(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(sorted(self.model.sessions)), label="session")

    def fresh(self, data: st.DataObject, label: str = "child") -> str:
        """A session id, most often one that does not exist."""
        absent = [sid for sid in SESSIONS if sid not in self.model.sessions]
        if absent and data.draw(st.integers(0, 3), label=f"{label} is new") > 0:
            return data.draw(st.sampled_from(absent), label=label)
        return data.draw(st.sampled_from(SESSIONS), label=label)

    def some(self, data: st.DataObject, label: str = "session") -> str:
        """A session id, most often one that exists."""
        if self.model.sessions and data.draw(st.integers(0, 4), label=f"{label} exists") > 0:
            return data.draw(st.sampled_from(sorted(self.model.sessions)), label=label)
        return data.draw(st.sampled_from(SESSIONS), label=label)

    # ------------------------------------------------------------------ saves
    def build_save(
        self, data: st.DataObject, sid: str, mode: str
    ) -> tuple[Checkpoint, list[Any], ExecutionRecord | None, list[TimestampedEvent]]:
        s = self.model.sessions.get(sid)
        new_items: list[Any]
        if mode == "long":
            new_items = data.draw(st.lists(BIG_ITEM, min_size=1, max_size=2), label="big items")
        else:
            new_items = data.draw(ITEMS, label="new items")
        if s is None:
            cp = Checkpoint.empty(sid, owner_id=OWNERS[0])
            cp.sequence = data.draw(st.integers(0, 3), label="first sequence")
            cp.context = new_items
        else:
            cp = clone_checkpoint(s.head)
            cp.sequence = s.latest + data.draw(st.sampled_from([1, 1, 2, 3, 2**40]), label="step")
            old = copy.deepcopy(s.head.context)  # equal by value, not the same objects
            cp.context = old + new_items
            if mode == "rewrite":
                cp.context_epoch += data.draw(st.integers(1, 2), label="epoch step")
                cp.context = data.draw(ITEMS, label="rewritten context")
            elif mode == "stale_sequence":
                cp.sequence = s.latest - data.draw(st.integers(0, min(s.latest, 2)))
            elif mode == "changed_prefix" and old:
                i = data.draw(st.integers(0, len(old) - 1), label="changed index")
                cp.context[i] = {"changed": old[i]}
            elif mode == "truncated_prefix" and old:
                cp.context = old[: data.draw(st.integers(0, len(old) - 1), label="cut at")]
            elif mode == "epoch_back" and cp.context_epoch > 0:
                cp.context_epoch -= 1
        cp.session_context = SessionContext(
            owner_id=" " if mode == "blank_owner" else data.draw(st.sampled_from(OWNERS)),
            origin_label=data.draw(st.none() | st.just("cli"), label="origin_label"),
            workspace_id=data.draw(st.none() | st.just("w1"), label="workspace_id"),
        )
        cp.execution_stats = ExecutionStats(run_count=data.draw(st.integers(0, 3)))
        cp.context_model_route = data.draw(st.none() | st.just("fast"))
        if mode == "bad_version":
            cp.version = 18
        if mode == "struct_in_json":  # loose JSON fields hold JSON, not msgspec Structs
            where = data.draw(st.sampled_from(["metadata", "context"]), label="struct in")
            if where == "metadata":
                cp.metadata = {"k": SessionContext(owner_id="x")}
            else:
                cp.context = [*cp.context, {"k": SessionContext(owner_id="x")}]
        cp.first_user_message = data.draw(st.none() | TEXT, label="first_user_message")
        cp.catalog_visible = data.draw(st.booleans(), label="catalog_visible")
        if mode != "struct_in_json":
            cp.metadata = data.draw(st.dictionaries(st.sampled_from(["x", "y"]), JSON, max_size=2))
        cp.model_route = data.draw(st.none() | st.sampled_from(["fast", "deep"]))
        cp.pending_messages = [
            QueuedMessage(owner="o", id=m)
            for m in data.draw(st.lists(st.sampled_from(SUBMISSIONS), unique=True, max_size=2))
        ]
        delta_kind = data.draw(st.sampled_from(["tail", "tail", "other", "none"]), label="delta")
        if delta_kind == "tail":
            delta = cp.context[len(cp.context) - len(new_items) :] if s is not None else cp.context
        elif delta_kind == "other":
            delta = data.draw(st.lists(ITEM, min_size=1, max_size=2), label="other delta")
        else:
            delta = []
        execution = None
        if mode == "bad_execution":
            execution = execution_for(sid, data, consistent=False)
        elif data.draw(st.booleans(), label="with execution"):
            execution = execution_for(sid, data, consistent=True)
        events = data.draw(TIMED_EVENTS, label="events")
        if mode == "negative_time":
            events = [*events, TimestampedEvent(recorded_at_ms=-1, event=Event(msg={"type": "x"}))]
        return cp, delta, execution, events

    @rule(data=st.data(), mode=st.sampled_from(SAVE_MODES))
    def save(self, data: st.DataObject, mode: str) -> None:
        self.save_to(data, self.some(data), mode)

    def save_to(self, data: st.DataObject, sid: str, mode: str) -> None:
        cp, delta, execution, events = self.build_save(data, sid, mode)
        expected_error = self.model.save_error(cp, execution, events)
        breaks = ("blank_owner", "negative_time", "bad_execution", "bad_version", "struct_in_json")
        if mode in breaks or (mode == "stale_sequence" and sid in self.model.sessions):
            assert expected_error is not None, mode  # the generator broke a rule
        snapshot = (clone_checkpoint(cp), copy.deepcopy(delta))
        with_events = bool(events) or data.draw(st.booleans(), label="save_with_events")
        lo = now()
        if expected_error is not None:
            with pytest.raises(expected_error):
                if with_events:
                    self.store.save_with_events(cp, delta, execution, events)
                else:
                    self.store.save(cp, delta, execution)
            return  # the invariant checks that nothing changed
        if with_events:
            got = self.store.save_with_events(cp, delta, execution, events)
        else:
            self.store.save(cp, delta, execution)
            got = []
        want = self.model.save(snapshot[0], snapshot[1], execution, events, (lo, now()))
        assert got == want

    # Saves and appends are what the rest reads: run them more often.
    @rule(data=st.data(), mode=st.sampled_from(SAVE_MODES))
    def save_more(self, data: st.DataObject, mode: str) -> None:
        self.save(data, mode)

    @rule(data=st.data(), mode=st.sampled_from(SAVE_MODES))
    def save_even_more(self, data: st.DataObject, mode: str) -> None:
        self.save(data, mode)

    @precondition(lambda self: self.model.sessions)
    @rule(data=st.data(), count=st.integers(5, 15))
    def long_history(self, data: st.DataObject, count: int) -> None:
        """Many growing saves with large items on one session: several segments, and
        a session dictionary once 32 KiB of payloads were written."""
        sid = self.existing(data)
        for _ in range(count):
            self.save_to(data, sid, "long")

    # ----------------------------------------------------------------- events
    @rule(
        data=st.data(),
        at=TIMESTAMP | st.just(-5),
        event=EVENT,
        expect=st.sampled_from([None, None, "right", "wrong"]),
    )
    def append(self, data: st.DataObject, at: int, event: Event, expect: str | None) -> None:
        sid = self.some(data)
        s = self.model.sessions.get(sid)
        counter = s.counter if s is not None else 0
        expected_latest = None
        if expect == "right":
            expected_latest = counter
        elif expect == "wrong":
            expected_latest = max(0, counter + data.draw(st.sampled_from([-1, 1, 7])))
            if expected_latest == counter:
                expected_latest += 1
        error = self.model.append_error(sid, at, expected_latest)
        if error is not None:
            with pytest.raises(error):
                self.store.append_event(sid, at, event, expected_latest=expected_latest)
            return
        got = self.store.append_event(sid, at, event, expected_latest=expected_latest)
        assert got == self.model.append(sid, at, event)

    @rule(data=st.data(), at=TIMESTAMP, event=EVENT)
    def append_more(self, data: st.DataObject, at: int, event: Event) -> None:
        self.append(data, at, event, None)

    @precondition(lambda self: self.model.sessions)
    @rule(data=st.data(), threads=st.integers(2, 4))
    def append_from_threads(self, data: st.DataObject, threads: int) -> None:
        jobs = [
            (
                self.existing(data),
                data.draw(st.lists(st.tuples(TIMESTAMP, EVENT), min_size=1, max_size=4)),
            )
            for _ in range(threads)
        ]
        before = {sid: self.model.sessions[sid].counter for sid, _ in jobs}
        barrier = threading.Barrier(threads)
        results: list[list[JournalEvent]] = [[] for _ in jobs]
        failures: list[BaseException] = []

        def run(i: int) -> None:
            sid, work = jobs[i]
            try:
                barrier.wait(timeout=30)
                for at, ev in work:
                    results[i].append(self.store.append_event(sid, at, ev))
            except BaseException as exc:
                failures.append(exc)

        workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not failures, failures
        for i, (_sid, _work) in enumerate(jobs):
            seqs = [e.sequence for e in results[i]]
            assert seqs == sorted(set(seqs)), seqs  # each thread's own order
        acked: list[tuple[int, str, int, Event, JournalEvent]] = []
        for i, (sid, work) in enumerate(jobs):
            for (at, ev), got in zip(work, results[i], strict=True):
                acked.append((got.sequence, sid, at, ev, got))
        for sid, start in before.items():
            seqs = sorted(a[0] for a in acked if a[1] == sid)
            total = sum(len(w) for j, w in jobs if j == sid)
            assert seqs == list(range(start + 1, start + total + 1)), (sid, seqs)  # distinct, dense
        for _, sid, at, ev, got in sorted(acked, key=lambda a: (a[1], a[0])):
            assert got == self.model.append(sid, at, ev)

    # ------------------------------------------------------------------ reads
    @rule(
        data=st.data(),
        limit=st.integers(1, 4),
        start=st.none() | st.integers(0, 12),
    )
    def page_events(self, data: st.DataObject, limit: int, start: int | None) -> None:
        sid = self.some(data)
        if sid not in self.model.sessions:
            with pytest.raises(NotFoundError):
                self.store.event_page(sid, EventPageRequest(limit=limit))
            return
        self.check_event_paging(sid, limit, start)

    def check_event_paging(self, sid: str, limit: int, start: int | None) -> None:
        """Page from `start` the way the README shows, until next_before_sequence is None."""
        before = start
        seen: list[JournalEvent] = []
        for _ in range(len(self.model.sessions[sid].events) + 2):  # a loop that must stop
            page = self.store.event_page(sid, EventPageRequest(before_sequence=before, limit=limit))
            latest, events, nxt = self.model.event_page(sid, before, limit)
            assert (page.latest_sequence, page.events, page.next_before_sequence) == (
                latest,
                events,
                nxt,
            ), (sid, before, limit)
            seen.extend(page.events)
            if page.next_before_sequence is None:
                break
            before = page.next_before_sequence
        else:
            raise AssertionError(f"event paging of {sid!r} did not stop")
        _, everything, _ = self.model.event_page(sid, start, PAGE_ALL)
        assert seen == everything

    @rule(data=st.data(), after=st.integers(0, 12), limit=st.integers(1, 4))
    def events_after(self, data: st.DataObject, after: int, limit: int) -> None:
        sid = self.some(data)
        assert self.store.events_after(sid, after, limit) == self.model.events_after(
            sid, after, limit
        )

    def check_journal_paging(self, sid: str, limit: int) -> None:
        before: int | None = None
        for _ in range(PAGE_ALL):
            tpage = self.store.transcript_page(
                sid, TranscriptPageRequest(before_sequence=before, max_batches=limit)
            )
            batches, nxt = self.model.transcript_page(sid, before, limit)
            assert [(b.sequence, b.items) for b in tpage.batches] == batches, (sid, before)
            assert tpage.next_before_sequence == nxt
            assert all(b.created_at > 0 for b in tpage.batches)
            if nxt is None:
                break
            before = nxt
        before = None
        for _ in range(PAGE_ALL):
            epage = self.store.execution_page(
                sid, ExecutionPageRequest(before_sequence=before, limit=limit)
            )
            records, nxt = self.model.execution_page(sid, before, limit)
            assert epage.executions == [r for _, r in records], (sid, before)
            assert epage.next_before_sequence == nxt
            if nxt is None:
                break
            before = nxt

    @rule(limit=st.integers(1, 3), owner=st.none() | st.sampled_from(OWNERS))
    def page_sessions(self, limit: int, owner: str | None) -> None:
        self.check_session_paging(limit, owner)

    def check_session_paging(self, limit: int, owner: str | None) -> None:
        want = {
            sid
            for sid, s in self.model.sessions.items()
            if owner is None or s.head.session_context.owner_id == owner
        }
        rows: list[journal.SessionSummary] = []
        cursor = None
        for _ in range(len(want) + 2):
            page = self.store.list_sessions_page(
                SessionPageRequest(owner_id=owner, cursor=cursor, limit=limit)
            )
            assert len(page.sessions) <= limit
            rows.extend(page.sessions)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        else:
            raise AssertionError("session paging did not stop")
        assert sorted(r.session_id for r in rows) == sorted(want)
        keys = [(r.updated_at, r.sequence, r.session_id) for r in rows]
        assert keys == sorted(keys, reverse=True)
        for r in rows:
            check_summary(self.model, r)

    @precondition(lambda self: self.model.sessions)
    @rule(data=st.data(), items=st.integers(0, 4))
    def reader(self, data: st.DataObject, items: int) -> None:
        sid = self.existing(data)
        s = self.model.sessions[sid]
        with self.store.reader(sid) as r:
            assert r.load() == s.head
            prefix = r.load_prefix(items)
            assert prefix is not None
            assert prefix.context == s.head.context[:items]
            assert r.checkpoint_at(s.latest) == s.head
            _, events, nxt = self.model.event_page(sid, None, 3)
            page = r.event_page(EventPageRequest(limit=3))
            assert (page.events, page.next_before_sequence) == (events, nxt)
            assert r.events_after(0, PAGE_ALL) == self.model.events_after(sid, 0, PAGE_ALL)

    @precondition(lambda self: self.steps % 5 == 0)
    @rule(sid=st.sampled_from(SESSIONS))
    def zero_limits(self, sid: str) -> None:
        with pytest.raises(InvalidInputError):
            self.store.event_page(sid, EventPageRequest(limit=0))
        with pytest.raises(InvalidInputError):
            self.store.transcript_page(sid, TranscriptPageRequest(max_batches=0))
        with pytest.raises(InvalidInputError):
            self.store.execution_page(sid, ExecutionPageRequest(limit=0))
        with pytest.raises(InvalidInputError):
            self.store.events_after(sid, 0, 0)
        with pytest.raises(InvalidInputError):
            self.store.list_sessions_page(SessionPageRequest(limit=0))

    # ------------------------------------------------------------------ forks
    @precondition(lambda self: self.model.sessions)
    @rule(data=st.data())
    def fork_at(self, data: st.DataObject) -> None:
        parent = self.some(data, "parent")
        child = self.fresh(data)
        p = self.model.sessions.get(parent)
        choices = st.integers(0, 12)
        if p is not None:
            choices = (
                st.sampled_from(sorted(p.checkpoints))
                | st.sampled_from(sorted(p.checkpoints))
                | st.integers(0, p.latest + 1)
            )
        sequence = data.draw(choices, label="fork sequence")
        error = self.model.fork_at_error(parent, sequence, child)
        if error is not None:
            with pytest.raises(error):
                self.store.fork_at(parent, sequence, child)
            return
        built = self.model.fork_at_child(parent, sequence, child)
        lo = now()
        summary = self.store.fork_at(parent, sequence, child)
        self.model.fork(parent, sequence, built, (lo, now()))
        check_summary(self.model, summary)

    @precondition(lambda self: self.model.sessions)
    @rule(
        data=st.data(),
        unclean=st.sampled_from([None, None, None, "sequence", "pending"]),
    )
    def fork(self, data: st.DataObject, unclean: str | None) -> None:
        parent = self.some(data, "parent")
        child = self.fresh(data)
        p = self.model.sessions.get(parent)
        sequence = data.draw(st.integers(0, (p.latest if p is not None else 0) + 1))
        cp = Checkpoint.empty(child, owner_id=data.draw(st.sampled_from(OWNERS)))
        cp.context = data.draw(ITEMS, label="child context")
        cp.first_user_message = data.draw(st.none() | TEXT)
        if unclean == "sequence":
            cp.sequence = 1
        elif unclean == "pending":
            cp.pending_messages = [QueuedMessage(owner="o", id="m1")]
        error = self.model.fork_error(parent, sequence, cp)
        if unclean is not None:
            assert error is ContractViolationError
        if error is not None:
            with pytest.raises(error):
                self.store.fork(parent, sequence, cp)
            return
        snapshot = clone_checkpoint(cp)
        lo = now()
        summary = self.store.fork(parent, sequence, cp)
        self.model.fork(parent, sequence, snapshot, (lo, now()))
        check_summary(self.model, summary)

    # ---------------------------------------------------------- delete, state
    @precondition(lambda self: self.steps % 2 == 1)
    @rule(data=st.data(), count=st.integers(0, 2))
    def delete(self, data: st.DataObject, count: int) -> None:
        ids = [self.some(data) for _ in range(count)]
        got = self.store.delete_sessions(ids)
        assert got == self.model.delete(ids)

    @rule(scope=st.sampled_from(SCOPES), key=st.sampled_from(KEYS), value=JSON)
    def save_state(self, scope: str, key: str, value: Any) -> None:
        self.store.save_state(scope, key, value)
        self.model.state[(scope, key)] = copy.deepcopy(value)

    # ------------------------------------------------------- reopen and crash
    @precondition(lambda self: self.steps % 3 == 0)
    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = journal.open(self.root, **self.options)

    @precondition(lambda self: self.steps % 4 == 2)
    @rule()
    def read_only_view(self) -> None:
        """A read-only store opened beside the writer answers every read the same."""
        writer = self.store
        options = {k: v for k, v in self.options.items() if k != "durability"}
        self.store = journal.open(self.root, read_only=True, **options)
        try:
            self.check_everything()
        finally:
            self.store.close()
            self.store = writer

    @precondition(lambda self: self.model.sessions)
    @rule(data=st.data(), count=st.integers(1, 4), keep_open=st.booleans())
    def crash(self, data: st.DataObject, count: int, keep_open: bool) -> None:
        """The next `count` writes run in a child killed with SIGKILL; then reopen.

        With `keep_open`, this process keeps its store open meanwhile and first
        checks every read through it (it must pick up what the child committed),
        then reopens.
        """
        sid = self.existing(data)
        # 0: killed while it opens the store (or before), rarely
        kill_after = data.draw(
            st.sampled_from([0, *list(range(1, count + 1)) * 3]), label="kill after"
        )
        absent = [x for x in SESSIONS if x not in self.model.sessions]
        head = clone_checkpoint(self.model.sessions[sid].head)
        plan: list[dict[str, Any]] = []
        fork_point = self.model.sessions[sid].latest  # committed: a child can start there
        for i in range(count):
            kinds = ["append", "save", "create", "fork"] + (["delete"] if i == count - 1 else [])
            kind = data.draw(st.sampled_from(kinds), label="op")
            if kind == "append":
                at, ev = data.draw(TIMESTAMP), data.draw(EVENT)
                plan.append({"op": "append", "session": sid, "at": at, "event": ev})
            elif kind == "fork" and absent:
                plan.append({"op": "fork", "session": sid, "sequence": fork_point})
                plan[-1]["child"] = absent.pop()
            elif kind == "delete":  # the last op: the session and its subtree
                plan.append({"op": "delete", "session": sid})
            elif kind == "create" and absent:  # a new session, created by the child
                fresh = Checkpoint.empty(absent.pop(), owner_id=data.draw(st.sampled_from(OWNERS)))
                fresh.context = data.draw(ITEMS, label="new context")
                plan.append({"op": "save", "checkpoint": fresh, "delta": fresh.context})
            else:
                new_items = data.draw(ITEMS, label="new items")
                head = clone_checkpoint(head)
                head.sequence += 1
                head.context = [*head.context, *new_items]
                plan.append({"op": "save", "checkpoint": head, "delta": new_items})
        plan_path = os.path.join(self.tmp, "plan.json")
        with open(plan_path, "wb") as f:
            f.write(msgspec.json.encode(plan))
        if not keep_open:
            self.store.close()
        lo = now()
        acks = run_and_kill(self.root, plan_path, kill_after, count, self.tmp, self.options)
        when = (lo, now())
        if not keep_open:
            self.store = journal.open(self.root, **self.options)
        for i, acked_seq in enumerate(acks):
            assert acked_seq == self.apply_planned(plan[i], when)
        done = len(acks)
        if done < count:  # the write under way at the kill: wholly there or absent
            op = plan[done]
            if op["op"] == "append":
                counter = self.model.sessions[sid].counter
                latest = self.store.event_page(sid, EventPageRequest(limit=1)).latest_sequence
                assert latest in (counter, counter + 1), (latest, counter)
                if latest == counter + 1:
                    self.apply_planned(op, when)
                    done += 1
            elif op["op"] == "fork":
                if self.store.load(op["child"]) is not None:
                    self.apply_planned(op, when)
                    done += 1
            elif op["op"] == "delete":
                if self.store.load(sid) is None:
                    self.apply_planned(op, when)
                    done += 1
            else:
                target: Checkpoint = op["checkpoint"]
                before = self.model.sessions.get(target.session_id)
                loaded = self.store.load(target.session_id)
                if loaded is None:
                    assert before is None, target.session_id
                elif loaded.sequence == target.sequence:
                    self.apply_planned(op, when)
                    done += 1
                else:
                    assert before is not None and loaded.sequence == before.latest
        # Nothing beyond: exactly what was acknowledged (and the write in flight). A store
        # that stayed open may list the dead writer's sessions as of its save before
        # last for a moment (README, Limitations: the catalog is reconciled once this
        # process notices the death, at most once a second), so its listings are
        # checked after the reopen below.
        self.check_everything(catalog=not keep_open)
        if keep_open:
            self.store.close()
            self.store = journal.open(self.root, **self.options)
        # This process finishes the plan, as a writer retrying what was not acknowledged
        # would; the state after this rule is then the same however the kill fell.
        for op in plan[done:]:
            lo = now()
            if op["op"] == "append":
                got = self.store.append_event(sid, op["at"], op["event"])
                assert got == self.model.append(sid, op["at"], op["event"])
            elif op["op"] == "fork":
                summary = self.store.fork_at(sid, op["sequence"], op["child"])
                self.apply_planned(op, (lo, now()))
                check_summary(self.model, summary)
            elif op["op"] == "delete":
                assert self.store.delete_sessions([sid]) is True
                self.apply_planned(op, (lo, now()))
            else:
                self.store.save(op["checkpoint"], op["delta"])
                self.model.save(op["checkpoint"], op["delta"], None, [], (lo, now()))

    def apply_planned(self, op: dict[str, Any], when: tuple[int, int]) -> int:
        if op["op"] == "append":
            return self.model.append(op["session"], op["at"], op["event"]).sequence
        if op["op"] == "fork":
            child = self.model.fork_at_child(op["session"], op["sequence"], op["child"])
            self.model.fork(op["session"], op["sequence"], child, when)
            return 0
        if op["op"] == "delete":
            return int(self.model.delete([op["session"]]))
        cp: Checkpoint = op["checkpoint"]
        self.model.save(cp, op["delta"], None, [], when)
        return cp.sequence

    # ------------------------------------------------------------- invariant
    @invariant()
    def every_read_matches_the_model(self) -> None:
        self.steps += 1
        self.check_everything()

    def check_everything(self, *, catalog: bool = True) -> None:
        limit = self.steps % 3 + 1
        for sid in SESSIONS:
            s = self.model.sessions.get(sid)
            if s is None:
                self.check_missing(sid)
            else:
                self.check_session(sid, s, limit)
            if not catalog:
                continue
            got_children = self.store.child_sessions(sid)
            assert {c.session_id for c in got_children} == self.model.children(sid)
            keys = [(c.updated_at, c.sequence, c.session_id) for c in got_children]
            assert keys == sorted(keys, reverse=True)
            for c in got_children:
                check_summary(self.model, c)
        if catalog:
            self.check_session_paging(limit + 1, None)
            self.check_session_paging(PAGE_ALL, OWNERS[self.steps % 2])
        assert self.store.recent_executions(PAGE_ALL) == self.model.recent_executions(PAGE_ALL)
        assert self.store.recent_executions(2) == self.model.recent_executions(2)
        for scope in SCOPES:
            for key in KEYS:
                assert self.store.load_state(scope, key) == self.model.state.get((scope, key))

    def check_missing(self, sid: str) -> None:
        assert self.store.load(sid) is None
        assert self.store.checkpoint_at(sid, 0) is None
        assert self.store.session_summary(sid) is None
        assert self.store.session_metadata(sid) is None
        assert not any(self.store.message_accepted(sid, m) for m in SUBMISSIONS)
        with pytest.raises(NotFoundError):
            self.store.event_page(sid, EventPageRequest(limit=3))
        assert self.store.events_after(sid, 0, 3) == []
        assert self.store.transcript_page(sid, TranscriptPageRequest(max_batches=3)).batches == []
        assert self.store.execution_page(sid, ExecutionPageRequest(limit=3)).executions == []

    def check_session(self, sid: str, s: SessionModel, limit: int) -> None:
        assert self.store.load(sid) == s.head
        for seq, cp in s.checkpoints.items():
            assert self.store.checkpoint_at(sid, seq) == cp, (sid, seq)
        near = {q + d for q in s.checkpoints for d in (-1, 1)} | {0, s.latest + 1}
        unsaved = sorted(q for q in near if q >= 0 and q not in s.checkpoints)
        for seq in unsaved[:3] + unsaved[-2:]:
            assert self.store.checkpoint_at(sid, seq) is None, (sid, seq)
        summary = self.store.session_summary(sid)
        assert summary is not None
        check_summary(self.model, summary)
        assert self.store.session_metadata(sid) == s.head.metadata
        for m in SUBMISSIONS:
            assert self.store.message_accepted(sid, m) == (m in s.receipts), (sid, m)
        self.check_event_paging(sid, limit, None)
        assert self.store.events_after(sid, 0, PAGE_ALL) == self.model.events_after(
            sid, 0, PAGE_ALL
        )
        self.check_journal_paging(sid, limit)


def run_and_kill(
    root: str, plan_path: str, kill_after: int, count: int, tmp: str, options: dict[str, Any]
) -> list[int]:
    """Run the plan in a child; kill it with SIGKILL once it acknowledged `kill_after`
    writes (after all of them, once it hangs). Returns every acknowledged sequence,
    in plan order, including those reported between the decision and the kill."""
    err_path = os.path.join(tmp, "child.err")
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), root, plan_path, msgspec.json.encode(options).decode()],
            stdout=subprocess.PIPE,
            stderr=err,
        )
    assert proc.stdout is not None
    lines: list[str] = []
    buffer = b""
    wanted = kill_after + (1 if kill_after == count else 0)  # + the "hang" line
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while len(lines) < wanted:
            if not sel.select(timeout=120):
                proc.kill()
                raise AssertionError("crash child made no progress in 120 s")
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                proc.wait()
                raise AssertionError(
                    f"crash child exited {proc.returncode}: {Path(err_path).read_text()}"
                )
            buffer += chunk
            *done, buffer_text = buffer.decode().split("\n")
            lines.extend(done)
            buffer = buffer_text.encode()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rest = buffer + proc.stdout.read()
    proc.stdout.close()
    lines.extend(line for line in rest.decode().split("\n") if line)
    acks: list[int] = []
    for line in lines:
        if line == "hang":
            continue
        index, seq = line.split()
        assert int(index) == len(acks), lines
        acks.append(int(seq))
    assert len(acks) >= kill_after
    return acks


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.skipif(os.name != "posix", reason="the crash rule needs SIGKILL")
def test_store_matches_model() -> None:
    print(f"JOURNAL_MODEL_SEED={SEED}")
    run_state_machine_as_test(seed(SEED)(StoreMachine), settings=SETTINGS)

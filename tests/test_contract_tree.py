"""The catalog, journal-paging and session-tree part of the `CheckpointStore` contract.

One suite, written once, run against both faces of the store: the synchronous
`Store` (`journal.open`) and the asyncio `AsyncStore` (`journal.open_async`). The
`store` fixture yields an adapter whose methods call the real store; for the
async flavour each call runs the coroutine to completion on a private event loop.

Methods covered: list_sessions_page, session_summary, session_metadata,
transcript_page, execution_page, recent_executions, fork, fork_at and
delete_sessions, following §2 and the "Journals" and "Sessions" behaviours of §5
in `reference/mobius-api.md`.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import glob
import os
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helpers
import msgspec
import pytest
from helpers import T0, fold, item, warning_event

# reaches inside: counts log reads, fails decoding, sets the clock, reads records on disk
import journal
import journal.inspect as tools
import journal.log
import journal.reads
import journal.store
from journal import (
    Checkpoint,
    ContractViolationError,
    EventPageRequest,
    ExecutionPageRequest,
    ExecutionRecord,
    ExecutionStats,
    InvalidInputError,
    JournalError,
    NotFoundError,
    SessionContext,
    SessionCursor,
    SessionPageRequest,
    SessionSummary,
    TimestampedEvent,
    TokenUsage,
    TranscriptPageRequest,
)
from journal.catalogrecords import OP_UPSERT, CatalogRecord
from journal.payloads import COMMIT_FORK, COMMIT_SAVE, DECODERS
from journal.record import CHECKPOINT, COMMIT, FLAG_ZSTD

OWNER = "owner-1"
FLAVOURS = ["sync", "async"]


# --- the adapter -------------------------------------------------------------------------


class Adapter:
    """The same blocking call interface over a `Store` or an `AsyncStore`.

    `adapter.save(...)` calls `Store.save` directly, or runs `AsyncStore.save(...)`
    to completion on the adapter's own event loop. `reopen()` closes and opens the
    store again (same flavour), `raw` is the underlying synchronous `Store`.
    """

    def __init__(self, flavour: str, root: Path):
        self.flavour = flavour
        self.root = root
        self.loop: asyncio.AbstractEventLoop | None = None
        if flavour == "async":
            self.loop = asyncio.new_event_loop()
        self._target: Any = self._open()

    def _open(self) -> Any:
        if self.loop is None:
            return journal.open(self.root)
        target = self.loop.run_until_complete(journal.open_async(self.root))
        assert isinstance(target, journal.AsyncStore)
        return target

    @property
    def raw(self) -> journal.Store:
        if isinstance(self._target, journal.AsyncStore):
            return self._target.sync
        assert isinstance(self._target, journal.Store)
        return self._target

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attr = getattr(self._target, name)
        if self.loop is None:
            return attr  # type: ignore[no-any-return]
        loop = self.loop

        def call(*args: Any, **kwargs: Any) -> Any:
            coro = attr(*args, **kwargs)
            assert asyncio.iscoroutine(coro), f"AsyncStore.{name} must be a coroutine function"
            return loop.run_until_complete(coro)

        return call

    def reopen(self) -> None:
        self.close_store()
        self._target = self._open()

    def close_store(self) -> None:
        if self.loop is None:
            self._target.close()
        else:
            self.loop.run_until_complete(self._target.close())

    def shutdown(self) -> None:
        self.close_store()
        if self.loop is not None:
            # Join the worker threads, so no thread outlives the test (other tests fork).
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()


@pytest.fixture(params=FLAVOURS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Adapter]:
    adapter = Adapter(str(request.param), tmp_path / "store")
    yield adapter
    adapter.shutdown()


# --- helpers -----------------------------------------------------------------------------


def ctx(owner: str = OWNER, **labels: str) -> SessionContext:
    return SessionContext(owner_id=owner, **labels)


checkpoint = functools.partial(helpers.checkpoint, owner=OWNER)


def execution(session_id: str, n: int, *, started: int | None = None) -> ExecutionRecord:
    """A finished turn of ada's: two model calls, one tool call, 15 tokens."""
    return helpers.execution(
        session_id,
        n,
        started=T0 + n * 10_000 if started is None else started,
        elapsed=1000,
        author={"type": "user", "name": "ada"},
        model_calls=2,
        tool_calls=1,
        failed_tool_calls=0,
        usage=TokenUsage(input_tokens=10, output_tokens=5, total_tokens=15),
    )


def listing(store: Adapter, owner: str | None = None, limit: int = 1000) -> list[str]:
    """Every session id the catalog lists, walking all pages."""
    out: list[str] = []
    cursor: SessionCursor | None = None
    while True:
        page = store.list_sessions_page(
            SessionPageRequest(owner_id=owner, cursor=cursor, limit=limit)
        )
        out.extend(s.session_id for s in page.sessions)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def summaries(store: Adapter) -> dict[str, SessionSummary]:
    page = store.list_sessions_page(SessionPageRequest(limit=1000))
    assert page.next_cursor is None
    return {s.session_id: s for s in page.sessions}


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Control the wall clock the store stamps `created_at`/`updated_at` with."""
    now = [1_800_000_000]
    fake = types.SimpleNamespace(time=lambda: float(now[0]), monotonic=time.monotonic)
    monkeypatch.setattr(journal.store, "time", fake)

    def set_now(seconds: int) -> None:
        now[0] = seconds

    return set_now


# --- transcript and execution journals --------------------------------------------------


def test_transcript_paging_3_2_then_1(store: Adapter) -> None:
    for seq in (1, 2, 3):
        store.save(checkpoint("s", seq), [item(seq), item(seq + 10)])
    first = store.transcript_page("s", TranscriptPageRequest(max_batches=2))
    assert [b.sequence for b in first.batches] == [3, 2]
    assert first.next_before_sequence == 2
    assert first.batches[0].items == [item(3), item(13)]
    second = store.transcript_page(
        "s", TranscriptPageRequest(before_sequence=first.next_before_sequence, max_batches=2)
    )
    assert [b.sequence for b in second.batches] == [1]
    assert second.next_before_sequence is None
    assert second.batches[0].items == [item(1), item(11)]
    for batch in first.batches + second.batches:
        assert batch.created_at > 0
    # An exact fit says there is nothing more.
    whole = store.transcript_page("s", TranscriptPageRequest(max_batches=3))
    assert [b.sequence for b in whole.batches] == [3, 2, 1]
    assert whole.next_before_sequence is None


def test_transcript_page_skips_saves_without_delta(store: Adapter) -> None:
    store.save(checkpoint("s", 0), [item(0)])
    store.save(checkpoint("s", 1))  # empty delta: no batch
    store.save(checkpoint("s", 5), [item(5)])
    page = store.transcript_page("s", TranscriptPageRequest(max_batches=10))
    assert [b.sequence for b in page.batches] == [5, 0]
    older = store.transcript_page("s", TranscriptPageRequest(before_sequence=5, max_batches=10))
    assert [b.sequence for b in older.batches] == [0]


def test_execution_paging_catalog_run_count_and_recent(store: Adapter) -> None:
    stats = ExecutionStats()
    for seq in (1, 2, 3):
        rec = execution("s", seq)
        stats = fold(stats, rec)
        store.save(checkpoint("s", seq, execution_stats=stats), [], rec)
    first = store.execution_page("s", ExecutionPageRequest(limit=2))
    assert [e.turn_id for e in first.executions] == ["turn-3", "turn-2"]
    assert first.next_before_sequence == 2
    second = store.execution_page(
        "s", ExecutionPageRequest(before_sequence=first.next_before_sequence, limit=2)
    )
    assert [e.turn_id for e in second.executions] == ["turn-1"]
    assert second.next_before_sequence is None
    assert second.executions[0] == execution("s", 1)

    summary = store.session_summary("s")
    assert summary is not None
    assert summary.execution_stats.run_count == 3
    assert summary.execution_stats == stats
    assert summaries(store)["s"].execution_stats.run_count == 3

    recent = store.recent_executions(2)
    assert [e.turn_id for e in recent] == ["turn-3", "turn-2"]
    assert recent[0] == execution("s", 3)
    assert [e.turn_id for e in store.recent_executions(10)] == ["turn-3", "turn-2", "turn-1"]


def test_recent_executions_order_across_sessions(store: Adapter) -> None:
    # started_at_ms DESC, then session_id DESC, then sequence DESC.
    t = 1_700_000_000_000
    store.save(checkpoint("a", 1), [], execution("a", 1, started=t))
    store.save(checkpoint("b", 1), [], execution("b", 2, started=t))
    store.save(checkpoint("a", 2), [], execution("a", 3, started=t + 5))
    store.save(checkpoint("a", 3), [], execution("a", 4, started=t))
    store.save(checkpoint("c", 1), [], execution("c", 5, started=t - 5))
    got = [(e.session_id, e.turn_id) for e in store.recent_executions(10)]
    assert got == [
        ("a", "turn-3"),
        ("b", "turn-2"),
        ("a", "turn-4"),
        ("a", "turn-1"),
        ("c", "turn-5"),
    ]
    assert [(e.session_id, e.turn_id) for e in store.recent_executions(1)] == [("a", "turn-3")]
    store.reopen()
    assert [(e.session_id, e.turn_id) for e in store.recent_executions(10)] == got


def test_journals_of_missing_session_are_empty(store: Adapter) -> None:
    page = store.transcript_page("nope", TranscriptPageRequest(max_batches=5))
    assert page.batches == [] and page.next_before_sequence is None
    execs = store.execution_page("nope", ExecutionPageRequest(limit=5))
    assert execs.executions == [] and execs.next_before_sequence is None
    assert store.session_summary("nope") is None
    assert store.session_metadata("nope") is None
    assert store.recent_executions(5) == []


@pytest.mark.parametrize(
    "call",
    [
        "list_sessions_page",
        "transcript_page",
        "execution_page",
        "recent_executions",
        "event_page",
    ],
)
@pytest.mark.parametrize("limit", [0, -1])
def test_limit_zero_rejected_for_every_paging_method(store: Adapter, call: str, limit: int) -> None:
    store.save(checkpoint("s", 1), [item(1)], execution("s", 1))
    calls: dict[str, Callable[[], Any]] = {
        "list_sessions_page": lambda: store.list_sessions_page(SessionPageRequest(limit=limit)),
        "transcript_page": lambda: store.transcript_page(
            "s", TranscriptPageRequest(max_batches=limit)
        ),
        "execution_page": lambda: store.execution_page("s", ExecutionPageRequest(limit=limit)),
        "recent_executions": lambda: store.recent_executions(limit),
        "event_page": lambda: store.event_page("s", EventPageRequest(limit=limit)),
    }
    with pytest.raises(InvalidInputError, match="must be positive"):
        calls[call]()


# --- catalog -----------------------------------------------------------------------------


def test_session_context_round_trips_through_save_catalog_and_fork(store: Adapter) -> None:
    full = SessionContext(
        owner_id="owner-ü",
        tenant_id="tenant-1",
        user_id="user-7",
        user_name="Ada Lovelace",
        workspace_id="ws-3",
        workspace_label="Analytical Engine",
        origin_label="cli",
    )
    store.save(checkpoint("p", 1, [item(0)], session_context=full), [item(0)])
    loaded = store.load("p")
    assert loaded is not None and loaded.session_context == full
    summary = store.session_summary("p")
    assert summary is not None and summary.session_context == full
    assert summaries(store)["p"].session_context == full
    assert listing(store, owner="owner-ü") == ["p"]

    child_ctx = msgspec.structs.replace(full, origin_label="fork")
    fork_summary = store.fork("p", 1, checkpoint("c", 0, [item(0)], session_context=child_ctx))
    assert fork_summary.session_context == child_ctx
    child = store.load("c")
    assert child is not None and child.session_context == child_ctx
    assert summaries(store)["c"].session_context == child_ctx

    # fork_at copies the parent's context labels and clears the origin label.
    built = store.fork_at("p", 1, "c2")
    assert built.session_context == msgspec.structs.replace(full, origin_label=None)
    store.reopen()
    assert summaries(store)["c"].session_context == child_ctx
    assert summaries(store)["p"].session_context == full


@pytest.mark.parametrize("owner", ["", "   ", "\t\n"])
def test_blank_owner_rejected_on_save(store: Adapter, owner: str) -> None:
    with pytest.raises(InvalidInputError, match="owner ID cannot be empty"):
        store.save(checkpoint("s", 0, owner=owner), [item(0)])
    assert store.load("s") is None
    assert store.session_summary("s") is None
    assert listing(store) == []
    # Also on an existing session, which keeps its previous state.
    store.save(checkpoint("s", 0))
    with pytest.raises(InvalidInputError, match="owner ID cannot be empty"):
        store.save(checkpoint("s", 1, owner=owner))
    loaded = store.load("s")
    assert loaded is not None and loaded.sequence == 0
    # And as a catalog filter.
    with pytest.raises(InvalidInputError):
        store.list_sessions_page(SessionPageRequest(owner_id=owner, limit=5))


def test_stored_blank_owner_is_an_error_when_listing(store: Adapter) -> None:
    """A catalog row with a blank owner (written behind the store's back) is not returned."""
    # reaches inside: writes a catalog record by hand

    store.save(checkpoint("s", 0))
    bad = SessionSummary(
        session_id="ghost",
        session_context=SessionContext(owner_id=" "),
        sequence=0,
        catalog_visible=True,
        created_at=1,
        updated_at=2_000_000_000,
    )
    store.raw.catalog.append([CatalogRecord(OP_UPSERT, "ghost", 0, bad)])
    with pytest.raises(JournalError, match="owner ID cannot be empty"):
        store.list_sessions_page(SessionPageRequest(limit=5))


def test_listing_newest_first_with_exclusive_cursor(
    store: Adapter, frozen_clock: Callable[[int], None]
) -> None:
    frozen_clock(1_800_000_000)
    store.save(checkpoint("old", 0))
    frozen_clock(1_800_000_100)
    store.save(checkpoint("mid", 4))
    frozen_clock(1_800_000_200)
    store.save(checkpoint("new", 0))
    frozen_clock(1_800_000_300)
    store.save(checkpoint("old", 1))  # an update moves "old" to the front
    page = store.list_sessions_page(SessionPageRequest(limit=2))
    assert [s.session_id for s in page.sessions] == ["old", "new"]
    assert page.next_cursor == SessionCursor(updated_at=1_800_000_200, sequence=0, session_id="new")
    rest = store.list_sessions_page(SessionPageRequest(cursor=page.next_cursor, limit=2))
    assert [s.session_id for s in rest.sessions] == ["mid"]
    assert rest.next_cursor is None
    old = page.sessions[0]
    assert (old.sequence, old.created_at, old.updated_at) == (1, 1_800_000_000, 1_800_000_300)
    assert store.session_summary("old") == old
    # The cursor is exclusive on the full key: a cursor equal to "mid"'s key skips it.
    after_mid = store.list_sessions_page(
        SessionPageRequest(
            cursor=SessionCursor(updated_at=1_800_000_100, sequence=4, session_id="mid"), limit=5
        )
    )
    assert after_mid.sessions == []
    # A cursor between keys (same time, lower sequence) also works.
    between = store.list_sessions_page(
        SessionPageRequest(
            cursor=SessionCursor(updated_at=1_800_000_100, sequence=5, session_id=""), limit=5
        )
    )
    assert [s.session_id for s in between.sessions] == ["mid"]


def test_catalog_cursor_stable_when_sessions_tie(
    store: Adapter, frozen_clock: Callable[[int], None]
) -> None:
    frozen_clock(1_800_000_000)
    for sid in ("a", "b", "c"):
        store.save(checkpoint(sid, 0))
    first = store.list_sessions_page(SessionPageRequest(limit=2))
    assert [s.session_id for s in first.sessions] == ["c", "b"]
    assert first.next_cursor == SessionCursor(updated_at=1_800_000_000, sequence=0, session_id="b")
    second = store.list_sessions_page(SessionPageRequest(cursor=first.next_cursor, limit=2))
    assert [s.session_id for s in second.sessions] == ["a"]
    assert second.next_cursor is None
    # Ties on updated_at are broken by sequence first, then by id.
    store.save(checkpoint("a", 7))
    assert listing(store, limit=1) == ["a", "c", "b"]
    store.reopen()
    assert listing(store, limit=1) == ["a", "c", "b"]


def test_owner_filter_applied_before_paging(
    store: Adapter, frozen_clock: Callable[[int], None]
) -> None:
    for t, (sid, owner) in enumerate([("a", "x"), ("b", "y"), ("c", "x")]):
        frozen_clock(1_800_000_000 + t)
        store.save(checkpoint(sid, 0, owner=owner))
    first = store.list_sessions_page(SessionPageRequest(owner_id="x", limit=1))
    assert [s.session_id for s in first.sessions] == ["c"]
    assert first.next_cursor is not None
    second = store.list_sessions_page(
        SessionPageRequest(owner_id="x", cursor=first.next_cursor, limit=1)
    )
    assert [s.session_id for s in second.sessions] == ["a"]
    assert second.next_cursor is None
    assert listing(store, owner="y") == ["b"]
    assert listing(store, owner="nobody") == []
    assert listing(store) == ["c", "b", "a"]
    # An owner change moves the session between filters.
    frozen_clock(1_800_000_010)
    store.save(checkpoint("a", 1, owner="y"))
    assert listing(store, owner="x", limit=1) == ["c"]
    assert listing(store, owner="y", limit=1) == ["a", "b"]


def test_catalog_invisible_sessions_are_listed(store: Adapter) -> None:
    store.save(checkpoint("hidden", 0, catalog_visible=False))
    store.save(checkpoint("shown", 0))
    got = summaries(store)
    assert set(got) == {"hidden", "shown"}
    assert got["hidden"].catalog_visible is False
    assert got["shown"].catalog_visible is True
    store.save(checkpoint("hidden", 1, catalog_visible=True))
    assert summaries(store)["hidden"].catalog_visible is True


def test_summary_keeps_first_non_null_user_message(store: Adapter) -> None:
    store.save(checkpoint("s", 0))
    summary = store.session_summary("s")
    assert summary is not None and summary.first_user_message is None
    store.save(checkpoint("s", 1, first_user_message="hello"))
    store.save(checkpoint("s", 2, first_user_message="something else"))
    store.save(checkpoint("s", 3))
    summary = store.session_summary("s")
    assert summary is not None
    assert summary.first_user_message == "hello"
    assert summary.sequence == 3
    assert summary.parent_session_id is None and summary.parent_sequence is None
    assert summary.created_at > 0 and summary.updated_at >= summary.created_at
    assert summaries(store)["s"] == summary
    store.reopen()
    assert store.session_summary("s") == summary
    assert summaries(store)["s"] == summary


def test_metadata_round_trips_through_save_and_fork(store: Adapter) -> None:
    meta = {"title": "Ünïcode", "nested": {"list": [1, 2.5, None, True]}, "n": -3}
    store.save(checkpoint("p", 0, [item(0)], metadata=meta), [item(0)])
    assert store.session_metadata("p") == meta
    store.save(checkpoint("p", 1, [item(0)], metadata={"title": "renamed"}))
    assert store.session_metadata("p") == {"title": "renamed"}
    store.fork("p", 0, checkpoint("c", 0, [item(0)], metadata=meta))
    assert store.session_metadata("c") == meta
    loaded = store.load("c")
    assert loaded is not None and loaded.metadata == meta
    # fork_at copies the historical metadata unless told otherwise.
    store.fork_at("p", 0, "c0")
    assert store.session_metadata("c0") == meta
    store.fork_at("p", 1, "c1")
    assert store.session_metadata("c1") == {"title": "renamed"}
    store.fork_at("p", 1, "c-own", metadata={"own": True})
    assert store.session_metadata("c-own") == {"own": True}
    store.reopen()
    assert store.session_metadata("c") == meta
    assert store.session_metadata("p") == {"title": "renamed"}
    assert store.session_metadata("missing") is None


def test_session_metadata_and_catalog_do_not_decode_the_checkpoint(
    store: Adapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mobius reads metadata without the context and the catalog without the checkpoint.

    Here: with every way of decoding a full checkpoint or a context item made to
    fail, `load` fails while `session_metadata`, `session_summary` and
    `list_sessions_page` still answer.
    """
    store.save(checkpoint("s", 0, [item(0), item(1)], metadata={"k": "v"}), [item(0)])

    def broken(*_: Any, **__: Any) -> Any:
        raise msgspec.DecodeError("simulated corrupt context")

    # the session's own decoders, the only way to make every full decode fail
    monkeypatch.setattr(journal.reads, "_decode_any", broken)
    monkeypatch.setattr(journal.reads, "_decode_checkpoint", broken)
    with pytest.raises(JournalError):
        store.load("s")
    assert store.session_metadata("s") == {"k": "v"}
    summary = store.session_summary("s")
    assert summary is not None and summary.sequence == 0
    assert listing(store) == ["s"]


def test_catalog_lists_session_whose_checkpoint_record_is_damaged(store: Adapter) -> None:
    """The catalog never decodes checkpoint bodies (mobius: works with corrupt checkpoint JSON).

    We flip a byte inside the newest CHECKPOINT record of the session's log while
    the store is closed, so the record fails its checksum. Listing still returns
    the session with its catalog fields, while reading that checkpoint reports
    the corruption.
    """
    meta_ctx = ctx(workspace_label="ws")
    store.save(checkpoint("s", 0, [item(0)], session_context=meta_ctx), [item(0)])
    store.save(
        checkpoint("s", 1, [item(0), item(1)], session_context=meta_ctx, first_user_message="hi"),
        [item(1)],
    )
    store.save(checkpoint("other", 0))
    before = summaries(store)
    session_dir = store.raw.session_dir("s")
    store.close_store()

    records = [r for c in tools.replay(session_dir) for r in c]
    target = [r for r in records if r.rtype == CHECKPOINT][-1]
    (segment,) = sorted(glob.glob(os.path.join(session_dir, "log", "*.seg")))
    offset = 32 + target.pos + target.size // 2  # inside the payload (the header JSON)
    with builtins.open(segment, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x5A]))

    store.reopen()
    after = summaries(store)
    assert after == before
    assert after["s"].sequence == 1
    assert after["s"].session_context == meta_ctx
    assert after["s"].first_user_message == "hi"
    assert sorted(listing(store, owner=OWNER, limit=1)) == ["other", "s"]
    # Reading the damaged record itself reports the damage, naming the file.
    with pytest.raises(journal.CorruptionError) as caught:
        store.checkpoint_at("s", 1)
    assert caught.value.path is not None and caught.value.path.endswith(".seg")


# --- fork --------------------------------------------------------------------------------


def _parent_with_history(store: Adapter) -> None:
    """Parent "p" at sequences 0..2, each save with a transcript batch, events and receipts."""
    store.save_with_events(
        checkpoint("p", 0, [item(0)], pending=("m1",), first_user_message="first"),
        [item(0)],
        None,
        [TimestampedEvent(recorded_at_ms=1, event=warning_event("w1"))],
    )
    store.save(checkpoint("p", 1, [item(0), item(1)], model_route="fast"), [item(1)])
    rec = execution("p", 2)
    store.save(
        checkpoint(
            "p", 2, [item(0), item(1), item(2)], execution_stats=fold(ExecutionStats(), rec)
        ),
        [item(2)],
        rec,
    )
    store.append_event("p", 2, warning_event("w2"))


def test_fork_keeps_historical_parent_sequence(store: Adapter) -> None:
    _parent_with_history(store)
    child = checkpoint("c", 0, [item(0), item(1)], first_user_message="first")
    summary = store.fork("p", 1, child)
    assert summary.session_id == "c"
    assert summary.parent_session_id == "p"
    assert summary.parent_sequence == 1
    assert summary.sequence == 0
    assert summary.first_user_message == "first"
    assert summary.execution_stats == ExecutionStats()
    assert summary.session_context == ctx()
    assert summary.created_at > 0 and summary.updated_at == summary.created_at
    assert store.session_summary("c") == summary
    assert summaries(store)["c"] == summary
    # The newest sequence is a valid fork point too.
    latest = store.fork("p", 2, checkpoint("c-latest", 0))
    assert latest.parent_sequence == 2
    store.reopen()
    assert store.session_summary("c") == summary
    assert summaries(store)["c"] == summary
    # The parent is untouched.
    parent = store.load("p")
    assert parent is not None and parent.sequence == 2
    assert summaries(store)["p"].parent_session_id is None


def test_child_sessions_lists_direct_forks_newest_first(store: Adapter) -> None:
    """Beyond mobius: a session's direct children, from the catalog, in catalog order."""
    _parent_with_history(store)
    assert store.child_sessions("p") == []
    first = store.fork("p", 1, checkpoint("c1", 0))
    second = store.fork("p", 2, checkpoint("c2", 0))
    store.fork("c1", 0, checkpoint("g1", 0))  # a grandchild is not a child of "p"
    store.save(checkpoint("c1", 1))  # now c1 is the newest of the two
    kids = store.child_sessions("p")
    assert [k.session_id for k in kids] == ["c1", "c2"]
    assert kids[0] == store.session_summary("c1") and kids[1] == second
    assert first.parent_session_id == "p"
    assert [k.session_id for k in store.child_sessions("c1")] == ["g1"]
    assert store.child_sessions("nobody") == []
    store.reopen()  # from the catalog's snapshot or log, not from this process's memory
    assert [k.session_id for k in store.child_sessions("p")] == ["c1", "c2"]
    assert store.delete_sessions(["c1"]) is True  # takes g1 with it
    assert [k.session_id for k in store.child_sessions("p")] == ["c2"]
    assert store.child_sessions("c1") == []
    with pytest.raises(InvalidInputError):
        store.child_sessions("")


def test_fork_rejects_future_sequence(store: Adapter) -> None:
    _parent_with_history(store)
    with pytest.raises(ContractViolationError, match="newer than the parent"):
        store.fork("p", 3, checkpoint("c", 0))
    assert store.load("c") is None
    assert "c" not in summaries(store)


def test_fork_rejects_missing_parent(store: Adapter) -> None:
    with pytest.raises(NotFoundError, match="fork parent does not exist"):
        store.fork("ghost", 0, checkpoint("c", 0))
    assert store.load("c") is None
    assert listing(store) == []
    # A deleted parent is missing too.
    store.save(checkpoint("p", 0))
    assert store.delete_sessions(["p"]) is True
    with pytest.raises(NotFoundError, match="fork parent does not exist"):
        store.fork("p", 0, checkpoint("c", 0))
    assert listing(store) == []


@pytest.mark.parametrize(
    "unclean",
    [
        {"sequence": 1},
        {"pending": ("m9",)},
        {"active_execution": {"submission_id": "s", "turn_id": "t", "started_at_ms": 1}},
        {"pending_approval": {"submission_id": "s", "turn_id": "t", "request_id": "r"}},
    ],
    ids=["sequence", "pending_messages", "active_execution", "pending_approval"],
)
def test_fork_rejects_unclean_child(store: Adapter, unclean: dict[str, Any]) -> None:
    _parent_with_history(store)
    fields = dict(unclean)
    seq = fields.pop("sequence", 0)
    with pytest.raises(ContractViolationError, match="clean sequence-zero"):
        store.fork("p", 1, checkpoint("c", seq, [item(0)], **fields))
    assert store.load("c") is None
    assert store.session_summary("c") is None
    assert "c" not in summaries(store)


def test_fork_rejects_self_fork_and_existing_child(store: Adapter) -> None:
    _parent_with_history(store)
    with pytest.raises(ContractViolationError, match="cannot fork itself"):
        store.fork("p", 1, checkpoint("p", 0))
    loaded = store.load("p")
    assert loaded is not None and loaded.sequence == 2
    store.save(checkpoint("taken", 4))
    with pytest.raises(JournalError):
        store.fork("p", 1, checkpoint("taken", 0))
    taken = store.load("taken")
    assert taken is not None and taken.sequence == 4
    assert summaries(store)["taken"].parent_session_id is None
    # An invalid child checkpoint is rejected before anything is written.
    with pytest.raises(InvalidInputError):
        store.fork("p", 1, checkpoint("c", 0, [float("nan")]))
    assert store.load("c") is None


def test_fork_child_starts_clean_with_context_as_batch_zero(store: Adapter) -> None:
    _parent_with_history(store)
    context = [item(0), {"type": "note", "text": "edited by the caller"}]
    child = checkpoint("c", 0, context, metadata={"m": 1}, first_user_message="first")
    store.fork("p", 2, child)
    assert store.load("c") == child
    assert store.checkpoint_at("c", 0) == child
    page = store.transcript_page("c", TranscriptPageRequest(max_batches=10))
    assert [b.sequence for b in page.batches] == [0]
    assert page.batches[0].items == context
    assert page.batches[0].created_at > 0
    assert page.next_before_sequence is None
    # Nothing of the parent's journals or receipts is copied.
    events = store.event_page("c", EventPageRequest(limit=10))
    assert events.latest_sequence == 0
    assert events.events == []
    assert store.events_after("c", 0, 10) == []
    assert store.execution_page("c", ExecutionPageRequest(limit=10)).executions == []
    assert store.message_accepted("c", "m1") is False
    assert store.message_accepted("p", "m1") is True
    assert [e.session_id for e in store.recent_executions(10)] == ["p"]
    # The child's own event counter starts at 1 and continues normally.
    assert store.append_event("c", 5, warning_event("child")).sequence == 1
    store.save(checkpoint("c", 1, [*context, item(9)]), [item(9)])
    assert [
        b.sequence
        for b in store.transcript_page("c", TranscriptPageRequest(max_batches=10)).batches
    ] == [1, 0]
    parent_events = store.event_page("p", EventPageRequest(limit=10))
    assert parent_events.latest_sequence == 2
    assert [e.sequence for e in parent_events.events] == [2, 1]


def test_fork_of_empty_context_writes_no_meaningless_items(store: Adapter) -> None:
    store.save(checkpoint("p", 0))
    store.fork("p", 0, checkpoint("c", 0))
    loaded = store.load("c")
    assert loaded is not None and loaded.context == []
    page = store.transcript_page("c", TranscriptPageRequest(max_batches=10))
    assert all(b.items == [] for b in page.batches)
    assert all(b.sequence == 0 for b in page.batches)


def test_fork_at_builds_child_from_historical_checkpoint(store: Adapter) -> None:
    labels = ctx(workspace_id="ws", origin_label="tui")
    store.save(
        checkpoint("p", 0, [item(0)], session_context=labels, first_user_message="first"),
        [item(0)],
    )
    store.save(
        checkpoint(
            "p",
            1,
            [item(0), item(1)],
            session_context=labels,
            model_route="fast",
            context_model_route="fast",
            metadata={"v": 1},
            first_user_message="first",  # the runtime carries it in every checkpoint
        ),
        [item(1)],
    )
    store.save(
        checkpoint("p", 2, [{"type": "summary"}], session_context=labels, context_epoch=1),
        [item(2)],
    )
    historical = store.checkpoint_at("p", 1)
    assert historical is not None
    summary = store.fork_at("p", 1, "c")
    assert summary.parent_session_id == "p" and summary.parent_sequence == 1
    assert summary.sequence == 0
    child = store.load("c")
    assert child is not None
    assert child.context == historical.context == [item(0), item(1)]
    assert child.first_user_message == historical.first_user_message == "first"
    assert child.model_route == "fast"
    assert child.context_model_route == "fast"
    assert child.metadata == {"v": 1}
    assert child.session_context == msgspec.structs.replace(labels, origin_label=None)
    assert child.sequence == 0 and child.context_epoch == 0
    assert child.execution_stats == ExecutionStats()
    batches = store.transcript_page("c", TranscriptPageRequest(max_batches=10)).batches
    assert [(b.sequence, b.items) for b in batches] == [(0, [item(0), item(1)])]
    # The latest (compacted) context would have been different.
    latest = store.fork_at("p", 2, "c2")
    assert latest.parent_sequence == 2
    c2 = store.load("c2")
    assert c2 is not None and c2.context == [{"type": "summary"}]


def test_fork_at_rejects_missing_points(store: Adapter) -> None:
    store.save(checkpoint("p", 0, [item(0)]))
    store.save(checkpoint("p", 3, [item(0)]))
    with pytest.raises(NotFoundError):
        store.fork_at("p", 2, "c")  # no checkpoint was saved at 2
    with pytest.raises(NotFoundError):
        store.fork_at("p", 4, "c")
    with pytest.raises(NotFoundError):
        store.fork_at("ghost", 0, "c")
    with pytest.raises(ContractViolationError, match="cannot fork itself"):
        store.fork_at("p", 0, "p")
    assert store.load("c") is None
    assert listing(store) == ["p"]


def test_fork_does_not_read_parent_history(store: Adapter, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork cost must not depend on the parent's history: it reads none of the parent's log.

    Structural, not timed: with the parent open and current, every record read
    from any log during `fork` is counted, and none may come from the parent.
    """
    for seq in range(30):
        store.save(checkpoint("p", seq, [item(n) for n in range(seq + 1)]), [item(seq)])
        store.append_event("p", seq, warning_event(f"w{seq}"))
    assert store.load("p") is not None
    parent_label = store.raw.open_sessions.get("p").log.label  # type: ignore[union-attr]
    reads: list[str] = []
    real_committed = journal.log.Log.committed
    real_read_records = journal.log.Log.read_records
    real_read_record = journal.log.Log.read_record
    real_read_record_at = journal.log.Log.read_record_at

    def committed(self: journal.log.Log, *args: Any, **kwargs: Any) -> Any:
        for commit in real_committed(self, *args, **kwargs):
            reads.extend(self.label for _ in commit)
            yield commit

    def read_records(self: journal.log.Log, *args: Any, **kwargs: Any) -> Any:
        out = real_read_records(self, *args, **kwargs)
        reads.extend(self.label for _ in out)
        return out

    def read_record(self: journal.log.Log, *args: Any, **kwargs: Any) -> Any:
        reads.append(self.label)
        return real_read_record(self, *args, **kwargs)

    def read_record_at(self: journal.log.Log, *args: Any, **kwargs: Any) -> Any:
        reads.append(self.label)
        return real_read_record_at(self, *args, **kwargs)

    monkeypatch.setattr(journal.log.Log, "committed", committed)
    monkeypatch.setattr(journal.log.Log, "read_records", read_records)
    monkeypatch.setattr(journal.log.Log, "read_record", read_record)
    monkeypatch.setattr(journal.log.Log, "read_record_at", read_record_at)
    store.fork("p", 3, checkpoint("c", 0, [item(0)]))
    assert parent_label not in reads
    assert store.load("c") is not None
    # The wrappers do see reads of the parent's log (so the check above could fail):
    store.raw.event_page("p", journal.EventPageRequest(limit=5))
    assert parent_label in reads, "the counting wrappers saw no reads at all"


# --- delete ------------------------------------------------------------------------------


def _tree(store: Adapter) -> None:
    """p -> c -> g (grandchild), p -> c2; an unrelated session u; state per scope."""
    store.save(checkpoint("p", 0, [item(0)], pending=("m1",)), [item(0)], None)
    store.save(checkpoint("p", 1, [item(0)]), [], execution("p", 1))
    store.fork("p", 0, checkpoint("c", 0, [item(0)]))
    store.save(checkpoint("c", 1, [item(0), item(1)]), [item(1)], execution("c", 2))
    store.fork("c", 1, checkpoint("g", 0, [item(0), item(1)]))
    store.fork_at("p", 1, "c2")
    store.save(checkpoint("u", 0), [], execution("u", 3))
    for scope in ("p", "c", "g", "c2", "u", "global", "gateway"):
        store.save_state(scope, "tasks.v1", {"scope": scope})
        store.save_state(scope, "other", [1, 2])


def _present(store: Adapter) -> set[str]:
    return {sid for sid in ("p", "c", "g", "c2", "u") if store.load(sid) is not None}


def test_delete_removes_whole_trees_and_their_state(store: Adapter) -> None:
    _tree(store)
    assert store.delete_sessions(["c"]) is True  # a subtree: c and g
    assert _present(store) == {"p", "c2", "u"}
    assert set(summaries(store)) == {"p", "c2", "u"}
    for scope in ("c", "g"):
        assert store.load_state(scope, "tasks.v1") is None
        assert store.load_state(scope, "other") is None
    assert store.load_state("p", "tasks.v1") == {"scope": "p"}

    assert store.delete_sessions(["p"]) is True  # the rest of the tree: p and c2
    assert _present(store) == {"u"}
    assert listing(store) == ["u"]
    for sid in ("p", "c", "g", "c2"):
        assert store.load(sid) is None
        assert store.session_summary(sid) is None
        assert store.session_metadata(sid) is None
        assert store.transcript_page(sid, TranscriptPageRequest(max_batches=5)).batches == []
        assert store.execution_page(sid, ExecutionPageRequest(limit=5)).executions == []
        assert store.message_accepted(sid, "m1") is False
        assert store.checkpoint_at(sid, 0) is None
        assert store.load_state(sid, "tasks.v1") is None
        with pytest.raises(NotFoundError):
            store.event_page(sid, EventPageRequest(limit=5))
        with pytest.raises(NotFoundError):
            store.append_event(sid, 1, warning_event("late"))
    # Global state and the state of a session outside the trees are kept.
    assert store.load_state("global", "tasks.v1") == {"scope": "global"}
    assert store.load_state("gateway", "other") == [1, 2]
    assert store.load_state("u", "tasks.v1") == {"scope": "u"}
    assert [e.session_id for e in store.recent_executions(10)] == ["u"]
    store.reopen()
    assert _present(store) == {"u"}
    assert listing(store) == ["u"]
    assert store.load_state("p", "tasks.v1") is None
    assert store.load_state("global", "tasks.v1") == {"scope": "global"}
    # The ids are free again: a new session under a deleted id starts from scratch.
    store.save(checkpoint("p", 0))
    assert store.transcript_page("p", TranscriptPageRequest(max_batches=5)).batches == []
    assert store.message_accepted("p", "m1") is False
    assert store.event_page("p", EventPageRequest(limit=5)).latest_sequence == 0
    summary = store.session_summary("p")
    assert summary is not None and summary.parent_session_id is None


def test_delete_root_takes_every_descendant_at_once(store: Adapter) -> None:
    _tree(store)
    assert store.delete_sessions(["p"]) is True
    assert _present(store) == {"u"}
    assert set(summaries(store)) == {"u"}
    for scope in ("p", "c", "g", "c2"):
        assert store.load_state(scope, "tasks.v1") is None


def test_delete_overlapping_and_duplicate_selection(store: Adapter) -> None:
    _tree(store)
    assert store.delete_sessions(["g", "p", "c", "g"]) is True
    assert _present(store) == {"u"}


def test_delete_incomplete_selection_deletes_nothing(store: Adapter) -> None:
    _tree(store)
    assert store.delete_sessions(["p", "missing", "u"]) is False
    assert _present(store) == {"p", "c", "g", "c2", "u"}
    assert set(summaries(store)) == {"p", "c", "g", "c2", "u"}
    for scope in ("p", "c", "g", "c2", "u"):
        assert store.load_state(scope, "tasks.v1") == {"scope": scope}
    assert len(store.recent_executions(10)) == 3


def test_delete_absent_twice_and_empty(store: Adapter) -> None:
    assert store.delete_sessions([]) is True
    assert store.delete_sessions(["nope"]) is False
    store.save(checkpoint("s", 0))
    store.save_state("global", "k", 1)
    assert store.delete_sessions([]) is True
    assert _present(store) == set() and store.load("s") is not None
    assert store.delete_sessions(["s"]) is True
    assert store.delete_sessions(["s"]) is False
    assert store.load("s") is None
    assert store.load_state("global", "k") == 1


def test_delete_state_only_scope_is_not_a_session(store: Adapter) -> None:
    """State under a scope that is not a session is not a session: deleting it is 'absent'."""
    store.save_state("lonely", "k", 1)
    assert store.delete_sessions(["lonely"]) is False
    assert store.load_state("lonely", "k") == 1


def test_fork_of_deleted_child_then_new_child_ok(store: Adapter) -> None:
    _tree(store)
    assert store.delete_sessions(["c2"]) is True
    assert _present(store) == {"p", "c", "g", "u"}
    again = store.fork("p", 1, checkpoint("c2", 0))
    assert again.parent_session_id == "p"
    assert store.delete_sessions(["p"]) is True
    assert _present(store) == {"u"}


def test_a_forks_first_commit_is_kind_2_and_not_compressed(tmp_path: Path) -> None:
    """FORMAT.md section 3: the child's first commit (its context twice) is stored as it
    is; the commits after it, and a first save's, are compressed as usual."""
    # reaches inside: the commit kinds and compression flags on disk are what this test checks

    big = [{"role": "user", "content": f"item {i} " + "lorem ipsum dolor " * 40} for i in range(10)]
    store = journal.open(tmp_path / "s")
    try:
        parent = Checkpoint.empty("parent")
        parent.context = list(big)
        store.save(parent)
        child = Checkpoint.empty("child")
        child.context = list(big)
        store.fork("parent", 0, child)
        later = Checkpoint.empty("child")
        later.sequence = 1
        later.context_epoch = 1
        later.context = [*big, *big]
        store.save(later, list(big))
        dirs = {sid: store.session_dir(sid) for sid in ("parent", "child")}
        assert store.load("child") == later
        page = store.transcript_page("child", journal.TranscriptPageRequest(max_batches=5))
        assert [b.sequence for b in page.batches] == [1, 0] and page.batches[1].items == big
    finally:
        store.close()

    def commits(directory: str) -> list[list[tuple[int, int]]]:
        """Per commit: (type, zstd flag) of each record, then (COMMIT, commit kind)."""
        return [
            [
                (r.rtype, DECODERS[COMMIT].decode(r.payload).kind)
                if r.rtype == COMMIT
                else (r.rtype, r.flags & FLAG_ZSTD)
                for r in records
            ]
            for records in tools.replay(directory)
        ]

    first, second = commits(dirs["child"])
    assert first[-1] == (COMMIT, COMMIT_FORK)
    assert all(flags == 0 for _, flags in first[:-1])
    assert second[-1] == (COMMIT, COMMIT_SAVE)
    assert any(flags for _, flags in second[:-1]), "the child's next commit is compressed"
    ((*records, closing),) = commits(dirs["parent"])
    assert closing == (COMMIT, COMMIT_SAVE) and any(flags for _, flags in records)

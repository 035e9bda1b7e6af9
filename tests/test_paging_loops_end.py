"""The README's paging examples end: a loop written the way the README shows stops
at the last page instead of starting again from the newest."""

from __future__ import annotations

from pathlib import Path

import pytest

import journal
from journal import (
    Checkpoint,
    Event,
    EventPageRequest,
    ExecutionPageRequest,
    SessionPageRequest,
    TranscriptPageRequest,
)


@pytest.fixture
def store(tmp_path: Path) -> journal.Store:
    store = journal.open(tmp_path / "s")
    cp = Checkpoint.empty("p")
    for seq in range(7):
        cp.sequence = seq
        store.save(cp, [{"t": seq}])
    for i in range(1, 11):
        store.append_event("p", i, Event(msg={"type": "warning", "message": f"m{i}"}))
    for n in range(5):
        store.save(Checkpoint.empty(f"other-{n}"))
    return store


@pytest.mark.parametrize("limit", [1, 3, 10, 11, 50])
def test_event_paging_loop_as_in_the_readme_ends(store: journal.Store, limit: int) -> None:
    page = store.event_page("p", EventPageRequest(limit=limit))
    seen = [e.sequence for e in page.events]
    for _ in range(100):
        if page.next_before_sequence is None:
            break
        page = store.event_page(
            "p", EventPageRequest(limit=limit, before_sequence=page.next_before_sequence)
        )
        seen += [e.sequence for e in page.events]
    else:
        pytest.fail("the loop never ended")
    assert seen == list(range(10, 0, -1))
    store.close()


@pytest.mark.parametrize("limit", [1, 3, 7, 8])
def test_transcript_paging_loop_ends(store: journal.Store, limit: int) -> None:
    page = store.transcript_page("p", TranscriptPageRequest(max_batches=limit))
    seen = [b.sequence for b in page.batches]
    for _ in range(100):
        if page.next_before_sequence is None:
            break
        page = store.transcript_page(
            "p", TranscriptPageRequest(max_batches=limit, before_sequence=page.next_before_sequence)
        )
        seen += [b.sequence for b in page.batches]
    else:
        pytest.fail("the loop never ended")
    assert seen == list(range(6, -1, -1))
    store.close()


def test_execution_paging_loop_ends(store: journal.Store) -> None:
    page = store.execution_page("p", ExecutionPageRequest(limit=2))
    for _ in range(100):
        if page.next_before_sequence is None:
            break
        page = store.execution_page(
            "p", ExecutionPageRequest(limit=2, before_sequence=page.next_before_sequence)
        )
    else:
        pytest.fail("the loop never ended")
    store.close()


@pytest.mark.parametrize("limit", [1, 2, 6, 7])
def test_session_paging_loop_ends(store: journal.Store, limit: int) -> None:
    page = store.list_sessions_page(SessionPageRequest(limit=limit))
    seen = [s.session_id for s in page.sessions]
    for _ in range(100):
        if page.next_cursor is None:
            break
        page = store.list_sessions_page(SessionPageRequest(limit=limit, cursor=page.next_cursor))
        seen += [s.session_id for s in page.sessions]
    else:
        pytest.fail("the loop never ended")
    assert sorted(seen) == sorted(["p", *(f"other-{n}" for n in range(5))])
    store.close()

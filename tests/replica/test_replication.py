"""Replication through a live store (`journal.open(replica=...)`) against a real S3
server: sync and async shipping, lazy fetch on an empty root, take-over and fencing,
deletes, state, and two processes of one root shipping the same session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from helpers import checkpoint, item

import journal
from journal import (
    Checkpoint,
    Event,
    EventPageRequest,
    FencedError,
    SessionPageRequest,
    TimestampedEvent,
    TranscriptPageRequest,
)

pytestmark = pytest.mark.replica


def _cp(sid: str, seq: int, n_items: int) -> Checkpoint:
    return checkpoint(sid, seq, [item(i) for i in range(n_items)], metadata={"turn": seq})


def _ev(i: int) -> TimestampedEvent:
    return TimestampedEvent(
        recorded_at_ms=1000 + i, event=Event(msg={"type": "note", "text": f"e{i}"})
    )


def _write_session(store: journal.Store, sid: str, turns: int) -> None:
    for t in range(1, turns + 1):
        store.save_with_events(
            _cp(sid, t, t),
            [{"role": "assistant", "content": f"reply {t}"}],
            None,
            [_ev(t * 10 + k) for k in range(3)],
        )
        store.append_event(sid, 5000 + t, Event(msg={"type": "note", "text": f"append {t}"}))


def _reads(store: journal.Store, sid: str) -> dict[str, Any]:
    cp = store.load(sid)
    events = store.event_page(sid, EventPageRequest(limit=1000))
    transcripts = store.transcript_page(sid, TranscriptPageRequest(max_batches=1000))
    return {
        "checkpoint": cp,
        "events": [(e.sequence, e.event) for e in events.events],
        "latest": events.latest_sequence,
        "transcripts": transcripts.batches,
        "summary": store.session_summary(sid),
    }


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fresh_root_fetches_what_was_shipped(tmp_path: Any, s3_bucket: str, mode: str) -> None:
    src = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode=mode, replica_lag=0.2)
    _write_session(src, "s1", 4)
    src.fork_at("s1", 2, "s1-fork")
    src.save_state("s1", "cursor", {"at": 7})
    src.flush()
    expected = {sid: _reads(src, sid) for sid in ("s1", "s1-fork")}
    src.close()

    dst = journal.open(tmp_path / "b", replica=s3_bucket, replica_mode=mode)
    try:
        assert not os.path.exists(tmp_path / "b" / "sessions" / "x")
        for sid, want in expected.items():
            assert _reads(dst, sid) == want
        assert dst.checkpoint_at("s1", 2) == _cp("s1", 2, 2)
        listed = dst.list_sessions_page(SessionPageRequest(limit=10)).sessions
        assert {s.session_id for s in listed} == {"s1", "s1-fork"}
    finally:
        dst.close()


def test_sync_mode_acknowledges_only_what_the_bucket_holds(tmp_path: Any, s3_bucket: str) -> None:
    src = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync")
    _write_session(src, "s1", 3)
    want = _reads(src, "s1")
    # No flush, no close: a process that died right after its last acknowledged
    # call leaves exactly this in the bucket.
    dst = journal.open(tmp_path / "b", replica=s3_bucket, replica_mode="sync")
    try:
        assert _reads(dst, "s1") == want
    finally:
        dst.close()
        src.close()


def test_take_over_fences_the_previous_writer(tmp_path: Any, s3_bucket: str) -> None:
    a = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync")
    b = journal.open(tmp_path / "b", replica=s3_bucket, replica_mode="sync")
    try:
        _write_session(a, "s1", 2)
        before = _reads(a, "s1")
        summary = b.take_over("s1")
        assert summary is not None and summary.session_id == "s1"
        assert _reads(b, "s1") == before
        with pytest.raises(FencedError):
            a.append_event("s1", 1, Event(msg={"type": "note", "text": "zombie"}))
        with pytest.raises(FencedError):
            a.save(_cp("s1", 9, 3))
        appended = b.append_event("s1", 2, Event(msg={"type": "note", "text": "b"}))
        assert appended.sequence == before["latest"] + 1  # gapless: B goes on from A's last
        c = journal.open(tmp_path / "c", replica=s3_bucket)
        try:
            texts = [e[1].msg.get("text") for e in _reads(c, "s1")["events"]]
            assert "zombie" not in texts and "b" in texts
            assert c.load("s1") == before["checkpoint"]
        finally:
            c.close()
        # And back: A takes over again, its zombie commit is gone from its copy too.
        a.take_over("s1")
        texts = [e[1].msg.get("text") for e in _reads(a, "s1")["events"]]
        assert "zombie" not in texts and "b" in texts
        a.append_event("s1", 3, Event(msg={"type": "note", "text": "a again"}))
        with pytest.raises(FencedError):
            b.append_event("s1", 4, Event(msg={"type": "note", "text": "b zombie"}))
    finally:
        a.close()
        b.close()


def test_a_session_another_host_owns_is_not_written(tmp_path: Any, s3_bucket: str) -> None:
    a = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync")
    b = journal.open(tmp_path / "b", replica=s3_bucket, replica_mode="sync")
    try:
        _write_session(a, "s1", 1)
        with pytest.raises(FencedError, match="take_over"):
            b.save(_cp("s1", 5, 2))
        assert not os.path.isdir(b.session_dir("s1"))  # nothing was written locally
    finally:
        a.close()
        b.close()


def test_a_delete_reaches_the_bucket(tmp_path: Any, s3_bucket: str) -> None:
    a = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync")
    _write_session(a, "gone", 1)
    _write_session(a, "kept", 1)
    assert a.delete_sessions(["gone"])
    a.close()
    b = journal.open(tmp_path / "b", replica=s3_bucket)
    try:
        assert b.load("gone") is None
        assert b.load("kept") is not None
    finally:
        b.close()


def test_a_session_created_again_after_a_delete_is_a_new_incarnation(
    tmp_path: Any, s3_bucket: str
) -> None:
    a = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="async", replica_lag=0.1)
    _write_session(a, "s1", 3)
    a.flush()
    assert a.delete_sessions(["s1"])
    a.save(_cp("s1", 1, 1))
    a.flush()
    a.close()
    b = journal.open(tmp_path / "b", replica=s3_bucket)
    try:
        assert b.load("s1") == _cp("s1", 1, 1)
        assert b.event_page("s1", EventPageRequest(limit=10)).latest_sequence == 0
    finally:
        b.close()


_SIBLING = textwrap.dedent(
    """
    import sys
    import journal
    from journal import Event
    store = journal.open(sys.argv[1], replica=sys.argv[2], replica_mode="sync")
    for i in range(int(sys.argv[3])):
        store.append_event("shared", i, Event(msg={"type": "note", "text": sys.argv[4] + str(i)}))
    store.close()
    """
)


def test_two_processes_of_one_root_share_a_chain(
    tmp_path: Any, s3_bucket: str, s3_server: Any
) -> None:
    root = tmp_path / "a"
    with journal.open(root, replica=s3_bucket, replica_mode="sync") as store:
        store.save(_cp("shared", 1, 1))
    env = {**os.environ, **s3_server.env}
    procs = [
        subprocess.Popen([sys.executable, "-c", _SIBLING, str(root), s3_bucket, "40", tag], env=env)
        for tag in ("p", "q")
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    with journal.open(root) as local:
        want = _reads(local, "shared")
    assert want["latest"] == 80
    b = journal.open(tmp_path / "b", replica=s3_bucket)
    try:
        assert _reads(b, "shared") == want
    finally:
        b.close()


def test_a_compacted_session_goes_on_shipping_after_a_restart(
    tmp_path: Any, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from journal.replica.shipper import SessionShipper

    root = tmp_path / "a"
    with journal.open(root, replica=s3_bucket, replica_mode="async", replica_lag=0.1) as store:
        _write_session(store, "s1", 6)
        report = store.compact("s1", keep=1)  # ships first, then rewrites what it seals
        assert report.segments_rewritten > 0 and report.compacted
    # A new process's shipper checks the bucket's newest chunk against the local log,
    # whose bytes compaction changed: it must tell that from divergence.
    seen: list[bool] = []
    original = SessionShipper._compacted

    def spy(self: SessionShipper, c: Any) -> bool:
        seen.append(original(self, c))
        return seen[-1]

    monkeypatch.setattr(SessionShipper, "_compacted", spy)
    with journal.open(root, replica=s3_bucket, replica_mode="sync") as store:
        _write_session_more(store, "s1", 9, 1)
        want = _reads(store, "s1")
    assert seen == [True]
    fresh = journal.open(tmp_path / "b", replica=s3_bucket)
    try:
        got = _reads(fresh, "s1")
        assert got["events"] == want["events"] and got["checkpoint"] == want["checkpoint"]
    finally:
        fresh.close()


def _write_session_more(store: journal.Store, sid: str, first: int, turns: int) -> None:
    for t in range(first, first + turns):
        store.save_with_events(_cp(sid, t, t), [item(t)], None, [_ev(t * 10)])

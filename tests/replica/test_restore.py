"""Point-in-time restore against a real S3 server: a session shipped one commit per
chunk (each chunk stamped with the commit's index as its time), then restored at
random cuts, by time and by event sequence: every read equals the source's as it
was at that commit, and the result passes `journal verify`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from helpers import checkpoint, item, run_cli

import journal
from journal import Event, TimestampedEvent
from journal.errors import InvalidInputError
from journal.layout import dir_name
from journal.record import DICT
from journal.replica import chunk as ck
from journal.replica.chain import read_incarnation
from journal.replica.objects import ObjectStore
from journal.replica.restore import rebuild_session_dir, restore
from journal.replica.tail import identity_bytes, read_tail

pytestmark = pytest.mark.replica

PREFIX = "t"
WRITER = bytes(range(16))


class HandShipper:
    """Puts a session's chain as a shipper would: a BEGIN, then DATA chunks of the
    committed bytes read with tail.py, each into the next slot (put-if-absent), with
    the times the test gives."""

    def __init__(self, objects: ObjectStore, directory: str, session_id: str) -> None:
        self.objects = objects
        self.directory = directory
        self.dir = dir_name(session_id)
        self.n = 0
        self.end = 0

    def put(self, kind: int, body: bytes = b"", *, at_ms: int, **fields: int) -> None:
        start = fields.get("start", 0)
        c = ck.Chunk(
            kind=kind,
            n=self.n,
            epoch=1,
            segment_base=fields.get("segment_base", 0),
            start=start,
            end=start + len(body) if kind == ck.KIND_DATA else 0,
            shipped_at_ms=at_ms,
            commits=fields.get("commits", 0),
            writer=WRITER,
            body=body,
        )
        key = ck.chunk_key(PREFIX, self.dir, self.n)
        assert self.objects.put_if_absent(key, ck.encode_chunk(c))
        self.n += 1

    def begin(self, at_ms: int = 0) -> None:
        self.put(ck.KIND_BEGIN, identity_bytes(self.directory), at_ms=at_ms)

    def ship(self, at_ms: int) -> int:
        """DATA chunks for what was committed since the last ship; how many."""
        pieces = read_tail(self.directory, self.end)
        for p in pieces:
            self.put(
                ck.KIND_DATA,
                p.body,
                at_ms=at_ms,
                segment_base=p.segment_base,
                start=p.start,
                commits=p.commits,
            )
            self.end = p.end
        return len(pieces)


def reads(store: journal.Store, sid: str) -> dict[str, Any]:
    """Every read of the session: load, each checkpoint_at, events, transcripts,
    its summary and how the store lists it."""
    events = store.event_page(sid, journal.EventPageRequest(limit=1000))
    cp = store.load(sid)
    listed = store.list_sessions_page(journal.SessionPageRequest(limit=100))
    return {
        "checkpoint": cp,
        "history": [store.checkpoint_at(sid, s) for s in range((cp.sequence if cp else 0) + 1)],
        "events": [(e.sequence, e.event) for e in events.events],
        "latest": events.latest_sequence,
        "transcripts": store.transcript_page(
            sid, journal.TranscriptPageRequest(max_batches=1000)
        ).batches,
        "summary": store.session_summary(sid),
        "listed": [s for s in listed.sessions if s.session_id == sid],
    }


def _ops(store: journal.Store, sid: str, rng: random.Random, count: int) -> list[int]:
    """`count` random commits; returns the event sequences after each."""
    latest = []
    cp = store.load(sid)
    seq = cp.sequence if cp is not None else 0
    for k in range(count):
        op = rng.random()
        if op < 0.5 or seq == 0:
            seq += 1
            events = [
                TimestampedEvent(
                    recorded_at_ms=10 * k + j, event=Event(msg={"type": "note", "n": j})
                )
                for j in range(rng.randrange(0, 4))
            ]
            store.save_with_events(
                checkpoint(sid, seq, [item(i, f"c{i}") for i in range(seq + 1)]),
                [{"role": "assistant", "content": f"reply {k}"}],
                None,
                events,
            )
        else:
            store.append_event(
                sid, 10 * k, Event(msg={"type": "note", "text": "x" * rng.randrange(900)})
            )
        latest.append(store.event_page(sid, journal.EventPageRequest(limit=1)).latest_sequence)
    return latest


def test_restores_at_random_commits_read_as_the_store_was(
    tmp_path: Path, object_store: ObjectStore
) -> None:
    rng = random.Random(18)
    store = journal.open(tmp_path / "src", segment_bytes=4096)
    snapshots: list[dict[str, Any]] = []
    latest: list[int] = []
    try:
        latest += _ops(store, "s", rng, 1)
        hs = HandShipper(object_store, store.session_dir("s"), "s")
        hs.begin(at_ms=0)
        assert hs.ship(at_ms=1000) == 1
        snapshots.append(reads(store, "s"))
        for k in range(1, 30):
            latest += _ops(store, "s", rng, 1)
            assert hs.ship(at_ms=1000 * (k + 1)) >= 1  # one commit: one piece (two at a roll)
            snapshots.append(reads(store, "s"))
    finally:
        store.close()
    assert latest[-1] > 10

    # Before the first DATA chunk the session has no commit: absent.
    empty = tmp_path / "empty"
    report = restore(object_store, PREFIX, str(empty), session_ids=["s"], at_time_ms=999)
    assert report.sessions == [] and report.absent == ["s"]

    for n, k in enumerate(sorted(rng.sample(range(30), 6))):
        dst = tmp_path / f"t{k}"
        restore(object_store, PREFIX, str(dst), session_ids=["s"], at_time_ms=1000 * (k + 1) + 500)
        with journal.open(dst) as got:
            assert reads(got, "s") == snapshots[k], f"at the time of commit {k}"
        if n < 2:
            run_cli(dst, "verify")

    for n, seq in enumerate(sorted(rng.sample(range(1, latest[-1] + 1), 6))):
        k = next(i for i, last in enumerate(latest) if last >= seq)
        dst = tmp_path / f"e{seq}"
        restore(object_store, PREFIX, str(dst), session_ids=["s"], at_sequence=seq)
        with journal.open(dst) as got:
            assert reads(got, "s") == snapshots[k], f"at event {seq} (commit {k})"
        if n < 2:
            run_cli(dst, "verify")


def test_a_deleted_incarnation_is_absent_and_a_new_one_restores(
    tmp_path: Path, object_store: ObjectStore
) -> None:
    store = journal.open(tmp_path / "src")
    try:
        store.save(checkpoint("s", 1, [item(0)]))
        hs = HandShipper(object_store, store.session_dir("s"), "s")
        hs.begin(at_ms=1)
        hs.ship(at_ms=2)
        first = reads(store, "s")
        store.delete_sessions(["s"])
        hs.put(ck.KIND_DELETE, at_ms=3)
        store.save(checkpoint("s", 5, [item(0), item(1)]))
        hs.directory, hs.end = store.session_dir("s"), 0
        hs.begin(at_ms=4)
        hs.ship(at_ms=5)
        second = reads(store, "s")
    finally:
        store.close()
    for at, want in ((2, first), (3, None), (4, None), (5, second), (None, second)):
        dst = tmp_path / f"at{at}"
        report = restore(object_store, PREFIX, str(dst), session_ids=["s"], at_time_ms=at)
        with journal.open(dst) as got:
            assert (reads(got, "s") if report.sessions else None) == want, at
    inc = read_incarnation(object_store, PREFIX, hs.dir, at_time_ms=3)
    assert inc is None


def test_rebuilt_directory_and_option_errors(tmp_path: Path, object_store: ObjectStore) -> None:
    store = journal.open(tmp_path / "src")
    try:
        store.save(checkpoint("s", 1, [item(0)]))
        hs = HandShipper(object_store, store.session_dir("s"), "s")
        hs.begin()
        hs.ship(at_ms=1)
        src_log = Path(store.session_dir("s"), "log", "00000000000000000000.seg").read_bytes()
    finally:
        store.close()
    inc = read_incarnation(object_store, PREFIX, hs.dir)
    assert inc is not None
    rebuild_session_dir(inc, str(tmp_path / "built"))
    built = Path(tmp_path / "built", "log", "00000000000000000000.seg").read_bytes()
    assert src_log[: len(built)] == built and not any(src_log[len(built) :])
    with pytest.raises(InvalidInputError):
        restore(object_store, PREFIX, str(tmp_path / "x"), at_sequence=1)
    with pytest.raises(InvalidInputError):
        restore(
            object_store,
            PREFIX,
            str(tmp_path / "x"),
            session_ids=["s"],
            at_sequence=1,
            at_time_ms=1,
        )
    # A second restore of a session the root holds is refused.
    restore(object_store, PREFIX, str(tmp_path / "y"), session_ids=["s"])
    with pytest.raises(journal.JournalError):
        restore(object_store, PREFIX, str(tmp_path / "y"), session_ids=["s"])


def test_at_sequence_cuts_inside_one_chunk(tmp_path: Path, object_store: ObjectStore) -> None:
    """All of a session's commits in one DATA chunk: a cut at event N ends inside it,
    right after the commit holding N."""
    rng = random.Random(7)
    store = journal.open(tmp_path / "src")
    snapshots: list[dict[str, Any]] = []
    latest: list[int] = []
    try:
        for _ in range(25):
            latest += _ops(store, "u", rng, 1)
            snapshots.append(reads(store, "u"))
        hs = HandShipper(object_store, store.session_dir("u"), "u")
        hs.begin()
        assert hs.ship(at_ms=1) == 1
    finally:
        store.close()
    for seq in [*sorted(rng.sample(range(1, latest[-1] + 1), 5)), latest[-1] + 5]:
        k = next((i for i, last in enumerate(latest) if last >= seq), len(latest) - 1)
        dst = tmp_path / f"e{seq}"
        restore(object_store, PREFIX, str(dst), session_ids=["u"], at_sequence=seq)
        with journal.open(dst) as got:
            assert reads(got, "u") == snapshots[k], f"at event {seq} (commit {k})"


def test_at_sequence_in_a_log_with_a_dictionary(tmp_path: Path, object_store: ObjectStore) -> None:
    """A cut after the session's DICT record: the events it decodes to find the cut
    are compressed with the dictionary."""
    store = journal.open(tmp_path / "src")
    words = "the build failed because the linker could not find libssl so we pinned it"
    targets = {150, 230, 259}
    snapshots: dict[int, dict[str, Any]] = {}
    try:
        store.save(checkpoint("d", 1, [item(0)]))
        for n in range(1, 260):
            msg = {"type": "note", "text": f"{words} {n} " + words[n % 30 :]}
            store.append_event("d", 1000 + n, Event(msg=msg))
            if n == 200:
                store.spares.wait()  # the dictionary is trained and committed
            if n in targets:
                snapshots[n] = reads(store, "d")
        hs = HandShipper(object_store, store.session_dir("d"), "d")
        hs.begin()
        hs.ship(at_ms=1)
    finally:
        store.close()
    inc = read_incarnation(object_store, PREFIX, hs.dir)
    assert inc is not None
    assert any(r.rtype == DICT for c in replay_pieces(inc.pieces, tmp_path / "probe") for r in c)
    for n in sorted(targets):
        dst = tmp_path / f"e{n}"
        restore(object_store, PREFIX, str(dst), session_ids=["d"], at_sequence=n)
        with journal.open(dst) as got:
            assert reads(got, "d") == snapshots[n], f"at event {n}"
    run_cli(tmp_path / "e150", "verify")


def replay_pieces(pieces: list[Any], where: Path) -> list[Any]:
    """The committed records of a log made of these pieces (rebuilt at `where`)."""
    from journal.inspect import replay
    from journal.replica.chain import Incarnation

    rebuild_session_dir(Incarnation(identity=b"", pieces=pieces), str(where))
    return list(replay(str(where)))


def test_a_chain_that_ends_with_a_seal_restores(tmp_path: Path, object_store: ObjectStore) -> None:
    """`compact` seals the newest segment: the ship after it carries the SEAL only,
    and its successor holds nothing yet. The restore creates that successor (a SEAL
    with no next segment is a lost segment) and reads as the source."""
    from journal.compact import compact_session

    store = journal.open(tmp_path / "src")
    try:
        for t in range(1, 6):
            store.save(checkpoint("c", t, [item(i, f"c{i}") for i in range(t + 1)]))
        hs = HandShipper(object_store, store.session_dir("c"), "c")
        hs.begin()
        hs.ship(at_ms=1)
        want = reads(store, "c")  # the chain keeps the bytes as shipped: uncompacted
        compact_session(store.session_dir("c"), "c", keep=1)
        assert hs.ship(at_ms=2) == 1  # the SEAL
    finally:
        store.close()
    dst = tmp_path / "dst"
    assert restore(object_store, PREFIX, str(dst), session_ids=["c"]).sessions == ["c"]
    run_cli(dst, "verify")
    with journal.open(dst) as got:
        assert reads(got, "c") == want

"""Point-in-time restore: a sync writer records the wall clock after each acknowledged
commit and everything the store shows at that moment; a restore at that time (or at
an event sequence) into a fresh root shows exactly that.

The session crosses the things a cut has to get right: many chunks (so that merged
objects cover some of them), several segments, the session dictionary (trained
half way, so cuts fall before and after it), middleware state versions, and a second
session deleted and created again (absent at the times in between)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import T0, checkpoint, item, stamped

import journal
from journal import Event, EventPageRequest
from journal.inspect import replay
from journal.record import DICT
from journal.replica.objects import ObjectStore
from journal.replica.restore import restore
from journal.replica.target import ReplicaTarget

from .replica_child import verified, view

pytestmark = pytest.mark.replica

COMMITS = 90
SENTENCE = (
    "the worker ships every marked session once per lag and the restore cuts the chain"
    " at the newest chunk shipped before the time it is asked for"
)
WORDS = SENTENCE.split(" ")
STATE = [("p", "k")]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _next_ms(after: int) -> None:
    """Wait until the wall clock's millisecond is past `after`, so that the next
    commit's chunk is shipped at a later millisecond than the point just recorded."""
    while _now_ms() <= after:
        time.sleep(0.001)


def _commit(store: journal.Store, i: int, rng: random.Random, saves: dict[str, int]) -> None:
    sid = "q" if i % 5 == 4 and not 30 <= i < 50 else "p"  # q is deleted meanwhile
    if i % 3 == 0 or store.load(sid) is None:
        saves[sid] = saves.get(sid, 0) + 1
        seq = saves[sid]
        store.save_with_events(
            checkpoint(sid, seq, [item(k, f"{sid} {k}") for k in range(seq)], metadata={"i": i}),
            [item(seq, _text(rng, 10))],
            None,
            [
                stamped(T0 + i, Event(msg={"type": "note", "i": i, "text": _text(rng, 60)}))
                for _ in range(rng.randrange(0, 3))
            ],
        )
    else:
        ev = Event(msg={"type": "note", "i": i, "text": _text(rng, 80)})
        store.append_event(sid, T0 + i, ev)


def _record(store: journal.Store) -> dict[str, Any]:
    return view(store, ["p", "q"], STATE)


def test_a_restore_at_a_time_or_sequence_shows_the_store_as_it_was(
    tmp_path: Path, s3_bucket: str, replica_target: ReplicaTarget, object_store: ObjectStore
) -> None:
    rng = random.Random("pitr")
    store = journal.open(
        tmp_path / "src", replica=s3_bucket, replica_mode="sync", segment_bytes=4096
    )
    points: list[tuple[int, int, dict[str, Any]]] = []  # (ms, p's latest event, reads)
    saves: dict[str, int] = {}
    start = _now_ms()
    _next_ms(start)
    try:
        for i in range(COMMITS):
            if i == 30:
                assert store.delete_sessions(["q"])
                saves.pop("q")
            elif i == 45:
                store.spares.wait()  # p's dictionary is trained and committed by now
            _commit(store, i, rng, saves)
            if i % 10 == 5:
                store.save_state("p", "k", {"i": i})
            at = _now_ms()
            latest = store.event_page("p", EventPageRequest(limit=1)).latest_sequence
            points.append((at, latest, _record(store)))
            _next_ms(at)
        directory = store.session_dir("p")
    finally:
        store.close()
    # What the cuts cross: a dictionary, merged objects, several segments.
    records = [r for commit in replay(directory) for r in commit]
    assert any(r.rtype == DICT for r in records)
    keys = [i.key for i in object_store.list(replica_target.prefix + "/")]
    assert any("/merged/" in k for k in keys), "no merged object: fewer chunks than a span"

    # Before the first commit: nothing.
    empty = tmp_path / "before"
    report = restore(object_store, replica_target.prefix, str(empty), at_time_ms=start)
    assert report.sessions == []

    chosen = sorted([*rng.sample(range(COMMITS), 6), 29, 30, 50, COMMITS - 1])
    for n, index in enumerate(chosen):
        at, _, want = points[index]
        root = tmp_path / f"at-time-{n}"
        restore(object_store, replica_target.prefix, str(root), at_time_ms=at)
        journal.open(root).close()
        verified(root)
        with journal.open(root) as restored:
            got = _record(restored)
        assert got == want, f"restored at the time of commit {index} ({at} ms)"

    latest = points[-1][1]
    for n, sequence in enumerate(sorted(rng.sample(range(1, latest + 1), 5))):
        index = next(k for k, (_, seen, _) in enumerate(points) if seen >= sequence)
        want = points[index][2]["p"]
        root = tmp_path / f"at-sequence-{n}"
        restore(
            object_store, replica_target.prefix, str(root), session_ids=["p"], at_sequence=sequence
        )
        verified(root)
        with journal.open(root) as restored:
            got = view(restored, ["p"])["p"]
        assert got == want, f"restored at event sequence {sequence} (commit {index})"

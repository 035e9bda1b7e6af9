"""A session's chain in a real bucket (SeaweedFS), damaged the ways FORMAT.md
section 14 says a reader must refuse: a missing slot, a body that is not its
SHA-256, DATA that overlaps the chunk before it, an epoch lower than one before
it. `restore` and lazy fetch both raise ReplicaCorruptionError naming the key and
install nothing. And merged objects: the shipper merges every 64 chunks, and a
chain whose single chunks are gone restores the same session from them."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import checkpoint, item

import journal
from journal import Event, EventPageRequest
from journal.errors import ReplicaCorruptionError
from journal.layout import dir_name
from journal.replica import chunk as ck
from journal.replica.objects import ObjectStore
from journal.replica.restore import restore
from journal.replica.shipper import MERGE_SPAN
from journal.replica.target import ReplicaTarget
from journal.verify import verify_store

pytestmark = pytest.mark.replica

SID = "s1"
DIR = dir_name(SID)


def _write(root: Path, s3_bucket: str, saves: int = 5, appends: int = 0) -> dict[str, Any]:
    """A session written through a live store in sync mode: chunk 0 is its BEGIN,
    one DATA chunk per commit after it. What its reads give."""
    with journal.open(root, replica=s3_bucket, replica_mode="sync") as store:
        for t in range(1, saves + 1):
            store.save(checkpoint(SID, t, [item(i) for i in range(t)]))
        for i in range(appends):
            store.append_event(SID, i, Event(msg={"type": "note", "text": f"append {i}"}))
        store.flush()
        return _reads(store)


def _reads(store: journal.Store) -> dict[str, Any]:
    events = store.event_page(SID, EventPageRequest(limit=10_000))
    return {
        "checkpoint": store.load(SID),
        "events": [(e.sequence, e.event) for e in events.events],
        "latest": events.latest_sequence,
    }


def _key(target: ReplicaTarget, n: int) -> str:
    return ck.chunk_key(target.prefix, DIR, n)


def _get(objects: ObjectStore, target: ReplicaTarget, n: int) -> ck.Chunk:
    got = objects.get(_key(target, n))
    assert got is not None, f"chunk {n} is not in the bucket"
    return ck.decode_chunk(got[0], key=_key(target, n), n=n)


def _replace(objects: ObjectStore, target: ReplicaTarget, c: ck.Chunk) -> None:
    objects.put(_key(target, c.n), ck.encode_chunk(c))


def _slots(objects: ObjectStore, target: ReplicaTarget) -> list[int]:
    prefix = ck.chunks_prefix(target.prefix, DIR)
    return [int(i.key[len(prefix) :]) for i in objects.list(prefix)]


def _nothing_installed(root: Path) -> None:
    sessions = root / "sessions"
    assert not sessions.exists() or os.listdir(sessions) == []
    leftovers = [n for n in os.listdir(root / "tmp") if n.startswith("fetch-")]
    assert leftovers == []
    findings = [f for _, found in verify_store(str(root)) for f in found]
    assert findings == []


def _refused(
    tmp_path: Path,
    s3_bucket: str,
    objects: ObjectStore,
    target: ReplicaTarget,
    key: str,
    what: str,
) -> None:
    """restore and lazy fetch both refuse the chain, naming `key`, installing nothing."""
    root = tmp_path / "restored"
    journal.open(root).close()
    with pytest.raises(ReplicaCorruptionError) as caught:
        restore(objects, target.prefix, str(root))
    assert key in str(caught.value) and what in str(caught.value)
    _nothing_installed(root)
    with (
        journal.open(root, replica=s3_bucket) as store,
        pytest.raises(ReplicaCorruptionError) as caught,
    ):
        store.load(SID)
    assert key in str(caught.value) and what in str(caught.value)
    _nothing_installed(root)


def test_an_undamaged_chain_restores_and_fetches(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    """The baseline the damage tests start from: slots 0..5, BEGIN then DATA, one
    epoch, contiguous; restore and lazy fetch give what the writer reads."""
    want = _write(tmp_path / "a", s3_bucket)
    assert _slots(object_store, replica_target) == list(range(6))
    chain = [_get(object_store, replica_target, n) for n in range(6)]
    assert [c.kind for c in chain] == [ck.KIND_BEGIN] + [ck.KIND_DATA] * 5
    assert [c.commits for c in chain[1:]] == [1] * 5
    assert all(b.start == a.end for a, b in itertools.pairwise(chain[1:]))
    root = tmp_path / "restored"
    report = restore(object_store, replica_target.prefix, str(root))
    assert report.sessions == [SID]
    with journal.open(root) as store:
        assert _reads(store) == want
    assert [f for _, found in verify_store(str(root)) for f in found] == []
    with journal.open(tmp_path / "fetched", replica=s3_bucket) as store:
        assert _reads(store) == want


def test_a_missing_middle_chunk_is_a_gap(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    _write(tmp_path / "a", s3_bucket)
    object_store.delete([_key(replica_target, 3)])
    _refused(tmp_path, s3_bucket, object_store, replica_target, _key(replica_target, 3), "missing")


def test_a_body_that_is_not_its_sha256(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    _write(tmp_path / "a", s3_bucket)
    key = _key(replica_target, 2)
    got = object_store.get(key)
    assert got is not None
    damaged = bytearray(got[0])
    damaged[-1] ^= 0x01  # a body byte: the header and its CRC stay intact
    object_store.put(key, bytes(damaged))
    _refused(tmp_path, s3_bucket, object_store, replica_target, key, "SHA-256")


def test_data_that_overlaps_the_chunk_before(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    """Chunk 4, a valid chunk object whose bytes claim to start one commit early."""
    _write(tmp_path / "a", s3_bucket)
    before, c = _get(object_store, replica_target, 3), _get(object_store, replica_target, 4)
    assert c.start == before.end
    c.start = before.start
    c.end = c.start + len(c.body)
    _replace(object_store, replica_target, c)
    _refused(tmp_path, s3_bucket, object_store, replica_target, _key(replica_target, 4), "covers")


def test_data_that_leaves_a_hole_in_the_log(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    """Chunk 4 valid, but starting past where chunk 3 ended."""
    _write(tmp_path / "a", s3_bucket)
    c = _get(object_store, replica_target, 4)
    c.start += 1
    c.end += 1
    _replace(object_store, replica_target, c)
    _refused(tmp_path, s3_bucket, object_store, replica_target, _key(replica_target, 4), "covers")


def test_an_epoch_lower_than_one_before_it(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    """Chunk 2 re-written at epoch 5: chunk 3, still at epoch 1, comes after it."""
    _write(tmp_path / "a", s3_bucket)
    c = _get(object_store, replica_target, 2)
    assert c.epoch == 1
    c.epoch = 5
    _replace(object_store, replica_target, c)
    _refused(
        tmp_path,
        s3_bucket,
        object_store,
        replica_target,
        _key(replica_target, 3),
        "epoch 1 after epoch 5",
    )


def test_a_stale_writers_chunk_after_a_fence(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    """B takes the session over (lease epoch 2, a FENCE) and writes on; the chunk B
    wrote after its fence replaced by one of A's epoch: refused."""
    _write(tmp_path / "a", s3_bucket)
    with journal.open(tmp_path / "b", replica=s3_bucket, replica_mode="sync") as b:
        b.take_over(SID)
        b.append_event(SID, 1, Event(msg={"type": "note", "text": "b"}))
        b.flush()
    slots = _slots(object_store, replica_target)
    fence, after = (_get(object_store, replica_target, n) for n in slots[-2:])
    assert fence.kind == ck.KIND_FENCE and fence.epoch == 2
    assert after.kind == ck.KIND_DATA and after.epoch == 2
    after.epoch = 1
    _replace(object_store, replica_target, after)
    _refused(
        tmp_path,
        s3_bucket,
        object_store,
        replica_target,
        _key(replica_target, after.n),
        "epoch 1 after epoch 2",
    )


def test_a_chunk_under_another_slots_name(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    """Slot 3's object holding chunk 2's bytes (an object copied to the wrong name)."""
    _write(tmp_path / "a", s3_bucket)
    got = object_store.get(_key(replica_target, 2))
    assert got is not None
    object_store.put(_key(replica_target, 3), got[0])
    _refused(
        tmp_path, s3_bucket, object_store, replica_target, _key(replica_target, 3), "name says 3"
    )


def test_merged_objects_stand_in_for_their_chunks(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    """70 commits in sync mode: the shipper's worker puts merged object 0..63, which
    holds chunks 0..63 verbatim; with those single chunks removed, restore and lazy
    fetch read it and give the same session. Damaged, it is refused by its name."""
    commits = MERGE_SPAN + 6
    want = _write(tmp_path / "a", s3_bucket, saves=1, appends=commits - 1)
    prefix = replica_target.prefix
    merged = [i.key for i in object_store.list(ck.merged_prefix(prefix, DIR))]
    key = ck.merged_key(prefix, DIR, 0, MERGE_SPAN - 1)
    assert merged == [key]
    assert _slots(object_store, replica_target) == list(range(commits + 1))
    singles = []
    for n in range(MERGE_SPAN):
        got = object_store.get(_key(replica_target, n))
        assert got is not None
        singles.append(got[0])
    held = object_store.get(key)
    assert held is not None and held[0] == b"".join(singles)

    object_store.delete([_key(replica_target, n) for n in range(MERGE_SPAN)])
    assert _slots(object_store, replica_target) == list(range(MERGE_SPAN, commits + 1))
    root = tmp_path / "restored"
    assert restore(object_store, prefix, str(root)).sessions == [SID]
    with journal.open(root) as store:
        assert _reads(store) == want
    assert [f for _, found in verify_store(str(root)) for f in found] == []
    with journal.open(tmp_path / "fetched", replica=s3_bucket) as store:
        assert _reads(store) == want

    damaged = bytearray(held[0])
    damaged[len(singles[0]) + 20] ^= 0x01  # chunk 1's header, inside the merged object
    object_store.put(key, bytes(damaged))
    fresh = tmp_path / "second"
    journal.open(fresh).close()
    with pytest.raises(ReplicaCorruptionError, match="CRC") as caught:
        restore(object_store, prefix, str(fresh))
    assert key in str(caught.value)
    _nothing_installed(fresh)

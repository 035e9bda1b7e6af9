"""A writer with a replica killed with SIGKILL at random moments, and a bucket that is
unreachable: what the bucket holds is always a prefix of what the writer did, every
commit a sync writer acknowledged is in it, and a restore of it verifies.

The writer is a child process (replica_child.py `crash`) making deterministic ops
and printing each acknowledged one; after each kill the bucket is restored into a
fresh root and compared with the ops."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from helpers import checkpoint, item, run_cli

import journal
import journal.replica.replicator as replicator
from journal import Checkpoint, Event, ReplicaUnavailableError
from journal.replica.objects import ObjectStore, open_object_store
from journal.replica.restore import restore
from journal.replica.target import ReplicaTarget, parse_replica_url

from . import faultproxy
from .replica_child import CRASH_SESSION, Child, event_texts, restored_ops

pytestmark = pytest.mark.replica


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_killed_writer_leaves_a_prefix_of_its_ops(
    tmp_path: Path, s3_bucket: str, mode: str
) -> None:
    rng = random.Random(f"crash-{mode}")
    losses: list[tuple[int, int, float]] = []
    for round_ in range(3):
        url = f"{s3_bucket}/round-{round_}"
        root = tmp_path / f"w{round_}"
        child = Child("crash", str(root), url, mode, "0.2", "100000")
        try:
            child.wait_for("ready")
            if mode == "sync":
                child.wait_for("ack", rng.choice([0, 1, rng.randrange(2, 150)]))
            else:
                child.wait_for("ack", rng.randrange(25, 150))
            time.sleep(rng.random() * 0.05)
        finally:
            child.kill()
        killed_at = time.monotonic()
        acked = max([line["ack"] for line in child.lines if "ack" in line], default=0)
        flushed = max([line["flushed"] for line in child.lines if "flushed" in line], default=0)
        m, _ = restored_ops(url, tmp_path / f"restored{round_}")
        # Never more than what the writer started: at most one op past the last ack.
        assert m <= acked + 1, (m, acked)
        if mode == "sync":
            assert m >= acked, (
                f"round {round_}: op {acked} was acknowledged, the bucket ends at {m}"
            )
        else:
            assert m >= flushed, f"round {round_}: flushed through op {flushed}, restored {m}"
        # What async mode lost: the ops acknowledged after op m, and how long before
        # the kill the oldest of them was acknowledged (reported, not asserted).
        lost_at = [line["_at"] for line in child.lines if line.get("ack", 0) > m]
        losses.append((acked, m, round(killed_at - min(lost_at), 3) if lost_at else 0.0))
        # The dead writer's root goes on: a new writer there ships what it left.
        with journal.open(root, replica=url, replica_mode="sync") as again:
            local = event_texts(again, CRASH_SESSION) if again.load(CRASH_SESSION) else []
            if local:
                again.append_event(CRASH_SESSION, 1, Event(msg={"type": "note", "text": "next"}))
        if local:
            target = parse_replica_url(url)
            objects = open_object_store(target)
            try:
                restore(objects, target.prefix, str(tmp_path / f"resumed{round_}"))
            finally:
                objects.close()
            with journal.open(tmp_path / f"resumed{round_}") as resumed:
                assert event_texts(resumed, CRASH_SESSION) == [*local, "next"]
    print(f"{mode}: (acknowledged, restored, oldest lost ack's age in s) per round: {losses}")


def test_a_sync_commit_fails_while_the_bucket_is_unreachable(
    tmp_path: Path,
    s3_bucket: str,
    object_store: ObjectStore,
    replica_target: ReplicaTarget,
    fault_proxy: faultproxy.FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store ships through the proxy; `object_store` (made before the test pointed
    AWS_ENDPOINT_URL at the proxy) reads the server directly."""
    monkeypatch.setattr(replicator, "SYNC_PATIENCE", 1.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    store = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync")

    def restored(name: str) -> tuple[list[str], Checkpoint | None, Checkpoint | None]:
        root = tmp_path / name
        restore(object_store, replica_target.prefix, str(root))
        run_cli(root, "verify")
        with journal.open(root) as got:
            return event_texts(got, "s"), got.load("s"), got.load("new")

    try:
        store.save(checkpoint("s", 1, [item(0)]))
        store.append_event("s", 1, Event(msg={"type": "note", "text": "shipped"}))
        fault_proxy.set_mode(faultproxy.RESET)
        with pytest.raises(ReplicaUnavailableError):
            store.append_event("s", 2, Event(msg={"type": "note", "text": "local only"}))
        with pytest.raises(ReplicaUnavailableError):
            store.save(checkpoint("s", 2, [item(0), item(1)]))
        # A session's first write claims its lease first: nothing is written locally.
        with pytest.raises(ReplicaUnavailableError):
            store.save(checkpoint("new", 1, [item(0)]))
        assert restored("down") == (["shipped"], checkpoint("s", 1, [item(0)]), None)
        fault_proxy.set_mode(faultproxy.PASS)
        store.append_event("s", 3, Event(msg={"type": "note", "text": "after"}))
        # The next commit ships the ones that raised, too.
        assert restored("up") == (
            ["shipped", "local only", "after"],
            checkpoint("s", 2, [item(0), item(1)]),
            None,
        )
        assert store.load("new") is None
    finally:
        store.close()

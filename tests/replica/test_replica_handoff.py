"""Two hosts (two roots, each written by its own process) hand one session back and
forth through one bucket: while the owner appends in a loop, the other calls
`take_over`; from the fence on, every write of the old owner raises FencedError, and
the bucket, a restore and the new owner's store hold exactly the events the old
owner had acknowledged plus the new owner's, with gapless sequences. The next round
swaps the roles (the fenced host takes the session back, which drops its own
unacknowledged commit). Halfway the host processes are replaced by new ones on the
same roots."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import run_cli

import journal
from journal.replica.objects import ObjectStore
from journal.replica.restore import restore
from journal.replica.target import ReplicaTarget

from .replica_child import HANDOFF_SESSION, Child, event_texts, verified

pytestmark = pytest.mark.replica

ROUNDS = 4
AFTER_FENCE = 4  # calls the fenced writer makes after its first FencedError
TAKER_WRITES = 3
# Seconds between the owner's appends in the rounds (a writer that never pauses has
# a test of its own below: the fence then lands two slots ahead of it).
PAUSE = 0.01


def _hosts(roots: dict[str, Path], url: str) -> dict[str, Child]:
    hosts = {name: Child("host", str(root), url) for name, root in roots.items()}
    for host in hosts.values():
        host.wait_for("ready")
    return hosts


def _stop(hosts: dict[str, Child]) -> None:
    for host in hosts.values():
        if host.proc.poll() is None:
            host.send("exit")
    for host in hosts.values():
        assert host.finish() == 0, host.lines[-3:]


def test_the_session_changes_hands_many_times(
    tmp_path: Path, s3_bucket: str, object_store: ObjectStore, replica_target: ReplicaTarget
) -> None:
    rng = random.Random("handoff")
    roots = {"A": tmp_path / "A", "B": tmp_path / "B"}
    expected: list[str] = []  # every acknowledged event's text, in sequence order
    refused: list[str] = []  # the texts of every call that raised FencedError
    hosts = _hosts(roots, s3_bucket)
    try:
        for round_ in range(ROUNDS):
            if round_ == ROUNDS // 2:
                _stop(hosts)
                hosts = _hosts(roots, s3_bucket)
            owner, other = ("A", "B") if round_ % 2 == 0 else ("B", "A")
            writer, taker = hosts[owner], hosts[other]
            w0, t0 = len(writer), len(taker)
            writer.send(f"write {owner}{round_} {AFTER_FENCE} 5000 {PAUSE}")
            writer.wait_for("ok", rng.randrange(1, 20), since=w0)
            taker.send(f"take {other}{round_} {TAKER_WRITES}")
            taker.wait_for("done", since=t0)
            writer.wait_for("done", since=w0)

            calls = [line for line in writer.since(w0) if "ok" in line or "fenced" in line]
            first_fenced = next(i for i, line in enumerate(calls) if "fenced" in line)
            assert all("fenced" in line for line in calls[first_fenced:]), (
                f"round {round_}: {owner} wrote after its first FencedError: {calls[first_fenced:]}"
            )
            assert len(calls) - first_fenced == AFTER_FENCE + 1
            acked = calls[:first_fenced]
            took = next(line for line in taker.since(t0) if "took" in line)["took"]
            assert took == len(expected) + len(acked), (
                f"round {round_}: {other} took over at sequence {took}; {owner} had"
                f" acknowledged {len(expected) + len(acked)} events"
            )
            taken = [line for line in taker.since(t0) if "ok" in line]
            assert [line["seq"] for line in acked + taken] == list(
                range(len(expected) + 1, len(expected) + len(acked) + len(taken) + 1)
            )
            expected += [line["ok"] for line in acked + taken]
            refused += [line["fenced"] for line in calls[first_fenced:]]

            # The bucket, restored into a fresh root, holds exactly that.
            fresh = tmp_path / f"restored{round_}"
            report = restore(object_store, replica_target.prefix, str(fresh))
            assert report.sessions == [HANDOFF_SESSION]
            verified(fresh)
            with journal.open(fresh) as restored:
                assert event_texts(restored, HANDOFF_SESSION) == expected
            # And so does the new owner's own copy (read by another process, without
            # the replica).
            with journal.open(roots[other]) as new_owner:
                assert event_texts(new_owner, HANDOFF_SESSION) == expected
            assert not set(refused) & set(expected)
    finally:
        _stop(hosts)
    for root in roots.values():
        run_cli(root, "verify")


def test_take_over_fences_a_writer_that_never_pauses(tmp_path: Path, s3_bucket: str) -> None:
    limit = 200  # the owner's calls in all; take_over starts after its 10th
    hosts = _hosts({"A": tmp_path / "A", "B": tmp_path / "B"}, s3_bucket)
    try:
        hosts["A"].send(f"write A 2 {limit} 0")
        hosts["A"].wait_for("ok", 10)
        hosts["B"].send("take B 1")
        hosts["A"].wait_for("done")
        hosts["B"].wait_for("done")
    finally:
        _stop(hosts)
    assert hosts["A"].count("fenced"), (
        f"the owner made all its {limit} appends: take_over landed only after it stopped"
    )

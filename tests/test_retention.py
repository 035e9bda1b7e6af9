"""Retention: `Store.prune`, the policy in the manifest and its background job.

What a prune lets go (age, the newest N, an owner), fork-awareness (a session
with a kept descendant is kept; a tree goes whole), trees that change between
the plan and the delete, bad input, and kill -9 in the middle of a prune of many
trees (each tree whole or gone, the store consistent).
"""

from __future__ import annotations

import datetime
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import helpers
import msgspec
import pytest
from helpers import checkpoint

import journal
from journal import InvalidInputError, RetentionPolicy

# reaches inside: planning against a clock the test sets, and the manifest's bytes
from journal import retention as retention_rules
from journal.layout import MANIFEST_FILE, RETENTION_STAMP_FILE


def _store(tmp_path: Path, **options: object) -> journal.Store:
    return journal.open(tmp_path / "store", durability="os", **options)  # type: ignore[arg-type]


def _save(store: journal.Store, sid: str, seq: int = 0, owner: str = "owner") -> None:
    store.save(checkpoint(sid, seq, owner=owner))


def _updated(store: journal.Store, sid: str) -> int:
    s = store.session_summary(sid)
    assert s is not None
    return s.updated_at


def test_keep_last_keeps_the_newest_and_deletes_the_rest(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for i in range(6):
        _save(store, f"s{i}")
    order = [s.session_id for s in helpers.listed(store).values()]
    newest = [
        s.session_id for s in store.list_sessions_page(journal.SessionPageRequest(limit=2)).sessions
    ]
    dry = store.prune(keep_last=2)
    assert dry.dry_run and sorted(dry.deleted) == sorted(set(order) - set(newest))
    assert helpers.listed_ids(store) == set(order), "a dry run deleted something"
    done = store.prune(keep_last=2, dry_run=False)
    assert sorted(done.deleted) == sorted(dry.deleted)
    assert done.trees == 4 and done.bytes_freed > 0
    assert helpers.listed_ids(store) == set(newest)
    for sid in done.deleted:
        assert store.load(sid) is None
        assert not os.path.exists(store.session_dir(sid))
    store.close()


def test_older_than_uses_the_last_update(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for sid in ("a", "b", "c"):
        _save(store, sid)
    first, t = _updated(store, "a"), max(_updated(store, sid) for sid in ("a", "b", "c"))
    policy = RetentionPolicy(older_than=100)
    # Not yet older than 100 s, nothing goes; past it, everything would.
    assert retention_rules.apply(store, policy, dry_run=False, now=first + 100).deleted == []
    assert helpers.listed_ids(store) == {"a", "b", "c"}
    # Combined with keep_last: the newest stays even though it is old.
    both = RetentionPolicy(older_than=100, keep_last=1)
    report = retention_rules.apply(store, both, dry_run=False, now=t + 101)
    assert len(report.deleted) == 2
    assert len(helpers.listed_ids(store)) == 1
    # A young session is never taken by age alone.
    assert store.prune(older_than=datetime.timedelta(days=1), dry_run=False).deleted == []
    store.close()


def test_owner_filter_counts_and_deletes_only_that_owner(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for i in range(3):
        _save(store, f"a{i}", owner="alice")
        _save(store, f"b{i}", owner="bob")
    report = store.prune(keep_last=1, owner_id="alice", dry_run=False)
    assert len(report.deleted) == 2 and all(s.startswith("a") for s in report.deleted)
    left = helpers.listed(store)
    assert sum(1 for s in left.values() if s.session_context.owner_id == "alice") == 1
    assert {f"b{i}" for i in range(3)} <= set(left)
    store.close()


def test_a_kept_fork_keeps_its_ancestors(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _save(store, "root")
    store.fork_at("root", 0, "mid")
    store.fork_at("mid", 0, "leaf")
    _save(store, "other")
    # The leaf's second checkpoint makes it the newest session (a later second or,
    # within the same one, a higher sequence): keep_last=1 keeps it, so its
    # ancestors stay too; the unrelated session goes.
    store.save(checkpoint("leaf", 1))
    newest = store.list_sessions_page(journal.SessionPageRequest(limit=1)).sessions
    assert [s.session_id for s in newest] == ["leaf"]
    report = store.prune(keep_last=1, dry_run=False)
    assert report.deleted == ["other"]
    assert sorted(report.kept_for_descendants) == ["mid", "root"]
    assert helpers.listed_ids(store) == {"root", "mid", "leaf"}
    # Once nothing of the tree is kept, it goes as one tree, in one delete.
    report = store.prune(keep_last=0, dry_run=False)
    assert report.trees == 1 and report.deleted == ["root", "mid", "leaf"]
    assert helpers.listed_ids(store) == set()
    store.close()


def test_a_fork_of_another_owner_keeps_its_parent(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _save(store, "p", owner="alice")
    child = checkpoint("c", 0, owner="bob")
    store.fork("p", 0, child)
    report = store.prune(keep_last=0, owner_id="alice", dry_run=False)
    assert report.deleted == [] and report.kept_for_descendants == ["p"]
    assert helpers.listed_ids(store) == {"p", "c"}
    store.close()


def test_a_tree_changed_after_the_plan_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    for sid in ("updated", "forked", "untouched"):
        _save(store, sid)
    stale = retention_rules.plan(store, RetentionPolicy(keep_last=0), time.time())
    # Between the plan and the delete: one session gets a new checkpoint, another
    # a new fork. Neither tree is what was planned any more.
    store.save(checkpoint("updated", 1))
    store.fork_at("forked", 0, "new-child")
    monkeypatch.setattr(retention_rules, "plan", lambda *_: stale)
    report = retention_rules.apply(store, RetentionPolicy(keep_last=0), dry_run=False)
    assert report.deleted == ["untouched"]
    assert sorted(report.changed) == ["forked", "updated"]
    assert helpers.listed_ids(store) == {"updated", "forked", "new-child"}
    assert store.load("updated") is not None and store.load("updated").sequence == 1  # type: ignore[union-attr]
    store.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "older_than or keep_last"),
        ({"keep_last": -1}, "keep_last"),
        ({"keep_last": True}, "keep_last"),
        ({"older_than": -5}, "older_than"),
        ({"older_than": float("nan")}, "older_than"),
        ({"keep_last": 1, "owner_id": ""}, "owner"),
    ],
)
def test_bad_prune_arguments_change_nothing(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    store = _store(tmp_path)
    _save(store, "s")
    with pytest.raises(InvalidInputError, match=message):
        store.prune(dry_run=False, **options)  # type: ignore[arg-type]
    assert helpers.listed_ids(store) == {"s"}
    store.close()


def test_a_read_only_store_prunes_only_dry(tmp_path: Path) -> None:
    _store(tmp_path).close()
    with journal.open(tmp_path / "store", read_only=True) as ro:
        assert ro.prune(keep_last=0).dry_run
        with pytest.raises(InvalidInputError, match="read-only"):
            ro.prune(keep_last=0, dry_run=False)


# ------------------------------------------------------------ the recorded policy
def test_the_policy_is_recorded_in_the_manifest(tmp_path: Path) -> None:
    policy = RetentionPolicy(older_than=30 * 86400, keep_last=100, interval=3600)
    _store(tmp_path, retention=policy).close()
    with _store(tmp_path) as again:  # not given: the recorded one
        assert again.retention == policy
    with journal.open(tmp_path / "store", read_only=True) as ro:
        assert ro.retention == policy
    _store(tmp_path, retention=RetentionPolicy()).close()  # an empty one removes it
    with _store(tmp_path) as cleared:
        assert cleared.retention is None and cleared.retention_job is None


def test_a_bad_policy_is_refused_and_the_manifest_untouched(tmp_path: Path) -> None:
    _store(tmp_path, retention=RetentionPolicy(keep_last=5)).close()
    before = (tmp_path / "store" / MANIFEST_FILE).read_bytes()
    for bad in (
        RetentionPolicy(keep_last=-1),
        RetentionPolicy(older_than=float("inf")),
        RetentionPolicy(keep_last=1, interval=0),
        "30d",
    ):
        with pytest.raises(InvalidInputError):
            _store(tmp_path, retention=bad)
    with pytest.raises(InvalidInputError, match="read-only"):
        journal.open(tmp_path / "store", read_only=True, retention=RetentionPolicy(keep_last=1))
    assert (tmp_path / "store" / MANIFEST_FILE).read_bytes() == before


def test_manifests_with_and_without_the_policy_read_both_ways(tmp_path: Path) -> None:
    """A manifest from before the policy existed opens; one with a policy decodes
    under the older shape (msgpack map: the unknown field is skipped)."""
    from journal import manifest as manifest_module  # reaches inside: the record's shape
    from journal.metafile import KIND_MANIFEST, write_meta

    class OlderManifest(msgspec.Struct):
        format: int = 1
        created_at: int = 0

    root = tmp_path / "store"
    _store(tmp_path, retention=RetentionPolicy(keep_last=3)).close()
    raw = manifest_module.read(str(root))
    older = msgspec.msgpack.decode(msgspec.msgpack.encode(raw), type=OlderManifest)
    assert older.format == 1
    write_meta(
        str(root / MANIFEST_FILE), KIND_MANIFEST, msgspec.msgpack.encode(older), durable=False
    )
    with _store(tmp_path) as store:
        assert store.retention is None


def test_the_background_job_applies_the_policy(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for i in range(4):
        _save(store, f"s{i}")
    store.close()
    store = _store(tmp_path, retention=RetentionPolicy(keep_last=1, interval=0.2))
    job = store.retention_job
    assert job is not None
    deadline = time.monotonic() + 30
    while job.runs == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.runs >= 1, f"the job did not run: {job.last_error!r}"
    assert job.last_report is not None and len(job.last_report.deleted) == 3
    assert len(helpers.listed_ids(store)) == 1
    assert (tmp_path / "store" / RETENTION_STAMP_FILE).exists()
    store.close()
    assert not job._thread.is_alive()  # reaches inside: close ends the thread


def test_a_younger_stamp_of_another_process_skips_the_run(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for i in range(3):
        _save(store, f"s{i}")
    store.close()
    stamp = tmp_path / "store" / RETENTION_STAMP_FILE
    stamp.touch()
    future = time.time() + 3600
    os.utime(stamp, (future, future))  # another process ran it "just now", forever
    store = _store(tmp_path, retention=RetentionPolicy(keep_last=0, interval=0.1))
    job = store.retention_job
    assert job is not None
    time.sleep(1.0)  # about ten intervals, each of which must skip
    assert job.runs == 0 and len(helpers.listed_ids(store)) == 3
    os.utime(stamp, (0, 0))  # the other process's run is long past
    deadline = time.monotonic() + 30
    while job.runs == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.runs >= 1 and helpers.listed_ids(store) == set()
    store.close()


# ------------------------------------------------------------------- kill -9
_PRUNER = textwrap.dedent(
    """
    import sys, journal
    store = journal.open(sys.argv[1], durability=sys.argv[2])
    print("ready", flush=True)
    store.prune(keep_last=0, dry_run=False)
    print("done", flush=True)
    """
)


def _build_forest(root: Path, trees: int) -> dict[str, list[str]]:
    forest: dict[str, list[str]] = {}
    with journal.open(root, durability="os") as store:
        for t in range(trees):
            top = f"t{t:02d}"
            store.save(checkpoint(top, 0, [helpers.item(0)]))
            store.save(checkpoint(top, 1, [helpers.item(0), helpers.item(1)]))
            kids = [f"{top}-k{k}" for k in range(2)]
            for k in kids:
                store.fork_at(top, 1, k)
            store.fork_at(kids[0], 0, f"{top}-g")
            forest[top] = [top, *kids, f"{top}-g"]
            store.save_state(top, "note", {"tree": t})
    return forest


@pytest.mark.slow
def test_sigkill_during_a_prune_leaves_every_tree_whole_or_gone(tmp_path: Path) -> None:
    seed = int(os.environ.get("JOURNAL_RETENTION_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"seed {seed}")
    partial = 0
    for round_ in range(6):
        root = tmp_path / f"store{round_}"
        forest = _build_forest(root, 12)
        child = subprocess.Popen(
            [sys.executable, "-c", _PRUNER, str(root), rng.choice(["fsync", "os"])],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.25))
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        child.stdout.close()
        with journal.open(root, durability="os") as store:
            present = helpers.listed_ids(store)
            loaded = {sid for tree in forest.values() for sid in tree if store.load(sid)}
            assert present == loaded, f"seed {seed}: listing and loads disagree"
            gone = 0
            for top, tree in forest.items():
                here = [sid for sid in tree if sid in present]
                assert here in ([], tree), f"seed {seed}: tree {top} is partly deleted: {here}"
                state = store.load_state(top, "note")
                assert (state is None) == (not here), f"seed {seed}: state of {top}"
                gone += not here
            partial += 0 < gone < len(forest)
            for sid in present:
                assert not helpers.session_findings(store.session_dir(sid)), sid
            # The store goes on: the rest can be pruned, and new sessions written.
            store.prune(keep_last=0, dry_run=False)
            assert helpers.listed_ids(store) == set()
            _save(store, "after")
            assert helpers.listed_ids(store) == {"after"}
    print(f"rounds with a partial prune: {partial}")


def test_the_async_store_prunes(tmp_path: Path) -> None:
    import asyncio

    async def run() -> journal.PruneReport:
        store = await journal.open_async(tmp_path / "store", durability="os")
        await store.save(checkpoint("a", 0))
        await store.save(checkpoint("b", 0))
        report = await store.prune(keep_last=1, dry_run=False)
        await store.close()
        return report

    report = asyncio.run(run())
    assert len(report.deleted) == 1 and report.trees == 1


def test_the_job_frees_what_an_integration_declared_erasable(tmp_path: Path) -> None:
    from journal.erase import erase_declaration, erase_event, is_erased

    store = _store(tmp_path)
    _save(store, "kept")
    secret = store.append_event("kept", 1, helpers.warning_event("x" * 20_000))
    store.append_event("kept", 2, erase_event(erase_declaration(events=[secret.sequence])))
    log_dir = Path(store.session_dir("kept")) / "log"
    before = sum(f.stat().st_blocks for f in log_dir.iterdir())
    job = retention_rules_job(store)
    report = job.run_once(0.0)
    assert report.deleted == [] and report.compacted == 1 and report.compacted_bytes > 0
    [stub] = store.events_after("kept", secret.sequence - 1, 1)
    assert stub.sequence == secret.sequence and is_erased(stub)
    assert sum(f.stat().st_blocks for f in log_dir.iterdir()) < before
    # A session not updated since the previous run is not read again.
    assert job.run_once(time.time() + 10).compacted == 0
    store.close()


def retention_rules_job(store: journal.Store) -> object:
    """A retention job that never runs by itself (its interval is a day), for
    calling `run_once` directly."""
    from journal.retentionjob import RetentionJob  # reaches inside: one run on demand

    job = RetentionJob(store, RetentionPolicy(keep_last=10, interval=86400))
    store.retention_job = job  # closed with the store
    return job

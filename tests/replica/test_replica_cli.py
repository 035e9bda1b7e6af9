"""The replication commands against a real S3 server: the sidecar following a store
that another process writes (and restarting), status, ls --replica, restore, and
prune keeping every restore point of its window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import checkpoint, item

import journal
from journal import Event, EventPageRequest

pytestmark = pytest.mark.replica


def _cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "journal.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"journal {' '.join(args)}: rc {done.returncode}\n{done.stderr}")
    return done


def _events(store: journal.Store, sid: str) -> list[Any]:
    page = store.event_page(sid, EventPageRequest(limit=10_000))
    return [(e.sequence, e.event) for e in page.events]


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])
    import journal
    from journal import Event
    from helpers import checkpoint, item
    with journal.open(sys.argv[1]) as store:
        for s in range(int(sys.argv[2])):
            sid = f"w{s}"
            store.save_with_events(checkpoint(sid, 1, [item(0)]), [item(1)], None, [])
            for i in range(5):
                store.append_event(sid, i, Event(msg={"type": "note", "text": f"{sid}-{i}"}))
        store.save_state("w0", "cursor", {"at": 3})
    """
)


def test_the_sidecar_follows_another_process_and_resumes_after_a_restart(
    tmp_path: Path, s3_bucket: str, s3_server: Any
) -> None:
    env = s3_server.env
    root = tmp_path / "src"
    tests = str(Path(__file__).resolve().parent.parent)
    subprocess.run([sys.executable, "-c", _WRITER, str(root), "3", tests], check=True, timeout=120)
    _cli(env, "replicate", "--root", str(root), "--to", s3_bucket, "--once")
    # More commits by another process, then a sidecar that starts knowing nothing.
    with journal.open(root) as store:
        store.append_event("w1", 99, Event(msg={"type": "note", "text": "later"}))
        assert store.delete_sessions(["w2"])
        want = {sid: _events(store, sid) for sid in ("w0", "w1")}
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "journal.cli",
            "replicate",
            "--root",
            str(root),
            "--to",
            s3_bucket,
            "--interval",
            "0.2s",
        ],
        env={**os.environ, **env},
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            status = json.loads(
                _cli(
                    env, "replica", "status", "--root", str(root), "--to", s3_bucket, "--json"
                ).stdout
            )
            rows = {r["session_id"]: r for r in status["sessions"]}
            if rows and all(r.get("unshipped_bytes") == 0 for r in rows.values()):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.3)
    finally:
        follower.terminate()
        follower.wait(timeout=60)
    assert set(rows) == {"w0", "w1"}
    time.sleep(0.5)  # the deleted session's DELETE goes on the second look
    _cli(env, "replicate", "--root", str(root), "--to", s3_bucket, "--once")
    _cli(env, "replicate", "--root", str(root), "--to", s3_bucket, "--once")
    dst = tmp_path / "dst"
    out = json.loads(_cli(env, "restore", s3_bucket, "--root", str(dst), "--json").stdout)
    assert sorted(out["sessions"]) == ["w0", "w1"]
    assert out["state_keys"] == 1
    assert _cli(env, "verify", "--root", str(dst)).returncode == 0
    with journal.open(dst) as restored:
        for sid, events in want.items():
            assert _events(restored, sid) == events
        assert restored.load("w2") is None
        assert restored.load_state("w0", "cursor") == {"at": 3}


def test_ls_replica_lists_newest_first_without_the_logs(
    tmp_path: Path, s3_bucket: str, s3_server: Any
) -> None:
    with journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync") as store:
        for n in range(3):
            store.save(checkpoint(f"s{n}", 1, [item(0)], owner=f"o{n}"))
            time.sleep(1.1)  # LastModified has a resolution of a second on some servers
        store.flush()
    listed = json.loads(_cli(s3_server.env, "ls", "--replica", s3_bucket, "--json").stdout)
    assert [s["session_id"] for s in listed["sessions"]] == ["s2", "s1", "s0"]
    page = json.loads(
        _cli(s3_server.env, "ls", "--replica", s3_bucket, "--limit", "2", "--json").stdout
    )
    assert [s["session_id"] for s in page["sessions"]] == ["s2", "s1"]
    rest = json.loads(
        _cli(
            s3_server.env, "ls", "--replica", s3_bucket, "--before", page["next_cursor"], "--json"
        ).stdout
    )
    assert [s["session_id"] for s in rest["sessions"]] == ["s0"]


def test_restore_refuses_sessions_the_root_has(
    tmp_path: Path, s3_bucket: str, s3_server: Any
) -> None:
    with journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync") as store:
        store.save(checkpoint("s1", 1, [item(0)]))
    with journal.open(tmp_path / "b") as other:
        other.save(checkpoint("s1", 7, [item(5)]))
    done = _cli(s3_server.env, "restore", s3_bucket, "--root", str(tmp_path / "b"), check=False)
    assert done.returncode != 0 and "already exist" in done.stderr
    with journal.open(tmp_path / "b") as other:
        assert other.load("s1") == checkpoint("s1", 7, [item(5)])  # nothing changed


def test_prune_keeps_every_restore_point_of_its_window(
    tmp_path: Path, s3_bucket: str, s3_server: Any, object_store: Any, replica_target: Any
) -> None:
    import importlib

    from journal.replica.restore import restore

    # the module (journal.replica's `prune` attribute is the function it exports)
    pruning = importlib.import_module("journal.replica.prune")

    store = journal.open(tmp_path / "a", replica=s3_bucket, replica_mode="sync")
    store.save(checkpoint("long", 1, [item(0)]))
    for i in range(140):  # more than two merge spans of 64 chunks
        store.append_event("long", i, Event(msg={"type": "note", "text": f"e{i}"}))
    store.save(checkpoint("old", 1, [item(0)]))
    assert store.delete_sessions(["old"])
    store.save(checkpoint("old", 1, [item(1)]))  # its next incarnation
    store.flush()
    want = _events(store, "long")
    store.close()
    before = sum(1 for _ in object_store.list(replica_target.prefix))
    # Nothing is old enough: a prune with a long window merges, removes nothing.
    kept = pruning.prune(object_store, replica_target.prefix, keep=3600.0)
    assert kept.removed == 0
    # Now as if a day had passed: singles held by merged objects and the deleted
    # incarnation go; the window (an hour) has no restore point that needs them.
    later = int(time.time() * 1000) + 86_400_000
    monkey = pytest.MonkeyPatch()
    monkey.setattr(pruning, "GRACE", 0.0)
    try:
        done = pruning.prune(object_store, replica_target.prefix, keep=3600.0, now_ms=later)
    finally:
        monkey.undo()
    assert done.removed > 100 and done.floors == 1
    after = sum(1 for _ in object_store.list(replica_target.prefix))
    assert after < before - 100
    restore(object_store, replica_target.prefix, str(tmp_path / "r"))
    with journal.open(tmp_path / "r") as restored:
        assert _events(restored, "long") == want
        assert restored.load("old") == checkpoint("old", 1, [item(1)])
    assert _cli(s3_server.env, "verify", "--root", str(tmp_path / "r")).returncode == 0

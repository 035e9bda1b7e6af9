"""export -o never overwrites or leaves partial files; delete asks first; repair
refuses a session in use; compact's report is true; demo keeps others' sessions."""

from __future__ import annotations

import json
import os
import pty
import random
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import child_script, run_cli, save_items

import journal
from journal import Checkpoint
from journal.inspect import dir_name

CLI = [sys.executable, "-m", "journal.cli"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    store = journal.open(root)
    for seq in range(3):
        save_items(store, "a", seq, seq + 1)
    store.fork_at("a", 1, "a-fork")
    save_items(store, "b", 0, 1)
    store.close()
    return root


def test_export_refuses_to_overwrite_without_force(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.jb"
    out.write_bytes(b"precious")
    proc = run_cli(root, "export", "a", "-o", str(out), check_code=2)
    assert "--force" in proc.stderr and out.read_bytes() == b"precious"
    run_cli(root, "export", "a", "-o", str(out), "--force")
    assert out.read_bytes() != b"precious"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".x.jb")] == []


def test_export_failure_leaves_nothing_at_the_output(root: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.jb"
    run_cli(root, "export", "a", "nope", "-o", str(out), check_code=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_delete_needs_yes_off_a_terminal(root: Path) -> None:
    proc = run_cli(root, "delete", "a", check_code=2)
    assert "--yes" in proc.stderr and "'a-fork'" in proc.stderr
    assert (root / "sessions" / dir_name("a")).exists()
    doc = json.loads(run_cli(root, "delete", "a", "--yes", "--json").stdout)
    assert sorted(doc["deleted"]) == ["a", "a-fork"]
    store = journal.open(root)
    try:
        assert store.load("a") is None and store.load("a-fork") is None
        assert store.load("b") is not None
    finally:
        store.close()
    run_cli(root, "delete", "a", "--yes", check_code=1)


@pytest.mark.parametrize(("answer", "deleted"), [(b"n\n", False), (b"y\n", True)])
def test_delete_on_a_terminal_asks_y_n(root: Path, answer: bytes, deleted: bool) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "--root", str(root), "delete", "b"],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=follower,
    )
    os.close(follower)
    prompt = b""
    while b"[y/N]" not in prompt:
        prompt += os.read(leader, 1024)
    os.write(leader, answer)
    proc.wait(timeout=60)
    os.close(leader)
    assert proc.returncode == (0 if deleted else 1)
    assert (root / "sessions" / dir_name("b")).exists() is not deleted


LIVE = """
import sys, time, journal
from journal import Checkpoint, Event
store = journal.open(sys.argv[1])
store.append_event("a", 1, Event(msg={"type": "warning", "message": "still here"}))
print("ready", flush=True)
time.sleep(120)
"""


def test_repair_refuses_while_another_process_writes_the_session(root: Path) -> None:
    with child_script(LIVE, str(root)) as writer:
        seg_dir = root / "sessions" / dir_name("a")
        before = {p.name for p in seg_dir.iterdir()}
        proc = run_cli(root, "repair", "a", check_code=1)
        assert "in use" in proc.stderr and f"pid={writer.pid}" in proc.stderr
        assert {p.name for p in seg_dir.iterdir()} == before  # no cache was removed
        err = json.loads(run_cli(root, "repair", "a", "--json", check_code=1).stderr)
        assert err["type"] == "SessionBusyError"
        run_cli(root, "repair", "b")  # another session is not in use
    run_cli(root, "repair", "a")  # the writer is gone


def _many_small_checkpoints(root: Path, saves: int, segment_bytes: int) -> None:
    store = journal.open(root, segment_bytes=segment_bytes)
    cp = Checkpoint.empty("big", owner_id="me")
    for seq in range(saves):
        cp.sequence = seq
        cp.context = [*cp.context, {"t": seq}]
        cp.metadata = {"blob": random.Random(seq).randbytes(900).hex()}
        store.save(cp, [{"t": seq}])
    store.close()


def test_compact_reports_zeroed_and_freed_bytes_truly(tmp_path: Path) -> None:
    """Headers of ~1.8 KiB between kept records: the records are packed, the bytes
    they no longer need become holes, and the report says what du says."""
    root = tmp_path / "s"
    _many_small_checkpoints(root, 120, 64 << 10)
    log = root / "sessions" / dir_name("big") / "log"

    def log_du() -> int:
        return sum(os.stat(p).st_blocks * 512 for p in sorted(log.iterdir()))

    before = log_du()
    dry = json.loads(run_cli(root, "compact", "big", "--dry-run", "--json").stdout)
    real = json.loads(run_cli(root, "compact", "big", "--json").stdout)
    after = log_du()
    assert real["compacted"] and real["bytes_zeroed"] > 100 << 10
    assert (real["bytes_before"], real["bytes_after"]) == (before, after)
    assert real["freed"] == before - after > 50 << 10 and dry["freed"] > 0
    text = run_cli(root, "compact", "big").stdout  # again: nothing left to drop
    assert "nothing dropped" in text and "compacted already" in text


def test_compact_dry_run_says_why_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _many_small_checkpoints(root, 30, 64 << 20)  # one segment: compact seals it first
    text = run_cli(root, "compact", "big", "--keep", "3", "--dry-run").stdout
    assert "would drop the headers of 27 older checkpoints" in text
    few = run_cli(root, "compact", "big", "--keep", "50", "--dry-run").stdout
    assert "has 30 checkpoint(s) and compact keeps the newest 50" in few


def test_demo_never_deletes_a_session_it_did_not_write(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    store = journal.open(root)
    cp = Checkpoint.empty("demo-session", owner_id="me")
    cp.context = [{"role": "user", "content": "my own work"}]
    store.save(cp)
    store.close()
    proc = run_cli(tmp_path, "demo", str(root), check_code=2)
    assert "did not write" in proc.stderr
    store = journal.open(root)
    try:
        kept = store.load("demo-session")
        assert kept is not None and kept.context == cp.context
    finally:
        store.close()


def test_demo_reruns_over_its_own_sessions(tmp_path: Path) -> None:
    root = tmp_path / "d"
    run_cli(tmp_path, "demo", str(root))
    run_cli(tmp_path, "demo", str(root))
    doc = json.loads(run_cli(root, "ls", "--json").stdout)
    assert len(doc["sessions"]) == 3


def test_sizes_have_one_name_each(tmp_path: Path) -> None:
    root = tmp_path / "d"
    run_cli(tmp_path, "demo", str(root))
    ls = {s["session_id"]: s for s in json.loads(run_cli(root, "ls", "--json").stdout)["sessions"]}
    show = json.loads(run_cli(root, "show", "demo-session", "--json").stdout)
    stats = json.loads(run_cli(root, "stats", "demo-session", "--json").stdout)
    every = {r["session"]: r for r in json.loads(run_cli(root, "stats", "--json").stdout)}
    row = ls["demo-session"]
    for doc in (show, stats, every["demo-session"]):
        assert doc["log_bytes"] == row["log_bytes"], doc
        assert doc["file_bytes"] == row["file_bytes"] and doc["disk_bytes"] == row["disk_bytes"]
    text = run_cli(root, "show", "demo-session").stdout
    assert "log " in text and "files " in text and "on disk (du) " in text

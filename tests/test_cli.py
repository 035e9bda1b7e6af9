"""The `journal` command line, run as a subprocess against real stores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import msgspec
import pytest
from helpers import live_writer, run_cli, save_items

# reaches inside: docs/cli.md is generated from the parser; the segment header places damage
import journal
from journal import (
    Checkpoint,
    EventPageRequest,
    ExecutionStats,
    SessionPageRequest,
    TranscriptPageRequest,
)
from journal.cli import render_docs
from journal.inspect import dir_name
from journal.segment import SEGMENT_HEADER_SIZE

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "journal.cli", "demo", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Verified every checksum and commit: clean" in proc.stdout
    return root


def _data_end(segment: bytes) -> int:
    """The file offset where a segment's records end, found by walking their frames
    (FORMAT.md: crc u32, length u32, type u8, flags u8, payload) up to a zero record
    header or the end of the file. Not `rstrip(b"\\0")`: a record may end in zero
    bytes itself (the last field of a COMMIT is the writer's wall clock in ms, whose
    low byte is 0 once in 256 saves)."""
    off = SEGMENT_HEADER_SIZE
    last_flags = None
    while off + 10 <= len(segment) and segment[off : off + 10] != bytes(10):
        length = int.from_bytes(segment[off + 4 : off + 8], "little")
        stop = off + 10 + length
        assert stop <= len(segment), (off, length, len(segment))
        crc = int.from_bytes(segment[off : off + 4], "little")
        assert zlib.crc32(segment[off + 4 : stop]) == crc, f"record at {off} fails its CRC"
        last_flags = segment[off + 9]
        off = stop
    assert last_flags is not None and last_flags & 2, "the last record closes a commit"
    return off


def test_docs_cli_md_is_current() -> None:
    assert (REPO / "docs" / "cli.md").read_text() == render_docs(), (
        "docs/cli.md is stale: run python -m journal.cli --write-docs docs/cli.md"
    )


def test_demo_narrative_and_json_listing(demo_root: Path) -> None:
    out = json.loads(run_cli(demo_root, "ls", "--json").stdout)["sessions"]
    ids = [s["session_id"] for s in out]
    assert set(ids) == {"demo-session", "demo-crashed-writer", "demo-session-fork"}
    assert [s["updated_at"] for s in out] == sorted((s["updated_at"] for s in out), reverse=True)
    fork = next(s for s in out if s["session_id"] == "demo-session-fork")
    assert fork["parent_session_id"] == "demo-session" and fork["parent_sequence"] == 4
    assert all(s["events"] >= 0 and s["log_bytes"] > 0 for s in out)
    assert all(s["file_bytes"] >= s["log_bytes"] and not s["damaged"] for s in out)


def test_human_ls_has_header_and_rows(demo_root: Path) -> None:
    lines = run_cli(demo_root, "ls").stdout.splitlines()
    assert lines[0].startswith("UPDATED") and "FIRST USER MESSAGE" in lines[0]
    assert len(lines) == 4


def test_events_newest_first_and_filters(demo_root: Path) -> None:
    events = json.loads(
        run_cli(demo_root, "events", "demo-session", "--json", "--limit", "5").stdout
    )
    seqs = [e["sequence"] for e in events]
    assert seqs == sorted(seqs, reverse=True) and len(seqs) == 5
    older = json.loads(
        run_cli(demo_root, "events", "demo-session", "--json", "--before", str(seqs[-1])).stdout
    )
    assert all(e["sequence"] < seqs[-1] for e in older)
    typed = json.loads(
        run_cli(demo_root, "events", "demo-session", "--json", "--type", "turn_complete").stdout
    )
    assert typed and all(e["event"]["msg"]["type"] == "turn_complete" for e in typed)
    after = json.loads(
        run_cli(
            demo_root, "events", "demo-session", "--json", "--after", "2", "--limit", "3"
        ).stdout
    )
    assert [e["sequence"] for e in after] == sorted(e["sequence"] for e in after)
    assert after[0]["sequence"] > 2


def test_missing_session_is_exit_1_one_sentence(demo_root: Path) -> None:
    proc = run_cli(demo_root, "events", "no-such-session", check_code=1)
    assert proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr


def test_usage_errors_exit_2(demo_root: Path) -> None:
    run_cli(demo_root, "ls", "--limit", "0", check_code=2)
    run_cli(demo_root, "no-such-command", check_code=2)


def test_checkpoint_at_and_tree_and_state(demo_root: Path) -> None:
    cp2 = json.loads(run_cli(demo_root, "checkpoint", "demo-session", "--at", "2").stdout)
    store = journal.open(demo_root)
    try:
        expected = store.checkpoint_at("demo-session", 2)
    finally:
        store.close()
    assert cp2 == msgspec.to_builtins(expected)
    run_cli(demo_root, "checkpoint", "demo-session", "--at", "999", check_code=1)
    tree = json.loads(run_cli(demo_root, "tree", "--json").stdout)
    root_node = next(n for n in tree if n["session_id"] == "demo-session")
    assert [c["session_id"] for c in root_node["children"]] == ["demo-session-fork"]
    state = json.loads(run_cli(demo_root, "state", "demo-session", "tasks.v1", "--json").stdout)
    assert state["done"] == 3


def test_replay_lists_every_committed_record_in_log_order(demo_root: Path) -> None:
    records = json.loads(run_cli(demo_root, "replay", "demo-session", "--json").stdout)
    positions = [r["position"] for r in records if "position" in r]
    assert positions == sorted(positions)
    kinds = {r["type"] for r in records}
    assert {"checkpoint", "transcript", "execution", "event", "commit", "state"} <= kinds


def test_diff_of_fork_and_parent(demo_root: Path) -> None:
    proc = run_cli(demo_root, "diff", "demo-session", "demo-session-fork", "--json", check_code=1)
    d = json.loads(proc.stdout)
    assert d["common_context_items"] == 5 and d["only_b"] == [] and len(d["only_a"]) > 0
    same = run_cli(demo_root, "diff", "demo-session", "--seq", "3", "3", "--json", check_code=0)
    assert json.loads(same.stdout)["fields"] == {}


def test_verify_clean_store_exit_0(demo_root: Path) -> None:
    proc = run_cli(demo_root, "verify")
    assert proc.stdout.startswith("ok: 3 sessions")


def test_verify_reports_flipped_byte_with_file_and_offset(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root, segment_bytes=4096)
    for seq in range(30):
        save_items(store, "victim", seq, seq + 1)
    store.close()
    seg_dir = root / "sessions" / dir_name("victim") / "log"
    sealed = sorted(seg_dir.iterdir())[0]
    data = bytearray(sealed.read_bytes())
    data[200] ^= 0xFF
    sealed.write_bytes(bytes(data))
    proc = run_cli(root, "verify", "--json", check_code=1)
    findings = json.loads(proc.stdout)["findings"]
    assert any(f["path"] == str(sealed) and f["severity"] == "data" for f in findings), findings
    assert all(f["offset"] is not None for f in findings if f["severity"] == "data")


def test_repair_cuts_exactly_the_uncommitted_tail(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    for seq in range(5):
        save_items(store, "torn", seq, seq + 1, events=2)
    store.close()
    seg = next((root / "sessions" / dir_name("torn") / "log").iterdir())
    data = seg.read_bytes()
    end = _data_end(data)
    # half of a record that never got its commit: the bytes a crash leaves
    garbage = bytes([0x11] * 4) + (60).to_bytes(4, "little") + bytes([4, 0]) + b"x" * 20
    seg.write_bytes(data[:end] + garbage + b"\x00" * 4096)
    proc = run_cli(root, "verify")  # a crash's leftover is reported, and is not damage
    assert "unfinished final commit" in proc.stdout
    proc = run_cli(root, "repair", "torn", "--json")
    report = json.loads(proc.stdout)
    (path, start, stop, _why) = report["dropped"][0]
    assert path == str(seg) and start == end and stop == end + len(garbage)
    saved = Path(report["saved_to"][0]).read_bytes()
    assert saved == garbage
    assert report["last_checkpoint"] == 4 and report["last_event"] == 10
    run_cli(root, "verify")
    store = journal.open(root)
    assert store.load("torn").sequence == 4  # type: ignore[union-attr]
    save_items(store, "torn", 5, 6)
    store.close()


def test_repair_refuses_damage_before_committed_data(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    for seq in range(5):
        save_items(store, "mid", seq, seq + 1)
    store.close()
    seg = next((root / "sessions" / dir_name("mid") / "log").iterdir())
    data = bytearray(seg.read_bytes())
    data[100] ^= 0x01
    seg.write_bytes(bytes(data))
    proc = run_cli(root, "repair", "mid", check_code=1)
    assert "refused" in proc.stdout and "--accept-loss" in proc.stdout
    assert seg.read_bytes() == bytes(data)  # nothing changed


def test_export_import_roundtrip_equal_pages(tmp_path: Path) -> None:
    root = tmp_path / "a"
    store = journal.open(root)
    for seq in range(12):
        save_items(store, "parent", seq, seq + 2, events=3)
    store.fork_at("parent", 5, "child")
    save_items(store, "child", 1, 8)
    store.save_state("child", "k", {"v": 1})
    store.close()
    bundle = tmp_path / "b.jbundle"
    run_cli(root, "export", "child", "--with-ancestors", "-o", str(bundle))
    other = tmp_path / "elsewhere" / "b"
    run_cli(other, "import", str(bundle))
    a, b = journal.open(root), journal.open(other)
    try:
        for sid in ("parent", "child"):
            assert a.load(sid) == b.load(sid)
            assert a.event_page(sid, EventPageRequest(limit=1000)) == b.event_page(
                sid, EventPageRequest(limit=1000)
            )
            assert a.transcript_page(
                sid, TranscriptPageRequest(max_batches=100)
            ) == b.transcript_page(sid, TranscriptPageRequest(max_batches=100))
            for seq in range(12):
                assert a.checkpoint_at(sid, seq) == b.checkpoint_at(sid, seq)
        assert b.load_state("child", "k") == {"v": 1}
        assert b.session_summary("child").parent_session_id == "parent"  # type: ignore[union-attr]
    finally:
        a.close()
        b.close()
    proc = run_cli(other, "import", str(bundle), check_code=2)
    assert "already exist" in proc.stderr
    proc = run_cli(other, "import", str(bundle), "--rename", "--json")
    renamed = json.loads(proc.stdout)["installed"]
    assert all(new != old for old, new in renamed)
    c = journal.open(other)
    try:
        new_child = next(new for old, new in renamed if old == "child")
        new_parent = next(new for old, new in renamed if old == "parent")
        assert c.session_summary(new_child).parent_session_id == new_parent  # type: ignore[union-attr]
    finally:
        c.close()


def test_import_rejects_a_damaged_bundle(tmp_path: Path) -> None:
    root = tmp_path / "a"
    store = journal.open(root)
    save_items(store, "x", 0, 3)
    store.close()
    bundle = tmp_path / "x.jbundle"
    run_cli(root, "export", "x", "-o", str(bundle))
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bundle.write_bytes(bytes(data))
    other = tmp_path / "o"
    run_cli(other, "import", str(bundle), check_code=1)
    assert not (other / "sessions" / dir_name("x")).exists()


def test_follow_tails_a_live_writer_and_export_is_consistent(tmp_path: Path) -> None:
    root = tmp_path / "live"
    with live_writer(root, owner="me", pause=0.002):
        follow = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "journal.cli",
                "--root",
                str(root),
                "events",
                "live",
                "--follow",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.5)
        bundle = tmp_path / "live.jbundle"
        run_cli(root, "export", "live", "-o", str(bundle))
        run_cli(root, "verify", "live")
        follow.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=30)
        assert follow.returncode == 130 and "Traceback" not in err
        seqs = [json.loads(line)["sequence"] for line in out.splitlines()]
        assert len(seqs) > 10
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # gapless, in order
    other = tmp_path / "copy"
    run_cli(other, "import", str(bundle))
    store = journal.open(other)
    try:
        page = store.event_page("live", EventPageRequest(limit=100000))
        got = sorted(e.sequence for e in page.events)
        assert got == list(range(1, page.latest_sequence + 1))
    finally:
        store.close()


def test_stats_reports_types(demo_root: Path) -> None:
    st = json.loads(run_cli(demo_root, "stats", "demo-session", "--json").stdout)
    assert st["commits"] > 0 and {"checkpoint", "event", "commit"} <= set(st["by_type"])
    assert os.path.exists(demo_root)


def test_compact_dry_run_then_real(tmp_path: Path) -> None:
    import random

    root = tmp_path / "s"
    store = journal.open(root, segment_bytes=64 << 10)
    for seq in range(30):
        cp = Checkpoint.empty("big", owner_id="me")
        cp.sequence = seq
        cp.context = [{"i": i} for i in range(seq + 1)]
        cp.metadata = {"blob": random.Random(seq).randbytes(12000).hex()}
        store.save(cp, [{"t": seq}])
    before = (
        store.event_page("big", EventPageRequest(limit=100)),
        store.transcript_page("big", TranscriptPageRequest(max_batches=100)),
    )
    store.close()
    seg_dir = root / "sessions" / dir_name("big") / "log"
    files = {p.name: p.read_bytes() for p in seg_dir.iterdir()}
    dry = json.loads(run_cli(root, "compact", "big", "--keep", "3", "--dry-run", "--json").stdout)
    assert dry["dry_run"] and len(dry["compacted"]) > 0 and dry["segments_rewritten"] == 0
    assert {p.name: p.read_bytes() for p in seg_dir.iterdir()} == files
    real = json.loads(run_cli(root, "compact", "big", "--keep", "3", "--json").stdout)
    assert real["compacted"] == dry["compacted"] and real["bytes_after"] < real["bytes_before"]
    assert real["retained"] == [27, 28, 29]
    run_cli(root, "verify")
    run_cli(root, "checkpoint", "big", "--at", str(real["compacted"][0]), check_code=1)
    store = journal.open(root)
    try:
        after = (
            store.event_page("big", EventPageRequest(limit=100)),
            store.transcript_page("big", TranscriptPageRequest(max_batches=100)),
        )
        assert after == before
        assert store.load("big").sequence == 29  # type: ignore[union-attr]
    finally:
        store.close()


def test_repair_cut_also_corrects_the_catalog(tmp_path: Path) -> None:
    """What `repair --accept-loss` cuts is gone from listings and recent_executions too."""
    from helpers import execution, fold

    root = tmp_path / "s"
    store = journal.open(root)
    cp = Checkpoint.empty("cut")
    stats = ExecutionStats()
    for seq in range(6):
        rec = execution("cut", seq)
        stats = fold(stats, rec)
        cp.sequence = seq
        cp.execution_stats = stats
        cp.metadata = {"pad": "p" * 3000}
        store.save(cp, [], rec)
    store.close()
    seg = next((root / "sessions" / dir_name("cut") / "log").iterdir())
    data = bytearray(seg.read_bytes())
    damage = len(data) * 2 // 3  # inside a later commit
    data[damage] ^= 0xFF
    seg.write_bytes(bytes(data))
    run_cli(root, "repair", "cut", check_code=1)  # refused without the flag
    report = json.loads(run_cli(root, "repair", "cut", "--accept-loss", "--json").stdout)
    last = report["loss"]["checkpoint_kept"]
    assert 0 <= last < 5
    store = journal.open(root, read_only=True)
    try:
        (summary,) = store.list_sessions_page(SessionPageRequest(limit=10)).sessions
        assert summary.sequence == last
        turns = sorted(r.turn_id for r in store.recent_executions(10))
        assert turns == sorted(f"turn-{n}" for n in range(last + 1))
    finally:
        store.close()
    run_cli(root, "verify")


def test_repair_refuses_a_cut_that_would_leave_no_commit(tmp_path: Path) -> None:
    """Cutting at damage in the first commit would make the session read as absent
    (and a writable open would trash it with the bytes saved aside): refuse."""
    root = tmp_path / "s"
    store = journal.open(root)
    for seq in range(3):
        save_items(store, "first", seq, seq + 1)
    store.close()
    session_dir = root / "sessions" / dir_name("first")
    for cache in session_dir.iterdir():
        if cache.name not in ("SESSION", "LOCK", "log"):
            cache.unlink()
    seg = next((session_dir / "log").iterdir())
    data = bytearray(seg.read_bytes())
    data[40] ^= 0xFF  # inside the first record
    seg.write_bytes(bytes(data))
    proc = run_cli(root, "repair", "first", "--accept-loss", check_code=1)
    assert "refused" in proc.stdout and "nothing before the damage" in proc.stdout
    assert seg.read_bytes() == bytes(data)  # nothing changed
    assert sorted(p.name for p in session_dir.iterdir()) == ["LOCK", "SESSION", "log"]


def test_export_refuses_a_session_without_a_complete_commit(tmp_path: Path) -> None:
    """What a power loss leaves of a creation that never finished is no session."""
    root = tmp_path / "s"
    store = journal.open(root)
    save_items(store, "cut", 0, 1)
    store.close()
    seg = next((root / "sessions" / dir_name("cut") / "log").iterdir())
    with open(seg, "r+b") as f:
        f.truncate(SEGMENT_HEADER_SIZE + 10)  # the segment header and a torn first record
    proc = run_cli(root, "export", "cut", "-o", str(tmp_path / "b.jbundle"), check_code=None)
    assert proc.returncode != 0 and "does not exist" in proc.stderr
    assert not (tmp_path / "b.jbundle").exists()


def test_export_reports_damage_in_a_first_commit_as_damage(tmp_path: Path) -> None:
    """No complete commit because of damage (data after it) is not "does not exist"."""
    root = tmp_path / "s"
    store = journal.open(root)
    for seq in range(3):
        save_items(store, "hurt", seq, seq + 1)
    store.close()
    session_dir = root / "sessions" / dir_name("hurt")
    seg = next((session_dir / "log").iterdir())
    data = bytearray(seg.read_bytes())
    data[SEGMENT_HEADER_SIZE + 8] ^= 0xFF  # the first record's type byte
    seg.write_bytes(bytes(data))
    proc = run_cli(root, "export", "hurt", "-o", str(tmp_path / "b.jbundle"), check_code=None)
    assert proc.returncode != 0
    assert "does not exist" not in proc.stderr and "fails its checksum" in proc.stderr

"""Damage is never silent on the command line: one bad session never hides the
others, and a command that reads damaged bytes says where and exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli, save_items

import journal
from journal import EventPageRequest
from journal.inspect import dir_name


def _store(root: Path) -> None:
    store = journal.open(root)
    for sid in ("good-a", "hurt", "good-b"):
        for seq in range(6):
            save_items(store, sid, seq, seq + 1, events=3)
    store.fork_at("good-a", 2, "good-a-fork")
    store.close()


def _flip_mid_log(root: Path, sid: str) -> tuple[Path, int]:
    seg = next((root / "sessions" / dir_name(sid) / "log").iterdir())
    data = bytearray(seg.read_bytes())
    where = len(data.rstrip(b"\0")) // 2
    data[where] ^= 0xFF
    seg.write_bytes(bytes(data))
    return seg, where


@pytest.fixture
def missing_segment(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    _store(root)
    for seg in (root / "sessions" / dir_name("hurt") / "log").iterdir():
        seg.unlink()
    return root


@pytest.mark.parametrize(
    "args",
    [("ls",), ("stats",), ("tree",), ("executions", "--all"), ("verify", "--json")],
    ids=lambda a: "-".join(a),
)
def test_one_bad_session_never_hides_the_others(missing_segment: Path, args: tuple[str]) -> None:
    proc = run_cli(missing_segment, *args, check_code=1)
    for sid in ("good-a", "good-b", "good-a-fork"):
        if args[0] != "executions":
            assert sid in proc.stdout, (args, proc.stdout, proc.stderr)
    if args[0] == "verify":
        doc = json.loads(proc.stdout)
        assert doc["damaged_sessions"] == ["hurt"] and len(doc["checked"]) == 4
    else:
        assert "'hurt'" in proc.stderr and "damaged" in proc.stderr, proc.stderr


def test_ls_json_marks_the_damaged_session(missing_segment: Path) -> None:
    proc = run_cli(missing_segment, "ls", "--json", check_code=1)
    rows = {s["session_id"]: s for s in json.loads(proc.stdout)["sessions"]}
    assert rows["hurt"]["damaged"] is True and rows["good-a"]["damaged"] is False
    note = json.loads(proc.stderr.splitlines()[0])
    assert note["damaged"] == "hurt" and note["path"]


def test_export_all_names_the_damaged_session_and_writes_nothing(
    missing_segment: Path, tmp_path: Path
) -> None:
    out = tmp_path / "all.jb"
    proc = run_cli(missing_segment, "export", "--all", "-o", str(out), check_code=1)
    assert "'hurt'" in proc.stderr and not out.exists()
    assert not list(tmp_path.glob(".all.jb*"))


def test_export_of_a_flipped_byte_fails_naming_file_and_offset(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    seg, _ = _flip_mid_log(root, "hurt")
    out = tmp_path / "x.jb"
    proc = run_cli(root, "export", "hurt", "-o", str(out), check_code=1)
    assert str(seg.name) in proc.stderr and "offset" in proc.stderr
    assert "exported" not in proc.stdout
    assert not out.exists() and not list(tmp_path.glob(".x.jb*"))
    err = json.loads(
        run_cli(root, "export", "hurt", "-o", str(out), "--json", check_code=1).stderr.splitlines()[
            -1
        ]
    )
    assert err["type"] == "DamagedSessionsError" and err["path"].endswith(seg.name)
    assert isinstance(err["offset"], int)


@pytest.mark.parametrize("command", ["replay", "stats", "show", "events"])
def test_reading_a_damaged_session_says_where_and_exits_1(tmp_path: Path, command: str) -> None:
    root = tmp_path / "s"
    _store(root)
    seg, _ = _flip_mid_log(root, "hurt")
    proc = run_cli(root, command, "hurt", check_code=1)
    assert "damaged" in proc.stderr and seg.name in proc.stderr and "offset" in proc.stderr


def test_the_readable_prefix_is_still_printed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    _flip_mid_log(root, "hurt")
    proc = run_cli(root, "replay", "hurt", "--json", check_code=1)
    records = json.loads(proc.stdout)
    assert records and records[0]["type"] == "checkpoint"


def test_healthy_sessions_still_export_and_import(missing_segment: Path, tmp_path: Path) -> None:
    out = tmp_path / "good.jb"
    run_cli(missing_segment, "export", "good-a", "good-b", "-o", str(out))
    other = tmp_path / "other"
    run_cli(other, "import", str(out))
    store = journal.open(other)
    try:
        assert store.event_page("good-b", EventPageRequest(limit=100)).latest_sequence == 18
    finally:
        store.close()

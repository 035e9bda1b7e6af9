"""`journal gc` and `journal retention`: a dry run unless --yes off a terminal,
what --json reports, usage errors that change nothing, and the recorded policy."""

from __future__ import annotations

import json
from pathlib import Path

import helpers
from helpers import run_cli

import journal


def _store(root: Path, n: int = 5) -> None:
    with journal.open(root, durability="os") as store:
        for i in range(n):
            store.save(helpers.checkpoint(f"s{i}", 0, owner="alice" if i % 2 else "bob"))
        store.fork_at("s0", 0, "s0-fork")


def _ids(root: Path) -> set[str]:
    with journal.open(root, read_only=True) as store:
        return helpers.listed_ids(store)


def test_gc_off_a_terminal_is_a_dry_run_that_says_so(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    before = _ids(root)
    proc = run_cli(root, "gc", "--keep-last", "2")
    assert "would delete" in proc.stdout and "give --yes to delete" in proc.stderr
    assert _ids(root) == before
    doc = json.loads(run_cli(root, "--json", "gc", "--keep-last", "2").stdout)
    assert doc["dry_run"] is True and len(doc["deleted"]) == len(before) - 2
    assert _ids(root) == before


def test_gc_yes_deletes_and_reports_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    doc = json.loads(run_cli(root, "--json", "gc", "--keep-last", "2", "--yes").stdout)
    assert doc["dry_run"] is False and doc["bytes_freed"] > 0
    assert doc["trees"] >= 1 and set(doc) >= {"scanned", "kept_for_descendants", "changed"}
    left = _ids(root)
    assert not left & set(doc["deleted"]) and len(left) == 2
    text = run_cli(root, "gc", "--older-than", "30d", "--yes").stdout
    assert text.startswith("deleted 0 sessions")  # all of them are younger than 30 days


def test_gc_owner_filter(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    doc = json.loads(
        run_cli(root, "--json", "gc", "--keep-last", "0", "--owner", "alice", "-y").stdout
    )
    assert doc["deleted"] and all(int(s[1:]) % 2 for s in doc["deleted"])
    assert "s0" in _ids(root) and "s1" not in _ids(root)


def test_gc_usage_errors_change_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    before = _ids(root)
    for args in (
        ["gc"],
        ["gc", "--keep-last", "1", "--dry-run", "--yes"],
        ["gc", "--older-than", "3x", "--yes"],
        ["gc", "--older-than", "-1d", "--yes"],
        ["gc", "--keep-last", "-1", "--yes"],
        ["retention", "--off", "--keep-last", "3"],
        ["retention", "--owner", "alice"],
    ):
        proc = run_cli(root, *args, check_code=2)
        assert proc.stderr.startswith(("journal", "usage")), (args, proc.stderr)
    assert _ids(root) == before
    run_cli(tmp_path / "nowhere", "gc", "--keep-last", "1", check_code=1)


def test_retention_records_shows_and_removes_a_policy(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root, 2)
    assert "no retention policy" in run_cli(root, "retention").stdout
    assert json.loads(run_cli(root, "--json", "retention").stdout) is None
    text = run_cli(root, "retention", "--older-than", "30d", "--keep-last", "100").stdout
    assert "older than 30d" in text and "beyond the newest 100" in text and "every 1h" in text
    doc = json.loads(run_cli(root, "--json", "retention").stdout)
    assert doc == {
        "older_than": 30 * 86400.0,
        "keep_last": 100,
        "owner_id": None,
        "interval": 3600.0,
    }
    with journal.open(root, read_only=True) as store:
        assert store.retention == journal.RetentionPolicy(older_than=30 * 86400.0, keep_last=100)
    run_cli(root, "retention", "--off")
    assert "no retention policy" in run_cli(root, "retention").stdout

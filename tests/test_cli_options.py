"""Options are never dropped silently: each one given is honoured or refused (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli, save_items

import journal
from journal import Checkpoint, Event


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("options") / "store"
    store = journal.open(root)
    cp = Checkpoint.empty("r", owner_id="me")
    for seq in range(6):
        cp.sequence = seq
        store.save(cp, [{"t": seq}])
        # committed alone, after checkpoint `seq`
        store.append_event("r", 1000 + seq, Event(msg={"type": "warning", "message": f"a{seq}"}))
    for n in range(7):
        save_items(store, f"s{n}", 0, 1)
    store.close()
    return root


def test_events_after_and_before_are_both_honoured(root: Path) -> None:
    doc = json.loads(run_cli(root, "events", "r", "--after", "2", "--before", "5", "--json").stdout)
    assert [e["sequence"] for e in doc] == [3, 4]
    run_cli(root, "events", "r", "--after", "4", "--before", "5", check_code=2)


def test_replay_range_filters_events_committed_alone(root: Path) -> None:
    doc = json.loads(run_cli(root, "replay", "r", "--from", "2", "--to", "3", "--json").stdout)
    events = [d for d in doc if d["type"] == "event"]
    assert sorted(e["event"]["msg"]["message"] for e in events) == ["a2", "a3"]
    checkpoints = [d["sequence"] for d in doc if d["type"] == "checkpoint"]
    assert checkpoints == [2, 3]
    assert all(2 <= d["at_checkpoint"] <= 3 for d in doc)
    assert not [d for d in doc if d["type"] == "state"]


def test_replay_from_after_to_is_a_usage_error(root: Path) -> None:
    proc = run_cli(root, "replay", "r", "--from", "5", "--to", "2", check_code=2)
    assert "--from 5 is after --to 2" in proc.stderr


def test_ls_pages_and_says_how_to_get_more(root: Path) -> None:
    first = run_cli(root, "ls", "--limit", "3")
    assert len(first.stdout.splitlines()) == 4  # header and 3 rows
    assert "more exist" in first.stderr and "--before" in first.stderr
    doc = json.loads(run_cli(root, "ls", "--limit", "3", "--json").stdout)
    seen = [s["session_id"] for s in doc["sessions"]]
    cursor = doc["next_before"]
    while cursor is not None:
        doc = json.loads(run_cli(root, "ls", "--limit", "3", "--before", cursor, "--json").stdout)
        seen += [s["session_id"] for s in doc["sessions"]]
        cursor = doc["next_before"]
    assert sorted(seen) == sorted(["r", *(f"s{n}" for n in range(7))])
    every = json.loads(run_cli(root, "ls", "--limit", "3", "--all", "--json").stdout)
    assert [s["session_id"] for s in every["sessions"]] == seen and every["next_before"] is None
    last = run_cli(root, "ls", "--limit", "100")
    assert "more exist" not in last.stderr


def test_ls_before_a_bad_cursor_is_a_usage_error(root: Path) -> None:
    proc = run_cli(root, "ls", "--before", "yesterday", check_code=2)
    assert "cursor" in proc.stderr


def test_executions_all_with_a_session_is_a_usage_error(root: Path) -> None:
    run_cli(root, "executions", "r", "--all", check_code=2)

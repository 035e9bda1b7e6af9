"""The way out of damage, as a user runs it: verify, salvage, export --salvage,
repair --accept-loss (docs/damaged.md), each as a subprocess."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from helpers import checkpoint, run_cli, warning

import journal
from journal.inspect import dir_name

SID = "hurt"


def damaged_store(root: Path) -> int:
    """A session of several segments with one flipped byte in the middle; its last
    event sequence."""
    store = journal.open(root, segment_bytes=4096)
    ctx: list[Any] = []
    last = 0
    try:
        for seq in range(30):
            ctx = [*ctx, {"n": seq, "text": "x" * 60}]
            store.save_with_events(checkpoint(SID, seq, ctx), ctx[-1:], None, [warning(f"s{seq}")])
            last = store.append_event(SID, seq, warning(f"a{seq}").event).sequence
    finally:
        store.close()
    segs = sorted((root / "sessions" / dir_name(SID) / "log").glob("*.seg"))
    victim = segs[len(segs) // 2]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x5A
    victim.write_bytes(bytes(data))
    return last


def test_export_salvage_bundles_what_is_left_and_import_says_what_is_missing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    damaged_store(root)
    bundle = tmp_path / "b.jb"
    refused = run_cli(root, "export", SID, "-o", str(bundle), check_code=None)
    assert refused.returncode == 1 and not bundle.exists()
    done = run_cli(root, "export", SID, "-o", str(bundle), "--salvage", check_code=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "was damaged" in done.stdout and "missing:" in done.stdout
    other = tmp_path / "other"
    journal.open(other).close()
    imported = run_cli(other, "import", str(bundle), "--json", check_code=None)
    assert imported.returncode == 0, imported.stderr
    report = json.loads(imported.stdout)
    ((sid, note),) = report["salvaged"]
    assert sid == SID and note["skipped"] and note["events_copied"] > 0
    assert run_cli(other, "verify", check_code=None).returncode == 0  # the salvaged copy is healthy
    text = run_cli(other, "import", str(bundle), "--rename", check_code=None)
    assert "missing:" in text.stdout


def test_salvage_then_accept_loss_from_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    last = damaged_store(root)
    proc = run_cli(root, "verify", check_code=None)
    assert proc.returncode == 1 and "to address it: `journal salvage" in proc.stdout
    proc = run_cli(root, "salvage", SID, "--to", "rescued", check_code=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipped" in proc.stdout and "copied" in proc.stdout
    proc = run_cli(root, "repair", SID, "--accept-loss", "--json", check_code=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    loss = json.loads(proc.stdout)["loss"]
    assert loss["events_through"] == last
    for path in json.loads(proc.stdout)["kept"]:
        assert os.path.exists(root / "sessions" / dir_name(SID) / path)
    proc = run_cli(root, "verify", check_code=None)
    assert proc.returncode == 0, proc.stdout
    assert "loss accepted" in proc.stdout
    assert "LOSS" in run_cli(root, "show", SID, check_code=None).stdout
    assert "LOSS" in run_cli(root, "stats", SID, check_code=None).stdout
    store = journal.open(root)
    try:
        assert store.append_event(SID, 1, warning("on").event).sequence == last + 1
    finally:
        store.close()

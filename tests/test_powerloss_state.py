"""Named power-loss cases for state values, on the FUSE recorder (tests/powerloss/fs.py).

Each drives the public API on the mount, takes the crash image that keeps only
what was synced ("durable": every unsynced write dropped), and opens it in a
fresh process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "powerloss"))

from fuse_ready import require_fuse, seed
from harness import probe, verify
from mount import mounted

import journal
from journal.inspect import dir_name

pytestmark = pytest.mark.slow


def test_os_mode_overwrite_of_a_durable_value_stays_readable(tmp_path: Path) -> None:
    """Save a state value durably, overwrite it in os mode, lose power: the value is
    old or new, never unreadable. A later durable save in the same scope syncs the
    scope's directory, and with it the os-mode rename: what it renamed must be
    synced content, not an unsynced temporary file."""
    require_fuse()
    seed("state-os-overwrite")
    with mounted(tmp_path / "fs") as m:
        root = m.path / "store"
        with journal.open(root) as store:
            store.save_state("scope", "key", {"v": "durable"})
        with journal.open(root, durability="os") as store:
            store.save_state("scope", "key", {"v": "os", "pad": "x" * 700})
        with journal.open(root) as store:
            store.save_state("scope", "other", {"v": "later"})
        m.control(cmd="image", dest=str(tmp_path / "img"), tear="durable")
    image = tmp_path / "img" / "store"
    found, err = probe(image, [], ["scope:key", "scope:other"])
    assert not err, err
    assert found["scope:key"] in ({"v": "durable"}, {"v": "os", "pad": "x" * 700})
    assert found["scope:other"] == {"v": "later"}
    assert verify(image) == ""


def test_value_in_a_scope_directory_left_unsynced_survives(tmp_path: Path) -> None:
    """A writer killed between creating a scope directory and syncing `state/` leaves
    the directory's entry unsynced; a later writer that finds the directory and
    acknowledges a value in it must make the entry durable first."""
    require_fuse()
    seed("state-unsynced-scope")
    with mounted(tmp_path / "fs") as m:
        root = m.path / "store"
        with journal.open(root) as store:
            store.save_state("other", "key", 1)  # state/ itself exists and is durable
        os.mkdir(root / "state" / dir_name("scope"))  # the killed writer's mkdir, no sync
        with journal.open(root) as store:
            store.save_state("scope", "key", {"v": 2})
        m.control(cmd="image", dest=str(tmp_path / "img"), tear="durable")
    image = tmp_path / "img" / "store"
    found, err = probe(image, [], ["scope:key", "other:key"])
    assert not err, err
    assert found == {"scope:key": {"v": 2}, "other:key": 1}
    assert verify(image) == ""


def test_value_in_a_new_scope_survives(tmp_path: Path) -> None:
    """Each acknowledged value in a scope created by the call itself is durable."""
    require_fuse()
    seed("state-new-scope")
    with mounted(tmp_path / "fs") as m:
        root = m.path / "store"
        with journal.open(root) as store:
            for n in range(4):
                store.save_state(f"scope{n}", "key", n)
        m.control(cmd="image", dest=str(tmp_path / "img"), tear="durable")
    image = tmp_path / "img" / "store"
    found, err = probe(image, [], [f"scope{n}:key" for n in range(4)])
    assert not err, err
    assert found == {f"scope{n}:key": n for n in range(4)}

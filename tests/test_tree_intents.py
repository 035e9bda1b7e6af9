"""Readers' view of pending deletes stays right on filesystems with coarse timestamps."""

from __future__ import annotations

import os
from pathlib import Path

from journal.tree import DeleteIntent, Tree


def test_intent_written_within_the_same_clock_tick_is_seen(tmp_path: Path) -> None:
    tree = Tree(str(tmp_path), lock_timeout=1.0)
    try:
        assert tree.pending_session_dirs() == set()
        tick = os.stat(tree.txn).st_mtime_ns
        path, owner = tree.write_intent(DeleteIntent(["a"], ["a-dir"], []))
        # a coarse clock: the directory's mtime did not move with the new intent
        os.utime(tree.txn, ns=(tick, tick))
        assert tree.pending_session_dirs() == {"a-dir"}
        owner.close()
        os.unlink(path)
        os.utime(tree.txn, ns=(tick, tick))
        assert tree.pending_session_dirs() == set()
    finally:
        tree.close()


def test_listing_of_an_old_directory_is_cached(tmp_path: Path, monkeypatch) -> None:
    tree = Tree(str(tmp_path), lock_timeout=1.0)
    try:
        old = os.stat(tree.txn).st_mtime_ns - 10_000_000_000
        os.utime(tree.txn, ns=(old, old))
        assert tree.pending_session_dirs() == set()
        calls: list[int] = []
        original = Tree.intents

        def counting(self):  # type: ignore[no-untyped-def]
            calls.append(1)
            return original(self)

        monkeypatch.setattr(Tree, "intents", counting)
        for _ in range(5):
            assert tree.pending_session_dirs() == set()
        assert calls == [], "an unchanged, settled txn/ was listed again"
    finally:
        tree.close()

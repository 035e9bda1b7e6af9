"""Readers' view of pending deletes stays right on filesystems with coarse timestamps."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

# reaches inside: these are tests of the tree's intent cache itself
from journal.tree import DeleteIntent, Tree


def test_intent_written_within_the_same_clock_tick_is_seen(tmp_path: Path) -> None:
    tree = Tree(str(tmp_path), lock_timeout=1.0)
    try:
        tick = time.time_ns() - 5_000_000  # a fine-grained stamp, 5 ms ago
        tick += 1 if tick % 1_000_000_000 == 0 else 0
        os.utime(tree.txn, ns=(tick, tick))
        assert tree.pending_session_dirs() == set()
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
        calls = _count_listings(monkeypatch)
        for _ in range(5):
            assert tree.pending_session_dirs() == set()
        assert calls == [], "an unchanged, settled txn/ was listed again"
    finally:
        tree.close()


def _count_listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = Tree.intents

    def counting(self):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(self)

    monkeypatch.setattr(Tree, "intents", counting)
    return calls


def test_fine_grained_stamps_are_trusted_after_a_few_ticks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = Tree(str(tmp_path), lock_timeout=1.0)
    try:
        stamp = time.time_ns() - 300_000_000  # 0.3 s ago, not a whole second
        stamp += 1 if stamp % 1_000_000_000 == 0 else 0
        os.utime(tree.txn, ns=(stamp, stamp))
        calls = _count_listings(monkeypatch)
        for _ in range(4):
            assert tree.pending_session_dirs() == set()
        assert calls == [1], "a settled fine-grained mtime was not trusted"
    finally:
        tree.close()


def test_whole_second_stamps_are_distrusted_for_two_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem with 1 s timestamps: a change 0.3 s later keeps the same mtime."""
    tree = Tree(str(tmp_path), lock_timeout=1.0)
    try:
        second = (time.time_ns() - 300_000_000) // 1_000_000_000 * 1_000_000_000
        os.utime(tree.txn, ns=(second, second))
        calls = _count_listings(monkeypatch)
        assert tree.pending_session_dirs() == set()
        path, owner = tree.write_intent(DeleteIntent(["b"], ["b-dir"], []))
        os.utime(tree.txn, ns=(second, second))
        assert tree.pending_session_dirs() == {"b-dir"}
        assert len(calls) == 2
        owner.close()
        os.unlink(path)
    finally:
        tree.close()

"""What a failed delete means: a StorageError from delete_sessions says nothing was
deleted (or, in its words, that the delete is in doubt); a failure after the
commit point (its durable intent) is not reported: the delete is done, and what
is left of its work is finished by a later call.

Faults are real errors (EIO) raised at the file-operation seam for chosen steps.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import checkpoint, listed_ids

# reaches inside: faults are injected at the file-operation seam
import journal
from journal import fsio


class _Failing(fsio.FileOps):
    """The real operations; those `fails(op, path)` picks raise EIO."""

    def __init__(self, fails: Callable[[str, str], bool]) -> None:
        self.fails = fails
        self.refused = 0

    def _maybe(self, op: str, path: str) -> None:
        if self.fails(op, path):
            self.refused += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    def rename(self, src: str, dst: str) -> None:
        self._maybe("rename", dst)
        super().rename(src, dst)

    def sync_dir(self, path: str) -> None:
        self._maybe("sync_dir", path)
        super().sync_dir(path)

    def unlink(self, path: str) -> None:
        self._maybe("unlink", path)
        super().unlink(path)


def _tree(store: journal.Store) -> None:
    store.save(checkpoint("p", 0, [{"n": 0}]))
    store.fork("p", 0, checkpoint("kid", 0, [{"n": 0}]))
    store.save_state("p", "k", 1)
    store.save(checkpoint("other", 0, []))


def _gone(store: journal.Store) -> None:
    assert store.load("p") is None and store.load("kid") is None
    assert store.load_state("p", "k") is None
    assert listed_ids(store) == {"other"}
    assert store.delete_sessions(["p"]) is False  # absent: nothing more to delete


@pytest.mark.parametrize(
    "step",
    ["move to the trash", "sync after the moves", "retiring the intent", "sync of the retire"],
)
def test_a_delete_that_fails_after_its_commit_point_reports_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    root = tmp_path / "store"
    trash = os.sep + "trash" + os.sep
    txn = os.path.join(str(root), "txn")
    fails = {
        "move to the trash": lambda op, path: op == "rename" and trash in path,
        "sync after the moves": lambda op, path: op == "sync_dir" and path.endswith("trash"),
        "retiring the intent": lambda op, path: op == "unlink" and "delete-" in path,
        "sync of the retire": lambda op, path: op == "sync_dir" and path == txn,
    }[step]
    with journal.open(root) as store:
        _tree(store)
        ops = _Failing(lambda op, path: False)
        monkeypatch.setattr(fsio, "ops", ops)
        armed = False

        def after_intent(op: str, path: str) -> bool:
            # Only after the intent is durable (its own directory sync done).
            nonlocal armed
            if op == "sync_dir" and path == txn and not armed:
                armed = True
                return False
            return armed and fails(op, path)

        ops.fails = after_intent
        assert store.delete_sessions(["p"]) is True
        assert ops.refused >= 1, "the fault never fired: this tests nothing"
        _gone(store)
        monkeypatch.setattr(fsio, "ops", fsio.FileOps())
        # The next delete (of anything) finishes what was left.
        assert store.delete_sessions(["other"]) is True
        store.tree.wait_for_trash()
        assert os.listdir(root / "txn") == [] or all(
            n.endswith(".lock") for n in os.listdir(root / "txn")
        )
        assert os.listdir(root / "sessions") == []
    with journal.open(root) as again:
        assert again.load("p") is None and listed_ids(again) == set()


def test_a_delete_whose_intent_cannot_be_made_durable_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intent's directory sync fails: the intent is taken back, StorageError says
    nothing was deleted, everything is still there, and a retry deletes it."""
    root = tmp_path / "store"
    txn = os.path.join(str(root), "txn")
    with journal.open(root) as store:
        _tree(store)
        ops = _Failing(lambda op, path: op == "sync_dir" and path == txn and ops.refused == 0)
        monkeypatch.setattr(fsio, "ops", ops)
        with pytest.raises(journal.StorageError) as raised:
            store.delete_sessions(["p"])
        assert "in doubt" not in str(raised.value)
        assert ops.refused == 1
        monkeypatch.setattr(fsio, "ops", fsio.FileOps())
        assert store.load("p") is not None and store.load("kid") is not None
        assert store.load_state("p", "k") == 1
        assert listed_ids(store) == {"p", "kid", "other"}
        assert not [n for n in os.listdir(root / "txn") if not n.endswith(".lock")]
        assert store.delete_sessions(["p"]) is True
        _gone(store)


def test_a_delete_in_doubt_says_so_and_is_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intent is in place but neither its sync nor taking it back works: the
    StorageError says the delete is in doubt, and the delete is finished later."""
    root = tmp_path / "store"
    txn = os.path.join(str(root), "txn")
    with journal.open(root) as store:
        _tree(store)

        def fails(op: str, path: str) -> bool:
            return (op == "sync_dir" and path == txn) or (op == "unlink" and "delete-" in path)

        monkeypatch.setattr(fsio, "ops", _Failing(fails))
        with pytest.raises(journal.StorageError, match="in doubt"):
            store.delete_sessions(["p"])
        monkeypatch.setattr(fsio, "ops", fsio.FileOps())
        _gone(store)

"""What a reader's listing shows while another store writes, with the interleavings
forced: a session leaves listings as soon as its delete's intent is written, before
any catalog record says so, and a reader that looks at the catalog while a
writer's record is only partly written neither lists it nor passes over it, so
the next listing has it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import checkpoint, listed_ids

# reaches inside: splits the catalog's writes at the file-operation seam
import journal
from journal import fsio


def test_listing_hides_a_session_once_its_delete_intent_is_written(tmp_path: Path) -> None:
    root = tmp_path / "store"
    writer = journal.open(root)
    reader = journal.open(root)
    try:
        writer.save(checkpoint("a", 0, []))
        writer.save(checkpoint("b", 0, []))
        assert listed_ids(reader) == {"a", "b"}
        intent_written = threading.Event()
        go_on = threading.Event()
        real_carry_out = writer.tree.carry_out

        def paused_carry_out(*args: Any, **kwargs: Any) -> None:
            intent_written.set()  # (the intent is durable: carry_out is the next step)
            assert go_on.wait(30)
            real_carry_out(*args, **kwargs)

        writer.tree.carry_out = paused_carry_out  # type: ignore[method-assign]
        result: list[bool] = []
        deleting = threading.Thread(target=lambda: result.append(writer.delete_sessions(["a"])))
        deleting.start()
        try:
            assert intent_written.wait(30)
            # The catalog has no delete record yet, and the directory is still in
            # place: the intent alone hides the session.
            assert os.path.isdir(writer.session_dir("a"))
            assert listed_ids(reader) == {"b"}
            assert reader.catalog.lists("a")
            assert reader.load("a") is None
        finally:
            go_on.set()
            deleting.join(30)
        assert result == [True]
        assert listed_ids(reader) == {"b"}
        assert not reader.catalog.lists("a")
    finally:
        writer.close()
        reader.close()


class _SplitCatalogWrites(fsio.FileOps):
    """Writes a catalog record in two parts, running `between` after the first."""

    def __init__(self, cut: int, head_first: bool) -> None:
        self.cut, self.head_first = cut, head_first
        self.between: Any = None
        self.splits: list[tuple[bytes, bytes]] = []  # (record bytes, bytes not yet written)

    def pwrite(self, fd: int, data: bytes, offset: int, path: str) -> None:
        catalog_log = os.sep + os.path.join("catalog", "log") + os.sep
        data = bytes(data)
        # (not the preallocation zeros, nor another thread's write elsewhere)
        between = self.between if catalog_log in path and data.strip(b"\0") else None
        if between is None:
            super().pwrite(fd, data, offset, path)
            return
        self.between = None
        cut = self.cut if self.head_first else len(data) - self.cut
        head, tail = data[:cut], data[cut:]
        if self.head_first:
            super().pwrite(fd, head, offset, path)
            self.splits.append((data, tail))
        else:
            super().pwrite(fd, tail, offset + cut, path)
            self.splits.append((data, head))
        between()
        if self.head_first:
            super().pwrite(fd, tail, offset + cut, path)
        else:
            super().pwrite(fd, head, offset, path)


@pytest.mark.parametrize("head_first", [True, False], ids=["head-first", "tail-first"])
@pytest.mark.parametrize("cut", [1, 4, 9, 10, 11, 40])
def test_reader_never_passes_a_half_written_catalog_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: int, head_first: bool
) -> None:
    root = tmp_path / "store"
    writer = journal.open(root)
    reader = journal.open(root)
    try:
        writer.save(checkpoint("a", 0, []))
        assert listed_ids(reader) == {"a"}
        ops = _SplitCatalogWrites(cut, head_first)
        monkeypatch.setattr(fsio, "ops", ops)
        seen: list[set[str]] = []

        def look() -> None:
            seen.append(listed_ids(reader))
            seen.append(listed_ids(reader))  # twice: a second refresh starts where one stopped

        ops.between = look
        writer.save(checkpoint("b", 0, []))  # its commit, then its catalog record, split
        monkeypatch.undo()
        assert len(ops.splits) == 1 and len(seen) == 2
        record, unwritten = ops.splits[0]
        assert 0 < len(unwritten) < len(record)
        for listing in seen:
            # Only if the bytes not yet written are zeros (what the preallocated
            # space holds already) is the record complete on disk.
            assert listing == ({"a", "b"} if not unwritten.strip(b"\0") else {"a"})
        assert listed_ids(reader) == {"a", "b"}, "the reader passed over the record it saw torn"
        summary = reader.session_summary("b")
        assert summary is not None and summary.sequence == 0
    finally:
        writer.close()
        reader.close()

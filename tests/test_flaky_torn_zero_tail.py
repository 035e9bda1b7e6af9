"""A torn final write that loses only zero bytes leaves the whole commit.

`test_lost_writes.py::test_torn_final_write` cuts the last commit's write after
every n bytes. The commit lands in preallocated zeros, and its last record (the
COMMIT record) ends with `committed_at_ms`. When that timestamp's low byte is 0
(once in 256 runs), the cut after all but the last byte leaves exactly the bytes
of the complete commit: it recovers as written, which the test once counted as
"showing a torn save" ("cut after 1331 bytes"). Here the clock is chosen, so both
cases are taken every run: the cut before a zero last byte keeps the commit, the
cut before any other last byte drops it.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from faults import recording
from helpers import checkpoint, execution, observe, warning

import journal


def _clock_ending_in(low: int) -> float:
    """A time whose milliseconds end in the byte `low` (the byte before it not 0)."""
    ms = (int(time.time() * 1000) >> 8) + 1
    if ms & 0xFF == 0:
        ms += 1  # the next-to-last byte of the timestamp stays nonzero
    return ((ms << 8) | low) / 1000 + 0.0004  # (+0.4 ms: int(t * 1000) gives ms back)


def _images_of_last_cuts(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, low: int
) -> tuple[dict[str, Any], dict[str, Any], list[Any], bytes, list[tuple[str, int]]]:
    """Three saves, then a fourth whose clock ends in `low`, imaged before its sync
    with the write cut after each of its last three bytes."""
    root = str(tmp / "store")
    images: list[tuple[str, int]] = []
    written: list[bytes] = []
    with recording(root) as recorder:
        store = journal.open(root, durability="fsync", segment_bytes=1 << 20)
        ctx: list[Any] = []
        for seq in range(3):
            ctx = [*ctx, {"n": seq, "text": "x" * 50}]
            store.save_with_events(
                checkpoint("s", seq, ctx), [{"t": seq}], None, [warning(f"e{seq}")]
            )
        before = observe(store, ["s"])

        def tear(op: str, path: str) -> None:
            if op != "sync_data" or not path.endswith(".seg"):
                return
            writes = recorder.pending_writes(path)
            data = writes[-1][2]
            written.append(data)
            for n in range(len(data) - 3, len(data)):
                dest = str(tmp / f"torn{n:05d}")
                recorder.crash_image(dest, tear=(path, len(writes) - 1, n))
                images.append((dest, n))

        recorder.hook = tear
        with monkeypatch.context() as m:
            at = _clock_ending_in(low)
            m.setattr(time, "time", lambda: at)
            store.save_with_events(
                checkpoint("s", 3, [*ctx, {"n": 3}]), [{"t": 3}], execution("s", 3), []
            )
        recorder.hook = None
        after = observe(store, ["s"])
        store.close()
    assert len(written) == 1
    return before, after, ctx, written[0], images


@pytest.mark.parametrize("low", [0x00, 0x6F])
def test_cut_that_loses_only_a_zero_byte_keeps_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, low: int
) -> None:
    before, after, ctx, data, images = _images_of_last_cuts(tmp_path, monkeypatch, low)
    assert data[-1] == low and data[-2] != 0, "the commit ends with committed_at_ms"
    assert after != before
    for dest, n in images:
        whole = not data[n:].strip(b"\0")  # the rule test_torn_final_write uses
        assert whole == (n == len(data) - 1 and low == 0)
        store = journal.open(dest, durability="fsync")
        try:
            assert observe(store, ["s"]) == (after if whole else before), f"cut after {n} bytes"
            # and the next commit follows what recovery kept
            kept = [*ctx, {"n": 3}] if whole else ctx
            store.save_with_events(checkpoint("s", len(kept), [*kept, {"n": 9}]), [], None, [])
            loaded = store.load("s")
            assert loaded is not None and loaded.sequence == len(kept)
            assert loaded.context == [*kept, {"n": 9}]
        finally:
            store.close()
        shutil.rmtree(dest)

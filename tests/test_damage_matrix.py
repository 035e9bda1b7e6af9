"""Every kind of session file damaged in every position, against the four promises.

Sessions of one segment and of many, with and without a dictionary, each closed
cleanly after its last acknowledged call. Each case damages one file (the only,
first, a middle or the newest segment, or the identity file) in one way (removed,
truncated at two points, a range zeroed, a byte flipped), then checks:

1. the loss is detected: `journal verify` exits 1 and never says "ok";
2. no sequence is handed out again: an append either raises a `JournalError` or
   returns a sequence above every one acknowledged, and so does a save;
3. the readable prefix stays readable: the first events read back as written;
4. every tool that reads the whole session exits non-zero (`verify`, `show`,
   `replay`, `stats`, `export`), and `salvage` copies what is left.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from faults import flip_byte, truncate_file, zero_range
from helpers import checkpoint, run_cli, warning

import journal
from journal import JournalError
from journal.inspect import dir_name

SID = "victim"
OTHER = "bystander"
PREFIX = 3  # events at the start of the log that every damage below leaves readable


def _build(root: str, *, segment_bytes: int, dictionary: bool, saves: int) -> int:
    store = journal.open(root, segment_bytes=segment_bytes, dictionary=dictionary)
    last = 0
    ctx: list[Any] = []
    try:
        store.save(checkpoint(OTHER, 0, [{"n": 0}]))
        for seq in range(saves):
            ctx = [*ctx, {"n": seq, "text": f"the build step {seq} failed: " + "linker " * 12}]
            got = store.save_with_events(
                checkpoint(SID, seq, ctx),
                ctx[-1:],
                None,
                [warning(f"save {seq}: the linker could not find libssl")],
            )
            last = got[-1].sequence
            for k in range(2):
                ev = store.append_event(
                    SID, 1_700_000_000_000 + seq, warning(f"append {seq}.{k} retrying").event
                )
                last = ev.sequence
        store.spares.wait()  # the dictionary's training, when there is one
    finally:
        store.close()
    return last


SHAPES = {
    # name: (segment_bytes, dictionary, saves)
    "one segment": (64 << 20, False, 40),
    "one segment, dictionary": (64 << 20, True, 120),
    "many segments": (4096, False, 40),
    "many segments, dictionary": (4096, True, 120),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, int, list[Any]]]:
    out = {}
    for name, (segment_bytes, dictionary, saves) in SHAPES.items():
        root = str(tmp_path_factory.mktemp("matrix") / "store")
        last = _build(root, segment_bytes=segment_bytes, dictionary=dictionary, saves=saves)
        store = journal.open(root)
        try:
            first = msgspec.to_builtins(store.events_after(SID, 0, PREFIX))
        finally:
            store.close()
        out[name] = (root, last, first)
    return out


def _session_dir(root: str) -> str:
    return os.path.join(root, "sessions", dir_name(SID))


def _segments(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(_session_dir(root), "log", "*.seg")))


def _target(root: str, which: str) -> str:
    segs = _segments(root)
    if which == "identity":
        return os.path.join(_session_dir(root), "SESSION")
    if which == "only segment":
        assert len(segs) == 1
        return segs[0]
    assert len(segs) >= 4, "a session of many segments"
    return {"first segment": segs[0], "middle segment": segs[len(segs) // 2]}.get(which, segs[-1])


def _damage(path: str, how: str) -> None:
    size = os.path.getsize(path)
    if how == "missing":
        os.unlink(path)
    elif how == "truncated at 3/4":
        truncate_file(path, size * 3 // 4)
    elif how == "truncated at 1/2":
        truncate_file(path, size // 2)
    elif how == "zeroed range":
        zero_range(path, size * 2 // 3, 48)
    else:
        flip_byte(path, size * 2 // 3)


DAMAGES = ["missing", "truncated at 3/4", "truncated at 1/2", "zeroed range", "flipped byte"]
CASES = [
    (shape, which, how)
    for shape in SHAPES
    for which in (
        ["only segment", "identity"]
        if shape.startswith("one")
        else ["first segment", "middle segment", "newest segment", "identity"]
    )
    for how in DAMAGES
]


@pytest.mark.parametrize(("shape", "which", "how"), CASES, ids=[" / ".join(c) for c in CASES])
def test_damage_keeps_the_four_promises(
    pristine: dict[str, tuple[str, int, list[Any]]],
    tmp_path: Path,
    shape: str,
    which: str,
    how: str,
) -> None:
    src, last, first = pristine[shape]
    root = str(tmp_path / "store")
    shutil.copytree(src, root)
    # The copy's next user writes its caches for this directory (FORMAT.md section 5):
    # from then on they are evidence here, as in the directory that wrote them.
    settle = journal.open(root)
    try:
        settle.load(SID)
    finally:
        settle.close()
    _damage(_target(root, which), how)

    # 1. detected: never "ok"
    proc = run_cli(root, "verify", check_code=None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not proc.stdout.startswith("ok")

    # 4. tools that read the whole session say so
    for args in (["show", SID], ["replay", SID], ["stats", SID]):
        proc = run_cli(root, *args, check_code=None)
        assert proc.returncode != 0, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
    bundle = os.path.join(str(tmp_path), "x.jb")
    proc = run_cli(root, "export", SID, "-o", bundle, check_code=None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not os.path.exists(bundle), "a failed export leaves nothing at the output path"

    store = journal.open(root)
    try:
        # 3. the prefix stays readable (not when the first segment itself is gone)
        holds_prefix = which in ("first segment", "only segment")
        if which != "identity" and not (holds_prefix and how == "missing"):
            assert msgspec.to_builtins(store.events_after(SID, 0, PREFIX)) == first
        # the other session is untouched
        assert store.load(OTHER) is not None
        # 2. nothing handed out again
        for attempt in range(2):
            try:
                ev = store.append_event(SID, 1, warning(f"after the damage {attempt}").event)
            except JournalError:
                continue
            assert ev.sequence > last, f"sequence {ev.sequence} re-issued (last was {last})"
        try:
            got = store.save_with_events(
                checkpoint(SID, 0, [{"n": 0}]), [], None, [warning("a first save again")]
            )
        except JournalError:
            pass
        else:
            assert got[-1].sequence > last, "a save re-issued event sequences"
        # salvage copies what is left into a healthy session
        if which != "first segment" and not (which == "only segment" and how == "missing"):
            from journal.inspect import salvage_session

            report = salvage_session(store, SID, "rescued")
            assert report.events >= PREFIX
            assert store.append_event("rescued", 1, warning("goes on").event).sequence > 0
    finally:
        store.close()

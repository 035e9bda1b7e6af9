"""Creating a store: a creation cut short by SIGKILL is finished by the next open,
and every top-level directory's entry is durable before the store relies on it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from faults import recording
from helpers import checkpoint

import journal

SEED = int(os.environ.get("JOURNAL_CREATION_SEED", str(random.randrange(1 << 30))))

# Opens a new store, SIGKILLing itself right before its N-th file-system step
# (an operation of the fsync seam, or a mkdir / makedirs), or never with N = 0;
# prints how many steps the open took.
_CREATOR = textwrap.dedent(
    """
    import os, signal, sys
    import journal
    # reaches inside: counts the file-system steps of a creation, to kill before each
    from journal import fsio

    root, kill_at = sys.argv[1], int(sys.argv[2])
    steps = 0

    def step():
        global steps
        steps += 1
        if steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    class Killing(fsio.FileOps):
        pass

    for name in ("pwrite", "sync_data", "sync_file", "sync_dir", "rename", "replace",
                 "truncate", "unlink"):
        real = getattr(fsio.FileOps, name)
        def op(self, *args, _real=real):
            step()
            return _real(self, *args)
        setattr(Killing, name, op)
    fsio.ops = Killing()
    for name in ("mkdir", "makedirs"):
        real = getattr(os, name)
        def made(*args, _real=real, **kwargs):
            step()
            return _real(*args, **kwargs)
        setattr(os, name, made)
    print("ready", flush=True)
    if sys.argv[3:] == ["wait"]:
        sys.stdin.readline()
    journal.open(root).close()
    print(steps, flush=True)
    """
)


def _creator(tmp_path: Path) -> str:
    script = tmp_path / "creator.py"
    script.write_text(_CREATOR)
    return str(script)


def _opens_fine(root: Path) -> None:
    """The store opens, takes a write and reads it back (also from a fresh process)."""
    with journal.open(root) as store:
        store.save(checkpoint("s", 0, [{"n": 0}]))
        loaded = store.load("s")
        assert loaded is not None and loaded.sequence == 0
    with journal.open(root) as store:
        assert store.load("s") is not None


def test_a_creation_killed_at_any_step_is_finished_by_the_next_open(tmp_path: Path) -> None:
    print(f"JOURNAL_CREATION_SEED={SEED}")
    rng = random.Random(SEED)
    script = _creator(tmp_path)
    done = subprocess.run(
        [sys.executable, script, str(tmp_path / "probe"), "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    steps = int(done.stdout.split()[-1])
    assert steps > 5, done.stdout
    points = [rng.randint(1, steps) for _ in range(38)] + [1, 2, steps]
    cut_short = 0
    for k, kill_at in enumerate(points):
        root = tmp_path / f"store{k}"
        run = subprocess.run(
            [sys.executable, script, str(root), str(kill_at)], capture_output=True, text=True
        )
        assert run.returncode == -signal.SIGKILL, (kill_at, run.stdout, run.stderr)
        cut_short += root.exists() and not (root / "JOURNAL").exists()
        try:
            _opens_fine(root)
        except journal.JournalError as exc:
            left = sorted(os.listdir(root)) if root.exists() else None
            pytest.fail(f"killed at step {kill_at} of {steps}: {exc} (left: {left})")
    assert cut_short > 0, "no kill left a creation unfinished: this tests nothing"


def test_a_creation_killed_by_another_process_is_finished_by_the_next_open(
    tmp_path: Path,
) -> None:
    """SIGKILL from outside, at a random moment during the first open."""
    print(f"JOURNAL_CREATION_SEED={SEED}")
    rng = random.Random(SEED + 1)
    script = _creator(tmp_path)
    for k in range(12):
        root = tmp_path / f"store{k}"
        child = subprocess.Popen(
            [sys.executable, script, str(root), "0", "wait"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("\n")
        child.stdin.flush()
        time.sleep(rng.uniform(0, 0.004))  # where the kill lands is not asserted
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdin.close()
        child.stdout.close()
        _opens_fine(root)


def test_only_the_leftovers_of_a_creation_are_taken_for_one(tmp_path: Path) -> None:
    """Empty store directories and temporary manifests are finished into a store;
    anything else in a root without a manifest is refused, and left as it was."""
    leftover = tmp_path / "leftover"
    for name in ("sessions", "state", "tmp", "txn"):
        (leftover / name).mkdir(parents=True)
    (leftover / "JOURNAL.tmp.123.abc").write_bytes(b"")
    _opens_fine(leftover)
    for what in ("file", "full dir", "other dir"):
        root = tmp_path / what.replace(" ", "-")
        (root / "sessions").mkdir(parents=True)
        if what == "file":
            (root / "notes.txt").write_text("mine")
        elif what == "full dir":
            (root / "state" / "x").mkdir(parents=True)
        else:
            (root / "photos").mkdir()
        before = sorted(p.name for p in root.rglob("*"))
        with pytest.raises(journal.InvalidInputError, match="not a journal store"):
            journal.open(root)
        assert sorted(p.name for p in root.rglob("*")) == before


def test_top_level_directories_are_durable_before_they_are_relied_on(tmp_path: Path) -> None:
    """Under the strict rule (an entry is durable once its parent is synced), a power
    loss right after the first open and a delete keeps txn/, trash/, catalog/ and
    procs/: the root is synced after they are created."""
    root = str(tmp_path / "store")
    with recording(root) as recorder, journal.open(root) as store:
        store.save(checkpoint("a", 0, []))
        dest = str(tmp_path / "image")
        recorder.crash_image(dest)
        assert store.delete_sessions(["a"])
    for name in ("JOURNAL", "sessions", "state", "tmp", "txn", "trash", "catalog", "procs"):
        assert os.path.exists(os.path.join(dest, name)), name
    assert os.path.isdir(os.path.join(dest, "catalog", "log"))

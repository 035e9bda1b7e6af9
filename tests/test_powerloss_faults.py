"""Faults beneath the library, injected by the FUSE recorder (tests/powerloss/fs.py):
ENOSPC and EIO on chosen operations, and a mount lost altogether.

The crash workload runs on, past every failure. Every failed call raises
`journal.errors.StorageError` (or, for a call that needs one that failed, the
error that call raises without it); the store ends as the script ends with some
subset of the failed calls left out, never with part of one; it opens, verifies
and writes again. Seeds are printed; JOURNAL_POWERLOSS_SEED replays.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "powerloss"))

from fuse_ready import require_fuse, seed
from harness import explain_failures, fault_run, judge, verify
from workloads import reference, steps

pytestmark = pytest.mark.slow

STORAGE_ERROR = "journal.errors.StorageError"
NOT_FOUND = "journal.errors.NotFoundError"


def test_enospc_and_eio_give_typed_errors_and_nothing_partial(tmp_path: Path) -> None:
    require_fuse()
    s = seed("faults")
    rnd = random.Random(s)
    rules = [
        {
            "op": "write",
            "path": "/store/sessions/*/log/*",
            "errno": "ENOSPC",
            "skip": rnd.randint(5, 60),
            "count": 1,
        },
        {
            "op": "fsync",
            "path": "/store/sessions/*",
            "errno": "EIO",
            "skip": rnd.randint(5, 60),
            "count": 1,
        },
        {
            "op": "create",
            "path": "/store/tmp/*",
            "errno": "ENOSPC",
            "skip": rnd.randint(0, 10),
            "count": 1,
        },
    ]
    out = fault_run(tmp_path, "crash", s, rules)
    assert out["exit"] == 0, out["output"]
    assert out["stats"]["injected"] > 0, f"no fault was hit: {out['stats']}"
    # A fault may land in background work (a spare directory, a warm-up's
    # preallocation) that no call waits for: then no call fails, and the store must
    # hold exactly what the whole script writes.
    fails = [(int(i), typ, msg) for i, typ, msg in out["side"]["fails"] if i != "close"]
    assert not out["error"], out["error"]
    assert not out["write_again"], out["write_again"]
    assert out["verify"] == "", out["verify"]
    # StorageError: the call may or may not have taken effect (never in part). Any
    # other error must be what the call raises anyway once the failed ones are out.
    storage = [i for i, t, _ in fails if t == STORAGE_ERROR]
    explained = explain_failures(tmp_path, "crash", s, out["seen"], storage)
    assert explained is not None, (
        f"seed={s}: the store shows no state the script reaches with some of the failed "
        f"calls {fails} left out: a failed call took effect in part"
    )
    _, raised = explained
    untyped = [(i, t, m) for i, t, m in fails if t != STORAGE_ERROR and raised.get(i) != t]
    assert not untyped, f"seed={s}: failures that are not StorageError: {untyped}"


def test_a_cache_that_cannot_be_written_fails_no_call(tmp_path: Path) -> None:
    """Caches (indexes, snapshots, the catalog snapshot) are never the caller's error:
    with every write to them refused (ENOSPC), every call still succeeds."""
    require_fuse()
    s = seed("cache-faults")
    rules = [
        {"op": op, "path": path, "errno": "ENOSPC", "count": -1}
        for op in ("create", "write")
        for path in (
            "/store/catalog/snapshot*",
            "/store/sessions/*/snapshot*",
            "/store/sessions/*.idx*",
        )
    ]
    out = fault_run(tmp_path, "crash", s, rules)
    assert out["exit"] == 0, out["output"]
    assert out["stats"]["injected"] > 0, f"no cache write was refused: {out['stats']}"
    assert out["side"]["fails"] == [], f"seed={s}: calls failed for a cache: {out['side']}"
    assert not out["error"], out["error"]
    ref = reference("crash", s, str(tmp_path / "reference"), every=False)
    assert out["seen"] == ref[-1]
    assert out["verify"] == "", out["verify"]


def test_lost_mount_fails_every_call_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """The disk goes away at a seeded operation: every later call raises StorageError
    (none hangs), and the image at the loss holds every call acknowledged before it."""
    require_fuse()
    s = seed("lost-mount")
    after = random.Random(s).randint(20, 250)
    out = fault_run(tmp_path, "crash", s, [], lose_after=after)
    assert out["exit"] == 0, out["output"]
    side = out["side"]
    assert side["fails"], f"seed={s}: nothing failed after the mount was lost at op {after}"
    first = min([int(i) for i, _, _ in side["fails"] if i != "close"], default=10**9)
    after_loss = [f for f in side["fails"] if f[0] != "close" and int(f[0]) >= first]
    # A call on a session whose creation failed on the lost mount finds no session.
    script = steps("crash", s)

    def created_by(name: str) -> str | None:  # "fork P@N -> C", "save S 0"
        words = name.split()
        return words[-1] if words[0] == "fork" else words[1] if name.endswith(" 0") else None

    def needs(name: str) -> str:  # "save S N", "append S N", "fork P@N -> C"
        return name.split()[1].split("@")[0]

    uncreated = {created_by(script.steps[int(i)].name) for i, _, _ in after_loss}
    untyped = [
        f
        for f in after_loss
        if f[1] != STORAGE_ERROR
        and not (f[1] == NOT_FOUND and needs(script.steps[int(f[0])].name) in uncreated)
    ]
    assert not untyped, f"seed={s}: failures on a lost mount that are not StorageError: {untyped}"
    assert all(i < first for i in side["acked"]), f"seed={s}: a call succeeded on a lost mount"
    image = tmp_path / "lost"
    about = (tmp_path / "lost.json").read_text()
    ref = reference("crash", s, str(tmp_path / "reference"))
    problems = judge(image, "crash", s, ref, json.loads(about)["side_text"])
    assert not problems, f"seed={s}: the image at the loss:\n" + "\n".join(problems)
    assert verify(image / "store") == ""

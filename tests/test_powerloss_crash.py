"""Power loss beneath the library: the crash, delete and state workloads on a FUSE
file system that keeps only what was synced (tests/powerloss/fs.py).

Each run takes crash images at seeded random operations (mid-call included) and
one at the end. Every image must open in a fresh process showing exactly the
state after the calls acknowledged when it was taken, or after the one call then
in flight (nothing acknowledged lost, nothing partial), `journal verify` must find
nothing wrong before and after the store takes new writes. The seed is printed;
JOURNAL_POWERLOSS_SEED=N replays a run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "powerloss"))

from fuse_ready import require_fuse, seed
from harness import crash_run, report

pytestmark = pytest.mark.slow

# Images per run, and about how many mutating operations each workload makes
# (so the images spread over the whole run).
RUNS = {"crash": (8, 450), "delete": (8, 700), "state": (8, 320)}


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_power_loss_during_workload(kind: str, tmp_path: Path) -> None:
    require_fuse()
    s = seed(kind)
    images, ops = RUNS[kind]
    verdicts, stats = crash_run(tmp_path, kind, s, images=images, prob=images / ops)
    assert len(verdicts) >= 2, f"too few crash images: {stats}"
    assert stats["seen"].get("fsyncdir", 0) > 0 and stats["seen"].get("fsync", 0) > 0
    bad = report(verdicts)
    assert not bad, f"seed={s}: crash images that break the contract:\n{bad}"

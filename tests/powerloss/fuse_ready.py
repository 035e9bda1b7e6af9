"""What every power-loss test does first: make sure FUSE works, pick and print a seed."""

from __future__ import annotations

import os

import pytest
from harness import seed_for
from mount import unavailable


def require_fuse() -> None:
    """Skip where FUSE cannot mount (not root, no /dev/fuse); in CI, fail instead:
    scripts/test.sh installs what these tests need, so a skip there would hide them."""
    why = unavailable()
    if why is None and os.geteuid() != 0:
        why = "not root (the FUSE tests mount as root)"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"power-loss tests cannot mount FUSE in CI: {why}")
        pytest.skip(why)


def seed(name: str) -> int:
    value = seed_for(name)
    print(f"seed={value} (replay: JOURNAL_POWERLOSS_SEED={value})")
    return value

"""Fixtures the tests share: a store directory, and a store open in each durability
mode."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import journal


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Where the test's store lives (not created yet)."""
    return tmp_path / "store"


@pytest.fixture(params=["fsync", "os"])
def durability(request: pytest.FixtureRequest) -> str:
    """Each durability mode in turn."""
    return str(request.param)


@pytest.fixture
def store(root: Path, durability: str) -> Iterator[journal.Store]:
    """A store at `root`, open in each durability mode in turn."""
    s = journal.open(root, durability=durability)
    yield s
    s.close()

"""What a store occupies on disk: allocated blocks (`du`) and journal's parts of them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .config import MIB


def disk_usage(root: Path) -> int:
    """Allocated bytes under `root`, directories included (what `du` reports)."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        total += os.stat(dirpath).st_blocks * 512
        for name in filenames:
            total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def used_bytes(path: str) -> int:
    """File size without the trailing zeros (journal preallocates its newest segment)."""
    size = os.path.getsize(path)
    with open(path, "rb") as file:
        end = size
        while end > 0:
            start = max(0, end - MIB)
            file.seek(start)
            chunk = file.read(end - start).rstrip(b"\0")
            if chunk:
                return start + len(chunk)
            end = start
    return 0


@dataclass
class JournalDisk:
    allocated: int  # du
    caches: int  # du of snapshot and *.idx files
    log_used: int  # segment bytes without preallocated zeros

    @classmethod
    def of(cls, root: Path) -> JournalDisk:
        caches = log_used = 0
        for dirpath, _, filenames in os.walk(root):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if name == "snapshot" or name.endswith(".idx"):
                    caches += os.stat(path).st_blocks * 512
                elif name.endswith(".seg"):
                    log_used += used_bytes(path)
        return cls(disk_usage(root), caches, log_used)

"""Fault injection for the durability tests: simulated power loss and on-disk damage.

`PowerLossOps` replaces `journal.fsio.ops` (the seam every write, fsync, rename,
truncate and unlink of the engine goes through) with a recorder that keeps a
model of what a power loss would leave behind:

- per file, its content as of its last fsync/fdatasync ("durable content") and
  the writes and truncations issued since ("pending");
- per directory, its entries as of its last directory fsync: a file created or
  renamed into a directory that was not synced afterwards is absent after a
  power loss (or still under its old name).

Files and directories are tracked by an identity that follows renames, so a
session directory built in `tmp/` and renamed into `sessions/` keeps the
entries that were synced while it was in `tmp/`.

`crash_image(dest)` writes what the disk could hold after a power loss at this
instant. Every file gets its durable content plus, per file and at random (when
an `rng` is given), an in-order prefix of its pending writes, the last of them
possibly torn at any byte. Writes are never reordered, so the model matches the
engine's assumption that an unsynced write persists as a prefix (see log.py).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# reaches inside: fault injection replaces the file-operation seam and fails catalog appends
import journal
from journal import (
    Checkpoint,
    Store,
    fsio,
)

Pending = tuple[str, int, bytes]  # ("w", offset, data) or ("t", size, b"")


class PowerLossOps(fsio.FileOps):
    """A `FileOps` that performs every operation and records what is durable."""

    # One operation at a time: the hook takes crash images between operations.
    # `fsio.sync_all` then syncs a new session's parts in a row, one order among
    # those the concurrent version can finish in; until the rename after it, any
    # subset of them is durable garbage in tmp/ anyway.
    concurrent = False

    def __init__(self, root: str):
        self.root = os.path.realpath(root)
        self._next = 0
        self.ids: dict[str, int] = {}  # current path -> identity (files and directories)
        self.is_dir: dict[int, bool] = {}
        self.durable: dict[int, bytes] = {}  # file identity -> content at its last sync
        self.pending: dict[int, list[Pending]] = {}  # file identity -> writes since
        self.entries: dict[int, dict[str, int]] = {}  # dir identity -> entries at last sync
        self.hook: Callable[[str, str], None] | None = None  # (op, path) before each op
        self.ops_seen = 0
        self._ident(self.root)

    # ------------------------------------------------------------- identities
    def _norm(self, path: str) -> str:
        return os.path.realpath(path)

    def _ident(self, path: str) -> int:
        path = self._norm(path)
        ident = self.ids.get(path)
        if ident is None:
            ident = self._next
            self._next += 1
            self.ids[path] = ident
            self.is_dir[ident] = os.path.isdir(path)
        return ident

    def _tracked(self, path: str) -> bool:
        p = self._norm(path)
        return p == self.root or p.startswith(self.root + os.sep)

    def _before(self, op: str, path: str) -> None:
        self.ops_seen += 1
        if self.hook is not None and self._tracked(path):
            self.hook(op, path)

    # ------------------------------------------------------------- operations
    def pwrite(self, fd: int, data: bytes, offset: int, path: str) -> None:
        self._before("pwrite", path)
        super().pwrite(fd, data, offset, path)
        if self._tracked(path):
            self.pending.setdefault(self._ident(path), []).append(("w", offset, bytes(data)))

    def truncate(self, fd: int, size: int, path: str) -> None:
        self._before("truncate", path)
        super().truncate(fd, size, path)
        if self._tracked(path):
            self.pending.setdefault(self._ident(path), []).append(("t", size, b""))

    def _synced(self, fd: int, path: str) -> None:
        if not self._tracked(path):
            return
        ident = self._ident(path)
        with open(path, "rb") as f:  # `fd` may be write-only; `path` names the same file
            self.durable[ident] = f.read()
        self.pending[ident] = []

    def sync_data(self, fd: int, path: str) -> None:
        self._before("sync_data", path)
        super().sync_data(fd, path)
        self._synced(fd, path)

    def sync_file(self, fd: int, path: str) -> None:
        self._before("sync_file", path)
        super().sync_file(fd, path)
        self._synced(fd, path)

    def sync_dir(self, path: str) -> None:
        self._before("sync_dir", path)
        super().sync_dir(path)
        if self._tracked(path):
            self.entries[self._ident(path)] = self._listing(path)

    def _listing(self, path: str) -> dict[str, int]:
        return {name: self._ident(os.path.join(path, name)) for name in os.listdir(path)}

    def _move(self, src: str, dst: str) -> None:
        src, dst = self._norm(src), self._norm(dst)
        if src not in self.ids:
            self._ident(src)
        for p in [p for p in self.ids if p == dst or p.startswith(dst + os.sep)]:
            del self.ids[p]  # what `dst` named before is unlinked (its identity lives on)
        for p in [p for p in self.ids if p == src or p.startswith(src + os.sep)]:
            self.ids[dst + p[len(src) :]] = self.ids.pop(p)

    def rename(self, src: str, dst: str) -> None:
        self._before("rename", dst)
        super().rename(src, dst)
        self._move(src, dst)

    def replace(self, src: str, dst: str) -> None:
        self._before("replace", dst)
        super().replace(src, dst)
        self._move(src, dst)

    def unlink(self, path: str) -> None:
        self._before("unlink", path)
        super().unlink(path)
        self.ids.pop(self._norm(path), None)

    # ------------------------------------------------------------ power loss
    def crash_image(
        self,
        dest: str,
        *,
        rng: random.Random | None = None,
        live_dirs: bool = False,
        tear: tuple[str, int, int] | None = None,
    ) -> None:
        """Write to `dest` what the store directory could hold after a power loss now.

        Without `rng`: only durable content. With `rng`: each file also keeps a
        random in-order prefix of its pending writes (the last one torn at a
        random byte). `tear=(path, k, n)`: that file keeps its pending writes
        before the k-th and the first n bytes of the k-th. `live_dirs` takes
        directory entries as they are now (as if every create/rename had reached
        the disk) instead of as last synced.
        """
        torn = None if tear is None else (self._ident(tear[0]), tear[1], tear[2])
        self._build_dir(self.ids[self.root], self.root, dest, rng, live_dirs, torn)

    def _build_dir(
        self,
        ident: int,
        live: str | None,
        dest: str,
        rng: random.Random | None,
        live_dirs: bool,
        torn: tuple[int, int, int] | None,
    ) -> None:
        os.makedirs(dest, exist_ok=True)
        if live_dirs and live is not None and os.path.isdir(live):
            entries = self._listing(live)
        else:
            entries = self.entries.get(ident, {})
        current = {v: k for k, v in self.ids.items()}
        for name, child in entries.items():
            target = os.path.join(dest, name)
            if self.is_dir.get(child):
                self._build_dir(child, current.get(child), target, rng, live_dirs, torn)
                continue
            pending = self.pending.get(child, [])
            if torn is not None and torn[0] == child:
                keep, cut = torn[1] + 1, torn[2]
            elif rng is not None and pending:
                keep = rng.randint(0, len(pending))
                cut = -1
                if keep and rng.random() < 0.7:
                    cut = rng.randint(0, max(0, len(pending[keep - 1][2]) - 1))
            else:
                keep, cut = 0, -1
            with open(target, "wb") as f:
                f.write(self.content(child, keep, cut))

    def content(self, ident: int, keep: int = 0, cut: int = -1) -> bytes:
        """Durable content plus the first `keep` pending writes, the last cut to `cut` bytes."""
        data = bytearray(self.durable.get(ident, b""))
        pending = self.pending.get(ident, [])[:keep]
        for k, (kind, offset, chunk) in enumerate(pending):
            if kind == "t":
                del data[offset:]
                data.extend(bytes(max(0, offset - len(data))))
                continue
            if k == len(pending) - 1 and cut >= 0:
                chunk = chunk[:cut]
            apply_write(data, offset, chunk)
        return bytes(data)

    def pending_writes(self, path: str) -> list[Pending]:
        return list(self.pending.get(self._ident(path), []))


def apply_write(data: bytearray, offset: int, chunk: bytes) -> None:
    if offset > len(data):
        data.extend(bytes(offset - len(data)))
    data[offset : offset + len(chunk)] = chunk


@contextmanager
def recording(root: str) -> Iterator[PowerLossOps]:
    """Route every durability-relevant call of `journal` through a recorder."""
    os.makedirs(root, exist_ok=True)
    recorder = PowerLossOps(root)
    saved = fsio.ops
    fsio.ops = recorder
    try:
        yield recorder
    finally:
        fsio.ops = saved


# ------------------------------------------------------------------ damage helpers
def flip_byte(path: str, offset: int, mask: int = 0x5A) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        assert b, f"{path} has no byte at {offset}"
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def zero_range(path: str, offset: int, size: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(bytes(size))


def truncate_file(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


# ------------------------------------------------------------------ faults of a store
def catalog_outlived_a_save(root: Path, scratch: Path, save: Callable[[Store], object]) -> None:
    """Leave `root` as a power loss during `save` could: every file as before it, but
    the catalog as `save` left it (its unsynced records kept, the rest lost), in the
    same directory (same inode, as after a reboot)."""
    before = scratch / "before"
    shutil.copytree(root, before)
    with journal.open(root) as store:
        save(store)
    after_catalog = scratch / "catalog-after"
    shutil.copytree(root / "catalog", after_catalog)
    for name in os.listdir(root):
        path = root / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    for name in os.listdir(before):
        src = before / name
        if name == "catalog":
            shutil.copytree(after_catalog, root / name)
        elif src.is_dir():
            shutil.copytree(src, root / name)
        else:
            shutil.copy2(src, root / name)


def save_whose_catalog_append_fails(store: Store, checkpoint: Checkpoint) -> None:
    """Save `checkpoint` while the store's catalog refuses appends: the save must
    return (its commit is made; the catalog is a cache, re-derived later); the
    catalog works again afterwards."""
    calls: list[object] = []

    def failing(records: object) -> None:
        calls.append(records)
        raise journal.StorageError("injected: catalog append failed")

    store.catalog.append = failing  # type: ignore[method-assign]
    try:
        store.save(checkpoint)
    finally:
        del store.catalog.append
    assert calls, "the save made no catalog append: the fault tested nothing"


def record_stats_and_writes(monkeypatch: Any) -> tuple[set[str], set[str]]:
    """From now until `monkeypatch.undo()`: the files stat'ed (`os.stat`, `os.fstat`)
    and the files written (`os.pwrite`), by real path, in two sets it fills. A stat
    then a write of one file made that file's next fdatasync slower (Linux 6.13+
    multigrain timestamps): tests look for files in both."""
    stat_of: set[str] = set()
    written: set[str] = set()
    real_fstat, real_stat, real_pwrite = os.fstat, os.stat, os.pwrite

    def name(fd: int) -> str:
        return os.readlink(f"/proc/self/fd/{fd}")

    def fstat(fd: int) -> os.stat_result:
        stat_of.add(name(fd))
        return real_fstat(fd)

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        stat_of.add(os.path.realpath(os.fspath(path)))
        return real_stat(path, *args, **kwargs)

    def pwrite(fd: int, data: Any, offset: int) -> int:
        written.add(name(fd))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "fstat", fstat)
    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "pwrite", pwrite)
    return stat_of, written


def commit_dictionary(store: Store, session_id: str, data: bytes) -> None:
    """Commit `data` as the session's zstd dictionary now, as the store's training job
    does once the background training found one (FORMAT.md section 3)."""
    sess = store.open_sessions.get(session_id)
    assert sess is not None
    with sess.writing():
        assert sess.write_dictionary(data)

"""Creating a store's root directory, atomically in effect, and its layout.

A store exists once its manifest (`ROOT/JOURNAL`) does, and the manifest is
written last, durably, after every top-level directory and the root's entries
are durable. A creation cut short (a kill, a power loss) can therefore leave
only journal's own empty top-level directories and temporary manifest files
(`JOURNAL.tmp.*`) beside them; `create_or_finish` recognises exactly those
leftovers and finishes the creation. Anything else in a root without a manifest
is somebody else's, and the open refuses it.
"""

from __future__ import annotations

import os
import time

from . import fsio
from .errors import InvalidInputError, StorageError
from .layout import CORE_DIRS, LEFTOVER_DIRS
from .metafile import KIND_MANIFEST, write_meta
from .rootcheck import mkdir_below

STALE_TMP_SECONDS = 60


def ensure_dirs(root: str, names: tuple[str, ...] = CORE_DIRS) -> None:
    """Create the missing ones of these top-level directories (the root must exist:
    it is never recreated by path), and sync the root once if any was made."""
    made = [mkdir_below(os.path.join(root, name)) for name in names]
    if any(made):
        fsio.sync_dir(root)


def leftovers_only(root: str, manifest_name: str) -> bool:
    """Whether `root` holds nothing but what an interrupted creation leaves: empty
    top-level directories of a store and temporary manifest files."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return True
    for name in names:
        path = os.path.join(root, name)
        if name.startswith(f"{manifest_name}.tmp."):
            if not os.path.isfile(path) or os.path.islink(path):
                return False
            continue
        if name not in LEFTOVER_DIRS or os.path.islink(path) or not os.path.isdir(path):
            return False
        if os.listdir(path):
            return False
    return True


def create_or_finish(root: str, manifest_name: str, payload: bytes) -> None:
    """Create a store at `root` (which may not exist, be empty, or hold the leftovers
    of an interrupted creation), the manifest last. Raises `InvalidInputError` if
    `root` holds anything else and no manifest appeared meanwhile."""
    manifest = os.path.join(root, manifest_name)
    try:
        os.makedirs(root, exist_ok=True)  # the root itself, by path: it is being created
    except OSError as exc:
        raise StorageError(f"cannot create store at {root}: {exc.strerror or exc}") from exc
    if not leftovers_only(root, manifest_name):
        if os.path.exists(manifest):
            return  # another process created it meanwhile
        raise InvalidInputError(
            f"{root} is not empty and is not a journal store (no {manifest_name})"
        )
    ensure_dirs(root)
    if os.path.exists(manifest):
        return  # another process finished it meanwhile
    write_meta(manifest, KIND_MANIFEST, payload, durable=True)  # syncs the root after
    parent = os.path.dirname(root)
    if parent:
        fsio.sync_dir(parent)
    _remove_stale_temporaries(root, manifest_name)


def _remove_stale_temporaries(root: str, manifest_name: str) -> None:
    """Temporary manifests of creations that died (old ones only: a young one may be
    another process's, about to be renamed)."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for name in os.listdir(root):
        if not name.startswith(f"{manifest_name}.tmp."):
            continue
        path = os.path.join(root, name)
        try:
            if os.stat(path).st_mtime < cutoff:
                os.unlink(path)
        except OSError:
            continue

"""The store's root, as the directory it was when the store opened it.

A store names its files by path. Were its root moved aside and another
directory put at that path, writes that create their parents by path would
land in the new directory (or recreate a tree there) and be acknowledged into
a store nobody opens. `RootGuard` remembers the root's (st_dev, st_ino) from the
open and is asked where it is cheap and where it matters: before a directory
is created and before a write that created one is acknowledged. A directory
is only ever created below a parent that exists (`mkdir`, never `makedirs`):
the store's top-level directories are never recreated by path.
"""

from __future__ import annotations

import os

from .errors import StorageError


class RootGuard:
    """The identity of a store's root directory at open, and checks against it."""

    def __init__(self, root: str) -> None:
        self.root = root
        try:
            st = os.stat(root)
        except OSError as exc:
            raise StorageError(f"cannot stat store root {root}: {exc.strerror or exc}") from exc
        self.key = (st.st_dev, st.st_ino)

    def is_same(self) -> bool:
        """Whether `root` still names the directory the store opened."""
        try:
            st = os.stat(self.root)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.key

    def check(self, what: str) -> None:
        """Raise `StorageError` unless the root is still the directory opened."""
        if not self.is_same():
            raise StorageError(
                f"{what}: the store root {self.root} is no longer the directory this store"
                " opened (moved, replaced or removed); nothing was written there"
            )

    def mkdir(self, path: str, what: str) -> bool:
        """Create directory `path` below an existing parent; True if this call made it.

        The root is checked first and again once the directory exists, so that
        a directory created after the root was replaced is never relied on.
        """
        self.check(what)
        try:
            made = mkdir_below(path)
        except StorageError:
            self.check(what)  # the likely cause of a missing parent: say so
            raise
        self.check(what)
        return made


def mkdir_below(path: str) -> bool:
    """Create directory `path` below a parent that exists (never the parents: the
    store's root and its top-level directories are not recreated by path); True
    if this call made it, False if it existed."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return False
    except FileNotFoundError as exc:
        raise StorageError(f"cannot create {path}: its parent directory is missing") from exc
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc.strerror or exc}") from exc
    return True

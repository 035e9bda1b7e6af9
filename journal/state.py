"""Middleware state: last-writer-wins opaque JSON by (scope, key).

Each value is one small file, `state/<scope>/<key>`, replaced atomically (temp
file, fsync, rename, directory fsync), so a reader sees the old or the new value
and a crash never leaves half of one. In "os" durability the directory syncs are
skipped but the temp file is still fsynced before the rename: a rename may reach
the disk before unsynced data, and an unsynced file renamed over a durable value
would turn it into an unreadable one after a power loss. So after a power loss a
value is old or new (or absent if it never was durable), never unreadable; an
os-mode save_state costs one file sync, not three syncs.

A scope directory's entry in `state/` is made durable before the first value
this process acknowledges in it, whoever created the directory (a writer killed
between its mkdir and its sync of `state/` leaves it unsynced otherwise).
Directory names come from `layout.dir_name` and the file stores the exact scope and key,
checked on read. State whose scope equals a session id is removed with that
session (see `delete_sessions`).
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from . import fsio
from .errors import CorruptionError, JournalError, StorageError
from .layout import STATE_DIR, dir_name
from .metafile import KIND_STATE, read_meta, write_meta
from .rootcheck import RootGuard


class StateValue(msgspec.Struct, array_like=True):
    scope: str
    key: str
    value: Any


_decode = msgspec.msgpack.Decoder(StateValue).decode
_encode = msgspec.msgpack.Encoder().encode


def read_value(path: str) -> StateValue:
    """The scope, key and value one state file holds (a bundle's copy, say)."""
    return _decode(read_meta(path, KIND_STATE))


class StateStore:
    def __init__(self, root: str, *, durable: bool, guard: RootGuard | None = None):
        self.dir = os.path.join(root, STATE_DIR)
        self.durable = durable
        self.guard = guard if guard is not None else RootGuard(root)
        # Scope directory names whose entry in state/ this process made durable
        # (or, in "os" mode, found present): no sync for them again.
        self._confirmed: set[str] = set()

    def scope_dir(self, scope: str) -> str:
        return os.path.join(self.dir, dir_name(scope))

    def load(self, scope: str, key: str) -> Any:
        path = os.path.join(self.scope_dir(scope), dir_name(key))
        try:
            raw = read_meta(path, KIND_STATE)
        except FileNotFoundError:
            return None
        try:
            item = _decode(raw)
        except msgspec.DecodeError as exc:
            raise CorruptionError(f"state value does not decode: {exc}", path=path) from exc
        if item.scope != scope or item.key != key:
            raise CorruptionError(
                f"state file holds ({item.scope!r}, {item.key!r}), expected ({scope!r}, {key!r})",
                path=path,
            )
        return item.value

    def save(self, scope: str, key: str, value: Any) -> None:
        name = dir_name(scope)
        directory = os.path.join(self.dir, name)
        if name not in self._confirmed:
            self._confirm_scope_dir(name, directory)
        payload = _encode(StateValue(scope, key, value))
        path = os.path.join(directory, dir_name(key))
        try:
            write_meta(path, KIND_STATE, payload, durable=self.durable, sync_content=True)
        except StorageError:
            if name not in self._confirmed or os.path.isdir(directory):
                raise
            # Moved away since this process confirmed it (a delete of the session
            # the scope is named after, maybe by another process): create it again.
            self._confirmed.discard(name)
            self._confirm_scope_dir(name, directory)
            write_meta(path, KIND_STATE, payload, durable=self.durable, sync_content=True)

    def _confirm_scope_dir(self, name: str, directory: str) -> None:
        """Create the scope directory if needed (below an existing `state/` of the
        root this store opened) and make its entry durable (a durable store)."""
        what = "save_state"
        if os.path.isdir(directory):
            self.guard.check(what)  # found, but maybe in another directory's tree
        else:
            self.guard.mkdir(directory, what)
        if self.durable:
            fsio.sync_dir(self.dir)
        self._confirmed.add(name)

    def forget_scopes(self, names: list[str]) -> None:
        """Scope directories moved away (a delete): the next save confirms them again."""
        self._confirmed.difference_update(names)

    def scopes_present(self, scopes: list[str]) -> list[str]:
        """Scope directory names (of `scopes`) that exist."""
        return [dir_name(s) for s in scopes if os.path.isdir(self.scope_dir(s))]

    def keys(self, scope: str) -> list[tuple[str, Any]]:
        """Every (key, value) of one scope, sorted by key."""
        directory = self.scope_dir(scope)
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if ".tmp." in name:
                continue
            try:
                item = _decode(read_meta(os.path.join(directory, name), KIND_STATE))
            except (JournalError, msgspec.DecodeError, FileNotFoundError):
                continue
            out.append((item.key, item.value))
        return sorted(out, key=lambda kv: kv[0])

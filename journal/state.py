"""Middleware state: last-writer-wins opaque JSON by (scope, key).

Each value is one small file, `state/<scope>/<key>`, replaced atomically (temp
file, fsync, rename, directory fsync), so a reader sees the old or the new value
and a crash never leaves half of one. Directory names come from `naming` and
the file stores the exact scope and key, checked on read. State whose scope
equals a session id is removed with that session (see `delete_sessions`).
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from . import fsio
from .errors import CorruptionError, JournalError, StorageError
from .metafile import KIND_STATE, read_meta, write_meta
from .naming import dir_name

STATE_DIR = "state"


class StateValue(msgspec.Struct, array_like=True):
    scope: str
    key: str
    value: Any


_decode = msgspec.msgpack.Decoder(StateValue).decode
_encode = msgspec.msgpack.Encoder().encode


class StateStore:
    def __init__(self, root: str, *, durable: bool):
        self.dir = os.path.join(root, STATE_DIR)
        self.durable = durable

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
        directory = self.scope_dir(scope)
        if not os.path.isdir(directory):
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create {directory}: {exc.strerror}") from exc
            if self.durable:
                fsio.sync_dir(self.dir)
        payload = _encode(StateValue(scope, key, value))
        write_meta(
            os.path.join(directory, dir_name(key)), KIND_STATE, payload, durable=self.durable
        )

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

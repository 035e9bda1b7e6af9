"""How the saver stores LangGraph values in journal records, and reads them back.

A value is stored as `[type, base64(bytes)]` of the saver's serde (journal
records hold JSON). The items of the list channel kept as the journal context
are stored one by one: an unchanged item of the last put keeps its stored form,
and an item decoded once is handed out as copies afterwards (`copies`).
Checkpoint metadata is stored as JSON where it has a JSON form.
"""

from __future__ import annotations

import base64
import binascii
import copy
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from journal import CorruptionError, InvalidInputError, check_json_value

from .copies import MessageCopier, NoClone, copier, message_copies

_RAW_MEMO = 8192  # base64-decoded list items remembered (by identity) across reads
_OBJ_MEMO_BYTES = 32 << 20  # msgpack bytes of the items whose decoded form is remembered


# ------------------------------------------------------------------ framing
def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


if sys.version_info >= (3, 11):

    def _b64decode(text: str) -> bytes:
        # strict_mode validates in C what `validate=True` checks with a regex.
        return binascii.a2b_base64(text, strict_mode=True)

else:  # pragma: no cover - Python 3.10

    def _b64decode(text: str) -> bytes:
        return base64.b64decode(text, validate=True)


def unb64(text: Any, where: str) -> bytes:
    if not isinstance(text, str):
        raise CorruptionError(f"{where}: expected a base64 string")
    try:
        return _b64decode(text)
    except (binascii.Error, ValueError) as exc:
        raise CorruptionError(f"{where}: bad base64 ({exc})") from exc


def typed(value: Any, where: str) -> tuple[str, bytes]:
    """The serde's (type, bytes) of a stored `[type, base64]`."""
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], str)
    ):
        raise CorruptionError(f"{where}: expected [type, base64]")
    return value[0], unb64(value[1], where)


def msgpack_array_header(n: int) -> bytes:
    """The msgpack header of an array of `n` elements (to join already-encoded items)."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


# First bytes of a msgpack array: fixarray (0x90-0x9f), array 16, array 32.
_MSGPACK_ARRAY_STARTS = frozenset(bytes([b]) for b in (*range(0x90, 0xA0), 0xDC, 0xDD))
_raw_list_decode = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode
_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


def jsonable(value: Any) -> Any:
    """`value` as plain JSON (tuples become lists), or None if it has no JSON form."""
    try:
        return _json_decode(_json_encode(value))
    except (TypeError, ValueError, OverflowError, msgspec.MsgspecError):
        return None


# ------------------------------------------------------------ reuse on put
_NO_SNAPSHOT: Any = object()
_IMMUTABLE = (str, int, float, bool, bytes, type(None))


def _snapshot(value: Any) -> Any:
    """A shallow copy of an object's attributes, to detect attributes set since."""
    if isinstance(value, _IMMUTABLE):
        return None
    attrs = getattr(value, "__dict__", None)
    if not isinstance(attrs, dict):
        return _NO_SNAPSHOT  # a dict, list or slotted object: always serialise again
    return attrs.copy()


_is = operator.is_
_attrs_of = operator.attrgetter("__dict__")


@dataclass
class SerCache:
    """The list items of a session's last put, position by position: the objects, a
    shallow snapshot of each one's attributes (`_snapshot`) and their stored form."""

    objs: list[Any]
    snaps: list[Any]
    items: list[Any]
    attrs: bool  # every snapshot is an attribute dict (then checked in C loops)


# ------------------------------------------------------------------ codec
class ItemCodec:
    """The saver's serde for what it stores, with the memory that makes it cheap.

    `with_serde` gives another serde the same memory (what a saver copy made by
    `JournalSaver.with_allowlist` uses).
    """

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde
        self.fast_list = isinstance(serde, JsonPlusSerializer)
        self._raw_memo: dict[int, tuple[Any, bytes]] = {}
        self._obj_memo: dict[int, tuple[Any, Callable[[], Any]]] = {}  # `_load_list_fast`
        self._obj_memo_bytes = 0  # msgpack bytes of the items `_obj_memo` holds
        # The same copiers by the items' msgpack bytes, for values stored elsewhere
        # that hold the same items (`load_write`); cleared with `_obj_memo`.
        self._bytes_memo: dict[bytes, Callable[[], Any]] = {}

    def with_serde(self, serde: SerializerProtocol) -> ItemCodec:
        """A codec encoding and decoding with `serde`, sharing this one's memos."""
        other = copy.copy(self)
        other.serde = serde
        return other

    # -------------------------------------------------------------- values
    def dump(self, value: Any) -> list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, b64(data)]

    def load(self, value: Any, where: str) -> Any:
        return self.serde.loads_typed(typed(value, where))

    def encode_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        plain = jsonable(metadata)
        if isinstance(plain, dict) and "__typed__" not in plain:
            try:
                check_json_value(plain, "metadata")
                return plain
            except InvalidInputError:
                pass
        return {"__typed__": self.dump(metadata)}

    def decode_metadata(self, value: Any) -> dict[str, Any]:
        if isinstance(value, dict) and "__typed__" in value:
            out = self.load(value["__typed__"], "checkpoint metadata")
            return dict(out) if isinstance(out, dict) else {}
        return dict(value) if isinstance(value, dict) else {}

    # ---------------------------------------------------------- list items
    def dump_items(self, values: list[Any], cache: SerCache | None) -> tuple[list[Any], SerCache]:
        """Serialise list items, reusing the stored form of unchanged items of the last put.

        An item is reused only if it is the very same object as at the same position
        in the last put of this session and its attributes compare equal to a
        shallow snapshot taken then; anything else is serialised again. (Changes
        made in place inside an attribute's value, e.g. to a message's
        `additional_kwargs` dict, are not seen: LangGraph state is meant to be
        updated through nodes' returned writes, which create new objects.)
        """
        if cache is not None and cache.attrs:
            grown = self._dump_grown(values, cache)
            if grown is not None:
                return grown
        old_objs = cache.objs if cache is not None else []
        old_snaps = cache.snaps if cache is not None else []
        old_items = cache.items if cache is not None else []
        n = len(old_objs)
        items: list[Any] = []
        snaps: list[Any] = []
        attrs = True
        for i, v in enumerate(values):
            if i < n and old_objs[i] is v:
                old_snap = old_snaps[i]
                if old_snap is None or (
                    old_snap is not _NO_SNAPSHOT and getattr(v, "__dict__", None) == old_snap
                ):  # (compared in place: no copy unless serialised again)
                    items.append(old_items[i])
                    snaps.append(old_snap)
                    attrs = attrs and type(old_snap) is dict
                    continue
            attrs = self._dump_onto(v, items, snaps) and attrs
        return items, SerCache(list(values), snaps, items[:], attrs)

    def _dump_grown(self, values: list[Any], cache: SerCache) -> tuple[list[Any], SerCache] | None:
        """`dump_items` for the common case, a list that grew (None: it is not that).

        Checked as `dump_items` checks each item, but in C loops: the same objects,
        each with attributes equal to its snapshot (each snapshot is an attribute
        dict, so each object has one).
        """
        n = min(len(values), len(cache.objs))
        head = values if n == len(values) else values[:n]
        objs = cache.objs if n == len(cache.objs) else cache.objs[:n]
        snaps = cache.snaps if n == len(cache.snaps) else cache.snaps[:n]
        try:
            same = all(map(_is, head, objs)) and list(map(_attrs_of, head)) == snaps
        except AttributeError:
            same = False
        if not same:
            return None
        items = cache.items[:n]
        snaps = snaps[:]
        attrs = True
        for v in values[n:]:
            attrs = self._dump_onto(v, items, snaps) and attrs
        return items, SerCache(list(values), snaps, items[:], attrs)

    def _dump_onto(self, value: Any, items: list[Any], snaps: list[Any]) -> bool:
        """Append the stored form of `value` to `items` and its snapshot to `snaps`;
        whether the snapshot is an attribute dict."""
        items.append(self.dump(value))
        snap = _snapshot(value)
        snaps.append(snap)
        return type(snap) is dict

    def load_list(self, items: list[Any], where: str) -> list[Any]:
        if self.fast_list and items:
            out = self._load_list_fast(items, where)
            if out is not None:
                return out
        return [self.serde.loads_typed(typed(item, where)) for item in items]

    def _load_list_fast(self, items: list[Any], where: str) -> list[Any] | None:
        """`load_list` for msgpack items (None: not all msgpack, use the general path).

        The contexts of a thread's checkpoints share their stored items (one is a
        prefix of the next), so a `list` returning k checkpoints would decode the
        same message up to k times (pydantic validation: most of a warm `list`).
        Instead the first decode of a stored item is kept (by the item's identity)
        as a way to copy it (`copier`), and later reads get a copy: a new object,
        equal to a fresh decode, sharing no mutable part with other copies (a value
        that cannot be copied that way is decoded every time).
        """
        memo = self._obj_memo
        out: list[Any] = [None] * len(items)
        miss_at: list[int] = []
        miss: list[Any] = []
        copy_at: list[int] = []
        copiers: list[MessageCopier] = []  # copied together (`message_copies`)
        for i, item in enumerate(items):
            hit = memo.get(id(item))
            if hit is not None and hit[0] is item:
                made = hit[1]
                if type(made) is MessageCopier:
                    copy_at.append(i)
                    copiers.append(made)
                else:
                    out[i] = made()
            else:
                miss_at.append(i)
                miss.append(item)
        if copiers:
            for i, value in zip(copy_at, message_copies(copiers), strict=True):
                out[i] = value
        if not miss:
            return out
        return self._decode_missing(out, miss_at, miss, where)

    def _decode_missing(
        self, out: list[Any], miss_at: list[int], miss: list[Any], where: str
    ) -> list[Any] | None:
        """Fill `out` at `miss_at` with the decodes of the items `miss`, remembering
        a way to copy each one (None: not all msgpack)."""
        raws = self._msgpack_items(miss, where)
        if raws is None:
            return None
        # One decode of one msgpack array instead of one call per item: the
        # items are msgpack values, so the array is their concatenation.
        raw = msgpack_array_header(len(raws)) + b"".join(raws)
        decoded = self.serde.loads_typed(("msgpack", raw))
        if not isinstance(decoded, list) or len(decoded) != len(raws):
            return None
        memo = self._obj_memo
        for i, item, r, value in zip(miss_at, miss, raws, decoded, strict=True):
            out[i] = value
            try:
                made = copier(value)
            except NoClone:
                continue
            if len(memo) >= _RAW_MEMO or self._obj_memo_bytes > _OBJ_MEMO_BYTES:
                memo.clear()
                self._bytes_memo.clear()
                self._obj_memo_bytes = 0
            memo[id(item)] = (item, made)  # holds the item: its id cannot be reused
            self._bytes_memo[r] = made
            self._obj_memo_bytes += len(r)
        return out

    def _msgpack_items(self, items: list[Any], where: str) -> list[bytes] | None:
        """The msgpack bytes of stored `[type, base64]` list items (None: not all msgpack).

        Items are the (never mutated) lists of a stored context; the contexts of a
        thread's checkpoints share them (one is a prefix of the next), so the
        base64 decode of an item is remembered by identity, not repeated.
        """
        memo = self._raw_memo
        out: list[bytes] = []
        for item in items:
            hit = memo.get(id(item))
            if hit is not None and hit[0] is item:
                out.append(hit[1])
                continue
            if (
                type(item) is not list
                or len(item) != 2
                or item[0] != "msgpack"
                or type(item[1]) is not str
            ):
                return None
            raw = unb64(item[1], where)
            if len(memo) >= _RAW_MEMO:
                memo.clear()
            memo[id(item)] = (item, raw)  # holds the item: its id cannot be reused
            out.append(raw)
        return out

    def load_write(self, value: Any, where: str) -> Any:
        """`load` of a pending write's value, copying list items decoded before.

        A step's write to the list channel (e.g. `[AIMessage]`) is stored as one
        msgpack array of items that the next checkpoint's context stores one by
        one, with the same bytes: when every element's bytes are those of an item
        `_load_list_fast` decoded (`_bytes_memo`), the value is a list of copies of
        them, equal to a fresh decode (which costs a validation per message).
        """
        if not (
            self._bytes_memo
            and type(value) is list
            and len(value) == 2
            and value[0] == "msgpack"
            and type(value[1]) is str
        ):
            return self.load(value, where)
        raw = unb64(value[1], where)
        copies = self._copies_of(raw)
        return self.serde.loads_typed(("msgpack", raw)) if copies is None else copies

    def _copies_of(self, raw: bytes) -> list[Any] | None:
        """Copies of the items of a msgpack array whose every element is an item
        decoded before (None: it is not)."""
        if raw[:1] not in _MSGPACK_ARRAY_STARTS:
            return None
        try:
            parts = _raw_list_decode(raw)
        except msgspec.DecodeError:
            return None
        memo = self._bytes_memo
        copiers = [memo.get(bytes(part)) for part in parts]
        if not copiers or None in copiers:
            return None
        messages = [c for c in copiers if type(c) is MessageCopier]
        if len(messages) == len(copiers):
            return message_copies(messages)
        return [c() for c in copiers if c is not None]

"""New copies of decoded list items, equal to a fresh decode of them.

The checkpoints of a thread share their stored messages (one's list is a
prefix of the next's), so a read returning k checkpoints would decode (and
validate) the same message up to k times. The saver decodes it once and hands
out copies instead: each a new object that shares no mutable part with the
others.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec
from langchain_core.messages import BaseMessage


class NoClone(Exception):
    """`clone` cannot copy this value (it is decoded afresh instead)."""


_set_attr = object.__setattr__
SCALARS = frozenset((str, int, float, bool, type(None)))  # immutable: shared by copies

mp_encode = msgspec.msgpack.Encoder().encode
mp_decode = msgspec.msgpack.Decoder().decode
_I64_MIN = -(1 << 63)
_U64_MAX = (1 << 64) - 1
_EXACT_DEPTH = 32


def clone(value: Any) -> Any:
    """A copy of a decoded list item that equals a fresh decode of it and shares no
    mutable part with `value`: JSON-like values (dicts, lists, tuples, scalars) and
    LangChain messages whose fields hold only such values. Raises `NoClone` else.
    """
    t = type(value)
    if t in SCALARS:
        return value
    if t is dict:
        return {k: v if type(v) in SCALARS else clone(v) for k, v in value.items()}
    if t is list:
        return [v if type(v) in SCALARS else clone(v) for v in value]
    if t is tuple:
        return tuple([clone(v) for v in value])
    if isinstance(value, BaseMessage) and not value.__pydantic_private__:
        # What pydantic's `__copy__` does, with every field value copied as above.
        new = object.__new__(t)  # what a pydantic model's `__new__` is
        extra = value.__pydantic_extra__
        _set_attr(
            new,
            "__dict__",
            {k: v if type(v) in SCALARS else clone(v) for k, v in value.__dict__.items()},
        )
        _set_attr(new, "__pydantic_extra__", None if extra is None else clone(extra))
        _set_attr(new, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
        _set_attr(new, "__pydantic_private__", None)
        return new
    raise NoClone


def exact(value: Any) -> bool:
    """Whether msgpack gives `value` back equal and with the same types: str, int
    (64-bit), float, bool, None, and lists and str-keyed dicts of those."""
    level = [value]
    for _ in range(_EXACT_DEPTH):
        below: list[Any] = []
        for v in level:
            t = type(v)
            if t is str or t is float or t is bool or v is None:
                continue
            if t is int:
                if not _I64_MIN <= v <= _U64_MAX:
                    return False
            elif t is dict:
                for k in v:
                    if type(k) is not str:
                        return False
                below.extend(v.values())
            elif t is list:
                below.extend(v)
            else:
                return False
        if not below:
            return True
        level = below
    return False


def exact_bytes(raw: bytes) -> bytes:
    """`raw` in a bytes object of its size (msgspec's can hold half as much again spare)."""
    return bytes(memoryview(raw))


class MessageCopier:
    """Makes new copies of one message (as `clone` builds one, faster); see `copier`.

    `template`: a shallow copy of the message's attributes, its own dict. A copy
    is a shallow copy of it in which every container is made anew: an empty one
    as a new empty one, any other one decoded from its msgpack (`plan`, taken
    here; the template then holds None in their place, not the message's own
    containers). Everything else is an immutable scalar (`exact`), which copies
    share with the message.
    """

    __slots__ = ("extra", "fields", "plan", "template", "type")

    def __init__(
        self, t: type[Any], template: dict[str, Any], extra: bytes | None, fields: frozenset[str]
    ) -> None:
        self.type = t
        self.template = template
        self.extra = extra
        self.fields = fields
        plan: list[tuple[str, type[Any] | None, bytes]] = []
        for key, value in template.items():
            kind = type(value)
            if kind in SCALARS:
                continue
            if not value:  # an empty dict or list
                plan.append((key, kind, b""))
            else:
                plan.append((key, None, exact_bytes(mp_encode(value))))
        for key, _, _ in plan:
            template[key] = None  # set anew in every copy
        self.plan = tuple(plan)

    def __call__(self) -> Any:
        return message_copies([self])[0]


def message_copies(
    copiers: list[MessageCopier],
    new: Callable[[type[Any]], Any] = object.__new__,
    set_attr: Callable[[Any, str, Any], None] = _set_attr,
    decode: Callable[[bytes], Any] = mp_decode,
) -> list[Any]:
    """A new copy of each copier's message, built as pydantic's `__copy__` builds one."""
    out: list[Any] = []
    for c in copiers:
        values = c.template.copy()
        for key, empty, raw in c.plan:
            values[key] = decode(raw) if empty is None else empty()
        obj = new(c.type)
        set_attr(obj, "__dict__", values)
        extra = c.extra
        set_attr(obj, "__pydantic_extra__", None if extra is None else decode(extra))
        set_attr(obj, "__pydantic_fields_set__", set(c.fields))
        set_attr(obj, "__pydantic_private__", None)
        out.append(obj)
    return out


def copier(value: Any) -> Callable[[], Any]:
    """A function that returns a new copy of a decoded list item at each call: equal
    to a fresh decode, sharing no mutable part with `value` or with other copies.

    A message whose fields hold only msgpack values (`exact`) is copied by a
    `MessageCopier` (a shallow copy with its containers made anew: a fraction of
    what `clone` costs); anything else `clone` can copy is copied from a
    template. Raises `NoClone` otherwise.
    """
    if isinstance(value, BaseMessage) and not value.__pydantic_private__:
        extra = value.__pydantic_extra__
        if exact(value.__dict__) and (extra is None or exact(extra)):
            try:
                # Its scalars are immutable (`exact`), its containers encoded here.
                made = MessageCopier(
                    type(value),
                    value.__dict__.copy(),
                    None if extra is None else exact_bytes(mp_encode(extra)),
                    frozenset(value.__pydantic_fields_set__),
                )
            except (msgspec.EncodeError, UnicodeEncodeError, OverflowError):
                pass  # e.g. a string with a lone surrogate: copied by `clone`
            else:
                return made
    return functools.partial(clone, clone(value))

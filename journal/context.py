"""The context-prefix rule: within one epoch the stored context only grows.

Within one `context_epoch` the stored context items are an immutable prefix of
every later checkpoint's context, so a save stores only the new tail. A higher
epoch replaces the context; an epoch going backwards, or a changed or
truncated prefix without a new epoch, is rejected and nothing changes.
Comparison is by JSON value: encoded bytes first (fast), decoded values when
the bytes differ (a dict with another key order is the same JSON value). The
value comparison keeps JSON's types apart, as serde_json does: `true`, `1` and
`1.0` are three different values, although Python finds them equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .errors import ContractViolationError

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


def encode_items(items: list[Any]) -> list[bytes]:
    return [_encode(item) for item in items]


def plan_context(
    stored: Sequence[bytes | msgspec.Raw] | None,
    stored_epoch: int,
    new_items: list[Any],
    new_epoch: int,
    *,
    joined: bytes | bytearray | None = None,
) -> tuple[int, list[bytes]]:
    """Return (base, tail): how many stored items stay, and the encoded items to append.

    `stored` is None for a session with no checkpoint yet. `joined`, when given,
    is `b"".join(stored)`, kept by the caller so a save does not copy the whole
    stored context again.
    """
    if stored is None or new_epoch > stored_epoch:
        return 0, encode_items(new_items)
    if new_epoch < stored_epoch:
        raise ContractViolationError(
            f"context epoch cannot move backwards (stored {stored_epoch}, got {new_epoch})"
        )
    n = len(stored)
    if len(new_items) < n:
        raise ContractViolationError(
            "context prefix was truncated without advancing its epoch "
            f"(stored {n} items, got {len(new_items)}, epoch {new_epoch})"
        )
    # One encode of the whole prefix (a C loop) decides the common case, compared
    # past its array header without joining header and items into a new copy.
    if joined is None:
        joined = b"".join(stored)
    if n and not _same_array(_encode(new_items[:n]), n, joined):
        for i in range(n):
            item = new_items[i]
            old = bytes(stored[i])
            if _encode(item) != old and not json_equal(_decode(old), item):
                raise ContractViolationError(
                    "context prefix changed without advancing its epoch "
                    f"(item {i}, epoch {new_epoch})"
                )
    return n, encode_items(new_items[n:])


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values that tells booleans, integers and floats apart.

    Objects compare without regard to key order, arrays in order. Iterative, so
    deep values cannot exhaust the Python stack.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if _kind(x) != _kind(y):
            return False
        if isinstance(x, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, (list, tuple)):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def _kind(value: Any) -> type:
    # bool is a subclass of int; tuples encode as arrays, like lists.
    if isinstance(value, bool):
        return bool
    if isinstance(value, int):
        return int
    if isinstance(value, tuple):
        return list
    return type(value)


def _same_array(encoded: bytes, n: int, joined: bytes | bytearray) -> bool:
    """Is `encoded` the msgpack array of `n` items whose encodings are `joined`?"""
    header = msgpack_array_header(n)
    return (
        len(encoded) == len(header) + len(joined)
        and encoded.startswith(header)
        and encoded.endswith(joined)  # memcmp; a memoryview == compares byte by byte
    )


def msgpack_array_header(n: int) -> bytes:
    """The msgpack header of an array of `n` elements (to join already-encoded items)."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")

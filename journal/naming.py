"""Map arbitrary session ids and state scopes to safe, portable directory names.

A name is `<slug>-<digest>`: the slug is a short, lowercase, cosmetic hint taken
from the id (so a person listing `sessions/` can recognise it); the digest is
26 base32 characters (130 bits) of SHA-256 over the id's UTF-8 bytes, so ids
that differ in any way, case included, get different names on case-insensitive
and Windows filesystems too. Names never contain a path separator, never start
with a dot and never equal a reserved device name. The identity file inside the
directory stores the exact id and is checked on every open, so a digest
collision is detected, never silently shared.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import re
from collections.abc import Callable
from typing import Any


def _builtin_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256 (the same digest, without OpenSSL's per-call lookups:
    most of a new id's name cost, cold), else hashlib's."""
    for module, name in (("_sha256", "sha256"), ("_sha2", "sha256")):  # 3.11, 3.12+
        try:
            found: Callable[[bytes], Any] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        return found
    return hashlib.sha256


_new_sha256 = _builtin_sha256()

_SLUG_BAD = re.compile(r"[^a-z0-9_-]+")
SLUG_MAX = 24


_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"  # RFC 4648's alphabet, lowercased
_BASE32_PAIRS = [a + b for a in _BASE32 for b in _BASE32]  # 10 bits -> 2 characters
_SHIFTS = range(120, -1, -10)


@functools.lru_cache(maxsize=8192)  # called on every store call; hashing is not free
def dir_name(ident: str) -> str:
    digest = _new_sha256(ident.encode("utf-8")).digest()
    # The first 26 characters of its base32 encoding: its first 130 bits, 10 at a
    # time (base64.b32encode is pure Python, and encodes all 256 bits).
    bits = int.from_bytes(digest[:17], "big") >> 6
    pairs = _BASE32_PAIRS
    tag = "".join([pairs[(bits >> shift) & 1023] for shift in _SHIFTS])
    lower = ident.lower()
    if lower.isascii() and lower.replace("-", "a").replace("_", "a").isalnum():
        slug = lower[:SLUG_MAX].strip("_")  # nothing to replace (the common case)
    else:
        slug = _SLUG_BAD.sub("_", lower)[:SLUG_MAX].strip("_")
    return f"{slug}-{tag}" if slug else tag

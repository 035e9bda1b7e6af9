"""The `journal:` URI scheme for ADK's service registry (`adk web`, `adk run`, `adk api_server`).

    journal:///var/lib/agent/sessions   an absolute path
    journal://sessions                  a path relative to the working directory
    journal://sessions?durability=os    a store option (durability: fsync | os)

ADK's registry knows only its built-in schemes; an agents directory adds one
with a `services.yaml` naming `from_uri` (see docs/adk.md), or a `services.py`
calling `register()`.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from journal import InvalidInputError

from .service import JournalSessionService

SCHEME = "journal"
_OPTIONS = {"durability"}


def root_of(uri: str) -> tuple[str, dict[str, str]]:
    """The store directory a `journal:` URI names, and its options."""
    parsed = urlparse(uri)
    if parsed.scheme != SCHEME:
        raise InvalidInputError(f"not a {SCHEME}: URI: {uri!r}")
    path = unquote(parsed.netloc + parsed.path)
    if not path:
        raise InvalidInputError(
            f"{uri!r} names no directory (journal:///abs/path or journal://rel)"
        )
    options: dict[str, str] = {}
    for name, values in parse_qs(parsed.query, keep_blank_values=True).items():
        if name not in _OPTIONS:
            raise InvalidInputError(f"{uri!r}: unknown option {name!r} (known: durability)")
        options[name] = values[-1]
    return os.path.abspath(path), options


def from_uri(uri: str, **kwargs: Any) -> JournalSessionService:
    """A `JournalSessionService` for a `journal:` URI (ADK's registry passes `agents_dir`,
    and a `services.yaml` class entry calls this with `uri=`)."""
    kwargs.pop("agents_dir", None)
    root, options = root_of(uri)
    if kwargs:
        raise InvalidInputError(f"{uri!r}: unsupported session service arguments {sorted(kwargs)}")
    durability = options.get("durability", "fsync")
    if durability == "fsync":
        return JournalSessionService(root)
    if durability == "os":
        return JournalSessionService(root, durability="os")
    raise InvalidInputError(f"{uri!r}: durability must be fsync or os, not {durability!r}")


def register(scheme: str = SCHEME) -> None:
    """Add the `journal:` scheme to ADK's service registry (idempotent)."""
    from google.adk.cli.service_registry import get_service_registry

    get_service_registry().register_session_service(scheme, from_uri)

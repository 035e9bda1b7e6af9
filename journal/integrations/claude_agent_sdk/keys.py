"""How an SDK `SessionKey` names a journal session, and back.

    main transcript   {project_key: P, session_id: S}             ->  "<P>/<S>"
    subagent subkey   {project_key: P, session_id: S, subpath: X}  ->  "<P>/<S>/<X>"

`P` and `S` are written with "%" and "/" percent-escaped, so the first two "/"
of a journal id are always the separators and the mapping is injective (the
subpath, last, keeps its own "/"s: "subagents/agent-1"). Ids stay readable in
`journal ls` for the keys the SDK makes (a sanitised cwd, a UUID). The project
key is also the session's `owner_id`, so the catalog lists one project's
sessions without reading the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import InvalidInputError, validate_session_id

SEP = "/"


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _unescape(part: str) -> str:
    # Exact inverse of `_escape`: every "%" of an escaped part starts "%25" or "%2F".
    return part.replace("%2F", "/").replace("%25", "%")


@dataclass(frozen=True)
class Key:
    """A checked SDK key: its project, session and subpath (None: the main transcript)."""

    project_key: str
    session_id: str
    subpath: str | None = None

    @property
    def main_id(self) -> str:
        """The journal id of the main transcript of this key's session."""
        return _escape(self.project_key) + SEP + _escape(self.session_id)

    @property
    def journal_id(self) -> str:
        """The journal session that holds this key's entries."""
        if self.subpath is None:
            return self.main_id
        return self.main_id + SEP + self.subpath

    @property
    def main(self) -> Key:
        return Key(self.project_key, self.session_id)

    def as_dict(self) -> dict[str, str]:
        out = {"project_key": self.project_key, "session_id": self.session_id}
        if self.subpath is not None:
            out["subpath"] = self.subpath
        return out


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"session key: {what} must be a non-empty string, not {value!r}")
    return value


def parse_key(key: Any, *, subpath_allowed: bool = True) -> Key:
    """The `Key` of an SDK `SessionKey` dict; `InvalidInputError` naming what is wrong."""
    if not isinstance(key, dict):
        raise InvalidInputError(f"session key must be a dict, not {type(key).__name__}")
    project = _text(key.get("project_key"), "project_key")
    session = _text(key.get("session_id"), "session_id")
    subpath = key.get("subpath")
    if subpath is not None:
        if not subpath_allowed:
            raise InvalidInputError("session key: list_subkeys takes no subpath")
        # The SDK documents "" as invalid (omit the field for the main transcript).
        _text(subpath, "subpath")
    parsed = Key(project, session, subpath)
    validate_session_id(parsed.journal_id)  # at most 4 KiB, valid UTF-8
    return parsed


def main_key_of(journal_id: str, project_key: str) -> Key | None:
    """The main-transcript key a journal id names in this project (None: another shape)."""
    head = _escape(project_key) + SEP
    if not journal_id.startswith(head):
        return None
    rest = journal_id[len(head) :]
    if not rest or SEP in rest:
        return None
    return Key(project_key, _unescape(rest))


def subpath_of(journal_id: str, main: Key) -> str | None:
    """The subpath a journal id names under this main key (None: not one of its subkeys)."""
    head = main.main_id + SEP
    if not journal_id.startswith(head) or len(journal_id) == len(head):
        return None
    return journal_id[len(head) :]

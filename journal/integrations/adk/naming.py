"""Journal names of ADK things: session ids, owners, and the scopes of `app:`/`user:` state.

Each part is percent-escaped (`/` and `%` included), so the mapping is one to
one and a journal id names exactly one (app, user, session): `journal ls` shows
`adk/<app>/<user>/<session>`, readable when the names are plain.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

PREFIX = "adk/"
APP_SCOPE = "adk-app/"
USER_SCOPE = "adk-user/"


def _q(part: str) -> str:
    return quote(part, safe="")


def owner_id(app_name: str, user_id: str) -> str:
    """The journal owner of a user's sessions: a catalog page lists them."""
    return f"{PREFIX}{_q(app_name)}/{_q(user_id)}"


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    """The journal session id of an ADK session."""
    return f"{owner_id(app_name, user_id)}/{_q(session_id)}"


def app_prefix(app_name: str) -> str:
    """What the journal ids of every session of an app start with."""
    return f"{PREFIX}{_q(app_name)}/"


def parse_key(key: str) -> tuple[str, str, str] | None:
    """(app, user, session) of a journal id made by `session_key`; None for any other id."""
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX) :].split("/")
    if len(parts) != 3:
        return None
    app, user, sid = (unquote(p) for p in parts)
    return (app, user, sid) if session_key(app, user, sid) == key else None


def app_scope(app_name: str) -> str:
    """The middleware-state scope of an app's `app:` keys (shared by its users)."""
    return f"{APP_SCOPE}{_q(app_name)}"


def user_scope(app_name: str, user_id: str) -> str:
    """The middleware-state scope of a user's `user:` keys (shared by the user's sessions)."""
    return f"{USER_SCOPE}{_q(app_name)}/{_q(user_id)}"

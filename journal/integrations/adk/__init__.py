"""Google ADK sessions stored in a `journal` store: `JournalSessionService`.

    from journal.integrations.adk import JournalSessionService
    runner = Runner(agent=agent, app_name="app", session_service=JournalSessionService("sessions"))

`JournalSessionService` is a `google.adk.sessions.BaseSessionService`. Mapping
(docs/adk.md has the full story):

- An ADK session (app name, user id, session id) is one journal session, id
  `adk/<app>/<user>/<session>` (each part percent-escaped), owned by
  `adk/<app>/<user>` (so listing a user's sessions is a catalog page).
- `create_session` saves the journal session's first checkpoint (sequence 0);
  its metadata holds the session's own state (`app:`/`user:`/`temp:` keys
  excluded) and times.
- Each `append_event` is ONE journal commit (`save_with_events`): the ADK event
  as one journal event and a checkpoint whose metadata holds the session state
  with the event's delta folded in, at checkpoint sequence = event sequence. A
  writer that read an older sequence is refused with ADK's `StaleSessionError`.
- `app:` and `user:` state is journal middleware state, one stamped value per
  key (scopes `adk-app/<app>` and `adk-user/<app>/<user>`), written after the
  event's commit, which records them too: a read or the next append rolls
  forward what a crash between the two held back. `temp:` state is never stored.
- `fork_session` is a journal `fork`: the new session shares its parent's events
  up to the fork point; nothing is copied.
- `register()` adds the `journal:` URI scheme to ADK's service registry;
  `from_uri` is the factory a `services.yaml` names, so `adk web` and `adk run`
  take `--session_service_uri journal:///path`.

Modules: `service` (the calls), `records` (what a commit holds and how it reads
back), `naming` (ids and state scopes), `scoped` (stamped `app:`/`user:` values
and their roll forward), `chain` (events across forks), `uri` (the URI scheme).

Across processes a write holds `journal.integrations.dirlock.DirLock` on the
session directory: `append_event` reads the session's checkpoint and commits
the next one under it, and `delete_session` deletes under it, so an append never
re-creates a session a delete has just removed (a journal save to a missing id
creates one); `scoped` takes it on an `app:`/`user:` scope's state directory to
compare and write stamped values. Without `fcntl` (Windows) nothing is locked:
only the sequence rule orders appends, and two processes writing one
`app:`/`user:` key at once may leave the lower stamp.
"""

from __future__ import annotations

import importlib


def _require_adk() -> None:
    """Raise an `ImportError` naming the extra to install if ADK is missing."""
    try:
        for module in (
            "google.adk.sessions.base_session_service",
            "google.adk.events.event",
            "google.adk.errors._stale_session_error",
        ):
            importlib.import_module(module)
    except ImportError as exc:  # the extra is optional: say which one
        raise ImportError(
            f"journal.integrations.adk needs Google ADK ({exc}): pip install 'journal[adk]'"
        ) from exc


_require_adk()  # before the modules that import it

from .service import JournalSessionService  # noqa: E402
from .uri import SCHEME, from_uri, register, root_of  # noqa: E402

__all__ = ["SCHEME", "JournalSessionService", "from_uri", "register", "root_of"]

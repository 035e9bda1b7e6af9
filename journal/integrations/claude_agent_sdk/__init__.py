"""A Claude Agent SDK `SessionStore` on a `journal` store: `JournalSessionStore`.

    from journal.integrations.claude_agent_sdk import JournalSessionStore
    options = ClaudeAgentOptions(session_store=JournalSessionStore("sessions"))

Mapping (docs/claude-agent-sdk.md has the full story):

- A main transcript `{project_key, session_id}` is one journal session, id
  `<project_key>/<session_id>` ("%" and "/" escaped in both), `owner_id` the
  project key; a subagent subkey (`subpath`) is a journal fork of it, id
  `<main id>/<subpath>`, so `journal tree` shows it and deleting the main
  transcript deletes it in the same atomic delete.
- Each `append` is ONE journal event (`claude_sdk.entries`): the batch's entries
  as their JSON text, and for a main transcript the SDK's folded summary (or the
  event holding it, when the batch left it unchanged). One commit: atomic, and
  durable when the call returns. Entries whose `uuid` the key holds already are
  not stored again (the SDK's idempotency key); conditional appends
  (`expected_latest`) make that, and the summary fold, exact across processes.
- `load` reads the key's events oldest first; `list_sessions` and
  `list_session_summaries` read the catalog's sessions of the project (by
  owner) and each one's latest event; `list_subkeys` reads the catalog's
  children of the main transcript.

Modules: `sessionstore` (the SDK calls), `keys` (key <-> session id),
`records` (what an append writes, strict decoding), `state` (what this process
knows of each session, caught up from the log).
"""

from __future__ import annotations

import importlib


def _require_sdk() -> None:
    """Raise an `ImportError` naming the extra to install if the SDK is missing."""
    try:
        importlib.import_module("claude_agent_sdk")
        importlib.import_module("anyio.to_thread")
    except ImportError as exc:  # the extra is optional: say which one
        raise ImportError(
            f"journal.integrations.claude_agent_sdk needs the Claude Agent SDK ({exc}):"
            " pip install 'journal[claude-agent-sdk]'"
        ) from exc


_require_sdk()  # before the modules that import it

from .records import ENTRIES, META_KEY  # noqa: E402
from .sessionstore import JournalSessionStore  # noqa: E402

__all__ = ["ENTRIES", "META_KEY", "JournalSessionStore"]

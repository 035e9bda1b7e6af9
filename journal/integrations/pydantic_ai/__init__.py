"""pydantic-ai conversations in a `journal` store: `JournalConversationStore`.

    from journal.integrations.pydantic_ai import JournalConversationStore
    store = JournalConversationStore("conversations")     # a directory
    conversation = await store.load(cid) or Conversation(conversation_id=cid)
    result = await agent.run(prompt, conversation=conversation)
    await store.save(result)

Mapping (docs/pydantic-ai.md has the full story):

- A conversation is the journal session `session_prefix + conversation_id`; its
  `ConversationRecord` is the session's checkpoint metadata, replaced by every
  save (the checkpoint sequence advances by one per save, which makes the
  journal itself refuse a second writer of the same revision).
- Each `ConversationEntry` is one journal event, stored once; it names its
  parent by id and by location (session, event sequence), so a history is read
  by following locations, a page of events at a time.
- A save is ONE `save_with_events` commit (record + new entries), durable on
  return. A fork is ONE `Store.fork`: the new conversation's session is a journal
  child of the forked one and points at its entries; nothing is copied.
- `expected_revision` is checked, and the commit made, under a per-conversation
  lock that works across processes (locks.py); every conflict is pydantic-ai's
  `ConversationConflict`.
- `delete` deletes the session, or, while forks share its entries, empties its
  record and keeps the session until the last fork is deleted.

Modules: `store` (the class), `reads` (records, histories, the entry index),
`writes` (saves, forks, deletes), `records` (what is stored and how it is
encoded), `locks` (the conversation lock), `naming` (session ids and owners).
"""

from __future__ import annotations

import importlib


def _require_pydantic_ai() -> None:
    """Raise an `ImportError` naming the extra to install if pydantic-ai is missing."""
    try:
        for module in (
            "pydantic_ai.conversation",
            "pydantic_ai.conversation_store",
            "pydantic_ai.messages",
        ):
            importlib.import_module(module)
    except ImportError as exc:  # the extra is optional: say which one
        raise ImportError(
            f"journal.integrations.pydantic_ai needs pydantic-ai ({exc}):"
            " pip install 'journal[pydantic-ai]'"
        ) from exc


_require_pydantic_ai()  # before the modules that import it

from .records import ENTRY, META_KEY, ORIGIN_LABEL  # noqa: E402
from .store import JournalConversationStore  # noqa: E402

__all__ = ["ENTRY", "META_KEY", "ORIGIN_LABEL", "JournalConversationStore"]

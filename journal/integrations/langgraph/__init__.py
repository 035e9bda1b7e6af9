"""A LangGraph checkpoint saver on a `journal` store: `JournalSaver`.

    from journal.integrations.langgraph import JournalSaver
    graph = builder.compile(checkpointer=JournalSaver("agent-store"))

For LangGraph Server (`langgraph dev`), `langgraph.json` names
`generate_checkpointer` (module `server`):

    "checkpointer": {"path": "journal.integrations.langgraph.generate_checkpointer"}

Mapping (docs/langgraph.md has the full story):

- A thread's root namespace ("") is the journal session whose id is the thread
  id (with an optional prefix); a subgraph namespace is a child session (a fork
  of the root) with id `<thread id>::ns::<namespace>`. `delete_thread` deletes the
  root, which deletes the children with it, in one atomic journal delete.
- Each `put` is ONE journal commit (`save_with_events`): a journal checkpoint
  whose `context` holds the items of the growing list channel (default
  "messages"), each serialised by the saver's serde, and one event
  `langgraph_checkpoint` carrying everything else (ids, parent, metadata, the
  serialised header and the other channels). Within one context epoch the
  journal writes only the new tail of the context, so a growing message list
  costs the new messages per step, not the whole list.
- Each `put_writes` is ONE journal commit (`append_event`, a `langgraph_writes`
  event), durable when the call returns. Writes already stored under the same
  (task_id, idx) are not stored again; reads keep the first one (special
  writes with negative idx: the last one), like LangGraph's own savers.
- `prune` and `delete_for_runs` are logical: one `langgraph_delete` event per
  session hides the checkpoints (and their writes) atomically.
- `copy_thread` replays the source's commits into the target and is atomic:
  the target is absent for readers until the copy's last commit (`copymark`).

The modules: `saver` (the calls) on `threads` (the index of each session's
events, caught up at every call) and `fastpath` (cold reads of old checkpoints
by binary search, over the `fingerprint` each event carries); `puts` and
`events` (what a call commits), `tuples` (what a read returns), `serde` and
`copies` (values as stored, and copies of decoded ones), `reads` (the store
reads), `naming` (session ids), `index`, `replay` and `copymark`
(`copy_thread`), `history` (`get_delta_channel_history`), `aio` (the async
forms) and `server` (`generate_checkpointer`).
"""

from __future__ import annotations

import importlib


def _require_langgraph() -> None:
    """Raise an `ImportError` naming the extra to install if LangGraph is missing."""
    try:
        for module in (
            "langchain_core.messages",
            "langchain_core.runnables",
            "langgraph.checkpoint.base",
            "langgraph.checkpoint.serde.base",
            "langgraph.checkpoint.serde.jsonplus",
        ):
            importlib.import_module(module)
    except ImportError as exc:  # the extra is optional: say which one
        raise ImportError(
            f"journal.integrations.langgraph needs LangGraph ({exc}):"
            " pip install 'journal[langgraph]'"
        ) from exc


_require_langgraph()  # before the modules that import it

from .naming import NS_SEP, ORIGIN_LABEL  # noqa: E402
from .saver import JournalSaver  # noqa: E402
from .server import generate_checkpointer  # noqa: E402

__all__ = ["NS_SEP", "ORIGIN_LABEL", "JournalSaver", "generate_checkpointer"]

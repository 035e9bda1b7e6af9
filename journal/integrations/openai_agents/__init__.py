"""OpenAI Agents SDK sessions stored in a `journal` store.

`JournalSession` implements the SDK's `Session` protocol (`get_items`,
`add_items`, `pop_item`, `clear_session`) on one journal session per SDK
session id, and adds what the SDK's `SQLiteSession` lacks: newest-first cursor
paging of items (`get_items_page`), branching a conversation at an item
(`branch`), and strict decoding (damage is reported as a `journal` error naming
the session and the position, never skipped).

Representation (see docs/openai-agents.md):

- `add_items(items)` appends ONE journal event `{"type": "agents.items",
  "items": [...]}` (one record that is its own commit: atomic, durable when the
  call returns). The event sequence plus the index inside the batch is the
  item's stable position.
- `pop_item()` appends a tombstone event `{"type": "agents.pop", "target":
  [depth, sequence, index]}` naming exactly the item it returned, as a
  compare-and-append: only if the session's latest event is still the one the
  pop's cache reflects (`append_event(..., expected_latest=N)`, checked under the
  session's write lock, across processes). Otherwise nothing is appended, the
  pop catches up with the log and tries again; so a tombstone always names the
  newest item, and two processes never pop the same one. Clears of one session
  are serialized across processes by an `flock` on the session directory.
- `clear_session()` saves a checkpoint with the event `{"type": "agents.clear"}`:
  items before it are no longer part of the conversation (the bytes are kept, and
  `journal ls` shows the clear; `delete()` erases the session and its branches).
- Compaction (the SDK's `OpenAIResponsesCompactionSession` over a
  `JournalSession`): a suffix replacement is ONE event `{"type":
  "agents.replace", "drop": [target, ...], "items": [...]}` appended as a
  compare-and-append (only if the session's newest items are still the
  snapshot's); a whole-history replacement is one checkpoint save with a clear
  and the new items. Either way one commit: the old items or the new, never a mix.
- `branch()` is a journal `fork`: the child starts with no items of its own and
  reads its ancestors' items up to the branch point (recorded in the child's
  checkpoint metadata), so a branch costs the same at any history length.

Reading pages the event journal newest first (`event_page`), so reading the
newest items or a page deep in a long history costs what the answer costs, not
what the history costs. The process also keeps, per session, the newest live
items (encoded, up to `cache_bytes` per session and `CACHE_BUDGET` in all,
shared by every `JournalSession` object on that session) and brings them up to
date from the log at the start of every call (one `events_after` read when
nothing changed; a pop skips that read, its conditional append checks the
same), so the reads the Runner makes every turn do not go back to the log. The
SDK is needed only to run agents: this package imports without it.

Modules, each with one concern:

- `session`: `JournalSession`, the SDK protocol and the operations on a session;
- `compaction`: the compaction session's snapshot and its one-record suffix replacement;
- `records`: the events and metadata written, item positions, strict decoding;
- `scan`: reading live items from the log newest first, across a branch chain;
- `cache`: the process's item caches and their budget;
- `sync`: keeping one session's cache true to its log;
- `paging`: `ItemPage`, cursors, and pages from the cache or the log;
- `branch`: branching a conversation at an item;
- `locks`: the per-session lock of this process and the clear lock across processes.
"""

from __future__ import annotations

from .cache import CACHE_BUDGET as CACHE_BUDGET
from .cache import drop_caches, set_cache_budget
from .paging import ItemPage
from .records import CLEAR, ITEMS, POP, REPLACE
from .records import META_KEY as META_KEY
from .session import JournalSession, SessionClosedError

__all__ = [
    "CLEAR",
    "ITEMS",
    "POP",
    "REPLACE",
    "ItemPage",
    "JournalSession",
    "SessionClosedError",
    "drop_caches",
    "set_cache_budget",
]

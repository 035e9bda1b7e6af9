"""`JournalConversationStore`: pydantic-ai's `ConversationStore` on a journal store."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord, ConversationStore
from pydantic_ai.exceptions import UserError

from journal import InvalidInputError, Store

from .naming import Naming
from .reads import EntryIndex, Reads
from .writes import Writes

_T = TypeVar("_T")


class JournalConversationStore(ConversationStore):
    """pydantic-ai conversations kept in a `journal` store, one journal session each.

    `store` is a directory (a store is opened there with `store_options`, e.g.
    `durability="os"`, and closed by `close()`) or an open `journal.Store` (shared:
    the caller closes it). `session_prefix` goes before each conversation id to
    make its session id; `owner_id` is the session owner of conversations without
    a scope (a scope is its conversation's owner). `index_entries` bounds how many
    entry locations this object remembers.

    Every method is a coroutine whose disk work runs in a worker thread, so the
    event loop never waits on a sync or a lock; a started write finishes even if
    the awaiting task is cancelled. Saves are durable when they return (with the
    store's default `durability="fsync"`). Conflicting writers, in this process or
    others, get pydantic-ai's `ConversationConflict`. See docs/pydantic-ai.md.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        session_prefix: str = "",
        owner_id: str = "local",
        index_entries: int = 1 << 16,
        **store_options: Any,
    ):
        if isinstance(store, Store):
            if store_options:
                raise InvalidInputError("store options need a path, not an open store")
            self.store = store
            self._owns_store = False
        else:
            self.store = Store(store, **store_options)
            self._owns_store = True
        if not isinstance(owner_id, str) or not owner_id.strip():
            raise InvalidInputError("owner_id must be a non-blank string")
        self.naming = Naming(session_prefix, owner_id)
        self._reads = Reads(self.store, EntryIndex(index_entries))
        self._writes = Writes(self.store, self._reads, self.naming)
        self._closed = False

    # ------------------------------------------------------ storage primitives
    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        sid = self.naming.session_id(conversation_id)

        def read() -> ConversationRecord | None:
            _, stored = self._reads.stored(sid)
            return stored.record if stored is not None else None

        return await self._run(read)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        if limit is not None and limit < 0:
            raise UserError("`limit` must not be negative.")
        return await self._run(lambda: self._records(scope, limit))

    def _records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        owner = self.naming.owner(scope) if scope is not None else None
        records = []
        for sid in list(self._reads.sessions(owner)):
            if not sid.startswith(self.naming.prefix):
                continue
            _, stored = self._reads.stored(sid)
            record = stored.record if stored is not None else None
            if record is not None and (scope is None or record.scope == scope):
                records.append(record)
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        entries = list(new_entries)
        await self._run(lambda: self._writes.write(record, entries, expected_revision))

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self._run(lambda: self._writes.delete(conversation_id, expected_revision))

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await self._run(lambda: self._reads.entry(entry_id))

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The entries up to `head_id`, oldest first: one worker-thread call that reads
        newest-first pages of events, not one call per entry."""
        return await self._run(lambda: self._reads.history(head_id, limit))

    # ------------------------------------------------------------------ extras
    async def sweep(self) -> int:
        """Delete the sessions of deleted conversations that no fork needs any more.

        `delete` does this itself, up the deleted conversation's lineage; a process
        killed in between leaves such sessions behind (they do not load or list as
        conversations). Reads every conversation's record: run it now and then, not
        per request. Returns how many sessions were deleted.
        """
        return await self._run(self._writes.sweep)

    # --------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the journal store if this object opened it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> JournalConversationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalConversationStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def _run(self, fn: Callable[[], _T]) -> _T:
        if self._closed:
            raise UserError("this JournalConversationStore is closed")
        # The worker thread finishes a started commit even if the caller is cancelled.
        return await asyncio.to_thread(fn)

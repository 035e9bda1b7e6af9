"""`JournalSessionStore`: the Claude Agent SDK's `SessionStore` on a `journal` store.

Every SDK call runs its disk work in a worker thread (`anyio.to_thread`, so it
serves asyncio and trio alike): the event loop never waits on a sync. A worker
thread finishes a commit it started even if the caller is cancelled or times out
(the SDK's mirror does not retry a timed-out append, since it may still land).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio.to_thread
from claude_agent_sdk import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
    fold_session_summary,
)

from journal import (
    Checkpoint,
    ContractViolationError,
    CorruptionError,
    Event,
    EventPageRequest,
    InvalidInputError,
    JournalError,
    JournalEvent,
    NotFoundError,
    SessionPageRequest,
    Store,
    TimestampedEvent,
)

from .keys import Key, main_key_of, parse_key, subpath_of
from .records import (
    META_KEY,
    Batch,
    Clock,
    decode,
    decode_lines,
    encode_entries,
    entries_msg,
    uuids_of,
)
from .state import KeyState, States, StripedLocks, batches, catch_up, rebuild

_T = TypeVar("_T")
logger = logging.getLogger(__name__)

MAX_TRIES = 1000
"""Refused conditional appends one call retries (each refusal means another writer's
append landed) before it gives up with a `JournalError`."""

LIST_PAGE = 1000
"""Catalog sessions read per page when listing a project."""


class JournalSessionStore(SessionStore):
    """A Claude Agent SDK `SessionStore` kept in a `journal` store.

    `root` is a directory (this object opens a `journal.Store` there with
    `store_options`, e.g. `durability="os"`, and closes it in `close()`) or an open
    `journal.Store` (shared: the caller closes it). Each transcript key is one
    journal session (`keys`); each `append` is one atomic commit, durable when the
    call returns (in the default `durability="fsync"`); a subagent subkey is a
    journal fork of its main transcript, so `journal tree` shows it and deleting
    the main transcript deletes it. Entries whose `uuid` is already stored under
    the key are not stored again (`dedupe=False` stores every entry). Safe to use
    from several threads, event loops and processes at once.
    """

    def __init__(
        self,
        root: Store | str | os.PathLike[str],
        *,
        dedupe: bool = True,
        **store_options: Any,
    ) -> None:
        if isinstance(root, Store):
            if store_options:
                raise InvalidInputError("store options need a path, not an open store")
            self.store = root
            self._owns_store = False
        else:
            self.store = Store(root, **store_options)
            self._owns_store = True
        self.dedupe = dedupe
        self._states = States()
        self._locks = StripedLocks()
        self._clock = Clock()
        self._closed = False

    # ------------------------------------------------------------- SDK protocol
    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Store a batch of entries after the key's earlier ones: one atomic commit."""
        k = parse_key(key)
        batch = list(entries)
        if not batch:
            self._check_open()
            return  # creates nothing: no phantom keys
        await self._run(lambda: self._append(k, batch))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry of the key in append order (None: nothing was ever stored)."""
        k = parse_key(key)
        return cast("list[SessionStoreEntry] | None", await self._run(lambda: self._load(k)))

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's main transcripts and the time of each one's latest append (ms)."""
        pk = _project(project_key)

        def run() -> list[SessionStoreListEntry]:
            return [
                {"session_id": k.session_id, "mtime": b.recorded_at_ms} for k, b in self._mains(pk)
            ]

        return await self._run(run)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The project's summaries as the SDK's fold left them, stamped with the same
        `mtime` as `list_sessions` (the time of the append that made them current)."""
        pk = _project(project_key)
        return await self._run(lambda: self._summaries(pk))

    async def delete(self, key: SessionKey) -> None:
        """Delete a key; a main transcript's subkeys go with it (one atomic journal delete)."""
        k = parse_key(key)
        await self._run(lambda: self._delete(k))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths stored under a main transcript, sorted."""
        k = parse_key(cast("dict[str, Any]", key), subpath_allowed=False)
        return await self._run(lambda: self._subkeys(k))

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the journal store if this object opened it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_store:
            self.store.close()

    async def __aenter__(self) -> JournalSessionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __enter__(self) -> JournalSessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------ the work, blocking (worker threads)
    def _append(self, k: Key, entries: list[Any]) -> None:
        """`append`, blocking: dedupe, fold, then one conditional append (retried
        after catching up with the log whenever another writer's append landed first)."""
        self._check_open()
        jid = k.journal_id
        lines, uuids = encode_entries(entries, f"append to {jid!r}")
        with self._locks.lock(jid):
            for _ in range(MAX_TRIES):
                state = self._state(jid)
                keep = self._new(uuids, state)
                if not keep:
                    return  # every entry is stored already
                summary, summary_at = self._fold(k, state, [entries[i] for i in keep])
                msg = entries_msg([lines[i] for i in keep], summary, summary_at)
                now = self._clock.now_ms()
                if state.ident is None:
                    jev = self._create(k, msg, now, summary)
                    self._states.drop(jid)
                    if jev is None:
                        continue  # created by a fork, or by another writer: look again
                    state = KeyState(self.store.incarnation(jid))
                    state.apply(
                        Batch(jev.sequence, now, [], summary, None), [uuids[i] for i in keep]
                    )
                    self._states.put(jid, state)
                    return
                try:
                    jev = self.store.append_event(
                        jid, now, Event(msg=msg), expected_latest=state.latest
                    )
                except NotFoundError:  # deleted meanwhile: create it again
                    self._states.drop(jid)
                    continue
                except ContractViolationError:
                    # Another writer's append landed first: take it in, then decide again
                    # (its entries may include ours). Nothing new to see means the log
                    # is not what this state describes: read it afresh.
                    if not catch_up(self.store, jid, state):
                        self._states.drop(jid)
                    continue
                batch = Batch(jev.sequence, now, [], summary, summary_at)
                state.apply(batch, [uuids[i] for i in keep])
                return
        raise JournalError(
            f"append to {jid!r}: {MAX_TRIES} conditional appends were refused in a row"
        )

    def _load(self, k: Key) -> list[Any] | None:
        """`load`, blocking; also leaves the key's state cached for the appends that
        usually follow (a resumed session goes on writing to its key)."""
        self._check_open()
        jid = k.journal_id
        state = KeyState(self.store.incarnation(jid))
        if state.ident is None:
            return None
        out: list[Any] = []
        for batch in batches(self.store, jid, 0):
            entries = decode_lines(jid, batch)
            out.extend(entries)
            state.apply(batch, uuids_of(entries))
        with self._locks.lock(jid):
            known = self._states.get(jid)
            if known is None or known.ident != state.ident or known.latest < state.latest:
                self._states.put(jid, state)
        return out or None

    def _summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """`list_session_summaries`, blocking."""
        self._check_open()
        out: list[SessionSummaryEntry] = []
        for k, latest in self._mains(project_key):
            try:
                data = self._summary_of(k.journal_id, latest)
            except CorruptionError as exc:
                _skip_damaged(k.journal_id, exc)
                continue
            if data is not None:
                out.append(
                    {"session_id": k.session_id, "mtime": latest.recorded_at_ms, "data": data}
                )
        return out

    def _delete(self, k: Key) -> None:
        """`delete`, blocking (absent keys are no-ops)."""
        self._check_open()
        jid = k.journal_id
        with self._locks.lock(jid):
            if self.store.incarnation(jid) is not None:
                self.store.delete_sessions([jid])  # False when deleted meanwhile: fine
            self._states.drop(jid, with_subkeys=k.subpath is None)

    def _subkeys(self, k: Key) -> list[str]:
        """`list_subkeys`, blocking: the main transcript's children in the catalog."""
        self._check_open()
        subpaths = (subpath_of(c.session_id, k) for c in self.store.child_sessions(k.main_id))
        return sorted(s for s in subpaths if s is not None)

    # -------------------------------------------------------------- internals
    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInputError("JournalSessionStore is closed")

    async def _run(self, fn: Callable[[], _T]) -> _T:
        self._check_open()
        return await anyio.to_thread.run_sync(fn)

    def _state(self, jid: str) -> KeyState:
        """The cached state of a session if it is still the same incarnation, else read."""
        state = self._states.get(jid)
        if state is None or state.ident != self.store.incarnation(jid):
            state = rebuild(self.store, jid)
            self._states.put(jid, state)
        return state

    def _new(self, uuids: list[str | None], state: KeyState) -> list[int]:
        """Indexes of the entries to store: all but those whose uuid is stored already
        (or came earlier in this batch)."""
        if not self.dedupe:
            return list(range(len(uuids)))
        seen: set[str] = set()
        keep: list[int] = []
        for i, uid in enumerate(uuids):
            if uid is None:
                keep.append(i)
            elif uid not in state.uuids and uid not in seen:
                seen.add(uid)
                keep.append(i)
        return keep

    def _fold(
        self, k: Key, state: KeyState, entries: list[Any]
    ) -> tuple[dict[str, Any] | None, int | None]:
        """(summary to write, or None; else the event holding the current one). Only main
        transcripts are folded; an unchanged summary is named, not written again."""
        if k.subpath is not None:
            return None, None
        prev: SessionSummaryEntry | None = None
        if state.summary is not None:
            prev = {"session_id": k.session_id, "mtime": 0, "data": state.summary}
        data = fold_session_summary(prev, cast("SessionKey", k.as_dict()), entries)["data"]
        if state.summary is not None and data == state.summary:
            return None, state.summary_at
        return data, None

    def _create(
        self, k: Key, msg: dict[str, Any], now: int, summary: dict[str, Any] | None
    ) -> JournalEvent | None:
        """Create the key's session. A main transcript is created with this first batch
        in one commit (its event returned); a subkey is forked from its main transcript
        (made empty first if it has no entries yet) and None returned: the caller then
        appends the batch. None too when another writer created the session first."""
        jid = k.journal_id
        if k.subpath is None:
            cp = self._checkpoint(k)
            first = (summary or {}).get("first_prompt")
            cp.first_user_message = first if isinstance(first, str) else None
            ev = TimestampedEvent(recorded_at_ms=now, event=Event(msg=msg))
            try:
                return self.store.save_with_events(cp, (), None, [ev])[0]
            except ContractViolationError:
                if self.store.incarnation(jid) is None:
                    raise
                return None
        main = k.main
        if self.store.incarnation(main.journal_id) is None:
            try:
                self.store.save(self._checkpoint(main))
            except ContractViolationError:
                if self.store.incarnation(main.journal_id) is None:
                    raise
        try:
            self.store.fork(main.journal_id, 0, self._checkpoint(k))
        except NotFoundError:
            pass  # the main transcript was deleted meanwhile: the caller looks again
        except ContractViolationError:
            if self.store.incarnation(jid) is None:
                raise
            # another writer forked it first: the caller appends to that one
        return None

    def _checkpoint(self, k: Key) -> Checkpoint:
        cp = Checkpoint.empty(k.journal_id, owner_id=k.project_key)
        cp.metadata = {META_KEY: {"key": k.as_dict()}}
        return cp

    def _mains(self, project_key: str) -> list[tuple[Key, Batch]]:
        """The project's main transcripts that hold entries, each with its latest batch."""
        out: list[tuple[Key, Batch]] = []
        request = SessionPageRequest(owner_id=project_key, limit=LIST_PAGE)
        while True:
            page = self.store.list_sessions_page(request)
            for summary in page.sessions:
                k = main_key_of(summary.session_id, project_key)
                if k is None:
                    continue  # a subkey, or not a session of this integration
                try:
                    latest = self._latest(summary.session_id)
                except CorruptionError as exc:
                    _skip_damaged(summary.session_id, exc)
                    continue
                if latest is not None:
                    out.append((k, latest))
            if page.next_cursor is None:
                return out
            request = SessionPageRequest(
                owner_id=project_key, cursor=page.next_cursor, limit=LIST_PAGE
            )

    def _latest(self, jid: str) -> Batch | None:
        """The session's latest batch (None: it has none, or is gone)."""
        try:
            page = self.store.event_page(jid, EventPageRequest(limit=1))
        except NotFoundError:
            return None  # deleted since it was listed
        return decode(jid, page.events[0]) if page.events else None

    def _summary_of(self, jid: str, latest: Batch) -> dict[str, Any] | None:
        """The summary current at a session's latest batch."""
        if latest.summary is not None or latest.summary_at is None:
            return latest.summary
        events = self.store.events_after(jid, latest.summary_at - 1, 1)
        holder = decode(jid, events[0]) if events else None
        if holder is None or holder.sequence != latest.summary_at or holder.summary is None:
            raise CorruptionError(
                f"session {jid!r}: event {latest.sequence} names event {latest.summary_at}"
                " as holding its summary, and it does not"
            )
        return holder.summary


def _project(project_key: Any) -> str:
    if not isinstance(project_key, str) or not project_key:
        raise InvalidInputError(f"project_key must be a non-empty string, not {project_key!r}")
    return project_key


def _skip_damaged(journal_id: str, exc: CorruptionError) -> None:
    """A listing leaves out a damaged session, saying so: one damaged session hides
    no other (its `load` raises; `journal verify` says what is wrong)."""
    logger.warning(
        "journal: session %r is left out of the listing: %s (see `journal verify`)",
        journal_id,
        exc,
    )

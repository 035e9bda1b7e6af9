"""`JournalSessionService`: ADK's `BaseSessionService` on a journal store.

Every method runs its store calls in a worker thread (`asyncio.to_thread`), so
the event loop never waits on a disk sync. See the package docstring for the
mapping and docs/adk.md for durability and limitations.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event as AdkEvent
from google.adk.platform import time as platform_time
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from typing_extensions import override

from journal import (
    Checkpoint,
    ContractViolationError,
    Durability,
    InvalidInputError,
    NotFoundError,
    SessionPageRequest,
    Store,
    TimestampedEvent,
)

from ..dirlock import DirLock
from . import naming, scoped
from .chain import find_fork_point, read_events, sources
from .records import encode_event, first_user_text, marker, meta_of, new_meta

_T = TypeVar("_T")

STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


class JournalSessionService(BaseSessionService):
    """ADK sessions kept in a journal store, one journal session per ADK session.

    `root` is a directory (this service opens a store there with `durability`
    and `store_options`, and closes it in `close()`) or an open `journal.Store`
    (shared: its owner closes it). Beyond ADK's methods: `get_user_state`, and
    `fork_session`, a new session sharing this one's history up to an event.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | Store,
        *,
        durability: Durability = "fsync",
        **store_options: Any,
    ) -> None:
        if isinstance(root, Store):
            if store_options or durability != "fsync":
                raise InvalidInputError("store options need a path, not an open store")
            self.store = root
            self._owns_store = False
        else:
            self.store = Store(root, durability=durability, **store_options)
            self._owns_store = True
        self._closed = False
        # (app, user) pairs whose sessions this service has rolled forward: once
        # each, at its first read, so a process that restarts after a crash
        # applies what the crash held back before it answers for that user.
        self._users_rolled: set[tuple[str, str]] = set()

    # ------------------------------------------------------------ ADK methods
    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        return await self._run(lambda: self._create(app_name, user_id, state, session_id))

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        return await self._run(lambda: self._get(app_name, user_id, session_id, config))

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        return await self._run(lambda: self._list(app_name, user_id))

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._run(lambda: self._delete(app_name, user_id, session_id))

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._run(lambda: self._user_state(app_name, user_id))

    @override
    async def append_event(self, session: Session, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        # As ADK's services: temp state reaches the in-memory session, never storage.
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        new_marker = await self._run(lambda: self._append(session, event))
        session.last_update_time = event.timestamp
        session._storage_update_marker = new_marker
        return self._commit_event_to_session(session, event)

    # ----------------------------------------------------------------- extras
    async def fork_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        new_session_id: str | None = None,
        at_event_id: str | None = None,
        before_invocation_id: str | None = None,
    ) -> Session:
        """A new session of the same user sharing this one's events and state up to a point.

        `at_event_id` keeps that event and everything before it;
        `before_invocation_id` keeps what came before that invocation's first event
        (to retry a turn differently); neither keeps every event. The new session is
        a journal fork of the session holding the fork point: its events up to there
        are read from there, not copied, and deleting that session deletes the fork
        with it. Raises `SessionNotFoundError` for a missing session, journal's
        `NotFoundError` when the fork point is not in the session, and
        `AlreadyExistsError` when `new_session_id` is taken.
        """
        if at_event_id is not None and before_invocation_id is not None:
            raise InvalidInputError("give at_event_id= or before_invocation_id=, not both")
        return await self._run(
            lambda: self._fork(
                app_name, user_id, session_id, new_session_id, at_event_id, before_invocation_id
            )
        )

    async def close(self) -> None:
        """Close the store if this service opened it. Idempotent."""
        if not self._closed:
            self._closed = True
            if self._owns_store:
                await asyncio.to_thread(self.store.close)

    async def __aenter__(self) -> JournalSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -------------------------------------------------------------- internals
    async def _run(self, fn: Callable[[], _T]) -> _T:
        if self._closed:
            raise InvalidInputError("JournalSessionService is closed")
        # The worker thread finishes a started commit even if the caller is cancelled.
        return await asyncio.to_thread(fn)

    def _scoped(self, scope: str) -> dict[str, Any]:
        return scoped.values(self.store, scope)

    def _merged(self, app_name: str, user_id: str, own: dict[str, Any]) -> dict[str, Any]:
        """A session's own state with its app's and its user's, prefixed (fresh values)."""
        merged = dict(own)
        for key, value in self._scoped(naming.app_scope(app_name)).items():
            merged[State.APP_PREFIX + key] = value
        for key, value in self._scoped(naming.user_scope(app_name, user_id)).items():
            merged[State.USER_PREFIX + key] = value
        return merged

    def _roll_forward(self, app_name: str, user_id: str, key: str, meta: dict[str, Any]) -> None:
        """Apply the `app:`/`user:` values of the session's last commit that carried
        any, if a crash kept them from being written (a no-op otherwise)."""
        scoped.apply(self.store, app_name, user_id, key, meta.get("scoped"))

    def _user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """The `user:` values, after rolling forward every session of the user."""
        self._roll_forward_user(app_name, user_id)
        return self._scoped(naming.user_scope(app_name, user_id))

    def _first_touch(self, app_name: str, user_id: str) -> None:
        """Roll forward the user's sessions if this service has not done so yet."""
        if (app_name, user_id) not in self._users_rolled:
            self._roll_forward_user(app_name, user_id)
            self._users_rolled.add((app_name, user_id))

    def _roll_forward_user(self, app_name: str, user_id: str) -> None:
        """Apply the record of every session of the user (a catalog walk by owner)."""
        request = SessionPageRequest(owner_id=naming.owner_id(app_name, user_id), limit=500)
        while True:
            page = self.store.list_sessions_page(request)
            for summary in page.sessions:
                metadata = self.store.session_metadata(summary.session_id)
                if metadata is not None and naming.parse_key(summary.session_id) is not None:
                    self._roll_forward(
                        app_name, user_id, summary.session_id, meta_of(metadata, summary.session_id)
                    )
            if page.next_cursor is None:
                break
            request = SessionPageRequest(
                owner_id=request.owner_id, cursor=page.next_cursor, limit=500
            )

    def _create(
        self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None
    ) -> Session:
        sid = (session_id.strip() if session_id else None) or uuid.uuid4().hex
        self._first_touch(app_name, user_id)
        key = naming.session_key(app_name, user_id, sid)
        if self.store.load(key) is not None:
            raise AlreadyExistsError(f"Session with id {sid} already exists.")
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        now = platform_time.get_time()
        cp = Checkpoint.empty(key, owner_id=naming.owner_id(app_name, user_id))
        cp.metadata = new_meta(app_name, user_id, sid, deltas["session"], now)
        record = scoped.new_record(self.store, app_name, user_id, deltas, 0, None)
        cp.metadata["adk"]["scoped"] = record
        try:
            self.store.save(cp)  # the commit point: the session exists from here
        except ContractViolationError:
            if self.store.load(key) is not None:  # created by another writer meanwhile
                raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
            raise
        scoped.apply(self.store, app_name, user_id, key, record)
        session = Session(
            app_name=app_name,
            user_id=user_id,
            id=sid,
            state=self._merged(app_name, user_id, deltas["session"]),
            events=[],
            last_update_time=now,
        )
        session._storage_update_marker = marker(cp.metadata["adk"], 0)
        return session

    def _get(
        self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
    ) -> Session | None:
        sid = session_id.strip() if session_id else session_id
        key = naming.session_key(app_name, user_id, sid)
        cp = self.store.load(key)
        if cp is None:
            return None
        meta = meta_of(cp.metadata, key)
        try:
            events = read_events(
                self.store,
                sources(key, cp.sequence, meta["chain"]),
                None if config is None else config.num_recent_events,
                None if config is None else config.after_timestamp,
            )
        except NotFoundError:
            return None  # deleted since its checkpoint was read
        self._roll_forward(app_name, user_id, key, meta)
        self._first_touch(app_name, user_id)
        session = Session(
            app_name=app_name,
            user_id=user_id,
            id=sid,
            state=self._merged(app_name, user_id, meta["state"]),
            events=events,
            last_update_time=meta["updated"],
        )
        session._storage_update_marker = marker(meta, cp.sequence)
        return session

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        owner = None if user_id is None else naming.owner_id(app_name, user_id)
        prefix = naming.app_prefix(app_name)
        found: list[tuple[str, str, str]] = []
        request = SessionPageRequest(owner_id=owner, limit=500)
        while True:
            page = self.store.list_sessions_page(request)
            for summary in page.sessions:
                if not summary.session_id.startswith(prefix):
                    continue
                names = naming.parse_key(summary.session_id)
                if names is not None and names[0] == app_name:
                    found.append((summary.session_id, names[1], names[2]))
            if page.next_cursor is None:
                break
            request = SessionPageRequest(owner_id=owner, cursor=page.next_cursor, limit=500)
        metas = []
        for key, uid, sid in found:
            metadata = self.store.session_metadata(key)
            if metadata is None:
                continue  # deleted since it was listed
            meta = meta_of(metadata, key)
            self._roll_forward(app_name, uid, key, meta)
            metas.append((uid, sid, meta))
        app_state = self._scoped(naming.app_scope(app_name))
        user_states: dict[str, dict[str, Any]] = {}
        sessions = []
        for uid, sid, meta in metas:
            if uid not in user_states:
                user_states[uid] = self._scoped(naming.user_scope(app_name, uid))
            state = dict(meta["state"])
            state.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
            state.update({State.USER_PREFIX + k: v for k, v in user_states[uid].items()})
            sessions.append(
                Session(
                    app_name=app_name,
                    user_id=uid,
                    id=sid,
                    state=state,
                    events=[],
                    last_update_time=meta["updated"],
                )
            )
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        sid = session_id.strip() if session_id else session_id
        key = naming.session_key(app_name, user_id, sid)
        if self.store.session_summary(key) is None:
            return
        # The session and its forks (deleted with it: they share its events), each
        # locked against an append re-creating it after the delete.
        tree, queue = [key], [key]
        while queue:
            for child in self.store.child_sessions(queue.pop()):
                tree.append(child.session_id)
                queue.append(child.session_id)
        timeout = self.store.options.lock_timeout
        with contextlib.ExitStack() as held:
            for path in sorted(self.store.session_dir(k) for k in tree):
                held.enter_context(DirLock(path, timeout, "ADK session lock"))
            self.store.delete_sessions([key])

    def _append(self, session: Session, event: AdkEvent) -> str:
        app_name, user_id = session.app_name, session.user_id
        key = naming.session_key(app_name, user_id, session.id)
        deltas = _session_util.extract_json_safe_state_delta(event.actions.state_delta or {})
        with DirLock(
            self.store.session_dir(key), self.store.options.lock_timeout, "ADK session lock"
        ) as exists:
            cp = self.store.load(key) if exists else None
            if cp is None:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            meta = meta_of(cp.metadata, key)
            if session._storage_update_marker is not None:
                if session._storage_update_marker != marker(meta, cp.sequence):
                    raise StaleSessionError(STALE_MESSAGE)
            elif meta["updated"] > session.last_update_time:
                raise StaleSessionError(STALE_MESSAGE)  # as ADK's SQLite service
            # The values of the last commit first, should a crash have kept them back;
            # then this commit carries its own (so it can replace that record).
            self._roll_forward(app_name, user_id, key, meta)
            record = scoped.new_record(
                self.store, app_name, user_id, deltas, cp.sequence + 1, meta.get("scoped")
            )
            meta["scoped"] = record
            meta["state"].update(deltas["session"])
            meta["updated"] = event.timestamp
            nxt = msgspec.structs.replace(
                cp, sequence=cp.sequence + 1, metadata={**cp.metadata, "adk": meta}
            )
            if nxt.first_user_message is None:
                nxt.first_user_message = first_user_text(event)
            recorded = TimestampedEvent(
                recorded_at_ms=max(0, int(event.timestamp * 1000)), event=encode_event(event)
            )
            try:
                # ONE commit: the event and the state it leaves; the sequence rule
                # refuses it if another writer committed since the load above.
                self.store.save_with_events(nxt, (), None, [recorded])
            except ContractViolationError:
                now = self.store.load(key)
                if now is not None and now.sequence > cp.sequence:
                    raise StaleSessionError(STALE_MESSAGE) from None
                raise
        scoped.apply(self.store, app_name, user_id, key, record)
        return marker(meta, nxt.sequence)

    def _fork(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        new_session_id: str | None,
        at_event_id: str | None,
        before_invocation_id: str | None,
    ) -> Session:
        sid = session_id.strip() if session_id else session_id
        key = naming.session_key(app_name, user_id, sid)
        cp = self.store.load(key)
        if cp is None:
            raise SessionNotFoundError(f"Session {sid} not found.")
        srcs = sources(key, cp.sequence, meta_of(cp.metadata, key)["chain"])
        if at_event_id is None and before_invocation_id is None:
            point: tuple[str, int] | None = (key, cp.sequence)
        else:
            point = find_fork_point(self.store, srcs, at_event_id, before_invocation_id)
        if point is None:
            what = (
                f"event {at_event_id!r}" if at_event_id else f"invocation {before_invocation_id!r}"
            )
            raise NotFoundError(f"session {sid!r} has no {what}")
        holder, sequence = point
        source = self.store.checkpoint_at(holder, sequence)
        if source is None:
            raise NotFoundError(f"journal session {holder!r} has no checkpoint at {sequence}")
        held = meta_of(source.metadata, holder)
        new_sid = (new_session_id.strip() if new_session_id else None) or uuid.uuid4().hex
        new_key = naming.session_key(app_name, user_id, new_sid)
        if self.store.load(new_key) is not None:
            raise AlreadyExistsError(f"Session with id {new_sid} already exists.")
        child = Checkpoint.empty(new_key, owner_id=naming.owner_id(app_name, user_id))
        child.first_user_message = source.first_user_message
        chain = [[holder, sequence], *held["chain"]]
        child.metadata = new_meta(
            app_name, user_id, new_sid, held["state"], platform_time.get_time(), chain
        )
        try:
            self.store.fork(holder, sequence, child)
        except ContractViolationError:
            if self.store.load(new_key) is not None:
                raise AlreadyExistsError(f"Session with id {new_sid} already exists.") from None
            raise
        forked = self._get(app_name, user_id, new_sid, None)
        assert forked is not None  # just created; a delete meanwhile is a caller's race
        return forked

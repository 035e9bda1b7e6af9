"""Writing conversations: a record with its new entries, a fork, a delete.

Every write checks the conversation's revision and commits under the
conversation's lock (locks.py), and the commit itself is one journal call:

- a save is one `save_with_events`: the checkpoint (the new record, at the stored
  sequence plus one, so the journal refuses it too if another writer got there
  first) and one event per new entry;
- a new conversation whose history starts in another one's (pydantic-ai's
  `fork`) is one `Store.fork` of the session that holds that history: the child
  points at the parent's entries, nothing is copied;
- a delete is one `delete_sessions` when no fork shares the conversation's
  entries, else one save of an empty record (the session stays, for its forks);
  a deleted session with no forks left is deleted in turn, up its lineage.

A record that points at entries outside its session's lineage (a fork given the
id of a deleted conversation that is kept for its own forks, or a record written
by hand) gets those entries copied into its session, ids unchanged, in the same
commit. Every conflict is pydantic-ai's `ConversationConflict`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
)
from pydantic_ai.exceptions import UserError

from journal import (
    Checkpoint,
    ContractViolationError,
    Event,
    EventPageRequest,
    JournalError,
    NotFoundError,
    SessionContext,
    Store,
    TimestampedEvent,
)

from .locks import ConversationLock
from .naming import Naming
from .reads import Reads
from .records import (
    META_KEY,
    ORIGIN_LABEL,
    Location,
    RawEntry,
    Stored,
    dump_messages,
    encode_location,
    encode_meta,
    entry_event,
    first_user_text,
)

Ref = int | Location
"""An entry a commit points at: its index among the commit's entries, or its location."""


class _Plan:
    """The entries one commit stores (copies first, then the new ones) and the refs."""

    def __init__(self, reads: Reads, here: str, lineage: set[str]):
        self.reads = reads
        self.here = here
        self.lineage = lineage
        self.items: list[tuple[str, str | None, Ref | None, str, Any]] = []
        self.pos: dict[str, int] = {}

    def ref(self, entry_id: str | None, conversation_id: str) -> Ref | None:
        """Where `entry_id` is for this commit: stored in the lineage, or copied in."""
        if entry_id is None:
            return None
        if entry_id in self.pos:
            return self.pos[entry_id]
        at = self.reads.locate(entry_id)
        if at is None:
            raise ConversationConflict(conversation_id)  # released by a concurrent delete
        try:
            chain = self.reads.walk(at, entry_id, 1 if at[0] in self.lineage else None)
        except NotFoundError:
            raise ConversationConflict(conversation_id) from None
        if at[0] in self.lineage:
            return at
        return self._copy(chain)

    def _copy(self, chain: list[RawEntry]) -> int:
        """Copy the newest entries of `chain` (newest first) that the lineage lacks."""
        needed: list[RawEntry] = []
        base: Ref | None = None
        for raw in chain:
            if raw.id in self.pos:
                base = self.pos[raw.id]
                break
            if raw.at[0] in self.lineage:
                base = raw.at
                break
            needed.append(raw)
        for raw in reversed(needed):
            parent = base if raw is needed[-1] else self.pos[raw.parent_id or ""]
            self.items.append((raw.id, raw.parent_id, parent, raw.kind, raw.message))
            self.pos[raw.id] = len(self.items) - 1
        return self.pos[chain[0].id]

    def add(self, entries: Sequence[ConversationEntry], conversation_id: str) -> None:
        messages = dump_messages([entry.message for entry in entries])
        for entry, message in zip(entries, messages, strict=True):
            parent = self.ref(entry.parent_id, conversation_id)
            self.items.append((entry.id, entry.parent_id, parent, entry.kind, message))
            self.pos[entry.id] = len(self.items) - 1

    def events(self, now_ms: int) -> list[TimestampedEvent]:
        out = []
        for index, (entry_id, parent_id, parent, kind, message) in enumerate(self.items):
            if isinstance(parent, int):
                encoded: Any = parent - index  # an offset back, within this commit
            else:
                encoded = encode_location(parent, self.here)
            msg = entry_event(entry_id, parent_id, encoded, kind, message)
            out.append(TimestampedEvent(recorded_at_ms=now_ms, event=Event(msg=msg)))
        return out


def _at(ref: Ref | None, here: str, first: int) -> Location | None:
    """A ref as a location, given the event sequence of the commit's first entry."""
    if ref is None or isinstance(ref, tuple):
        return ref
    return (here, first + ref)


class Writes:
    """The writes of a `JournalConversationStore` (blocking; run in worker threads)."""

    def __init__(self, store: Store, reads: Reads, naming: Naming):
        self.store = store
        self.reads = reads
        self.naming = naming
        self.timeout = store.options.lock_timeout

    def _lock(self, session_id: str) -> ConversationLock:
        return ConversationLock(self.store.session_dir(session_id), self.timeout)

    def lineage(self, session_id: str) -> set[str]:
        """A session and its ancestors (the sessions whose entries its history may use)."""
        out: set[str] = set()
        cur: str | None = session_id
        while cur is not None and cur not in out:
            out.add(cur)
            summary = self.store.session_summary(cur)
            cur = summary.parent_session_id if summary is not None else None
        return out

    # -------------------------------------------------------------------- save
    def write(
        self,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        cid = record.conversation_id
        sid = self.naming.session_id(cid)
        for _ in range(8):
            with self._lock(sid) as held:
                if held:
                    cp, stored = self.reads.stored(sid)
                    if cp is not None and stored is not None:
                        current = stored.record
                        if (current.revision if current is not None else None) != expected_revision:
                            raise ConversationConflict(cid)
                        self._save(sid, cp, record, new_entries)
                        return
            if expected_revision is not None:
                raise ConversationConflict(cid)
            if self._create(sid, record, new_entries):
                return
            # The session appeared meanwhile: check it under its lock.
        raise ConversationConflict(cid)

    def _plan(
        self,
        sid: str,
        lineage: set[str],
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
    ) -> tuple[_Plan, Ref | None, dict[str, Ref]]:
        cid = record.conversation_id
        plan = _Plan(self.reads, sid, lineage)
        plan.add(new_entries, cid)
        head = plan.ref(record.head_id, cid)
        tips = {tip: ref for tip in record.branches if (ref := plan.ref(tip, cid)) is not None}
        return plan, head, tips

    def _save(
        self,
        sid: str,
        cp: Checkpoint,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
    ) -> None:
        """Save into an existing session (its lock held, its revision checked)."""
        lineage = {sid}
        ids = [record.head_id, *record.branches, *(entry.parent_id for entry in new_entries)]
        new_ids = {entry.id for entry in new_entries}
        for entry_id in ids:
            if entry_id is not None and entry_id not in new_ids:
                at = self.reads.locate(entry_id)
                if at is not None and at[0] != sid:
                    lineage = self.lineage(sid)
                    break
        plan, head, tips = self._plan(sid, lineage, record, new_entries)
        latest = 0
        if plan.items:
            latest = self.store.event_page(sid, EventPageRequest(limit=1)).latest_sequence
        now = time.time()
        messages = [entry.message for entry in new_entries]
        nxt = self._checkpoint(
            sid,
            record,
            _at(head, sid, latest + 1),
            tips,
            first=latest + 1,
            sequence=cp.sequence + 1,
        )
        nxt.first_user_message = cp.first_user_message or first_user_text(messages)
        try:
            journal = self.store.save_with_events(nxt, (), None, plan.events(int(now * 1000)))
        except ContractViolationError:
            raise ConversationConflict(record.conversation_id) from None
        self._settle(
            sid, nxt, record, plan, head, tips, [ev.sequence for ev in journal], latest + 1
        )

    def _settle(
        self,
        sid: str,
        saved: Checkpoint,
        record: ConversationRecord,
        plan: _Plan,
        head: Ref | None,
        tips: dict[str, Ref],
        sequences: list[int],
        predicted: int,
    ) -> None:
        """Note the new entries; if their sequences are not the predicted ones (events
        appended to the session by something other than this integration), save the
        record again with their real locations."""
        first = sequences[0] if sequences else predicted
        for index, item in enumerate(plan.items):
            self.reads.index.note(item[0], (sid, first + index))
        if first == predicted:
            return
        fixed = self._checkpoint(
            sid, record, _at(head, sid, first), tips, first=first, sequence=saved.sequence + 1
        )
        self.store.save_with_events(fixed)

    def _checkpoint(
        self,
        sid: str,
        record: ConversationRecord | None,
        head_at: Location | None,
        tips: dict[str, Ref],
        *,
        first: int,
        sequence: int,
        owner: str | None = None,
    ) -> Checkpoint:
        branches_at = {tip: loc for tip, ref in tips.items() if (loc := _at(ref, sid, first))}
        if owner is None:
            owner = self.naming.owner(record.scope if record is not None else None)
        cp = Checkpoint.empty(sid, owner_id=owner)
        cp.session_context = SessionContext(owner_id=owner, origin_label=ORIGIN_LABEL)
        cp.sequence = sequence
        cp.metadata = {META_KEY: encode_meta(Stored(record, head_at, branches_at), sid)}
        return cp

    def _create(
        self, sid: str, record: ConversationRecord, new_entries: Sequence[ConversationEntry]
    ) -> bool:
        """Create the conversation's session; False if it exists (nothing written)."""
        new_ids = {entry.id for entry in new_entries}
        refs = [record.head_id, *record.branches, *(entry.parent_id for entry in new_entries)]
        outside = [i for i in refs if i is not None and i not in new_ids]
        if outside and not new_entries:
            parent = self._fork_parent(record, outside)
            if parent is not None:
                return self._fork(sid, parent, record)
        plan, head, tips = self._plan(sid, set(), record, new_entries)
        cp = self._checkpoint(sid, record, _at(head, sid, 1), tips, first=1, sequence=0)
        cp.first_user_message = first_user_text([entry.message for entry in new_entries])
        now = time.time()
        try:
            journal = self.store.save_with_events(cp, (), None, plan.events(int(now * 1000)))
        except ContractViolationError:
            return False  # created by another writer meanwhile
        self._settle(sid, cp, record, plan, head, tips, [ev.sequence for ev in journal], 1)
        return True

    def _fork_parent(self, record: ConversationRecord, outside: list[str]) -> str | None:
        """The session to fork so that every entry in `outside` is in the child's
        lineage: the forked conversation's, else the one holding the head."""
        located = [self.reads.locate(entry_id) for entry_id in outside]
        if any(at is None for at in located):
            raise ConversationConflict(record.conversation_id)
        candidates = []
        if record.forked_from is not None:
            candidates.append(self.naming.session_id(record.forked_from))
        candidates += [at[0] for at in located if at is not None]
        for candidate in dict.fromkeys(candidates):
            lineage = self.lineage(candidate)
            if all(at is not None and at[0] in lineage for at in located):
                return candidate
        return None

    def _fork(self, sid: str, parent: str, record: ConversationRecord) -> bool:
        """A new conversation sharing `parent`'s entries: one journal fork."""
        cid = record.conversation_id
        with self._lock(parent) as held:
            pcp = self.store.load(parent) if held else None
            if pcp is None:
                raise ConversationConflict(cid)  # deleted meanwhile: its entries with it
            plan, head, tips = self._plan(sid, self.lineage(parent), record, ())
            if plan.items:  # an entry moved out of the lineage meanwhile: look again
                return False
            child = self._checkpoint(sid, record, _at(head, sid, 1), tips, first=1, sequence=0)
            child.first_user_message = pcp.first_user_message
            try:
                self.store.fork(parent, pcp.sequence, child)
            except ContractViolationError:
                return False  # the child exists: created meanwhile
            except NotFoundError:
                raise ConversationConflict(cid) from None
            return True

    # ------------------------------------------------------------------ delete
    def delete(self, conversation_id: str, expected_revision: str) -> None:
        sid = self.naming.session_id(conversation_id)
        with self._lock(sid) as held:
            cp, stored = self.reads.stored(sid) if held else (None, None)
            record = stored.record if stored is not None else None
            if cp is None or record is None or record.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            summary = self.store.session_summary(sid)
            parent = summary.parent_session_id if summary is not None else None
            if self.store.child_sessions(sid):
                self._bury(sid, cp, conversation_id)
                return
            self.store.delete_sessions([sid])
        self._collect(parent)

    def _bury(self, sid: str, cp: Checkpoint, conversation_id: str) -> None:
        """Keep a deleted conversation's session for the forks that use its entries."""
        owner = cp.session_context.owner_id
        tomb = self._checkpoint(sid, None, None, {}, first=1, sequence=cp.sequence + 1, owner=owner)
        try:
            self.store.save_with_events(tomb)
        except ContractViolationError:
            raise ConversationConflict(conversation_id) from None

    def sweep(self) -> int:
        """Delete every deleted conversation's session that no fork needs any more
        (those a crash left between a delete and the collection of its lineage);
        returns how many sessions were deleted."""
        swept = 0
        for sid in list(self.reads.sessions(None)):
            if sid.startswith(self.naming.prefix):
                swept += self._collect(sid)
        return swept

    def _collect(self, session_id: str | None) -> int:
        """Delete the deleted conversations up a lineage that no fork needs any more;
        returns how many sessions were deleted."""
        deleted = 0
        while session_id is not None:
            with self._lock(session_id) as held:
                if not held:
                    return deleted
                try:
                    cp, stored = self.reads.stored(session_id)
                except (JournalError, UserError):  # not ours, or unreadable: leave it
                    return deleted
                if cp is None or stored is None or stored.record is not None:
                    return deleted
                if self.store.child_sessions(session_id):
                    return deleted
                summary = self.store.session_summary(session_id)
                self.store.delete_sessions([session_id])
                deleted += 1
            session_id = summary.parent_session_id if summary is not None else None
        return deleted

"""A plain in-memory model of the `CheckpointStore` contract, for the stateful test.

It holds what a store must answer, written from the contract
(`reference/mobius-api.md` §2, README's API tour), not from the library's code:

- sessions with every checkpoint saved (`checkpoint_at`), the latest sequence, and
  a context that, within one `context_epoch`, may only grow;
- an event journal per session: a gapless counter from 1 and the retained events
  (transient kinds consume a sequence and are never retained; a user `message`
  removes its submission's earlier `message_delta`s; a `token_count` replaces the
  previous one);
- transcript batches and execution records keyed by checkpoint sequence;
  admission receipts; the catalog (parent links of forks, first non-null
  `first_user_message`, wall-clock bounds of `created_at`/`updated_at`);
- middleware state per (scope, key), removed with the session named by its scope.

Each write method returns the error class the store must raise (and then changes
nothing), or applies the write and returns None. Each read method returns the
expected answer.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import msgspec

# reaches inside: the model accepts the checkpoint versions the store supports
from journal import (
    Checkpoint,
    ContractViolationError,
    Event,
    ExecutionRecord,
    InvalidInputError,
    JournalError,
    JournalEvent,
    NotFoundError,
    TimestampedEvent,
)
from journal.types import SUPPORTED_CHECKPOINT_VERSIONS

TRANSIENT_KINDS = frozenset({"session_history", "session_resume_requested"})

ErrorClass = type[JournalError]


def clone_checkpoint(cp: Checkpoint) -> Checkpoint:
    """An independent copy (the caller may change its checkpoint after a save)."""
    return msgspec.json.decode(msgspec.json.encode(cp), type=Checkpoint)


@dataclass
class SessionModel:
    checkpoints: dict[int, Checkpoint]
    latest: int
    created: tuple[int, int]  # bounds of created_at (Unix seconds)
    updated: tuple[int, int]  # bounds of updated_at
    first_user_message: str | None = None
    parent: str | None = None
    parent_sequence: int | None = None
    counter: int = 0  # the latest event sequence ever assigned
    events: dict[int, JournalEvent] = field(default_factory=dict)  # retained, by sequence
    message_deltas: dict[str, list[int]] = field(default_factory=dict)
    token_count: int = 0  # sequence of the retained token_count event, 0 if none
    transcript: dict[int, list[Any]] = field(default_factory=dict)
    executions: dict[int, ExecutionRecord] = field(default_factory=dict)
    receipts: set[str] = field(default_factory=set)

    @property
    def head(self) -> Checkpoint:
        return self.checkpoints[self.latest]


def _blank(value: str) -> bool:
    return not value.strip()


def plain_json(value: Any) -> bool:
    """Is `value` JSON made of dicts with str keys, lists, str, int, float, bool, None?"""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if type(value) is list:
        return all(plain_json(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and plain_json(v) for k, v in value.items())
    return False  # a Struct, a tuple, a set, ...


class Model:
    """What the store holds, as plain Python data."""

    def __init__(self) -> None:
        self.sessions: dict[str, SessionModel] = {}
        self.state: dict[tuple[str, str], Any] = {}

    # ------------------------------------------------------------------ saves
    def save_error(
        self,
        cp: Checkpoint,
        execution: ExecutionRecord | None,
        events: list[TimestampedEvent],
    ) -> ErrorClass | None:
        """The error a save must raise, or None if it is valid."""
        if _blank(cp.session_context.owner_id):
            return InvalidInputError
        if any(e.recorded_at_ms < 0 for e in events):
            return InvalidInputError
        if not all(plain_json(v) for v in (cp.context, cp.metadata, cp.pending_tools)):
            return InvalidInputError
        if cp.version not in SUPPORTED_CHECKPOINT_VERSIONS:
            return ContractViolationError
        if execution is not None:
            if execution.started_at_ms < 0:
                return InvalidInputError
            if (
                execution.session_id != cp.session_id
                or cp.active_execution is not None
                or execution.finished_at_ms < execution.started_at_ms
                or execution.elapsed_ms != execution.finished_at_ms - execution.started_at_ms
                or execution.failed_tool_calls > execution.tool_calls
            ):
                return ContractViolationError
        s = self.sessions.get(cp.session_id)
        if s is None:
            return None  # a first save inserts at any sequence
        if cp.sequence <= s.latest:
            return ContractViolationError  # "checkpoint sequence did not advance"
        stored = s.head
        if cp.context_epoch < stored.context_epoch:
            return ContractViolationError  # "context epoch cannot move backwards"
        if cp.context_epoch == stored.context_epoch:
            if len(cp.context) < len(stored.context):
                return ContractViolationError  # "prefix was truncated"
            if cp.context[: len(stored.context)] != stored.context:
                return ContractViolationError  # "prefix changed"
        return None

    def save(
        self,
        cp: Checkpoint,
        delta: list[Any],
        execution: ExecutionRecord | None,
        events: list[TimestampedEvent],
        when: tuple[int, int],
    ) -> list[JournalEvent]:
        """Apply a valid save; returns the events with the sequences they must get."""
        assert self.save_error(cp, execution, events) is None
        s = self.sessions.get(cp.session_id)
        if s is None:
            s = SessionModel(checkpoints={}, latest=cp.sequence, created=when, updated=when)
            self.sessions[cp.session_id] = s
        saved = clone_checkpoint(cp)
        s.checkpoints[cp.sequence] = saved
        s.latest = cp.sequence
        s.updated = when
        if s.first_user_message is None:
            s.first_user_message = saved.first_user_message
        if delta:
            s.transcript[cp.sequence] = copy.deepcopy(delta)
        if execution is not None:
            s.executions[cp.sequence] = msgspec.json.decode(
                msgspec.json.encode(execution), type=ExecutionRecord
            )
        s.receipts.update(m.id for m in saved.pending_messages)
        return [self._append(s, e.recorded_at_ms, e.event) for e in events]

    # ----------------------------------------------------------------- events
    def append_error(
        self, session_id: str, recorded_at_ms: int, expected_latest: int | None = None
    ) -> ErrorClass | None:
        if recorded_at_ms < 0:
            return InvalidInputError
        s = self.sessions.get(session_id)
        if s is None:
            return NotFoundError  # "event journal session does not exist"
        if expected_latest is not None and expected_latest != s.counter:
            return ContractViolationError
        return None

    def append(self, session_id: str, recorded_at_ms: int, event: Event) -> JournalEvent:
        return self._append(self.sessions[session_id], recorded_at_ms, event)

    def _append(self, s: SessionModel, recorded_at_ms: int, event: Event) -> JournalEvent:
        s.counter += 1
        seq = s.counter
        ev = msgspec.json.decode(msgspec.json.encode(event), type=Event)
        out = JournalEvent(sequence=seq, recorded_at_ms=recorded_at_ms, event=ev)
        kind = ev.msg["type"]
        if kind in TRANSIENT_KINDS:
            return out  # consumes a sequence, never retained
        if kind == "message_delta" and ev.submission_id is not None:
            s.message_deltas.setdefault(ev.submission_id, []).append(seq)
        elif kind == "message" and ev.submission_id is not None:
            for old in s.message_deltas.pop(ev.submission_id, []):
                s.events.pop(old, None)
        elif kind == "token_count":
            if s.token_count:
                s.events.pop(s.token_count, None)
            s.token_count = seq
        s.events[seq] = out
        return out

    # ------------------------------------------------------------------ forks
    def fork_at_error(self, parent: str, sequence: int, child: str) -> ErrorClass | None:
        p = self.sessions.get(parent)
        if p is None or sequence not in p.checkpoints:
            return NotFoundError  # no checkpoint at that sequence to build the child from
        if child == parent or child in self.sessions:
            return ContractViolationError
        return None

    def fork_at_child(self, parent: str, sequence: int, child: str) -> Checkpoint:
        """The child `fork_at` builds: the parent's checkpoint at `sequence`, cleaned."""
        source = self.sessions[parent].checkpoints[sequence]
        cp = Checkpoint.empty(child, owner_id=source.session_context.owner_id)
        cp.session_context = msgspec.structs.replace(source.session_context, origin_label=None)
        cp.context = copy.deepcopy(source.context)
        cp.first_user_message = source.first_user_message
        cp.model_route = source.model_route
        cp.context_model_route = source.context_model_route
        cp.metadata = copy.deepcopy(source.metadata)
        return cp

    def fork_error(self, parent: str, sequence: int, cp: Checkpoint) -> ErrorClass | None:
        """`fork` with a caller-built child: clean-child rules first, then the parent."""
        if _blank(cp.session_context.owner_id):
            return InvalidInputError
        if (
            parent == cp.session_id
            or cp.sequence != 0
            or cp.active_execution is not None
            or cp.pending_approval is not None
            or cp.pending_messages
        ):
            return ContractViolationError
        p = self.sessions.get(parent)
        if p is None:
            return NotFoundError  # "fork parent does not exist"
        if sequence > p.latest:
            return ContractViolationError  # "fork point is newer than the parent checkpoint"
        if cp.session_id in self.sessions:
            return ContractViolationError
        return None

    def fork(self, parent: str, sequence: int, cp: Checkpoint, when: tuple[int, int]) -> None:
        assert self.fork_error(parent, sequence, cp) is None
        saved = clone_checkpoint(cp)
        s = SessionModel(
            checkpoints={0: saved},
            latest=0,
            created=when,
            updated=when,
            first_user_message=saved.first_user_message,
            parent=parent,
            parent_sequence=sequence,
        )
        if saved.context:
            s.transcript[0] = copy.deepcopy(saved.context)  # the whole context, batch 0
        self.sessions[cp.session_id] = s

    # ----------------------------------------------------------------- delete
    def subtree(self, session_id: str) -> set[str]:
        out = {session_id}
        grew = True
        while grew:
            grew = False
            for sid, s in self.sessions.items():
                if sid not in out and s.parent in out:
                    out.add(sid)
                    grew = True
        return out

    def delete(self, session_ids: list[str]) -> bool:
        if any(sid not in self.sessions for sid in session_ids):
            return False  # nothing deleted
        doomed: set[str] = set()
        for sid in session_ids:
            doomed |= self.subtree(sid)
        for sid in doomed:
            del self.sessions[sid]
        for scope, key in list(self.state):
            if scope in doomed:
                del self.state[(scope, key)]
        return True

    # ------------------------------------------------------------------ reads
    def children(self, session_id: str) -> set[str]:
        return {sid for sid, s in self.sessions.items() if s.parent == session_id}

    def checkpoint_at(self, session_id: str, sequence: int) -> Checkpoint | None:
        s = self.sessions.get(session_id)
        return None if s is None else s.checkpoints.get(sequence)

    def event_page(
        self, session_id: str, before: int | None, limit: int
    ) -> tuple[int, list[JournalEvent], int | None]:
        """(latest_sequence, events newest first, next_before_sequence)."""
        s = self.sessions[session_id]
        older = [
            s.events[q] for q in sorted(s.events, reverse=True) if before is None or q < before
        ]
        page = older[:limit]
        nxt = page[-1].sequence if len(older) > limit else None
        return s.counter, page, nxt

    def events_after(self, session_id: str, after: int, limit: int) -> list[JournalEvent]:
        s = self.sessions.get(session_id)
        if s is None:
            return []
        return [s.events[q] for q in sorted(s.events) if q > after][:limit]

    @staticmethod
    def _sparse_page(
        table: dict[int, Any], before: int | None, limit: int
    ) -> tuple[list[tuple[int, Any]], int | None]:
        keys = [q for q in sorted(table, reverse=True) if before is None or q < before]
        page = keys[:limit]
        nxt = page[-1] if len(keys) > limit else None
        return [(q, table[q]) for q in page], nxt

    def transcript_page(
        self, session_id: str, before: int | None, limit: int
    ) -> tuple[list[tuple[int, list[Any]]], int | None]:
        s = self.sessions.get(session_id)
        return self._sparse_page({} if s is None else s.transcript, before, limit)

    def execution_page(
        self, session_id: str, before: int | None, limit: int
    ) -> tuple[list[tuple[int, ExecutionRecord]], int | None]:
        s = self.sessions.get(session_id)
        return self._sparse_page({} if s is None else s.executions, before, limit)

    def recent_executions(self, limit: int) -> list[ExecutionRecord]:
        rows = [
            (rec.started_at_ms, sid, seq, rec)
            for sid, s in self.sessions.items()
            for seq, rec in s.executions.items()
        ]
        rows.sort(key=lambda r: (r[0], r[1], r[2]), reverse=True)
        return [r[3] for r in rows[:limit]]

    def summary_fields(self, session_id: str) -> dict[str, Any]:
        """The catalog fields of a session that the model knows exactly."""
        s = self.sessions[session_id]
        head = s.head
        return {
            "session_id": session_id,
            "session_context": head.session_context,
            "parent_session_id": s.parent,
            "parent_sequence": s.parent_sequence,
            "sequence": s.latest,
            "catalog_visible": head.catalog_visible,
            "first_user_message": s.first_user_message,
            "execution_stats": head.execution_stats,
        }

"""Import transcript files into a store: check what is there, then write what is new.

Each file is read twice. The first pass computes its ops without writing and checks
them against the store: for every session the file makes, the store's copy (if
any) must have been imported from this file, and the bytes it consumed (offset and
SHA-256 in its checkpoint metadata) must still be the file's first bytes; the file
is refused otherwise, with nothing written. The second pass writes the ops whose
sequence is above the session's in the store, in file order (a fork after the
commit it forks from), each one commit. A file that grew therefore gets only its
new lines; an unchanged one gets nothing; an import killed half-way resumes where
its last commit ended. A file that changes between the passes stops its import at
the first op that differs.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from journal import Checkpoint, SessionContext, Store

from . import claude_code, codex
from .discover import Source
from .lines import Line, read_lines
from .model import Finding, Fork, Op
from .report import FileReport, SessionReport

IMPORTER_VERSION = 1
BATCH_LINES = 128
"""At most this many consecutive lines of one session go in one commit."""


@dataclass
class Index:
    """What forks of a session need of it: the sequence of each tool call, of each
    subagent it names, and the time of each commit."""

    calls: dict[str, int] = field(default_factory=dict)
    agents: dict[str, int] = field(default_factory=dict)
    times: list[tuple[int, int]] = field(default_factory=list)
    spawns: list[tuple[int, int]] = field(default_factory=list)  # ops starting subagents
    last: int = -1

    def add(self, op: Op) -> None:
        for call_id in op.call_ids:
            self.calls.setdefault(call_id, op.sequence)
        for agent in op.agent_ids:
            self.agents.setdefault(agent, op.sequence)
        self.times.append((op.timestamp_ms, op.sequence))
        if op.ends_commit:
            self.spawns.append((op.timestamp_ms, op.sequence))
        self.last = max(self.last, op.sequence)

    def fork_point(self, fork: Fork) -> int:
        if fork.sequence is not None:
            return fork.sequence
        if fork.call_id is not None and fork.call_id in self.calls:
            return self.calls[fork.call_id]
        if fork.agent_id is not None and fork.agent_id in self.agents:
            return self.agents[fork.agent_id]
        started = fork.started_ms
        spawned = [seq for ms, seq in self.spawns if started is not None and ms <= started]
        if spawned:  # the last call that started a subagent before this one began
            return spawned[-1]
        best = 0
        for ms, seq in self.times:
            if fork.started_ms is not None and ms <= fork.started_ms:
                best = max(best, seq)
        return best


@dataclass
class Stored:
    """A session as the store has it: its sequence and its import record."""

    sequence: int
    record: dict[str, Any] | None


def reader_for(source: Source) -> claude_code.Reader | codex.Reader:
    if source.format == "codex":
        return codex.Reader(source.path)
    return claude_code.Reader(source.path)


def file_ops(source: Source, limit: int, tail: list[Finding] | None = None) -> Iterator[Op]:
    """The ops of `source`'s first `limit` bytes; a half-written last line is left
    out (and reported in `tail`, when given)."""
    with open(source.path, "rb") as f:
        yield from reader_for(source).ops(_whole(source.path, read_lines(f, limit), tail))


def _whole(path: str, lines: Iterator[Line], tail: list[Finding] | None) -> Iterator[Line]:
    for line in lines:
        if not line.incomplete:
            yield line
        elif tail is not None:
            tail.append(
                Finding(
                    path,
                    line.number,
                    "incomplete",
                    f"the last line ({len(line.raw)} bytes, no newline) is not whole JSON:"
                    " its writer was killed or is still writing it; not imported (a later"
                    " import reads it once it is whole)",
                )
            )


class Importer:
    """Imports files one after another into `store` (None: a dry run on no store)."""

    def __init__(
        self,
        store: Store | None,
        *,
        dry_run: bool = False,
        owner: str = "local",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.dry_run = dry_run
        self.owner = owner
        self.progress = progress
        self.indexes: dict[str, Index] = {}
        self.stored: dict[str, Stored | None] = {}
        self.written: dict[str, int] = {}  # sessions written this run: their sequence
        self.written_from: dict[str, str] = {}  # and the file each was written from
        self.commits: dict[str, list[int]] = {}  # the sequences written this run

    # ----------------------------------------------------------------- store
    def _stored(self, sid: str) -> Stored | None:
        if sid in self.written:
            return Stored(self.written[sid], None)
        if sid not in self.stored:
            found = None
            if self.store is not None:
                summary = self.store.session_summary(sid)
                if summary is not None:
                    meta = self.store.session_metadata(sid) or {}
                    record = meta.get("import")
                    found = Stored(summary.sequence, record if isinstance(record, dict) else None)
            self.stored[sid] = found
        return self.stored[sid]

    def _parent_index(self, parent: str) -> Index | None:
        """The index of a fork's parent: read this run, or re-read from the file the
        store's copy was imported from."""
        if parent in self.indexes:
            return self.indexes[parent]
        stored = self._stored(parent)
        if stored is None or stored.record is None:
            return None
        path, fmt = stored.record.get("path"), stored.record.get("format")
        if not isinstance(path, str) or not os.path.isfile(path) or not isinstance(fmt, str):
            return Index(times=[(0, stored.sequence)], last=stored.sequence)
        offset = stored.record.get("offset")
        limit = offset if isinstance(offset, int) else os.path.getsize(path)
        for op in file_ops(Source(path, fmt), limit):
            self.indexes.setdefault(op.session_id, Index()).add(op)
        return self.indexes.get(parent)

    # ------------------------------------------------------------------ file
    def run_file(self, source: Source) -> FileReport:
        size = os.path.getsize(source.path)
        report = FileReport(source.path, source.format, size)
        new_shas: list[tuple[str, int, str]] = []
        forks: dict[str, tuple[str, int] | None] = {}
        sessions: dict[str, SessionReport] = {}
        for op in file_ops(source, size, report.findings):
            report.lines = max(report.lines, op.line or 0)
            report.consumed = max(report.consumed, op.offset)
            self.indexes.setdefault(op.session_id, Index()).add(op)
            sess = sessions.get(op.session_id)
            if sess is None:
                sess = sessions[op.session_id] = SessionReport(op.session_id)
                refused = self._check_owner(source, op.session_id)
                if refused:
                    report.refuse(refused)
            stored = self._stored(op.session_id)
            sess.commits += 1
            if op.fork is not None:
                point = forks[op.session_id] = self._resolve(op, report)
                sess.parent = op.fork.parent
                sess.fork_sequence = point[1] if point else None
            if stored is not None and op.sequence <= stored.sequence:
                sess.existing += 1
                record = stored.record
                consumed = (record.get("offset"), record.get("sha256")) if record else None
                if op.sequence == stored.sequence and consumed not in (
                    None,
                    (op.offset, op.sha256),
                ):
                    report.refuse(
                        f"session {op.session_id!r} was imported from other bytes of this file"
                        f" (its first {consumed[0] if consumed else 0} bytes changed); delete it"
                        " (journal delete) to import the file again"
                    )
                continue
            sess.written += 1
            report.findings.extend(op.findings)
            new_shas.append((op.session_id, op.sequence, op.sha256))
        for sid, sess in sessions.items():
            stored = self._stored(sid)
            if stored is not None and stored.sequence > sess.commits - 1:
                report.refuse(
                    f"session {sid!r} has more commits ({stored.sequence + 1}) than this file"
                    " makes: the file shrank or was rewritten; delete the session to import it"
                    " again"
                )
        report.sessions = list(sessions.values())
        if report.refused or self.dry_run or not new_shas:
            return report
        self._write(source, size, report, new_shas, forks)
        return report

    def _check_owner(self, source: Source, sid: str) -> str | None:
        if sid in self.written:
            if self.written_from[sid] == source.path:
                return None
            return f"session {sid!r} was written from another file ({self.written_from[sid]})"
        stored = self._stored(sid)
        if stored is None:
            return None
        record = stored.record
        if record is None:
            return f"session {sid!r} exists and was not imported from a transcript"
        if record.get("path") != source.path:
            return f"session {sid!r} exists, imported from another file ({record.get('path')})"
        return None

    def _resolve(self, op: Op, report: FileReport) -> tuple[str, int] | None:
        assert op.fork is not None
        index = self._parent_index(op.fork.parent)
        if index is None:
            report.findings.append(
                Finding(
                    report.path,
                    None,
                    "parent_missing",
                    f"{op.session_id!r} forks {op.fork.parent!r}, which is neither in this"
                    " import nor in the store: imported on its own",
                )
            )
            return None
        return op.fork.parent, min(index.fork_point(op.fork), max(index.last, 0))

    # ----------------------------------------------------------------- write
    def _write(
        self,
        source: Source,
        size: int,
        report: FileReport,
        new_shas: list[tuple[str, int, str]],
        forks: dict[str, tuple[str, int] | None],
    ) -> None:
        assert self.store is not None
        states: dict[str, _Applied] = {}
        expected = iter(new_shas)
        batch: list[Op] = []
        for op in file_ops(source, size):
            state = states.get(op.session_id)
            if state is None:
                state = states[op.session_id] = _Applied(source, self.owner)
            stored = self._stored(op.session_id)
            if stored is not None and op.sequence <= stored.sequence:
                state.advance(op)
                continue
            if next(expected, None) != (op.session_id, op.sequence, op.sha256):
                self._flush(batch, states, source)
                report.refuse("the file changed while it was being imported; import it again")
                return
            if batch and (
                op.session_id != batch[-1].session_id
                or op.fork is not None
                or len(batch) >= BATCH_LINES
            ):
                self._flush(batch, states, source)
            state.advance(op)
            point = forks.get(op.session_id) if op.fork is not None else None
            if point is not None:
                at = self._commit_at(point[0], point[1])
                self.store.fork(point[0], at, state.checkpoint(op))
                self._wrote(op.session_id, op.sequence, source)
            else:
                batch.append(op)
                if op.ends_commit:
                    self._flush(batch, states, source)
        self._flush(batch, states, source)

    def _flush(self, batch: list[Op], states: dict[str, _Applied], source: Source) -> None:
        """Write consecutive ops of one session as one commit, at the last one's
        sequence (the sequences of the others are left unused)."""
        if not batch:
            return
        assert self.store is not None
        last = batch[-1]
        items: list[Any] = []
        events = []
        for op in batch:
            for target in op.targets:
                target["checkpoint_sequence"] = last.sequence
                target["batch_item_count"] += len(items)
            items += op.items
            events += op.events
        cp = states[last.session_id].checkpoint(last)
        self.store.save_with_events(cp, items, None, events)
        self._wrote(last.session_id, last.sequence, source)
        if self.progress:
            self.progress(f"{os.path.basename(source.path)}: line {last.line or 0}")
        batch.clear()

    def _wrote(self, sid: str, sequence: int, source: Source) -> None:
        self.written[sid] = sequence
        self.written_from[sid] = source.path
        self.commits.setdefault(sid, []).append(sequence)

    def _commit_at(self, sid: str, sequence: int) -> int:
        """The sequence of the commit of `sid` that holds its op `sequence`: the first
        checkpoint at or after it (lines are written in batches)."""
        assert self.store is not None
        before = self.stored.get(sid)
        mine = self.commits.get(sid, [])
        if before is None or sequence > before.sequence:  # written in this run
            at = bisect.bisect_left(mine, sequence)
            return mine[at] if at < len(mine) else sequence
        for k in range(sequence, min(sequence + BATCH_LINES, before.sequence) + 1):
            if self.store.checkpoint_at(sid, k) is not None:
                return k
        return before.sequence


class _Applied:
    """A session's checkpoint as the ops so far make it."""

    def __init__(self, source: Source, owner: str) -> None:
        self.source = source
        self.owner = owner
        self.context: list[Any] = []
        self.epoch = 0
        self.rewritten = False
        self.meta: dict[str, Any] = {}
        self.first_user_message: str | None = None
        self.model_route: str | None = None
        self.pending: list[Any] = []
        self.op: Op | None = None

    def advance(self, op: Op) -> None:
        if op.rewrite:
            self.epoch += 1
            self.rewritten = True
            self.context = list(op.context)
        elif op.context:
            self.context = [*self.context, *op.context]
        self.meta.update(op.meta)
        self.first_user_message = self.first_user_message or op.first_user_message
        self.model_route = op.model_route or self.model_route
        self.pending = op.pending
        self.op = op

    def checkpoint(self, op: Op) -> Checkpoint:
        cp = Checkpoint.empty(op.session_id, owner_id=self.owner)
        cp.session_context = SessionContext(
            owner_id=self.owner,
            workspace_label=self.meta.get("cwd") if isinstance(self.meta.get("cwd"), str) else None,
            origin_label=self.source.format,
        )
        cp.sequence = op.sequence
        cp.context = [] if op.fork is not None else self.context
        cp.context_epoch = 0 if op.fork is not None else self.epoch
        if self.rewritten and op.fork is None:
            cp.last_context_rewrite = {"epoch": self.epoch, "reasons": ["compaction"]}
        cp.first_user_message = self.first_user_message
        cp.model_route = self.model_route
        record = {
            "format": self.source.format,
            "path": self.source.path,
            "offset": op.offset,
            "sha256": op.sha256,
            "line": op.line,
            "timestamp_ms": op.timestamp_ms,
            "importer": IMPORTER_VERSION,
        }
        cp.metadata = {**self.meta, "import": record}
        if self.pending and op.fork is None:
            # Calls without a result yet (not `pending_tools`, which means calls about
            # to run in a live execution): their ids and names.
            cp.metadata["open_tool_calls"] = [
                {"call_id": c.get("call_id"), "name": c.get("name")} for c in self.pending
            ]
        return cp

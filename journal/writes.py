"""A session's writes: commits, saves, event appends and the dictionary's record.

A commit is built from the head, written with one `write` while holding the
session's lock (thread lock + cross-process flock), applied to the head, and then
made durable with a shared fdatasync (group commit) after the lock is released.
Readers never see bytes that a commit record does not close.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import msgspec

from . import dictionary, eventrules
from .appends import PendingAppend
from .context import plan_context
from .errors import (
    ContractViolationError,
    CorruptionError,
    JournalError,
    NotFoundError,
)
from .index import (
    KIND_CHECKPOINTS,
    KIND_EVENTS,
    KIND_EXECUTIONS,
    KIND_TRANSCRIPTS,
    REMOVED,
)
from .locking import SessionLocking
from .payloads import (
    COMMIT_FORK,
    COMMIT_SAVE,
    CheckpointPayload,
    CommitPayload,
    EventPayload,
    ExecutionPayload,
    TranscriptPayload,
)
from .record import (
    CHECKPOINT,
    COMMIT,
    DICT,
    EVENT,
    EXECUTION,
    FLAG_COMMIT,
    TRANSCRIPT,
    Record,
    frame,
)
from .scan import Tail
from .types import (
    Checkpoint,
    Event,
    ExecutionRecord,
    JournalEvent,
    TimestampedEvent,
)
from .validate import check_json_value

_encode = msgspec.msgpack.Encoder().encode


class SessionWrites(SessionLocking):
    """Commit, save, append."""

    def commit(self, records: list[tuple[int, Any]], kind: int, cp_seq: int) -> int:
        """Frame, write and apply one commit (caller holds `writing()`); return its end."""
        start = self.log.writer_end
        frames: list[bytes] = []
        recs: list[Record] = []
        objs: list[Any] = []
        pos = start
        first_event = last_event = 0
        zdict = self.log.dictionary if self.options.dictionary else None
        for rtype, obj in records:
            payload = _encode(obj)
            if len(payload) > self.options.max_record_bytes:
                raise_too_large(rtype, len(payload), self.options.max_record_bytes)
            if self.sampler.samples is not None:
                self._sample(payload)
            data = frame(rtype, payload, commit=False, dictionary=zdict)
            frames.append(data)
            recs.append(Record(pos, len(data), rtype, 0, b""))
            objs.append(obj)
            pos += len(data)
            if rtype == EVENT:
                last_event = obj.sequence
                first_event = first_event or obj.sequence
        closing = CommitPayload(kind, cp_seq, first_event, last_event, int(time.time() * 1000))
        data = frame(COMMIT, _encode(closing), commit=True, compress=False)
        frames.append(data)
        recs.append(Record(pos, len(data), COMMIT, 0x02, b"", int.from_bytes(data[:4], "little")))
        objs.append(closing)
        end = self.log.write(b"".join(frames))
        if self.on_written is not None:
            self.on_written()
        with self._state_lock:
            self._apply(recs, objs)
            self._extend_view(start, end)
        return end

    def _sample(self, payload: bytes) -> None:
        """Keep `payload` for training the session's dictionary (writer's lock held)."""
        if self.sampler.add(payload) and self.on_samples is not None:
            self.sampler.asked()
            # Optional work: a failure to queue it must not fail the caller's commit.
            with contextlib.suppress(Exception):
                self.on_samples()

    def take_samples(self) -> list[bytes] | None:
        """The samples for a training job, once there are enough and no other job has
        them (else None). The job ends with `write_dictionary` or `no_dictionary`,
        or `training_failed`."""
        with self._state_lock:
            return self.sampler.take()

    def training_failed(self) -> None:
        """The job that took the samples stopped early (an error): a later one may try."""
        with self._state_lock:
            self.sampler.failed()

    def no_dictionary(self) -> None:
        """Training found no dictionary worth keeping: stop sampling (this object)."""
        with self._state_lock:
            self.sampler.stop()

    def write_dictionary(self, data: bytes) -> bool:
        """Commit `data` as the session's dictionary (caller holds `writing()`); False
        when the session has one already (another writer's). Not synced on its own:
        the records that use it come after it, so the sync that makes any of them
        durable makes it durable too, and a crash that loses it loses them."""
        if self.log.dictionary is not None:  # (set whenever head.dict_pos is)
            self.no_dictionary()
            return False
        start = self.log.writer_end
        zdict = dictionary.SessionDictionary(data, start, path=self.log.label)
        data = frame(DICT, zdict.payload(), commit=True, compress=False)
        end = self.log.write(data)
        with self._state_lock:
            crc = int.from_bytes(data[:4], "little")
            rec = Record(start, len(data), DICT, FLAG_COMMIT, b"", crc)
            self.log.use_dictionary(zdict)
            self._apply([rec], [None])
            self._extend_view(start, end)
        return True

    def _joined_context(self) -> bytearray:
        """`b"".join(head.context)`, kept between saves (writers hold the lock).

        The head's context list only grows in place within an epoch and is
        replaced by a new list otherwise, so the cache holds the list itself (not
        its id, which a new list could reuse) and how many items it joined. A
        bytearray, extended in place: a new bytes object per save copied the whole
        context each time.
        """
        context = self.head.context
        cached = self._context_cache
        if cached is not None and cached[0] is context and cached[1] <= len(context):
            joined = cached[2]
            if cached[1] < len(context):
                joined += b"".join(context[cached[1] :])
        else:
            joined = bytearray(b"".join(context))
        self._context_cache = (context, len(context), joined)
        return joined

    def wait_durable(self, end: int) -> None:
        if self.options.durable:
            self.log.wait_durable(end)

    @staticmethod
    def fork_commit(checkpoint: Checkpoint, now: int, max_record_bytes: int) -> tuple[bytes, bytes]:
        """The first commit of a fork's child, framed: its whole log after the segment
        header (FORMAT.md section 3: commit kind 2, its records not compressed), and
        the checkpoint header in it. Built without a `Session`: the child's log is
        empty and nobody else knows it, so there is no head to plan against. The
        transcript batch 0 is the context, each item encoded once for both.
        """
        header = _encode(msgspec.structs.replace(checkpoint, context=[]))
        items = [msgspec.Raw(_encode(item)) for item in checkpoint.context]
        seq = checkpoint.sequence
        receipts: list[str] = list(dict.fromkeys(m.id for m in checkpoint.pending_messages))
        records: list[tuple[int, Any]] = [
            (
                CHECKPOINT,
                CheckpointPayload(
                    seq, now, checkpoint.context_epoch, 0, -1, msgspec.Raw(header), items, receipts
                ),
            )
        ]
        if items:
            records.append((TRANSCRIPT, TranscriptPayload(seq, now, items)))
        frames: list[bytes] = []
        for rtype, obj in records:
            payload = _encode(obj)
            if len(payload) > max_record_bytes:
                raise_too_large(rtype, len(payload), max_record_bytes)
            frames.append(frame(rtype, payload, commit=False, compress=False))
        closing = CommitPayload(COMMIT_FORK, seq, 0, 0, int(time.time() * 1000))
        frames.append(frame(COMMIT, _encode(closing), commit=True, compress=False))
        return b"".join(frames), header

    def save(
        self,
        checkpoint: Checkpoint,
        transcript_delta: list[Any],
        execution: ExecutionRecord | None,
        events: list[TimestampedEvent],
        *,
        now: int,
        on_commit: Callable[[], None] | None = None,
        checked_from: int = 0,
    ) -> list[JournalEvent]:
        """The body of `save_with_events` (validated input).

        `checked_from`: the store checked the context as JSON from this index on only
        (the stored prefix, as it saw it before taking the lock); whatever turns out
        to be new before it is checked here, under the lock, before anything is
        written (the session may have been deleted and created again, or given a
        shorter context of the same epoch, meanwhile).

        `on_commit` runs right after the commit, still under the session's write
        lock: the catalog upsert goes there, so that it cannot land after the
        catalog's delete record of a delete that began after this commit (a delete
        takes every session lock first). A fork's first commit is `fork_commit`.
        """
        header = msgspec.Raw(_encode(msgspec.structs.replace(checkpoint, context=[])))
        transcript_items = [msgspec.Raw(_encode(item)) for item in transcript_delta]
        with self.committing():
            records = self._checkpoint_records(checkpoint, header, now, checked_from)
            seq = checkpoint.sequence
            if transcript_items:
                records.append((TRANSCRIPT, TranscriptPayload(seq, now, transcript_items)))
            if execution is not None:
                records.append((EXECUTION, ExecutionPayload(seq, execution)))
            end, journal = self._commit_with_events(records, events, transcript_delta, seq)
            self.after_commit()
            if on_commit is not None:
                try:
                    on_commit()
                except BaseException:
                    # The commit is visible already: make it durable before the call
                    # fails, as any commit is. A failing sync poisons the log, so
                    # later writes report it.
                    with contextlib.suppress(JournalError):
                        self.wait_durable(end)
                    raise
        self.wait_durable(end)
        return journal

    def _checkpoint_records(
        self, checkpoint: Checkpoint, header: msgspec.Raw, now: int, checked_from: int
    ) -> list[tuple[int, Any]]:
        """The CHECKPOINT record of a save, planned against the head (lock held): the
        sequence must advance, and only the context items not stored yet go in it."""
        head = self.head
        if head.sequence >= 0 and checkpoint.sequence <= head.sequence:
            raise ContractViolationError(
                f"checkpoint sequence did not advance (session {self.id!r}: stored "
                f"{head.sequence}, got {checkpoint.sequence})"
            )
        if checkpoint.sequence <= head.sequence_floor:
            raise ContractViolationError(
                f"checkpoint sequence {checkpoint.sequence} of session {self.id!r} was"
                f" used before a loss that `journal repair --accept-loss` accepted:"
                f" the next checkpoint must come after {head.sequence_floor}"
            )
        stored = head.context if head.sequence >= 0 else None
        base, tail = plan_context(
            stored,
            head.epoch,
            checkpoint.context,
            checkpoint.context_epoch,
            joined=self._joined_context() if stored is not None else None,
        )
        for index in range(base, min(checked_from, len(checkpoint.context))):
            check_json_value(checkpoint.context[index], f"checkpoint.context[{index}]")
        receipts = []
        seen = set()
        for msg in checkpoint.pending_messages:
            if msg.id not in self._receipts and msg.id not in seen:
                seen.add(msg.id)
                receipts.append(msg.id)
        payload = CheckpointPayload(
            checkpoint.sequence,
            now,
            checkpoint.context_epoch,
            base,
            head.ctx_pos if base else -1,
            header,
            [msgspec.Raw(t) for t in tail],
            receipts,
        )
        return [(CHECKPOINT, payload)]

    def _commit_with_events(
        self,
        records: list[tuple[int, Any]],
        events: list[TimestampedEvent],
        transcript_delta: list[Any],
        seq: int,
    ) -> tuple[int, list[JournalEvent]]:
        """Add the save's events to `records` and commit them all (lock held); return
        the commit's end and the events as journaled.

        Rules are planned in place and undone if the commit fails; under the state
        lock, so that a reader thread cannot replay this commit's events into them
        from the log before it is applied (see `_commit_appends`).
        """
        journal: list[JournalEvent] = []
        head = self.head
        with self._state_lock:
            rules = head.rules
            changes: eventrules.Undo = []
            counter = head.event_counter
            try:
                for te in events:
                    counter += 1
                    removes, transient, metrics = eventrules.plan(
                        rules, counter, te.recorded_at_ms, te.event, changes
                    )
                    kept, ref = _store_output_once(te.event, transcript_delta, seq)
                    payload = EventPayload(
                        counter, te.recorded_at_ms, kept, metrics, removes, transient, ref
                    )
                    records.append((EVENT, payload))
                    journal.append(
                        JournalEvent(
                            sequence=counter,
                            recorded_at_ms=te.recorded_at_ms,
                            event=te.event,
                            stream_metrics=metrics,
                        )
                    )
                end = self.commit(records, COMMIT_SAVE, seq)
            except BaseException:
                eventrules.undo(rules, changes)
                raise
        return end, journal

    def append_event(
        self, recorded_at_ms: int, event: Event, expected_latest: int | None = None
    ) -> JournalEvent:
        """Append one event as its own commit; concurrent appends share a write
        (`appends.AppendQueue`)."""
        return self.appends.append(PendingAppend(recorded_at_ms, event, expected_latest))

    def last_sync_seconds(self) -> float:
        return self.log.last_sync

    def write_batch(
        self, take: Callable[[PendingAppend], list[PendingAppend]], leader: PendingAppend
    ) -> None:
        """Take the write lock, commit the appends `take(leader)` returns, release it
        (`appends.BatchWriter`). `committing()` spelled out: its three nested
        context managers cost more than the flock they take."""
        durable = self.options.durable
        if durable:
            self.log.announce()
        try:
            self._acquire_writer()
            try:
                self._commit_appends(take(leader))
                self.after_commit()
            except BaseException:
                self._writer_ready = False  # not quiet next time: see `_release_writer`
                raise
            finally:
                self._release_writer()
        finally:
            if durable:
                self.log.arrived()

    def _commit_appends(self, batch: list[PendingAppend]) -> None:
        """Write the batch's events as consecutive one-record commits (lock held).

        Planned, written and applied under the state lock: the rules are updated
        in place as each event is planned, so a reader thread must not apply the
        same commits from the log meanwhile (`_catch_up` replays rules too).
        """
        head = self.head
        if head.sequence < 0:
            raise NotFoundError(
                f"event journal session does not exist: {self.id!r} (save a checkpoint first)"
            )
        limit = self.options.max_record_bytes
        zdict = self.log.dictionary if self.options.dictionary else None
        with self._state_lock:
            rules = head.rules
            seq = head.event_counter
            changes: eventrules.Undo = []
            staged: list[tuple[PendingAppend, EventPayload, bytes]] = []
            for req in batch:
                if req.expected is not None and req.expected != seq:
                    req.error = ContractViolationError(
                        f"event journal of session {self.id!r}: the latest sequence is {seq},"
                        f" not the expected {req.expected}; nothing was appended"
                    )
                    continue
                mark = len(changes)
                try:
                    removes, transient, metrics = eventrules.plan(
                        rules, seq + 1, req.recorded_at_ms, req.event, changes
                    )
                    payload = EventPayload(
                        seq + 1, req.recorded_at_ms, req.event, metrics, removes, transient
                    )
                    raw = _encode(payload)
                    size = len(raw)
                    if size > limit:
                        raise_too_large(EVENT, size, limit)
                    if self.sampler.samples is not None:
                        self._sample(raw)
                    data = frame(EVENT, raw, commit=True, dictionary=zdict)
                except Exception as exc:  # this caller's input: the others go on
                    eventrules.undo(rules, changes, mark)
                    req.error = exc
                    continue
                except BaseException:
                    # interrupted (a signal handler raising): nothing is written, so
                    # nothing planned may stay
                    eventrules.undo(rules, changes)
                    raise
                staged.append((req, payload, data))
                seq += 1
            if not staged:
                return
            start = self.log.writer_end
            joined = staged[0][2] if len(staged) == 1 else b"".join(d for _, _, d in staged)
            try:
                self.log.write(joined)
            except BaseException:
                eventrules.undo(rules, changes)  # nothing was written
                raise
            end = self._apply_own_events(staged, start)
            state = self.tail_state  # `_extend_view`, inline
            if state.tail == Tail.CLEAN and state.end == start:
                state.end = end

    def _apply_own_events(
        self, staged: list[tuple[PendingAppend, EventPayload, bytes]], start: int
    ) -> int:
        """`_apply` of the one-event commits this writer just wrote from `start` (state
        lock held); fills in each append's end and result, returns the end.

        The writer's head and indexes all end at `start` (it holds the write lock and
        caught up before writing): the general `_apply`, which decides per
        structure whether it already reflects a commit, is only needed otherwise.
        """
        head = self.head
        indexes = self.indexes
        events, checkpoints = indexes[KIND_EVENTS], indexes[KIND_CHECKPOINTS]
        transcripts, executions = indexes[KIND_TRANSCRIPTS], indexes[KIND_EXECUTIONS]
        current = (
            head.covered
            == events.covered
            == checkpoints.covered
            == transcripts.covered
            == executions.covered
            == start
        )
        pos = last = start
        counter = head.event_counter
        for req, payload, data in staged:
            size = len(data)
            if not current:
                crc = int.from_bytes(data[:4], "little")
                self._apply([Record(pos, size, EVENT, FLAG_COMMIT, b"", crc)], [payload])
            else:
                sequence = payload.sequence
                if sequence != counter + 1:
                    raise CorruptionError(
                        f"event sequence {sequence} follows {counter}",
                        path=self.log.label,
                        offset=pos,
                    )
                counter = sequence
                events.append(sequence, pos, size, REMOVED if payload.transient else 0)
                if payload.removes:
                    count = events.count
                    for r in payload.removes:
                        if 0 < r <= count:
                            events.mark_removed(r - 1)
            last = pos
            pos += size
            req.end = pos
            req.result = JournalEvent(
                sequence=payload.sequence,
                recorded_at_ms=payload.recorded_at_ms,
                event=payload.event,
                stream_metrics=payload.stream_metrics,
            )
        if current:
            events.covered = checkpoints.covered = transcripts.covered = pos
            executions.covered = head.covered = pos
            head.event_counter = counter
            head.anchor_pos = last
            head.anchor_crc = int.from_bytes(staged[-1][2][:4], "little")
            head.commits += len(staged)
        return pos


LARGE_TOOL_OUTPUT = 4096  # bytes of text above which a tool output is stored once


def _store_output_once(
    event: Event, transcript: list[Any], batch_seq: int
) -> tuple[Event, list[int] | None]:
    """mobius's "large tool outputs stored once": a `tool_call_end` whose text output
    is over 4 KiB and equals a `function_call_output` item of the same save keeps a
    reference to that transcript item instead of a second copy."""
    msg = event.msg
    output = msg.get("output")
    if msg.get("type") != "tool_call_end" or not isinstance(output, str):
        return event, None
    # (a str of at most 1024 characters cannot exceed 4 KiB of UTF-8: skip the encode)
    if len(output) <= LARGE_TOOL_OUTPUT // 4:
        return event, None
    if len(output.encode("utf-8", "surrogatepass")) <= LARGE_TOOL_OUTPUT:
        return event, None
    for index, item in enumerate(transcript):
        if (
            isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and item.get("call_id") == msg.get("call_id")
            and item.get("output") == output
        ):
            stripped = {k: v for k, v in msg.items() if k != "output"}
            return Event(submission_id=event.submission_id, msg=stripped), [batch_seq, index]
    return event, None


def raise_too_large(rtype: int, size: int, limit: int) -> None:
    from .errors import InvalidInputError
    from .record import TYPE_NAMES

    raise InvalidInputError(
        f"{TYPE_NAMES.get(rtype, rtype)} record of {size} bytes exceeds the limit of {limit} bytes"
    )

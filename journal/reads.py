"""A session's reads: the latest checkpoint, checkpoints at a sequence, and pages of
events, transcripts and executions, answered from the head, the indexes and the log.

Readers never take the session's lock. A read that an index answers wrongly (an
entry pointing at the wrong record) rebuilds the indexes from the log and tries
once more; a read that needs what lies behind known damage raises it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from . import payloads
from .catchup import SessionCatchUp
from .context import msgpack_array_header
from .errors import (
    CorruptionError,
    NotFoundError,
)
from .fold import compacted_stub, decode_payload
from .index import (
    KIND_CHECKPOINTS,
    KIND_EVENTS,
    KIND_EXECUTIONS,
    KIND_TRANSCRIPTS,
    IndexDoubtError,
)
from .payloads import (
    CheckpointPayload,
    EventPayload,
)
from .record import (
    CHECKPOINT,
    EVENT,
    EXECUTION,
    TRANSCRIPT,
    Record,
)
from .sessionstate import KnownDamage
from .types import (
    Checkpoint,
    Event,
    ExecutionRecord,
    JournalEvent,
    TranscriptBatch,
)

_decode_checkpoint = msgspec.msgpack.Decoder(Checkpoint).decode
_decode_any = msgspec.msgpack.Decoder().decode


class SessionReads(SessionCatchUp):
    """Loads and pages."""

    @property
    def exists(self) -> bool:
        if self.head.sequence < 0:
            self._need(not self._bounded(self.head.covered))
        return self.head.sequence >= 0

    def load(self) -> Checkpoint | None:
        return self._load(None)

    def load_prefix(self, items: int) -> Checkpoint | None:
        """`load`, with only the first `items` items of the context decoded (all of
        them if it has fewer): for a reader that needs an older checkpoint's part
        of the newest context, without decoding the rest."""
        return self._load(items)

    def _load(self, items: int | None) -> Checkpoint | None:
        """The latest checkpoint, with its whole context or its first `items` items."""
        with self._state_lock:
            self._need(not self._bounded(self.head.covered))
            head = self.head
            if head.header is None:
                return None
            header = bytes(head.header)
            part = head.context if items is None else head.context[:items]
            # One decode of the items joined as one array: a C loop, where a decode
            # call per item cost about 40% more for a context of 150 items.
            context = msgpack_array_header(len(part)) + b"".join(part)
        cp = _decode_checkpoint(header)
        cp.context = _decode_any(context)
        return cp

    def receipt(self, submission_id: str) -> bool:
        if submission_id in self._receipts:
            return True
        self._need(not self._bounded(self.head.covered))
        return False

    def _read(self, entries: list[tuple[int, int, int, int]]) -> list[Record]:
        return self.log.read_records([(e[1], e[2]) for e in entries])

    def _with_index_retry(self, fn: Any) -> Any:
        try:
            return fn()
        except KnownDamage:
            raise  # already located by a scan of the log: rebuilding would find it again
        except (IndexDoubtError, CorruptionError):
            pass
        # An index pointing at the wrong bytes is a cache problem: rebuild and retry.
        # If the log itself is damaged, the rebuild stops there and raises the precise
        # error (the old indexes stay in use for reads that do not touch the damage).
        self._rebuild_indexes()
        try:
            return fn()
        except IndexDoubtError as exc:  # internal: never reaches a caller raw
            raise CorruptionError(f"session {self.id!r}: {exc}", path=self.dir) from exc

    def event_page(
        self, before: int | None, limit: int
    ) -> tuple[int, list[JournalEvent], int | None]:
        def run() -> tuple[int, list[JournalEvent], int | None]:
            with self._state_lock:
                bound = self._index_bound(KIND_EVENTS)
                self._need(bound is None or (before is not None and before - 1 <= bound))
                latest = self.head.event_counter
                entries, more = self.indexes[KIND_EVENTS].newest_before(before, limit)
            events = self._events_of(self._read(entries), entries)
            nxt = events[-1].sequence if more and events else None
            return latest, events, nxt

        result: tuple[int, list[JournalEvent], int | None] = self._with_index_retry(run)
        return result

    def events_after(self, after: int, limit: int) -> list[JournalEvent]:
        def run() -> list[JournalEvent]:
            with self._state_lock:
                entries = self.indexes[KIND_EVENTS].oldest_after(after, limit)
                # fewer than asked for: the rest may lie behind the damage
                self._need(len(entries) == limit or self._index_bound(KIND_EVENTS) is None)
            return self._events_of(self._read(entries), entries)

        result: list[JournalEvent] = self._with_index_retry(run)
        return result

    def _events_of(
        self, records: list[Record], entries: list[tuple[int, int, int, int]]
    ) -> list[JournalEvent]:
        """`_event_of` for a page, as one loop (a page decodes tens of records)."""
        decode = payloads.event_decoder.decode
        out: list[JournalEvent] = []
        try:
            for rec, entry in zip(records, entries, strict=True):
                if rec.rtype != EVENT:
                    return self._events_carefully(records, entries)  # raises the doubt
                p = decode(rec.payload)
                if p.sequence != entry[0] or p.output_ref is not None:
                    out.append(self._event_of(rec, entry[0]))  # raises, or restores output
                    continue
                out.append(
                    JournalEvent(
                        sequence=p.sequence,
                        recorded_at_ms=p.recorded_at_ms,
                        event=p.event,
                        stream_metrics=p.stream_metrics,
                    )
                )
        except msgspec.DecodeError:
            return self._events_carefully(records, entries)  # raises the precise error
        return out

    def _events_carefully(
        self, records: list[Record], entries: list[tuple[int, int, int, int]]
    ) -> list[JournalEvent]:
        return [self._event_of(r, e[0]) for r, e in zip(records, entries, strict=True)]

    def _event_of(self, rec: Record, seq: int) -> JournalEvent:
        if rec.rtype != EVENT:
            raise IndexDoubtError(f"index entry for event {seq} points at a {rec.rtype} record")
        p = decode_payload(payloads.event_decoder, rec, self)
        if p.sequence != seq:
            raise IndexDoubtError(f"index entry for event {seq} points at event {p.sequence}")
        event = p.event if p.output_ref is None else self._restore_output(p, rec)
        return JournalEvent(
            sequence=p.sequence,
            recorded_at_ms=p.recorded_at_ms,
            event=event,
            stream_metrics=p.stream_metrics,
        )

    def _restore_output(self, p: EventPayload, rec: Record) -> Event:
        """Put back a large tool output that is stored once, in the transcript."""
        assert p.output_ref is not None
        batch_seq, index = p.output_ref
        with self._state_lock:
            entry = self.indexes[KIND_TRANSCRIPTS].find(batch_seq)
        item: Any = None
        if entry is not None:
            batch = decode_payload(
                payloads.transcript_decoder, self.log.read_record(entry[1], entry[2]), self
            )
            if batch.sequence == batch_seq and 0 <= index < len(batch.items):
                item = _decode_any(bytes(batch.items[index]))
        if not isinstance(item, dict) or "output" not in item:
            raise CorruptionError(
                f"event {p.sequence} stores its tool output as transcript batch {batch_seq}"
                f" item {index}, which is missing",
                path=self.log.label,
                offset=rec.pos,
            )
        return Event(
            submission_id=p.event.submission_id, msg={**p.event.msg, "output": item["output"]}
        )

    def sparse_page(
        self, kind: int, before: int | None, limit: int, decoder: Any = None
    ) -> tuple[list[Any], int | None]:
        rtype, default = {
            KIND_TRANSCRIPTS: (TRANSCRIPT, payloads.transcript_decoder),
            KIND_EXECUTIONS: (EXECUTION, payloads.execution_decoder),
            KIND_CHECKPOINTS: (CHECKPOINT, payloads.checkpoint_decoder),
        }[kind]
        decoder = decoder or default

        def run() -> tuple[list[Any], int | None]:
            with self._state_lock:
                bound = self._index_bound(kind)
                self._need(bound is None or (before is not None and before - 1 <= bound))
                entries, more = self.indexes[kind].newest_before(before, limit)
            out = []
            for rec, e in zip(self._read(entries), entries, strict=True):
                if rec.rtype != rtype:
                    raise IndexDoubtError(f"index entry {e[0]} points at a {rec.rtype} record")
                p = decode_payload(decoder, rec, self)
                if p.sequence != e[0]:
                    raise IndexDoubtError(f"index entry {e[0]} points at {p.sequence}")
                out.append(p)
            nxt = out[-1].sequence if more and out else None
            return out, nxt

        result: tuple[list[Any], int | None] = self._with_index_retry(run)
        return result

    def transcript_page(
        self, before: int | None, limit: int
    ) -> tuple[list[TranscriptBatch], int | None]:
        # One decode per batch, items included (not one per item).
        found, nxt = self.sparse_page(
            KIND_TRANSCRIPTS, before, limit, payloads.transcript_items_decoder
        )
        return [
            TranscriptBatch(sequence=p.sequence, created_at=p.created_at, items=p.items)
            for p in found
        ], nxt

    def execution_page(
        self, before: int | None, limit: int
    ) -> tuple[list[ExecutionRecord], int | None]:
        items, nxt = self.sparse_page(KIND_EXECUTIONS, before, limit)
        return [p.record for p in items], nxt

    def checkpoint_at(self, sequence: int) -> Checkpoint | None:
        """The checkpoint exactly as saved at `sequence` (None if no save had it)."""

        def run() -> Checkpoint | None:
            with self._state_lock:
                bound = self._index_bound(KIND_CHECKPOINTS)
                self._need(bound is None or sequence <= bound)
                entry = self.indexes[KIND_CHECKPOINTS].find(sequence)
            if entry is None:
                return None
            rec = self.log.read_record(entry[1], entry[2])
            if rec.rtype != CHECKPOINT:
                raise IndexDoubtError(f"checkpoint index entry {sequence} points elsewhere")
            p = decode_payload(payloads.checkpoint_decoder, rec, self)
            if p.sequence != sequence:
                raise IndexDoubtError(f"checkpoint index entry {sequence} points at {p.sequence}")
            if compacted_stub(p.header) is not None:
                raise NotFoundError(
                    f"checkpoint {sequence} of session {self.id!r} was compacted away"
                    " (`journal compact` keeps only the newest checkpoints)"
                )
            return self._materialise(p)

        result: Checkpoint | None = self._with_index_retry(run)
        return result

    def _materialise(self, p: CheckpointPayload) -> Checkpoint:
        """Rebuild a historical checkpoint's context by walking its epoch's item chain."""
        chunks: list[list[msgspec.Raw]] = [p.items]
        base, prev = p.base, p.prev_ctx
        while base > 0:
            if prev < 0:
                raise CorruptionError(
                    f"checkpoint {p.sequence}: context chain ends with {base} items missing",
                    path=self.log.label,
                )
            rec = self.log.read_record_at(prev)
            q = decode_payload(payloads.checkpoint_decoder, rec, self)
            take = base - q.base
            if rec.rtype != CHECKPOINT or take <= 0 or take > len(q.items):
                raise CorruptionError(
                    f"checkpoint {p.sequence}: context chain is inconsistent at position {prev}",
                    path=self.log.label,
                    offset=prev,
                )
            chunks.append(q.items[:take])
            base, prev = q.base, q.prev_ctx
        cp = _decode_checkpoint(bytes(p.header))
        items = [i for chunk in reversed(chunks) for i in chunk]
        cp.context = _decode_any(msgpack_array_header(len(items)) + b"".join(items))
        return cp

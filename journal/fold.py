"""Applying a commit to a session's head and indexes.

Every commit a session learns of, from a scan of the log or from its own writer,
is folded in here: each structure (the head, each of the four indexes) takes it
only if it does not reflect it yet, so a scan may start at the lowest position
any of them covers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from . import dictionary, eventrules, payloads
from .errors import (
    CorruptionError,
)
from .index import (
    KIND_CHECKPOINTS,
    KIND_EVENTS,
    KIND_EXECUTIONS,
    KIND_TRANSCRIPTS,
    REMOVED,
)
from .payloads import (
    CheckpointPayload,
)
from .record import (
    CHECKPOINT,
    COMMIT,
    DICT,
    EVENT,
    EXECUTION,
    FLAG_COMMIT,
    LOSS,
    PAD,
    SEAL,
    TRANSCRIPT,
    Record,
)
from .sessionstate import SessionState


class _FirstUserMessage(msgspec.Struct):
    first_user_message: str | None = None


_decode_fum = msgspec.msgpack.Decoder(_FirstUserMessage).decode


INDEX_OF = {
    EVENT: KIND_EVENTS,
    CHECKPOINT: KIND_CHECKPOINTS,
    TRANSCRIPT: KIND_TRANSCRIPTS,
    EXECUTION: KIND_EXECUTIONS,
}
_DECODERS = payloads.DECODERS


class SessionFold(SessionState):
    """Folding commits into the head and the indexes."""

    def _apply(self, commit: list[Record], built: list[Any] | None) -> None:
        """Fold one committed record group into the head and the indexes.

        `built` holds the payload objects when the writer just encoded them
        (saves a decode); otherwise payloads are decoded from the records. Each
        structure takes the commit only if it does not reflect it yet.
        """
        head = self.head
        first = commit[0].pos
        commit_end = commit[-1].pos + commit[-1].size
        to_head = first >= head.covered
        fresh = {k: first >= idx.covered for k, idx in self.indexes.items()}
        if not to_head and not any(fresh.values()):
            return
        for k, rec in enumerate(commit):
            obj = built[k] if built is not None else None
            rtype = rec.rtype
            kind = INDEX_OF.get(rtype)
            if kind is None:
                if rtype == DICT:
                    self._apply_dictionary(commit, rec, to_head)
                    continue
                if rtype == LOSS:
                    self._apply_loss(rec, to_head)
                    continue
                if rtype not in (COMMIT, PAD, SEAL):
                    raise CorruptionError(
                        f"unexpected record type {rtype} in a session log",
                        path=self.log.label,
                        offset=rec.pos,
                    )
                continue
            p: Any = obj if obj is not None else decode_payload(_DECODERS[rtype], rec, self)
            if fresh[kind]:
                idx = self.indexes[kind]
                idx.append(
                    p.sequence, rec.pos, rec.size, REMOVED if rtype == EVENT and p.transient else 0
                )
                if rtype == EVENT:
                    for r in p.removes:
                        if 0 < r <= idx.count:
                            idx.mark_removed(r - 1)
            if not to_head:
                continue
            if rtype == EVENT:
                if p.sequence != head.event_counter + 1:
                    raise CorruptionError(
                        f"event sequence {p.sequence} follows {head.event_counter}",
                        path=self.log.label,
                        offset=rec.pos,
                    )
                head.event_counter = p.sequence
                if built is None:
                    eventrules.replay(
                        head.rules, p.sequence, p.recorded_at_ms, p.event, p.transient
                    )
            elif rtype == CHECKPOINT:
                self._apply_checkpoint(p, rec)
            elif rtype == TRANSCRIPT:
                head.transcripts += 1
            else:
                head.executions += 1
        for k, idx in self.indexes.items():
            if fresh[k]:
                idx.covered = commit_end
        if to_head:
            last = commit[-1]
            head.covered = commit_end
            head.anchor_pos, head.anchor_crc = last.pos, last.crc
            head.commits += 1

    def _apply_dictionary(self, commit: list[Record], rec: Record, to_head: bool) -> None:
        """A DICT record (read by a scan, which adopted it: `Log.committed`)."""
        if not dictionary.well_placed(commit):
            raise CorruptionError(dictionary.MISPLACED, path=self.log.label, offset=rec.pos)
        if to_head:
            self.head.dict_pos = rec.pos
        self.sampler.stop()

    def _apply_loss(self, rec: Record, to_head: bool) -> None:
        """A LOSS record: the numbers handed out before the loss stay used.

        The event index gets an entry, marked removed, for each event sequence lost,
        so entry `i` still describes sequence `i + 1`; pages skip them.
        """
        if rec.flags != FLAG_COMMIT:
            raise CorruptionError(
                "a loss record must be a commit of its own", path=self.log.label, offset=rec.pos
            )
        p = decode_payload(payloads.loss_decoder, rec, self)
        events = self.indexes[KIND_EVENTS]
        if rec.pos >= events.covered:
            for seq in range(events.count + 1, p.events_through + 1):
                events.append(seq, rec.pos, rec.size, REMOVED)
        if not to_head:
            return
        head = self.head
        head.event_counter = max(head.event_counter, p.events_through)
        head.sequence_floor = max(head.sequence_floor, p.checkpoints_through)
        head.losses.append(rec.pos)

    def _apply_checkpoint(self, p: CheckpointPayload, rec: Record) -> None:
        head = self.head
        stub = compacted_stub(p.header)
        if stub is not None and stub.get("items_dropped"):
            # `compact` dropped this dead epoch's items: nothing in it can be rebuilt,
            # and nothing needs to be (a later epoch replaced it before any retained
            # checkpoint). Keep counting so the epoch's later records still check.
            self._dead_epoch = p.epoch
        if self._dead_epoch == p.epoch:
            head.context = [msgspec.Raw(b"\xc0")] * (p.base + len(p.items))
        elif head.sequence >= 0 and p.epoch == head.epoch and p.base != len(head.context):
            raise CorruptionError(
                f"checkpoint {p.sequence} extends {p.base} context items,"
                f" {len(head.context)} stored",
                path=self.log.label,
                offset=rec.pos,
            )
        if p.base == 0:
            head.context = list(p.items)
        elif p.items:
            head.context.extend(p.items)
        if p.items:
            head.ctx_pos = rec.pos
        elif p.base == 0:
            head.ctx_pos = -1
        if head.sequence < 0:
            head.created_at = p.updated_at
        head.epoch = p.epoch
        head.sequence = p.sequence
        head.checkpoint_pos, head.checkpoint_size = rec.pos, rec.size
        head.header = bytes(p.header)
        head.updated_at = p.updated_at
        if head.first_user_message is None:
            head.first_user_message = _decode_fum(p.header).first_user_message
        for r in p.receipts:
            if r not in self._receipts:
                self._receipts.add(r)
                head.receipts.append(r)


def compacted_stub(header: bytes | msgspec.Raw) -> dict[str, Any] | None:
    """The marker map of a checkpoint header that `compact` replaced, else None."""
    header = bytes(header)
    if len(header) > 256 or not header or header[0] & 0xF0 != 0x80:
        return None  # real headers are large maps; stubs are small fixmaps
    try:
        value = msgspec.msgpack.decode(header)
    except msgspec.DecodeError:
        return None
    if isinstance(value, dict) and value.get("compacted") is True:
        return value
    return None


def decode_payload(decoder: Any, rec: Record, session: SessionState) -> Any:
    try:
        return decoder.decode(rec.payload)
    except msgspec.DecodeError as exc:
        raise CorruptionError(
            f"record payload does not decode: {exc}", path=session.log.label, offset=rec.pos
        ) from exc

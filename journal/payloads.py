"""The msgpack payload of each record type (FORMAT.md, "Record payloads").

Payloads are msgspec structs encoded as msgpack arrays (`array_like`), fields in
declaration order. Opaque JSON (checkpoint header, context and transcript items)
is kept as `msgspec.Raw` so a reader can skip what it does not need without
decoding it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .record import CHECKPOINT, COMMIT, DICT, EVENT, EXECUTION, LOSS, TRANSCRIPT
from .types import Event, ExecutionRecord, StreamMetrics


class CheckpointPayload(msgspec.Struct, array_like=True):
    sequence: int
    updated_at: int  # Unix seconds, the catalog's updated_at
    epoch: int  # context_epoch of this checkpoint
    base: int  # context items this record does not repeat (same epoch, already stored)
    prev_ctx: int  # log position of the previous checkpoint record with items, or -1
    header: msgspec.Raw  # msgpack of the Checkpoint with `context` emptied
    items: list[msgspec.Raw]  # the new context tail (or the whole context on a new epoch)
    receipts: list[str]  # submission ids of pending_messages not received before


class TranscriptPayload(msgspec.Struct, array_like=True):
    sequence: int  # the checkpoint sequence that carried the batch
    created_at: int  # Unix seconds
    items: list[msgspec.Raw]


class TranscriptItemsPayload(msgspec.Struct, array_like=True):
    """The same bytes as `TranscriptPayload`, items decoded at once (for pages)."""

    sequence: int
    created_at: int
    items: list[Any]


class ExecutionPayload(msgspec.Struct, array_like=True):
    sequence: int
    record: ExecutionRecord


class EventPayload(msgspec.Struct, array_like=True, gc=False):  # see types.Event
    sequence: int
    recorded_at_ms: int
    event: Event
    stream_metrics: list[StreamMetrics]
    removes: list[int]  # earlier event sequences this event compacts away
    transient: bool  # delivered live, never retained in history
    # [transcript sequence, item index]: the event's `output` is that transcript item's
    # `output` (a large tool output stored once); nil otherwise
    output_ref: list[int] | None = None


class CommitPayload(msgspec.Struct, array_like=True):
    kind: int  # COMMIT_SAVE, COMMIT_FORK
    checkpoint_sequence: int
    first_event: int  # 0 when the commit carries no event
    last_event: int
    committed_at_ms: int


class DictionaryPayload(msgspec.Struct, array_like=True):
    """The session's zstd dictionary (see journal/dictionary.py)."""

    dict_id: int  # its zstd id (also in its header and in every frame that uses it)
    data: bytes  # the dictionary, as zstd's trainer wrote it


class LostRange(msgspec.Struct, array_like=True):
    """Bytes `journal repair --accept-loss` cut from one segment file, and where they went."""

    segment: str  # the segment file's name
    start: int  # file offsets [start, end) cut from it
    end: int
    kept_as: str  # the file, relative to the session directory, that holds them now


class LossPayload(msgspec.Struct, array_like=True):
    """A LOSS record: what a person accepted to lose, and the numbers never reused.

    Appended by `journal repair --accept-loss` where it cut the log. The session's
    numbering continues after the `*_through` fields: sequences that were handed out
    before the loss are never handed out again.
    """

    accepted_at: int  # Unix seconds
    cut_at: int  # log position where the readable log ended, and this record starts
    lost_to: int  # furthest log position the evidence shows was committed (-1: unknown)
    events_kept: int  # event sequences 1..events_kept were kept
    events_through: int  # the highest event sequence known to have been handed out
    checkpoint_kept: int  # the latest checkpoint sequence kept (-1: none)
    checkpoints_through: int  # the highest checkpoint sequence known to have been saved
    reason: str  # the damage that was found
    ranges: list[LostRange]


COMMIT_SAVE = 1
COMMIT_FORK = 2

_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode
checkpoint_decoder = msgspec.msgpack.Decoder(CheckpointPayload)
transcript_decoder = msgspec.msgpack.Decoder(TranscriptPayload)
transcript_items_decoder = msgspec.msgpack.Decoder(TranscriptItemsPayload)
execution_decoder = msgspec.msgpack.Decoder(ExecutionPayload)
event_decoder = msgspec.msgpack.Decoder(EventPayload)
commit_decoder = msgspec.msgpack.Decoder(CommitPayload)
dictionary_decoder = msgspec.msgpack.Decoder(DictionaryPayload)
loss_decoder = msgspec.msgpack.Decoder(LossPayload)


# session-log record type -> payload decoder
DECODERS: dict[int, msgspec.msgpack.Decoder[Any]] = {
    LOSS: loss_decoder,
    CHECKPOINT: checkpoint_decoder,
    TRANSCRIPT: transcript_decoder,
    EXECUTION: execution_decoder,
    EVENT: event_decoder,
    COMMIT: commit_decoder,
    DICT: dictionary_decoder,
}

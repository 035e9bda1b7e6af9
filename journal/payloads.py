"""The msgpack payload of each record type (FORMAT.md, "Record payloads").

Payloads are msgspec structs encoded as msgpack arrays (`array_like`), fields in
declaration order. Opaque JSON (checkpoint header, context and transcript items)
is kept as `msgspec.Raw` so a reader can skip what it does not need without
decoding it.
"""

from __future__ import annotations

from typing import Any

import msgspec

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


def _decoders() -> dict[int, msgspec.msgpack.Decoder[Any]]:
    from .record import CHECKPOINT, COMMIT, DICT, EVENT, EXECUTION, TRANSCRIPT

    return {
        CHECKPOINT: checkpoint_decoder,
        TRANSCRIPT: transcript_decoder,
        EXECUTION: execution_decoder,
        EVENT: event_decoder,
        COMMIT: commit_decoder,
        DICT: dictionary_decoder,
    }


DECODERS = _decoders()  # session-log record type -> payload decoder

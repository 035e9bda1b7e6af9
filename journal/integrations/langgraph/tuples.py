"""A stored checkpoint as LangGraph's `CheckpointTuple`, with its message list.

A checkpoint's list channel is the journal context of its save. Within one
context epoch every later checkpoint's context starts with an earlier one's
(the journal refuses a save that changes the prefix), so an older
checkpoint's list is cut from a later one's where one is at hand: from the
head's (`Store.load`, or only its first items: `SessionReader.load_prefix`),
from the last one rebuilt, or from a later checkpoint of the same `list`.
Otherwise it is rebuilt with `Store.checkpoint_at`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint as LGCheckpoint
from langgraph.checkpoint.base import (
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    writes_sort_key,
)

from journal import Checkpoint, CorruptionError, InvalidInputError, NotFoundError

from .index import Index, Put
from .reads import SessionReads
from .serde import ItemCodec

# An older context of the head's epoch is sliced from `load()` (the head) rather
# than rebuilt by `checkpoint_at` while the head has at most this many items per
# item of that context, plus this: `load()` decodes every item of the head,
# `checkpoint_at` reads one record per save of the epoch up to that checkpoint,
# which costs about as much as a dozen decodes.
_LOAD_ITEMS_PER_ITEM = 12
_LOAD_ITEMS_FIXED = 64

Context = tuple[int, int, list[Any]]  # (checkpoint sequence, epoch, context items)


def check_ours(cp: Checkpoint, sid: str) -> None:
    """Refuse a session this saver did not write."""
    if not isinstance(cp.metadata.get("langgraph"), dict):
        raise InvalidInputError(
            f"journal session {sid!r} exists and was not written by the LangGraph saver"
        )


def covers(ctx: Context | None, put: Put) -> bool:
    """Whether `ctx` (a context, or a prefix of one) holds the context of `put`: of
    the same epoch, no older, and at least as long (within an epoch a
    checkpoint's context is a prefix of every later one's)."""
    return (
        ctx is not None and ctx[1] == put.epoch and ctx[0] >= put.seq and len(ctx[2]) >= put.ctx_len
    )


def config(idx: Index, checkpoint_id: str) -> RunnableConfig:
    """The config that names a checkpoint of the index's thread and namespace."""
    return {
        "configurable": {
            "thread_id": idx.thread_id,
            "checkpoint_ns": idx.ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class Tuples:
    """Builds the `CheckpointTuple`s of indexed puts from the store's records."""

    def __init__(self, reads: SessionReads, codec: ItemCodec) -> None:
        self.reads = reads
        self.codec = codec

    def build(
        self, idx: Index, put: Put, context: dict[int, tuple[int, list[Any]]] | None = None
    ) -> CheckpointTuple:
        """The tuple of `put`; `context` maps epoch -> (seq, items) of a later put."""
        where = f"session {idx.sid!r} checkpoint {put.id}"
        load = self.codec.load
        msg = put.msg
        header = load(msg.get("header"), where)
        if not isinstance(header, dict):
            raise CorruptionError(f"{where}: header is not a mapping")
        channels = msg.get("channels") or {}
        values: dict[str, Any] = {k: load(v, f"{where} channel {k}") for k, v in channels.items()}
        if put.ctx_channel is not None:  # before the writes: they may copy its items
            items = self.context_items(idx, put, context)
            values[put.ctx_channel] = self.codec.load_list(items, f"{where} context")
        lg_cp: LGCheckpoint = {**header, "channel_values": values}  # type: ignore[typeddict-item]
        parent_conf = config(idx, put.parent) if put.parent else None
        writes = idx.writes.get(put.id, {})
        ordered = sorted(writes.items(), key=lambda kv: writes_sort_key(kv[1].path, *kv[0]))
        pending: list[PendingWrite] = [
            (w.task_id, w.channel, self.codec.load_write(w.value, f"{where} write"))
            for _, w in ordered
        ]
        md: CheckpointMetadata = dict(put.metadata)  # type: ignore[assignment]
        return CheckpointTuple(config(idx, put.id), lg_cp, md, parent_conf, pending)

    # ------------------------------------------------------------- contexts
    def head(self, idx: Index) -> Context:
        """The head's (seq, epoch, context), read once per head."""
        if idx.head is None:
            cp = self.reads.load(idx.sid)
            if cp is None:
                raise NotFoundError(f"session {idx.sid!r} does not exist")
            check_ours(cp, idx.sid)
            idx.head = (cp.sequence, cp.context_epoch, cp.context)
        return idx.head

    def head_prefix(self, idx: Index, items: int) -> Context | None:
        """(seq, epoch, the first `items` context items) of the head, read through the
        `reading` block's reader (`SessionReader.load_prefix`: the rest of the
        context is not decoded). None outside such a block, or if the session is
        gone (`head` then reads, or raises)."""
        cp = self.reads.load_prefix(idx.sid, items)
        if cp is None:
            return None
        check_ours(cp, idx.sid)
        return (cp.sequence, cp.context_epoch, cp.context)

    def context_items(
        self, idx: Index, put: Put, cache: dict[int, tuple[int, list[Any]]] | None
    ) -> list[Any]:
        """The stored context of a put; `cache` maps epoch -> (seq, items) of a later put."""
        if put.ctx_len == 0:
            return []
        if cache is not None:
            hit = cache.get(put.epoch)
            if hit is not None and hit[0] >= put.seq and len(hit[1]) >= put.ctx_len:
                return hit[1][: put.ctx_len]
        head = self._head_or_prefix(idx, put)
        older = idx.older
        if head is not None and head[0] == put.seq:
            items = head[2]
        elif (
            head is not None
            and head[1] == put.epoch
            and head[0] >= put.seq
            and len(head[2]) >= put.ctx_len
        ):
            items = head[2][: put.ctx_len]  # a later checkpoint's context extends this one's
        elif older is not None and covers(older, put):
            items = older[2][: put.ctx_len]
        else:
            items = self._rebuilt(idx, put)
        if len(items) != put.ctx_len:
            raise CorruptionError(
                f"session {idx.sid!r}: checkpoint {put.id} has {len(items)} context items,"
                f" expected {put.ctx_len}"
            )
        if cache is not None:
            cache[put.epoch] = (put.seq, items)
        return items

    def _head_or_prefix(self, idx: Index, put: Put) -> Context | None:
        """The head's context if it is read, or worth reading, for `put`'s (else None).

        When the head's context starts with this put's (same epoch), only that part
        of it is read if it is shorter (not the rest of a long context: then kept
        as `idx.older`), else the whole head if it is not much longer.
        """
        head = idx.head
        top = idx.top
        if (
            head is None
            and top is not None
            and top[1] == put.epoch
            and top[0] >= put.seq
            and not covers(idx.older, put)
        ):
            pre = self.head_prefix(idx, put.ctx_len) if put.ctx_len < top[2] else None
            if pre is not None and covers(pre, put):
                idx.older = pre
            elif top[2] <= _LOAD_ITEMS_PER_ITEM * put.ctx_len + _LOAD_ITEMS_FIXED:
                head = self.head(idx)
        return head

    def _rebuilt(self, idx: Index, put: Put) -> list[Any]:
        """The context of `put` from `Store.checkpoint_at` (kept as `idx.older`)."""
        cp = self.reads.checkpoint_at(idx.sid, put.seq)
        if cp is None:
            raise CorruptionError(
                f"session {idx.sid!r}: checkpoint sequence {put.seq} of {put.id} is missing"
            )
        lg = cp.metadata.get("langgraph")
        if not isinstance(lg, dict) or lg.get("checkpoint_id") != put.id:
            raise CorruptionError(
                f"session {idx.sid!r}: checkpoint sequence {put.seq} is not {put.id}"
            )
        items = cp.context
        idx.older = (put.seq, put.epoch, items)
        return items

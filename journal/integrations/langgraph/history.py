"""`get_delta_channel_history` from the index: the parent chain in one pass.

LangGraph's `DeltaChannel` keeps only a sentinel in most checkpoints and
rebuilds its value from the writes along the parent chain, back to the nearest
ancestor that stores a value (the seed). The inherited implementation builds a
whole `CheckpointTuple` per ancestor (every channel and message list decoded);
here the chain is followed through the index (`ThreadIndexes.find` pages older
events in only as deep as the walk goes, each page once), only the requested
channels' writes are decoded, and only the seed's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite, writes_sort_key

from .index import Index, Put
from .serde import ItemCodec
from .threads import ThreadIndexes
from .tuples import Tuples


def delta_history(
    threads: ThreadIndexes,
    tuples: Tuples,
    codec: ItemCodec,
    idx: Index | None,
    checkpoint_id: str | None,
    channels: Sequence[str],
) -> Mapping[str, DeltaChannelHistory]:
    """Each channel's on-path writes (oldest first) and seed, for the checkpoint
    `checkpoint_id` of `idx` (None: the newest), as the inherited implementation
    answers: the walk starts at the target's parent (the target's own writes are
    pending for the next step), takes each ancestor's writes in `writes_sort_key`
    order, and stops for a channel at the first ancestor whose values hold it
    (that ancestor's writes included)."""
    collected: dict[str, list[list[PendingWrite]]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    target: Put | None = None
    if idx is not None:
        target = threads.find(idx, checkpoint_id) if checkpoint_id else threads.latest(idx)
    parent = target.parent if target is not None else None
    seen: set[str] = set()  # a chain that loops (ids given by a caller) ends
    while idx is not None and parent and remaining and parent not in seen:
        seen.add(parent)
        # Whole pages: the walk usually goes on past this ancestor (`find` alone
        # would read pages cut to the one event it needs).
        while parent not in idx.puts and threads.page_down(idx):
            pass
        known = idx.puts.get(parent)
        while known is not None and idx.low > known.writes_from and threads.page_down(idx):
            pass
        put = threads.find(idx, parent)
        if put is None:
            break
        where = f"session {idx.sid!r} checkpoint {put.id}"
        writes = idx.writes.get(put.id, {})
        wanted = [(k, w) for k, w in writes.items() if w.channel in remaining]
        wanted.sort(key=lambda kw: writes_sort_key(kw[1].path, *kw[0]))
        by_channel: dict[str, list[PendingWrite]] = {}
        for _, w in wanted:
            value = codec.load_write(w.value, f"{where} write")
            by_channel.setdefault(w.channel, []).append((w.task_id, w.channel, value))
        for ch, found in by_channel.items():
            collected[ch].append(found)
        stored = put.msg.get("channels") or {}
        for ch in [c for c in remaining if c in stored or c == put.ctx_channel]:
            if ch == put.ctx_channel:
                items = tuples.context_items(idx, put, None)
                seeds[ch] = codec.load_list(items, f"{where} context")
            else:
                seeds[ch] = codec.load(stored[ch], f"{where} channel {ch}")
            remaining.discard(ch)
        parent = put.parent
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {
            "writes": [w for step in reversed(collected[ch]) for w in step]
        }
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result

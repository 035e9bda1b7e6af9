"""`get_delta_channel_history` from the index: the parent chain in one pass.

LangGraph's `DeltaChannel` keeps only a sentinel in most checkpoints and
rebuilds its value from the writes along the parent chain, back to the nearest
ancestor that stores a value (the seed). The inherited implementation builds a
whole `CheckpointTuple` per ancestor (every channel and message list decoded);
here the chain is followed through the index (older events paged in only as
deep as the walk goes, each page once; for a target below the index's covered
range, from the fast path's islands), only the requested channels' writes are
decoded, and only the seed's value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite, writes_sort_key

from .fastpath import FastPath, NoFastPath
from .index import Index, Put
from .serde import ItemCodec
from .threads import ThreadIndexes
from .tuples import Tuples


def delta_history(
    threads: ThreadIndexes,
    fast: FastPath,
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
    (that ancestor's writes included).

    A target below the index's covered range is found by the fast path (what a
    cold `get_tuple` of it does), and its ancestors are read from there down,
    not from the head; if the fast path cannot prove its answer, the scan.
    """
    if idx is None:
        return _answer(channels, {}, {})
    if checkpoint_id and checkpoint_id not in idx.puts and not idx.complete:
        try:
            return _collect(tuples, codec, idx, _fast_chain(fast, idx, checkpoint_id), channels)
        except NoFastPath:
            pass
    chain = _scan_chain(threads, idx, checkpoint_id)
    return _collect(tuples, codec, idx, chain, channels)


def _scan_chain(threads: ThreadIndexes, idx: Index, checkpoint_id: str | None) -> Iterator[Put]:
    """The target's ancestors, parent first, paging older events in as the walk
    goes (whole pages: it usually goes on past each ancestor, and `find` alone
    would read pages cut to the one event it needs)."""
    target = threads.find(idx, checkpoint_id) if checkpoint_id else threads.latest(idx)
    parent = target.parent if target is not None else None
    seen: set[str] = set()  # a chain that loops (ids given by a caller) ends
    while parent and parent not in seen:
        seen.add(parent)
        while parent not in idx.puts and threads.page_down(idx):
            pass
        known = idx.puts.get(parent)
        while known is not None and idx.low > known.writes_from and threads.page_down(idx):
            pass
        put = threads.find(idx, parent)
        if put is None:
            return
        yield put
        parent = put.parent


def _fast_chain(fast: FastPath, idx: Index, checkpoint_id: str) -> Iterator[Put]:
    """`_scan_chain` for a target below `low`, from the fast path's islands: the
    puts older than the target, newest first, each with its writes (an ancestor
    is always older than its child). Raises `NoFastPath`."""
    target = fast.find(idx, checkpoint_id)
    if target is None:
        return
    older = fast.before(idx, checkpoint_id)
    if older is None:
        raise NoFastPath
    parent = target.parent
    seen: set[str] = set()
    while parent and parent not in seen:
        seen.add(parent)
        put = next((p for p in older if p.id == parent), None)
        if put is None:
            return  # deleted, or never put: the walk ends, as `get_tuple` would say
        yield put
        parent = put.parent


def _collect(
    tuples: Tuples,
    codec: ItemCodec,
    idx: Index,
    chain: Iterator[Put],
    channels: Sequence[str],
) -> Mapping[str, DeltaChannelHistory]:
    collected: dict[str, list[list[PendingWrite]]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    for put in chain:
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
        if not remaining:
            break  # before the next ancestor is looked for
    return _answer(channels, collected, seeds)


def _answer(
    channels: Sequence[str], collected: dict[str, list[list[PendingWrite]]], seeds: dict[str, Any]
) -> Mapping[str, DeltaChannelHistory]:
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        steps = collected.get(ch, [])
        entry: DeltaChannelHistory = {"writes": [w for step in reversed(steps) for w in step]}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result

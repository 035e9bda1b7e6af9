"""`JournalSaver`: LangGraph's `BaseCheckpointSaver` on a journal store.

Each call takes the session's lock, brings the session's index up to date
(`threads`), and makes at most one journal commit: a `put` is one
`save_with_events` (the context tail and one `langgraph_checkpoint` event), a
`put_writes` one `append_event` made on condition that nothing was appended
since the index's newest event, a `prune` or `delete_for_runs` one
`langgraph_delete` event per session. Reads build `CheckpointTuple`s from the
index (`tuples`), taking the fast path for old checkpoints where it can prove
its answer (`fastpath`).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.base import Checkpoint as LGCheckpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from journal import (
    ContractViolationError,
    Durability,
    Event,
    InvalidInputError,
    NotFoundError,
    Store,
    TimestampedEvent,
)
from journal.compact import compact_store_session
from journal.erase import ERASE_KEY, erase_declaration

from . import copymark, naming, puts
from .aio import ThreadedAsync
from .events import EV_CHECKPOINT, EV_DELETE, EV_WRITES, delete_msg, writes_msg
from .fastpath import FastPath, NoFastPath
from .history import delta_history
from .index import Index, Put
from .naming import Target
from .puts import PutCall
from .reads import SessionReads
from .replay import copy_sessions
from .serde import ItemCodec
from .threads import ThreadIndexes
from .tuples import Tuples

_PUT_TRIES = 3  # saves of one `put` when another writer moves the head meanwhile
_CAS_TRIES = 4  # conditional appends of one `put_writes` (the last one is not conditional)

_Tuples = list[CheckpointTuple]


class JournalSaver(ThreadedAsync):
    """LangGraph's `BaseCheckpointSaver` on a journal store (sync and async).

    `store` is a `journal.Store` or a directory (opened with `durability`; closed
    by `close()`). `context_channel` names the list channel kept as the journal
    context, item by item, so that only new items are written (None: none).
    `owner_id` labels the sessions (`session_context.owner_id`), `session_prefix`
    is put in front of every thread id to form session ids.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        durability: Durability = "fsync",
        context_channel: str | None = "messages",
        owner_id: str = "langgraph",
        session_prefix: str = "",
    ) -> None:
        super().__init__(serde=serde)
        if isinstance(store, Store):
            self.store = store
            self._owns_store = False
        else:
            self.store = Store(store, durability=durability)
            self._owns_store = True
        naming.check_prefix(session_prefix)
        self.context_channel = context_channel
        self.owner_id = owner_id
        self.session_prefix = session_prefix
        self._lock = threading.Lock()  # guards `_session_locks`
        self._session_locks: dict[str, threading.RLock] = {}
        self._reads = SessionReads(self.store)
        self._codec = ItemCodec(self.serde)
        self._threads = ThreadIndexes(self._reads, self._codec)
        self._fast = FastPath(self._threads)
        self._tuples = Tuples(self._reads, self._codec)

    def with_allowlist(
        self, extra_allowlist: Collection[tuple[str, ...]]
    ) -> BaseCheckpointSaver[str]:
        """LangGraph's copy of this saver with a wider msgpack allowlist: it encodes
        and decodes with its own serde, and shares this saver's store, indexes and
        memos."""
        clone = super().with_allowlist(extra_allowlist)
        if isinstance(clone, JournalSaver) and clone is not self:
            clone._codec = self._codec.with_serde(clone.serde)
            clone._threads = self._threads.with_codec(clone._codec)
            clone._fast = FastPath(clone._threads)
            clone._tuples = Tuples(self._reads, clone._codec)
        return clone

    # ------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the store if this saver opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> JournalSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # ------------------------------------------------------------- sessions
    def session_id(self, thread_id: str, checkpoint_ns: str = "") -> str:
        """The journal session id of a thread's namespace."""
        return naming.session_id(self.session_prefix, thread_id, checkpoint_ns)

    def _slock(self, sid: str) -> threading.RLock:
        with self._lock:
            lock = self._session_locks.get(sid)
            if lock is None:
                lock = self._session_locks[sid] = threading.RLock()
            return lock

    def _thread_sessions(self, thread_id: str | None) -> list[Target]:
        return naming.thread_sessions(self.store, self.session_prefix, thread_id)

    def _ensure_session(self, sid: str, thread_id: str, ns: str) -> None:
        """Create the session (and its thread's root) with an empty sequence-0
        checkpoint. What an unfinished copy left of the thread (absent for
        readers: `copymark`) is deleted first: the thread starts afresh."""
        root = self.session_id(thread_id)
        if copymark.unfinished(self._reads, root):
            with self._slock(root):
                if copymark.unfinished(self._reads, root):
                    self._discard_unfinished(thread_id)
        if self.store.session_summary(sid) is not None:
            return
        if ns:
            with self._slock(root):
                self._ensure_session(root, thread_id, "")
        placeholder = puts.placeholder(sid, thread_id, ns, self.owner_id)
        try:
            if not ns:
                self.store.save(placeholder)
            else:
                summary = self.store.session_summary(root)
                if summary is None:
                    raise NotFoundError(f"thread root session {root!r} vanished")
                self.store.fork(root, summary.sequence, placeholder)
        except ContractViolationError:
            if self.store.session_summary(sid) is None:  # not a lost race: a real error
                raise

    # ------------------------------------------------------------- put
    def put(
        self,
        config: RunnableConfig,
        checkpoint: LGCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: one journal commit (context tail + one event)."""
        thread_id, ns = naming.target(config)
        sid = self.session_id(thread_id, ns)
        call = puts.prepare(
            self._codec, (sid, thread_id, ns), config, checkpoint, metadata, self.context_channel
        )
        with self._slock(sid):
            for attempt in range(_PUT_TRIES):
                idx = self._threads.index(sid, thread_id, ns, mode="write")
                if idx is None:
                    self._ensure_session(sid, thread_id, ns)
                    idx = self._threads.index(sid, thread_id, ns)
                    if idx is None:
                        continue
                if self._put_on(idx, call, last=attempt == _PUT_TRIES - 1):
                    break
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _put_on(self, idx: Index, call: PutCall, *, last: bool) -> bool:
        """Save `call` on the head `idx` knows; False if another writer moved the head
        (raised instead on the `last` try)."""
        items: list[Any] = []
        if call.ctx_channel is not None:
            items, idx.ser_cache = self._codec.dump_items(call.listed, idx.ser_cache)
        head_seq, head_epoch, head_items = self._tuples.head(idx)
        n = len(head_items)
        epoch = head_epoch
        if n > len(items) or head_items != items[:n]:
            epoch += 1
        msg = call.msg
        msg["seq"] = head_seq + 1
        msg["fp"] = self._threads.next_fp(idx, EV_CHECKPOINT, call.checkpoint_id)
        msg["ctx"] = [call.ctx_channel, len(items), epoch]
        cp = puts.journal_checkpoint(call, self.owner_id, head_seq + 1, items, epoch)
        event = TimestampedEvent(recorded_at_ms=int(time.time() * 1000), event=Event(msg=msg))
        try:
            written = self.store.save_with_events(cp, events=[event])
        except ContractViolationError:
            # Another writer moved the head: re-read it and try again.
            idx.head = None
            idx.ser_cache = None
            self._threads.forget(call.sid)
            if last:
                raise
            return False
        ev = written[0]
        if ev.sequence == idx.high + 1:
            self._threads.advance(idx, ev)
            if idx.wids and idx.high_fp is not None:  # keep only what `pend` names
                idx.wids = {s: idx.wids[s] for s in idx.high_fp.pend if s in idx.wids}
        else:
            self._threads.forget(call.sid)
        idx.head = (cp.sequence, epoch, items)
        return True

    # ------------------------------------------------------------- put_writes
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes: one journal commit, durable on return, never duplicated."""
        thread_id, ns = naming.target(config)
        checkpoint_id = (config.get("configurable") or {}).get("checkpoint_id")
        if not isinstance(checkpoint_id, str):
            raise InvalidInputError("put_writes needs the config of a stored checkpoint")
        sid = self.session_id(thread_id, ns)
        dumped: dict[int, list[str]] = {}  # serialised once, even if the append is retried
        with self._slock(sid):
            # No read of the log when nothing changed: the append is conditional on
            # the log's latest event still being the newest one indexed (checked by
            # the store under the session's write lock, across processes), so the
            # duplicate check below saw every write stored before this one.
            idx = self._threads.index(sid, thread_id, ns, mode="cas")
            for attempt in range(_CAS_TRIES):
                if idx is None:
                    self._ensure_session(sid, thread_id, ns)
                    idx = self._threads.index(sid, thread_id, ns)
                    if idx is None:
                        raise NotFoundError(f"session {sid!r} vanished")
                self._threads.cover_writes(idx, checkpoint_id)
                entries = self._new_writes(idx, checkpoint_id, writes, task_id, dumped)
                if not entries:
                    return
                fp = self._threads.next_fp(idx, EV_WRITES, checkpoint_id)
                msg = writes_msg(checkpoint_id, task_id, task_path, entries, fp)
                # The last try appends unconditionally, after a full catch-up (a log
                # that keeps moving under us: what every try did before).
                expected = idx.high if attempt < _CAS_TRIES - 1 else None
                try:
                    ev = self.store.append_event(
                        sid, int(time.time() * 1000), Event(msg=msg), expected_latest=expected
                    )
                except ContractViolationError:
                    if expected is None:
                        raise
                    idx = self._after_refusal(sid, thread_id, ns, idx.high)
                    continue
                if ev.sequence == idx.high + 1:
                    self._threads.advance(idx, ev)
                return

    def _new_writes(
        self,
        idx: Index,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        dumped: dict[int, list[str]],
    ) -> list[list[Any]]:
        """The `[idx, channel, value]` entries of the writes not stored yet (`dumped`:
        the values serialised by an earlier try, by position)."""
        existing = idx.writes.get(checkpoint_id, {})
        entries: list[list[Any]] = []
        for i, (channel, value) in enumerate(writes):
            wid = WRITES_IDX_MAP.get(channel, i)
            if wid >= 0 and (task_id, wid) in existing:
                continue
            stored = dumped.get(i)
            if stored is None:
                stored = dumped[i] = self._codec.dump(value)
            entries.append([wid, channel, stored])
        return entries

    def _after_refusal(self, sid: str, thread_id: str, ns: str, seen: int) -> Index | None:
        """The index after the store refused an append expecting `seen` as the latest
        event: another writer appended since. Caught up (re-checking the event at
        `high`), so that the caller decides again what is stored already."""
        idx = self._threads.index(sid, thread_id, ns)
        if idx is not None and idx.high == seen:
            # Nothing new is readable, yet the latest sequence moved (events the
            # log does not keep): take it from a new index.
            self._threads.forget(sid)
            idx = self._threads.index(sid, thread_id, ns)
        return idx

    # ------------------------------------------------------------- reads
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by `checkpoint_id`, else the thread's newest one."""
        thread_id, ns = naming.target(config)
        sid = self.session_id(thread_id, ns)
        checkpoint_id = get_checkpoint_id(config)
        with self._slock(sid), self._reads.reading(sid):
            idx = self._threads.index(sid, thread_id, ns)
            if idx is None:
                return None
            if checkpoint_id and checkpoint_id not in idx.puts and not idx.complete:
                try:
                    found = self._fast.find(idx, checkpoint_id)
                    return None if found is None else self._tuples.build(idx, found)
                except NoFastPath:
                    pass
            if checkpoint_id:
                put = self._threads.find(idx, checkpoint_id)
            else:
                put = self._threads.latest(idx)
            if put is None:
                return None
            return self._tuples.build(idx, put)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; `before` a checkpoint, at most `limit`, metadata `filter`."""
        targets: Iterable[Target]
        checkpoint_id: str | None = None
        if config is not None:
            thread_id, _ = naming.target(config)
            conf = config.get("configurable") or {}
            checkpoint_id = get_checkpoint_id(config)
            ns = conf.get("checkpoint_ns")
            if ns is None:
                targets = naming.thread_targets(self.store, self.session_prefix, thread_id)
            else:
                targets = [(self.session_id(thread_id, ns), thread_id, ns)]
        else:
            targets = self._thread_sessions(None)
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        sessions = iter(targets)
        # (The limit is checked before the next session is asked for: the catalog
        # lookup of a thread's namespaces is not made when the root answered.)
        while remaining is None or remaining > 0:
            target = next(sessions, None)
            if target is None:
                return
            query = _ListQuery(before_id, checkpoint_id, filter, remaining)
            found = self._list_session(target, query)
            if found is None:
                continue
            if remaining is not None:
                remaining -= len(found)
            yield from found

    def _list_session(self, target: Target, q: _ListQuery) -> _Tuples | None:
        """`list`'s answer from one session (None: no such session)."""
        sid, thread_id, ns = target
        with self._slock(sid), self._reads.reading(sid):
            idx = self._threads.index(sid, thread_id, ns)
            if idx is None:
                return None
            if q.before_id is not None:
                puts = self._fast.before(idx, q.before_id)
                if puts is not None:
                    try:  # the fast path yields only older puts
                        return self._collect(idx, puts, -1, q)
                    except NoFastPath:
                        pass
            before_seq: int | None = None
            if q.before_id is not None:
                anchor = self._threads.find(idx, q.before_id)
                before_seq = anchor.seq if anchor is not None else None
            return self._collect(idx, self._threads.iter_puts(idx, before_seq), before_seq, q)

    def _collect(
        self, idx: Index, puts: Iterator[Put], before_seq: int | None, q: _ListQuery
    ) -> _Tuples:
        found: _Tuples = []
        cache: dict[int, tuple[int, list[Any]]] = {}
        for put in puts:
            if q.checkpoint_id is not None and put.id != q.checkpoint_id:
                continue
            if q.before_id is not None and before_seq is None and put.id >= q.before_id:
                continue
            if q.filter and not all(put.metadata.get(k) == v for k, v in q.filter.items()):
                continue
            found.append(self._tuples.build(idx, put, cache))
            if q.limit is not None and len(found) >= q.limit:
                break
        return found

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Each channel's writes along the parent chain and its seed (`history`):
        the inherited answer, from the index in one pass."""
        if not channels:
            return {}
        thread_id, ns = naming.target(config)
        sid = self.session_id(thread_id, ns)
        with self._slock(sid), self._reads.reading(sid):
            idx = self._threads.index(sid, thread_id, ns)
            cid = get_checkpoint_id(config)
            return delta_history(
                self._threads, self._fast, self._tuples, self._codec, idx, cid, channels
            )

    # ------------------------------------------------------------- deletes
    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread (every namespace, checkpoint and write): one atomic journal delete."""
        thread_id = str(thread_id)
        root = self.session_id(thread_id)
        with self._slock(root):
            try:
                if self.store.session_summary(root) is not None:
                    self.store.delete_sessions([root])
            finally:
                self._threads.forget_thread(thread_id)

    def _hide(self, idx: Index, ids: Sequence[str], reason: str) -> bool:
        if not ids:
            return False
        msg = delete_msg([*ids], reason, self._threads.next_fp(idx, EV_DELETE, None))
        # The hidden puts' events, their writes' events and their checkpoints' headers
        # are erasable (journal.erase): `compact` frees them, on demand or by retention.
        hidden = [idx.puts[i] for i in ids if i in idx.puts]
        writes = [w.event_seq for i in ids for w in idx.writes.get(i, {}).values()]
        msg[ERASE_KEY] = erase_declaration(
            events=[p.event_seq for p in hidden] + writes, checkpoints=[p.seq for p in hidden]
        )
        ev = self.store.append_event(idx.sid, int(time.time() * 1000), Event(msg=msg))
        if ev.sequence == idx.high + 1:
            self._threads.advance(idx, ev)
        return True

    def _free(self, sids: Iterable[str]) -> None:
        """Compact the sessions now: what `_hide` declared erasable is freed."""
        for sid in sids:
            compact_store_session(self.store, sid)

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", free: bool = False
    ) -> None:
        """`keep_latest`: hide all but each namespace's newest checkpoint; `delete`: delete.

        `free`: also compact the pruned sessions now, which gives back the bytes of
        what is hidden, by this call or earlier ones (otherwise the store's retention
        job, or `journal compact`, does it later)."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"unknown prune strategy {strategy!r}")
        pruned: list[str] = []
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for sid, tid, ns in self._thread_sessions(str(thread_id)):
                with self._slock(sid):
                    idx = self._threads.index(sid, tid, ns)
                    if idx is None:
                        continue
                    self._threads.page_all(idx)
                    visible = idx.ordered()
                    self._hide(idx, [p.id for p in visible[1:]], "prune")
                    pruned.append(sid)
        if free:
            self._free(pruned)

    def delete_for_runs(self, run_ids: Sequence[str], *, free: bool = False) -> None:
        """Hide every checkpoint whose metadata `run_id` is one of `run_ids` (and its
        writes); `free`: compact those sessions now (see `prune`)."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        hid: list[str] = []
        for sid, tid, ns in self._thread_sessions(None):
            with self._slock(sid):
                idx = self._threads.index(sid, tid, ns)
                if idx is None:
                    continue
                self._threads.page_all(idx)
                ids = [p.id for p in idx.ordered() if p.metadata.get("run_id") in wanted]
                if self._hide(idx, ids, "delete_for_runs"):
                    hid.append(sid)
        if free:
            self._free(hid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every namespace, checkpoint and write of a thread to a new thread.

        Replays the source's commits in order (same checkpoint ids, metadata and
        writes). Atomic (`copymark`): until its last commit the target is absent
        for every reader, after a crash too; a copy left unfinished is removed
        by the next `copy_thread`, `put` or `delete_thread` on the target. The
        target must not exist yet (`ContractViolationError`), nor be written
        while the copy runs.
        """
        src = str(source_thread_id)
        dst = str(target_thread_id)
        root = self.session_id(dst)
        with self._slock(root):
            if self.store.session_summary(root) is not None:
                if not copymark.unfinished(self._reads, root):
                    raise ContractViolationError(
                        f"copy_thread: target thread {dst!r} already exists"
                    )
                self._discard_unfinished(dst)
            src_root = self.session_id(src)
            if copymark.unfinished(self._reads, src_root):
                return  # an unfinished copy is no thread: nothing to copy
            sessions = self._thread_sessions(src)
            if not sessions:
                return
            sessions.sort(key=lambda t: (t[2] != "", t[2]))  # the root first
            pairs = [(sid, self.session_id(dst, ns), ns) for sid, _tid, ns in sessions]
            self._threads.forget_thread(dst)
            try:
                copy_sessions(self.store, pairs, dst, src, self.owner_id)
            finally:
                self._threads.forget_thread(dst)

    def _discard_unfinished(self, thread_id: str) -> None:
        """Delete what a copy that did not finish left of `thread_id` (absent for
        readers already)."""
        root = self.session_id(thread_id)
        try:
            self.store.delete_sessions([root])
        finally:
            self._threads.forget_thread(thread_id)

    # ------------------------------------------------------------- versions
    def get_next_version(self, current: str | None, channel: None) -> str:
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


@dataclass
class _ListQuery:
    """What a `list` asks of each session: the puts before `before_id` (if given),
    only `checkpoint_id` (if given), matching `filter`, at most `limit`."""

    before_id: str | None
    checkpoint_id: str | None
    filter: dict[str, Any] | None
    limit: int | None

"""A LangGraph checkpoint saver on a `journal` store: `JournalSaver`.

    from journal.integrations.langgraph import JournalSaver
    graph = builder.compile(checkpointer=JournalSaver("agent-store"))

Mapping (docs/langgraph.md has the full story):

- A thread's root namespace ("") is the journal session whose id is the thread
  id (with an optional prefix); a subgraph namespace is a child session (a fork
  of the root) with id `<thread id>::ns::<namespace>`. `delete_thread` deletes the
  root, which deletes the children with it, in one atomic journal delete.
- Each `put` is ONE journal commit (`save_with_events`): a journal checkpoint
  whose `context` holds the items of the growing list channel (default
  "messages"), each serialised by the saver's serde, and one event
  `langgraph_checkpoint` carrying everything else (ids, parent, metadata, the
  serialised header and the other channels). Within one context epoch the
  journal writes only the new tail of the context, so a growing message list
  costs the new messages per step, not the whole list.
- Each `put_writes` is ONE journal commit (`append_event`, a `langgraph_writes`
  event), durable when the call returns. Writes already stored under the same
  (task_id, idx) are not stored again; reads keep the first one (special
  writes with negative idx: the last one), like LangGraph's own savers.
- `prune` and `delete_for_runs` are logical: one `langgraph_delete` event per
  session hides the checkpoints (and their writes) atomically.

The saver keeps an in-memory index per session (checkpoint ids, parents,
metadata, writes), built lazily from the session's event journal newest first
and caught up at every call, so it sees commits of other processes and of
earlier runs: a read re-reads the newest event indexed and anything newer; a
`put` checks the session's identity file and reads only newer events; a
`put_writes` reads nothing and appends on condition that nothing was appended
since (`expected_latest`), catching up and deciding again otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import math
import operator
import os
import random
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        CheckpointMetadata,
        CheckpointTuple,
        PendingWrite,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.base import Checkpoint as LGCheckpoint
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
except ImportError as exc:  # the extra is optional: say which one
    raise ImportError(
        f"journal.integrations.langgraph needs LangGraph ({exc}):"
        " pip install 'journal[langgraph]'"
    ) from exc

from journal.context import msgpack_array_header
from journal.errors import (
    ContractViolationError,
    CorruptionError,
    InvalidInputError,
    JournalError,
    NotFoundError,
)
from journal.session import Session as _CoreSession
from journal.store import Durability, SessionReader, Store
from journal.types import (
    CHECKPOINT_VERSION,
    Checkpoint,
    Event,
    EventPage,
    EventPageRequest,
    JournalEvent,
    SessionContext,
    SessionPageRequest,
    SessionSummary,
    TimestampedEvent,
)

__all__ = ["NS_SEP", "ORIGIN_LABEL", "JournalSaver"]

NS_SEP = "::ns::"
"""Separates the thread id from the checkpoint namespace in a subgraph's session id."""

ORIGIN_LABEL = "langgraph"
"""`session_context.origin_label` of every session this saver creates."""

EV_CHECKPOINT = "langgraph_checkpoint"
EV_WRITES = "langgraph_writes"
EV_DELETE = "langgraph_delete"
_PAGE = 256
_MAX_INDEXES = 256
_CAS_TRIES = 4  # conditional appends of one `put_writes` (the last one is not conditional)
_MAX_LATE = 48  # late events the fast path reads one by one before it gives up
_RAW_MEMO = 8192  # base64-decoded list items remembered (by identity) across reads
_OBJ_MEMO_BYTES = 32 << 20  # msgpack bytes of the items whose decoded form is remembered
_FP_LEN = 8  # fields of a current `fp` (5: written before `pend`, `mine`, `lastseq`)
_MAX_PEND = 64  # checkpoints with pending ahead writes an event lists (more: not clean)
# An older context of the head's epoch is sliced from `load()` (the head) rather
# than rebuilt by `checkpoint_at` while the head has at most this many items per
# item of that context, plus this: `load()` decodes every item of the head (about
# 1 us each), `checkpoint_at` reads one record per save of the epoch up to that
# checkpoint (about 16 us each).
_LOAD_ITEMS_PER_ITEM = 12
_LOAD_ITEMS_FIXED = 64


# ----------------------------------------------------------------------- encoding
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


if sys.version_info >= (3, 11):

    def _b64decode(text: str) -> bytes:
        # strict_mode validates in C what `validate=True` checks with a regex.
        return binascii.a2b_base64(text, strict_mode=True)

else:  # pragma: no cover - Python 3.10

    def _b64decode(text: str) -> bytes:
        return base64.b64decode(text, validate=True)


def _unb64(text: Any, where: str) -> bytes:
    if not isinstance(text, str):
        raise CorruptionError(f"{where}: expected a base64 string")
    try:
        return _b64decode(text)
    except (binascii.Error, ValueError) as exc:
        raise CorruptionError(f"{where}: bad base64 ({exc})") from exc


def _typed(value: Any, where: str) -> tuple[str, bytes]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], str)
    ):
        raise CorruptionError(f"{where}: expected [type, base64]")
    return value[0], _unb64(value[1], where)


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


_NO_SNAPSHOT: Any = object()
_IMMUTABLE = (str, int, float, bool, bytes, type(None))


def _snapshot(value: Any) -> Any:
    """A shallow copy of an object's attributes, to detect attributes set since."""
    if isinstance(value, _IMMUTABLE):
        return None
    attrs = getattr(value, "__dict__", None)
    if not isinstance(attrs, dict):
        return _NO_SNAPSHOT  # a dict, list or slotted object: always serialise again
    return attrs.copy()


_is = operator.is_
_attrs_of = operator.attrgetter("__dict__")


@dataclass
class _SerCache:
    """The list items of a session's last put, position by position: the objects, a
    shallow snapshot of each one's attributes (`_snapshot`) and their stored form."""

    objs: list[Any]
    snaps: list[Any]
    items: list[Any]
    attrs: bool  # every snapshot is an attribute dict (then checked in C loops)


# The nonce (`n`) of each event, which tells apart two events at the same sequence
# (`_mark`). Not a secret: a generator seeded from the OS once, and again in a
# forked child (which must not repeat its parent's), instead of a `getrandom` call
# per event (`secrets.token_hex`).
_nonce_rng = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_nonce_rng.seed)


def _nonce() -> str:
    return f"{_nonce_rng.getrandbits(32):08x}"


class _NoClone(Exception):
    """`_clone` cannot copy this value (it is decoded afresh instead)."""


_set_attr = object.__setattr__
_SCALARS = frozenset((str, int, float, bool, type(None)))  # immutable: shared by copies


def _clone(value: Any) -> Any:
    """A copy of a decoded list item that equals a fresh decode of it and shares no
    mutable part with `value`: JSON-like values (dicts, lists, tuples, scalars) and
    LangChain messages whose fields hold only such values. Raises `_NoClone` else.
    """
    t = type(value)
    if t in _SCALARS:
        return value
    if t is dict:
        return {k: v if type(v) in _SCALARS else _clone(v) for k, v in value.items()}
    if t is list:
        return [v if type(v) in _SCALARS else _clone(v) for v in value]
    if t is tuple:
        return tuple([_clone(v) for v in value])
    if isinstance(value, BaseMessage) and not value.__pydantic_private__:
        # What pydantic's `__copy__` does, with every field value copied as above.
        new = object.__new__(t)  # what a pydantic model's `__new__` is
        extra = value.__pydantic_extra__
        _set_attr(
            new,
            "__dict__",
            {k: v if type(v) in _SCALARS else _clone(v) for k, v in value.__dict__.items()},
        )
        _set_attr(new, "__pydantic_extra__", None if extra is None else _clone(extra))
        _set_attr(new, "__pydantic_fields_set__", set(value.__pydantic_fields_set__))
        _set_attr(new, "__pydantic_private__", None)
        return new
    raise _NoClone


_mp_encode = msgspec.msgpack.Encoder().encode
_mp_decode = msgspec.msgpack.Decoder().decode
_raw_list_decode = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode
# First bytes of a msgpack array: fixarray (0x90-0x9f), array 16, array 32.
_MSGPACK_ARRAY_STARTS = frozenset(bytes([b]) for b in (*range(0x90, 0xA0), 0xDC, 0xDD))
_I64_MIN = -(1 << 63)
_U64_MAX = (1 << 64) - 1
_EXACT_DEPTH = 32


def _exact(value: Any) -> bool:
    """Whether msgpack gives `value` back equal and with the same types: str, int
    (64-bit), float, bool, None, and lists and str-keyed dicts of those."""
    level = [value]
    for _ in range(_EXACT_DEPTH):
        below: list[Any] = []
        for v in level:
            t = type(v)
            if t is str or t is float or t is bool or v is None:
                continue
            if t is int:
                if not _I64_MIN <= v <= _U64_MAX:
                    return False
            elif t is dict:
                for k in v:
                    if type(k) is not str:
                        return False
                below.extend(v.values())
            elif t is list:
                below.extend(v)
            else:
                return False
        if not below:
            return True
        level = below
    return False


def _exact_bytes(raw: bytes) -> bytes:
    """`raw` in a bytes object of its size (msgspec's can hold half as much again spare)."""
    return bytes(memoryview(raw))


class _MessageCopier:
    """Makes new copies of one message (as `_clone` builds one, faster); see `_copier`.

    `template`: a shallow copy of the message's attributes, its own dict. A copy
    is a shallow copy of it in which every container is made anew: an empty one
    as a new empty one, any other one decoded from its msgpack (`plan`, taken
    here; the template then holds None in their place, not the message's own
    containers). Everything else is an immutable scalar (`_exact`), which copies
    share with the message.
    """

    __slots__ = ("extra", "fields", "plan", "template", "type")

    def __init__(
        self, t: type[Any], template: dict[str, Any], extra: bytes | None, fields: frozenset[str]
    ) -> None:
        self.type = t
        self.template = template
        self.extra = extra
        self.fields = fields
        plan: list[tuple[str, type[Any] | None, bytes]] = []
        for key, value in template.items():
            kind = type(value)
            if kind in _SCALARS:
                continue
            if not value:  # an empty dict or list
                plan.append((key, kind, b""))
            else:
                plan.append((key, None, _exact_bytes(_mp_encode(value))))
        for key, _, _ in plan:
            template[key] = None  # set anew in every copy
        self.plan = tuple(plan)

    def __call__(self) -> Any:
        return _message_copies([self])[0]


def _message_copies(
    copiers: list[_MessageCopier],
    new: Callable[[type[Any]], Any] = object.__new__,
    set_attr: Callable[[Any, str, Any], None] = _set_attr,
    decode: Callable[[bytes], Any] = _mp_decode,
) -> list[Any]:
    """A new copy of each copier's message, built as pydantic's `__copy__` builds one."""
    out: list[Any] = []
    for c in copiers:
        values = c.template.copy()
        for key, empty, raw in c.plan:
            values[key] = decode(raw) if empty is None else empty()
        obj = new(c.type)
        set_attr(obj, "__dict__", values)
        extra = c.extra
        set_attr(obj, "__pydantic_extra__", None if extra is None else decode(extra))
        set_attr(obj, "__pydantic_fields_set__", set(c.fields))
        set_attr(obj, "__pydantic_private__", None)
        out.append(obj)
    return out


def _copier(value: Any) -> Callable[[], Any]:
    """A function that returns a new copy of a decoded list item at each call: equal
    to a fresh decode, sharing no mutable part with `value` or with other copies.

    A message whose fields hold only msgpack values (`_exact`) is copied by a
    `_MessageCopier` (a shallow copy with its containers made anew: a fraction of
    what `_clone` costs); anything else `_clone` can copy is copied from a
    template. Raises `_NoClone` otherwise.
    """
    if isinstance(value, BaseMessage) and not value.__pydantic_private__:
        extra = value.__pydantic_extra__
        if _exact(value.__dict__) and (extra is None or _exact(extra)):
            try:
                # Its scalars are immutable (`_exact`), its containers encoded here.
                copier = _MessageCopier(
                    type(value),
                    value.__dict__.copy(),
                    None if extra is None else _exact_bytes(_mp_encode(extra)),
                    frozenset(value.__pydantic_fields_set__),
                )
            except (msgspec.EncodeError, UnicodeEncodeError, OverflowError):
                pass  # e.g. a string with a lone surrogate: copied by `_clone`
            else:
                return copier
    return functools.partial(_clone, _clone(value))


def _covers(ctx: tuple[int, int, list[Any]] | None, put: _Put) -> bool:
    """Whether `ctx` (seq, epoch, items: a context, or a prefix of one) holds the
    context of `put`: of the same epoch, no older, and at least as long (within an
    epoch a checkpoint's context is a prefix of every later one's)."""
    return (
        ctx is not None
        and ctx[1] == put.epoch
        and ctx[0] >= put.seq
        and len(ctx[2]) >= put.ctx_len
    )


def _first_user_message(messages: list[Any]) -> str | None:
    """The text of the first human message (shown by `journal ls`), if any."""
    for m in messages[:8]:
        if getattr(m, "type", None) == "human":
            content = getattr(m, "content", None)
            if isinstance(content, str) and content.strip():
                return content[:200]
            return None
    return None


# ------------------------------------------------------------------------ index
@dataclass
class _Put:
    """One `put` as recorded by its `langgraph_checkpoint` event."""

    event_seq: int
    seq: int  # journal checkpoint sequence
    id: str
    parent: str | None
    msg: dict[str, Any]  # the whole event message (header, channels, metadata)
    metadata: dict[str, Any]
    ctx_channel: str | None
    ctx_len: int
    epoch: int
    # Where writes stored before this put can be: from `ahead[0]` on ([]: none),
    # when `known` (its `fp` is clean); anywhere below it otherwise.
    ahead: tuple[int, ...] = ()
    known: bool = False

    @property
    def writes_from(self) -> int:
        """The lowest event sequence that may hold a write of this checkpoint."""
        if not self.known:
            return 1
        return self.ahead[0] if self.ahead else self.event_seq


@dataclass
class _Write:
    event_seq: int
    pos: int  # position within its event
    task_id: str
    channel: str
    value: list[Any]  # [type, base64]
    path: str


@dataclass
class _Index:
    """What one session's event journal says, for the covered range [low, high]."""

    sid: str
    thread_id: str
    ns: str
    dir: str  # the session's directory
    # The incarnation of that directory this index describes (see `_ident`): read
    # before the index's first event, so a session deleted and created again since
    # never matches.
    ident: tuple[int, int, int] | None
    puts: dict[str, _Put] = field(default_factory=dict)  # newest put of each id
    writes: dict[str, dict[tuple[str, int], _Write]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    low: int = 1  # lowest covered event sequence (1: complete)
    high: int = 0  # highest covered event sequence
    high_mark: str | None = None  # fingerprint of the event at `high`
    high_fp: _Fp | None = None  # the `fp` of the event at `high`
    late_loaded: bool = False  # every late event below `low` is applied
    late_fps: list[_Fp] = field(default_factory=list)  # the `fp`s of that late chain
    # Islands read by the fast path below `low`: puts by event sequence, and the
    # event ranges [a, b] whose every event is applied (writes, deletes) or here.
    iputs: dict[int, _Put] = field(default_factory=dict)
    iranges: list[tuple[int, int]] = field(default_factory=list)
    # Checkpoint ids of ahead writes seen (event sequence -> id), for `_fp_next`.
    wids: dict[int, str] = field(default_factory=dict)
    located: dict[str, int] = field(default_factory=dict)  # `_locate` answers below `low`
    head: tuple[int, int, list[Any]] | None = None  # (seq, epoch, context) of the head
    # (seq, epoch, context length) of the newest put event read: the head's, unless a
    # checkpoint was saved without one (`_context_items` checks the head it loads).
    top: tuple[int, int, int] | None = None
    # The last context read with `checkpoint_at`, or the part of the head's read
    # with `load_prefix`: (seq, epoch, items). Within an epoch a checkpoint's
    # context is a prefix of every later one's.
    older: tuple[int, int, list[Any]] | None = None
    order: list[_Put] | None = None  # `ordered()`, until `puts` or `deleted` change
    # The list items of the last put (objects, attribute snapshots, stored items).
    ser_cache: _SerCache | None = None

    @property
    def complete(self) -> bool:
        return self.low <= 1

    def ordered(self) -> list[_Put]:
        """Visible checkpoints, newest first (by journal sequence); do not modify."""
        if self.order is None:
            puts = [p for p in self.puts.values() if p.id not in self.deleted]
            puts.sort(key=lambda p: p.seq, reverse=True)
            self.order = puts
        return self.order

    def add_write(self, checkpoint_id: str, key: tuple[str, int], w: _Write) -> None:
        slot = self.writes.setdefault(checkpoint_id, {})
        old = slot.get(key)
        if old is None:
            slot[key] = w
            return
        newer = (w.event_seq, w.pos) > (old.event_seq, old.pos)
        # Regular writes: the first one stays. Special writes (idx < 0): the last one.
        if (key[1] < 0) == newer:
            slot[key] = w


def _mark(ev: JournalEvent) -> str:
    n = ev.event.msg.get("n")
    return f"{ev.sequence}:{ev.event.msg.get('type')}:{n if isinstance(n, str) else ''}"


@dataclass(frozen=True)
class _Fp:
    """The `fp` field every event of the saver carries (what makes cold reads fast).

    `prev`: the newest event sequence the writer had seen (the event landed at
    `prev + 1` unless another writer got in between); `late`: the newest "late"
    event strictly before this one (0: none); `last`: the id of the newest put at
    or before this event; `ok`: every earlier event carried an `fp`, none was
    raced, and put ids grew strictly in log order; `is_late`: this event refers
    to an older checkpoint than `last` (writes of an earlier checkpoint, deletes).
    `pend`: for each checkpoint id named by an "ahead" write at or before this
    event (a write naming an id newer than `last`: with LangGraph's
    `durability="async"` a step's writes are often stored before its
    checkpoint) whose put has not come yet, the sequence of the first such
    write; `mine` (on a put): `[s]` when its id had such writes (they all lie in
    `[s, put)`), else `[]`. A put's writes are therefore in `[mine, put)`, between
    it and the next put, and on the `late` chain. `lastseq`: the event sequence
    of the put `last` (0: unknown).
    """

    seq: int
    prev: int
    late: int
    last: str | None
    ok: bool
    is_late: bool
    pend: tuple[int, ...] = ()
    mine: tuple[int, ...] = ()
    lastseq: int = 0
    current: bool = False  # written with `pend`, `mine` and `lastseq`

    @property
    def clean(self) -> bool:
        """Whether the fast path may trust everything up to this event."""
        return self.ok and self.prev == self.seq - 1


def _seqs(value: Any, below: int) -> tuple[int, ...] | None:
    """A strictly increasing list of event sequences in [1, below], or None."""
    if not isinstance(value, list) or len(value) > _MAX_PEND:
        return None
    last = 0
    for s in value:
        if not isinstance(s, int) or isinstance(s, bool) or not last < s <= below:
            return None
        last = s
    return tuple(value)


def _fp_of(ev: JournalEvent) -> _Fp | None:
    fp = ev.event.msg.get("fp")
    if (
        not isinstance(fp, list)
        or len(fp) not in (5, _FP_LEN)
        or not isinstance(fp[0], int)
        or not isinstance(fp[1], int)
        or not (fp[2] is None or isinstance(fp[2], str))
        or not isinstance(fp[3], bool)
        or not isinstance(fp[4], bool)
        or isinstance(fp[0], bool)
        or isinstance(fp[1], bool)
        or not 0 <= fp[1] < ev.sequence
    ):
        return None
    if len(fp) == 5:  # written before `pend`: its ahead writes are on the late chain
        return _Fp(ev.sequence, fp[0], fp[1], fp[2], fp[3], fp[4])
    pend = _seqs(fp[5], ev.sequence)
    mine = _seqs(fp[6], ev.sequence - 1)
    lastseq = fp[7]
    if (
        pend is None
        or mine is None
        or len(mine) > 1
        or not isinstance(lastseq, int)
        or isinstance(lastseq, bool)
        or not 0 <= lastseq <= ev.sequence
        or (fp[2] is None and lastseq != 0)
    ):
        return None
    return _Fp(ev.sequence, fp[0], fp[1], fp[2], fp[3], fp[4], pend, mine, lastseq, True)


def _id_time(checkpoint_id: str | None) -> int | None:
    """The timestamp of a uuid6 id (LangGraph's checkpoint ids), or None."""
    c = checkpoint_id
    if c is None or len(c) != 36 or c[8] != "-" or c[13] != "-" or c[14] != "6":
        return None
    try:
        return int(c[0:8] + c[9:13] + c[15:18], 16)
    except ValueError:
        return None


def _fp_next(
    prev: _Fp | None,
    high: int,
    kind: str,
    checkpoint_id: str | None,
    resolve: Callable[[int], str | None],
) -> list[Any]:
    """The `fp` of a new event written after the event `high` (whose fp is `prev`).

    `resolve(seq)` names the checkpoint of the pending ahead write `seq` (None:
    unknown; the new event is then not clean). The new event is assumed to land
    at `high + 1`; if it does not, its `prev` says so and nothing trusts it.
    """
    pend: list[int] = []
    mine: list[int] = []
    lastseq = 0
    if high == 0:
        late, last, ok = 0, None, True
    elif prev is None or prev.seq != high:
        late, last, ok = 0, None, False
    else:
        late = prev.seq if prev.is_late else prev.late
        # After a 5-field `fp` (no `pend`: its ahead writes are unknown) nothing is clean.
        last, ok, lastseq = prev.last, prev.clean and prev.current, prev.lastseq
        if ok:
            pend = list(prev.pend)
    if kind == EV_CHECKPOINT:
        is_late = False
        if checkpoint_id is None or (last is not None and not checkpoint_id > last):
            ok = False
        if ok:
            keep: list[int] = []
            for s in pend:
                named = resolve(s)
                if named is None:
                    ok = False
                    break
                if named == checkpoint_id:
                    mine.append(s)
                elif checkpoint_id is not None and named > checkpoint_id:
                    keep.append(s)
                # else: its put can no longer come while `ok` holds (ids grow)
            pend = keep
        last = checkpoint_id
        lastseq = high + 1 if checkpoint_id is not None else 0
    elif kind == EV_WRITES and checkpoint_id is not None and checkpoint_id == last:
        is_late = False  # local: between its put and the next one
    elif (
        kind == EV_WRITES
        and ok
        and checkpoint_id is not None
        and (last is None or checkpoint_id > last)
    ):
        is_late = False  # ahead: its put (if any) comes later and names `[first, put)`
        named_before = False
        for s in pend:
            named = resolve(s)
            if named is None:
                ok = False
                break
            if named == checkpoint_id:
                named_before = True
        if ok and not named_before:
            if len(pend) >= _MAX_PEND:
                ok = False  # too many checkpoints pending: stop trusting this session
            else:
                pend.append(high + 1)
    else:
        is_late = True
    if not ok:
        pend, mine = [], []
    return [high, late, last, ok, is_late, pend, mine, lastseq]


_Tuples = list[CheckpointTuple]


class _Unread:
    """The type of `_UNREAD`: an event's `fp` not parsed yet (None means it has none)."""


_UNREAD = _Unread()


class _NoFastPath(Exception):
    """The fast path cannot prove its answer: use the scan."""


# ------------------------------------------------------------------------ saver
class JournalSaver(BaseCheckpointSaver[str]):
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
        if NS_SEP in session_prefix:
            raise InvalidInputError(f"session_prefix cannot contain {NS_SEP!r}")
        self.context_channel = context_channel
        self.owner_id = owner_id
        self.session_prefix = session_prefix
        self._lock = threading.Lock()
        self._session_locks: dict[str, threading.RLock] = {}
        self._indexes: OrderedDict[str, _Index] = OrderedDict()
        self._fast_list = isinstance(self.serde, JsonPlusSerializer)
        self._raw_memo: dict[int, tuple[Any, bytes]] = {}
        self._obj_memo: dict[int, tuple[Any, Callable[[], Any]]] = {}  # `_load_list_fast`
        self._obj_memo_bytes = 0  # msgpack bytes of the items `_obj_memo` holds
        # The same copiers by the items' msgpack bytes, for values stored elsewhere
        # that hold the same items (`_load_write`); cleared with `_obj_memo`.
        self._bytes_memo: dict[bytes, Callable[[], Any]] = {}
        # Sessions whose store reads go through one `Store.reader` (`_reading`):
        # its reader, made at the block's first read (None: not made yet).
        self._readers: dict[str, SessionReader | None] = {}

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

    # ------------------------------------------------------------- naming
    def session_id(self, thread_id: str, checkpoint_ns: str = "") -> str:
        """The journal session id of a thread's namespace."""
        if NS_SEP in thread_id:
            raise InvalidInputError(f"thread id {thread_id!r} contains {NS_SEP!r}")
        root = self.session_prefix + thread_id
        return root if not checkpoint_ns else f"{root}{NS_SEP}{checkpoint_ns}"

    def _parse_sid(self, sid: str) -> tuple[str, str] | None:
        if not sid.startswith(self.session_prefix):
            return None
        rest = sid[len(self.session_prefix) :]
        thread_id, sep, ns = rest.partition(NS_SEP)
        if not thread_id:
            return None
        return thread_id, (ns if sep else "")

    @staticmethod
    def _target(config: RunnableConfig) -> tuple[str, str]:
        conf = config.get("configurable") or {}
        if "thread_id" not in conf or conf["thread_id"] is None:
            raise InvalidInputError('config["configurable"]["thread_id"] is required')
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns") or ""
        if not isinstance(ns, str):
            raise InvalidInputError("checkpoint_ns must be a string")
        return thread_id, ns

    def _slock(self, sid: str) -> threading.RLock:
        with self._lock:
            lock = self._session_locks.get(sid)
            if lock is None:
                lock = self._session_locks[sid] = threading.RLock()
            return lock

    # ------------------------------------------------------------- store reads
    @contextlib.contextmanager
    def _reading(self, sid: str) -> Iterator[None]:
        """The store reads of `sid` in this block share one `Store.reader`, which
        checks the session once instead of at every read (a cold `list` makes
        about ten). Call with the session lock held: only its holder reads `sid`
        through `_readers`.

        The reader is made at the block's first read, not here: `_index` reads the
        session's incarnation (`_ident`) before its first read, and a reader made
        before that could hold an older incarnation than the one the index is
        then labelled with (`_renew_reader` drops it when `_index` starts over).
        Reads through it see at least what was committed when it was made, and
        perhaps later commits (what the saver's reads already allow: each one
        caught up with what came before; `Store.reader`).
        """
        if sid in self._readers:  # nested: the outer block's reader
            yield
            return
        self._readers[sid] = None
        try:
            yield
        finally:
            reader = self._readers.pop(sid, None)
            if reader is not None:
                reader.close()

    def _reader(self, sid: str) -> SessionReader | None:
        """The reader of a `_reading` block for `sid` (None outside one: read the
        store). Raises `NotFoundError` if the session does not exist."""
        if sid not in self._readers:
            return None
        reader = self._readers[sid]
        if reader is None:
            reader = self._readers[sid] = self.store.reader(sid)
        return reader

    def _renew_reader(self, sid: str) -> None:
        """Drop the block's reader: the next read makes a new one (see `_reading`)."""
        reader = self._readers.get(sid)
        if reader is not None:
            self._readers[sid] = None
            reader.close()

    def _event_page(self, sid: str, request: EventPageRequest) -> EventPage:
        reader = self._reader(sid)
        if reader is None:
            return self.store.event_page(sid, request)
        return reader.event_page(request)

    def _events_after(self, sid: str, after: int, limit: int) -> list[JournalEvent]:
        try:
            reader = self._reader(sid)
        except NotFoundError:
            return []  # what `Store.events_after` answers for a missing session
        if reader is None:
            return self.store.events_after(sid, after, limit)
        return reader.events_after(after, limit)

    def _load_cp(self, sid: str) -> Checkpoint | None:
        try:
            reader = self._reader(sid)
        except NotFoundError:
            return None
        return self.store.load(sid) if reader is None else reader.load()

    def _checkpoint_at(self, sid: str, seq: int) -> Checkpoint | None:
        try:
            reader = self._reader(sid)
        except NotFoundError:
            return None
        return self.store.checkpoint_at(sid, seq) if reader is None else reader.checkpoint_at(seq)

    # ------------------------------------------------------------- serde
    def _dump(self, value: Any) -> list[str]:
        kind, data = self.serde.dumps_typed(value)
        return [kind, _b64(data)]

    def _load(self, value: Any, where: str) -> Any:
        return self.serde.loads_typed(_typed(value, where))

    def _msgpack_items(self, items: list[Any], where: str) -> list[bytes] | None:
        """The msgpack bytes of stored `[type, base64]` list items (None: not all msgpack).

        Items are the (never mutated) lists of a stored context; the contexts of a
        thread's checkpoints share them (one is a prefix of the next), so the
        base64 decode of an item is remembered by identity, not repeated.
        """
        memo = self._raw_memo
        out: list[bytes] = []
        for item in items:
            hit = memo.get(id(item))
            if hit is not None and hit[0] is item:
                out.append(hit[1])
                continue
            if (
                type(item) is not list
                or len(item) != 2
                or item[0] != "msgpack"
                or type(item[1]) is not str
            ):
                return None
            raw = _unb64(item[1], where)
            if len(memo) >= _RAW_MEMO:
                memo.clear()
            memo[id(item)] = (item, raw)  # holds the item: its id cannot be reused
            out.append(raw)
        return out

    def _load_list(self, items: list[Any], where: str) -> list[Any]:
        if self._fast_list and items:
            out = self._load_list_fast(items, where)
            if out is not None:
                return out
        return [self.serde.loads_typed(_typed(item, where)) for item in items]

    def _load_list_fast(self, items: list[Any], where: str) -> list[Any] | None:
        """`_load_list` for msgpack items (None: not all msgpack, use the general path).

        The contexts of a thread's checkpoints share their stored items (one is a
        prefix of the next), so a `list` returning k checkpoints would decode the
        same message up to k times (pydantic validation: most of a warm `list`).
        Instead the first decode of a stored item is kept (by the item's identity)
        as a way to copy it (`_copier`), and later reads get a copy: a new object,
        equal to a fresh decode, sharing no mutable part with other copies (a value
        that cannot be copied that way is decoded every time).
        """
        memo = self._obj_memo
        out: list[Any] = [None] * len(items)
        miss_at: list[int] = []
        miss: list[Any] = []
        copy_at: list[int] = []
        copiers: list[_MessageCopier] = []  # copied together (`_message_copies`)
        for i, item in enumerate(items):
            hit = memo.get(id(item))
            if hit is not None and hit[0] is item:
                copier = hit[1]
                if type(copier) is _MessageCopier:
                    copy_at.append(i)
                    copiers.append(copier)
                else:
                    out[i] = copier()
            else:
                miss_at.append(i)
                miss.append(item)
        if copiers:
            for i, value in zip(copy_at, _message_copies(copiers), strict=True):
                out[i] = value
        if not miss:
            return out
        raws = self._msgpack_items(miss, where)
        if raws is None:
            return None
        # One decode of one msgpack array instead of one call per item: the
        # items are msgpack values, so the array is their concatenation.
        raw = msgpack_array_header(len(raws)) + b"".join(raws)
        decoded = self.serde.loads_typed(("msgpack", raw))
        if not isinstance(decoded, list) or len(decoded) != len(raws):
            return None
        for i, item, r, value in zip(miss_at, miss, raws, decoded, strict=True):
            out[i] = value
            try:
                copy = _copier(value)
            except _NoClone:
                continue
            if len(memo) >= _RAW_MEMO or self._obj_memo_bytes > _OBJ_MEMO_BYTES:
                memo.clear()
                self._bytes_memo.clear()
                self._obj_memo_bytes = 0
            memo[id(item)] = (item, copy)  # holds the item: its id cannot be reused
            self._bytes_memo[r] = copy
            self._obj_memo_bytes += len(r)
        return out

    def _load_write(self, value: Any, where: str) -> Any:
        """`_load` of a pending write's value, copying list items decoded before.

        A step's write to the list channel (e.g. `[AIMessage]`) is stored as one
        msgpack array of items that the next checkpoint's context stores one by
        one, with the same bytes: when every element's bytes are those of an item
        `_load_list_fast` decoded (`_bytes_memo`), the value is a list of copies of
        them, equal to a fresh decode (which costs a validation per message).
        """
        if not (
            self._bytes_memo
            and type(value) is list
            and len(value) == 2
            and value[0] == "msgpack"
            and type(value[1]) is str
        ):
            return self._load(value, where)
        raw = _unb64(value[1], where)
        copies = self._copies_of(raw)
        return self.serde.loads_typed(("msgpack", raw)) if copies is None else copies

    def _copies_of(self, raw: bytes) -> list[Any] | None:
        """Copies of the items of a msgpack array whose every element is an item
        decoded before (None: it is not)."""
        if raw[:1] not in _MSGPACK_ARRAY_STARTS:
            return None
        try:
            parts = _raw_list_decode(raw)
        except msgspec.DecodeError:
            return None
        memo = self._bytes_memo
        copiers = [memo.get(bytes(part)) for part in parts]
        if not copiers or None in copiers:
            return None
        messages = [c for c in copiers if type(c) is _MessageCopier]
        if len(messages) == len(copiers):
            return _message_copies(messages)
        return [c() for c in copiers if c is not None]

    def _dump_items(
        self, values: list[Any], cache: _SerCache | None
    ) -> tuple[list[Any], _SerCache]:
        """Serialise list items, reusing the stored form of unchanged items of the last put.

        An item is reused only if it is the very same object as at the same position
        in the last put of this session and its attributes compare equal to a
        shallow snapshot taken then; anything else is serialised again. (Changes
        made in place inside an attribute's value, e.g. to a message's
        `additional_kwargs` dict, are not seen: LangGraph state is meant to be
        updated through nodes' returned writes, which create new objects.)
        """
        if cache is not None and cache.attrs:
            n = min(len(values), len(cache.objs))
            head = values if n == len(values) else values[:n]
            objs = cache.objs if n == len(cache.objs) else cache.objs[:n]
            snaps = cache.snaps if n == len(cache.snaps) else cache.snaps[:n]
            # The common case (a list that grew), checked as the loop below checks it
            # but in C loops: the same objects, each with attributes equal to its
            # snapshot (each snapshot is an attribute dict, so each object has one).
            try:
                same = all(map(_is, head, objs)) and list(map(_attrs_of, head)) == snaps
            except AttributeError:
                same = False
            if same:
                items = cache.items[:n]
                objs = list(values)
                snaps = snaps[:]
                attrs = True
                for v in values[n:]:
                    item = self._dump(v)
                    snap = _snapshot(v)
                    items.append(item)
                    snaps.append(snap)
                    attrs = attrs and type(snap) is dict
                return items, _SerCache(objs, snaps, items[:], attrs)
        old_objs = cache.objs if cache is not None else []
        old_snaps = cache.snaps if cache is not None else []
        old_items = cache.items if cache is not None else []
        n = len(old_objs)
        items = []
        snaps = []
        attrs = True
        for i, v in enumerate(values):
            if i < n and old_objs[i] is v:
                old_snap = old_snaps[i]
                if old_snap is None or (
                    old_snap is not _NO_SNAPSHOT and getattr(v, "__dict__", None) == old_snap
                ):  # (compared in place: no copy unless serialised again)
                    items.append(old_items[i])
                    snaps.append(old_snap)
                    attrs = attrs and type(old_snap) is dict
                    continue
            item = self._dump(v)
            snap = _snapshot(v)
            items.append(item)
            snaps.append(snap)
            attrs = attrs and type(snap) is dict
        return items, _SerCache(list(values), snaps, items[:], attrs)

    @staticmethod
    def _jsonable(value: Any) -> Any:
        """`value` as plain JSON (tuples become lists), or None if it has no JSON form."""
        try:
            return _json_decode(_json_encode(value))
        except (TypeError, ValueError, OverflowError, msgspec.MsgspecError):
            return None

    def _encode_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        plain = self._jsonable(metadata)
        if isinstance(plain, dict) and "__typed__" not in plain:
            try:
                from journal import validate

                validate.check_json_value(plain, "metadata")
                return plain
            except InvalidInputError:
                pass
        return {"__typed__": self._dump(metadata)}

    def _decode_metadata(self, value: Any) -> dict[str, Any]:
        if isinstance(value, dict) and "__typed__" in value:
            out = self._load(value["__typed__"], "checkpoint metadata")
            return dict(out) if isinstance(out, dict) else {}
        return dict(value) if isinstance(value, dict) else {}

    # ------------------------------------------------------------- index upkeep
    def _parse_put(self, idx: _Index, ev: JournalEvent, fp: _Fp | _Unread | None = _UNREAD) -> _Put:
        """The put of a checkpoint event (`fp`: its `_fp_of`, if the caller has it)."""
        msg = ev.event.msg
        if isinstance(fp, _Unread):
            fp = _fp_of(ev)
        known = fp is not None and fp.clean and fp.current
        try:
            ctx = msg.get("ctx") or [None, 0, 0]
            return _Put(
                event_seq=ev.sequence,
                seq=int(msg["seq"]),
                id=str(msg["id"]),
                parent=msg.get("parent"),
                msg=msg,
                metadata=self._decode_metadata(msg.get("metadata")),
                ctx_channel=ctx[0],
                ctx_len=int(ctx[1]),
                epoch=int(ctx[2]),
                ahead=fp.mine if fp is not None and known else (),
                known=known,
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CorruptionError(
                f"session {idx.sid!r}: malformed checkpoint event {ev.sequence}"
            ) from exc

    def _apply(
        self, idx: _Index, ev: JournalEvent, *, forward: bool, fp: _Fp | _Unread | None = _UNREAD
    ) -> None:
        msg = ev.event.msg
        kind = msg.get("type")
        if kind == EV_CHECKPOINT:
            put = self._parse_put(idx, ev, fp)
            old = idx.puts.get(put.id)
            if old is None or old.seq < put.seq:
                idx.puts[put.id] = put
                idx.order = None
            if forward:
                idx.head = None  # a newer checkpoint: the cached head is stale
                if idx.top is None or put.seq > idx.top[0]:
                    idx.top = (put.seq, put.epoch, put.ctx_len)
        elif kind == EV_WRITES:
            cid = msg.get("id")
            task_id = msg.get("task")
            writes = msg.get("w")
            if (
                not isinstance(cid, str)
                or not isinstance(task_id, str)
                or not isinstance(writes, list)
            ):
                raise CorruptionError(f"session {idx.sid!r}: malformed writes event {ev.sequence}")
            path = msg.get("path") if isinstance(msg.get("path"), str) else ""
            raw = msg.get("fp")
            if (
                isinstance(raw, list)
                and len(raw) == _FP_LEN
                and raw[5]
                and raw[5][-1] == ev.sequence
            ):
                idx.wids[ev.sequence] = cid  # an ahead write: a later put will name it
            for pos, w in enumerate(writes):
                if not isinstance(w, list) or len(w) != 3:
                    raise CorruptionError(
                        f"session {idx.sid!r}: malformed write in event {ev.sequence}"
                    )
                key = (task_id, int(w[0]))
                idx.add_write(
                    cid, key, _Write(ev.sequence, pos, task_id, str(w[1]), w[2], str(path))
                )
        elif kind == EV_DELETE:
            ids = msg.get("ids")
            if isinstance(ids, list):
                idx.deleted.update(str(i) for i in ids)
                idx.order = None

    def _ident(self, session_dir: str) -> tuple[int, int, int] | None:
        """What identifies the incarnation of a session directory (None: no such
        session): the identity file the store writes once per session, as the store
        itself tells a session deleted and created again from the one it opened."""
        return _CoreSession.identity_key(session_dir)

    def _index(self, sid: str, thread_id: str, ns: str, *, mode: str = "read") -> _Index | None:
        """The session's index, caught up with the store (None: no such session).

        `mode` "read": the event at `high` is read again and must be the one indexed
        (what tells a log deleted and created again, or cut by a repair), then the
        events after it are applied. For a commit of this saver, whose event is
        only trusted by readers when it lands right after `high`: "write" checks
        the session's incarnation (`_ident`, one `stat`) instead of re-reading the
        event at `high` and applies the events after it (a read that finds none
        decodes nothing); "cas" checks only the incarnation, for an append made
        with `expected_latest=high` (which the store refuses if anything came since).

        Call with the session lock held.
        """
        with self._lock:
            idx = self._indexes.get(sid)
            if idx is not None:
                self._indexes.move_to_end(sid)
        if idx is not None and mode != "read":
            if (
                idx.ident is not None
                and self._ident(idx.dir) == idx.ident
                and (mode == "cas" or self._catch_up(idx, verify=False))
            ):
                return idx
            idx = None  # deleted (and perhaps created again) since: build it afresh
        # One read when the log still holds the event at `high`: it and anything newer.
        if idx is not None and idx.high > 0 and self._catch_up(idx):
            return idx
        session_dir = idx.dir if idx is not None else self.store.session_dir(sid)
        ident = self._ident(session_dir)  # before the first read: an older one never matches
        self._renew_reader(sid)  # (a reader made before it would be such a read)
        try:
            newest = self._event_page(sid, EventPageRequest(limit=1))
        except NotFoundError:
            self._forget(sid)
            return None
        latest = newest.latest_sequence
        if idx is not None and idx.high == 0 and latest == 0 and idx.ident == ident:
            return idx
        if idx is not None and idx.high == 0 and idx.ident == ident and self._catch_up(idx):
            return idx
        idx = _Index(sid, thread_id, ns, session_dir, ident, low=latest + 1, high=latest)
        if newest.events:
            top = newest.events[0]
            idx.high_mark = _mark(top)
            idx.high_fp = _fp_of(top)
            if top.event.msg.get("type") == EV_CHECKPOINT:
                with contextlib.suppress(CorruptionError):  # read again (and raised) if needed
                    put = self._parse_put(idx, top)
                    idx.top = (put.seq, put.epoch, put.ctx_len)
        with self._lock:
            self._indexes[sid] = idx
            while len(self._indexes) > _MAX_INDEXES:
                self._indexes.popitem(last=False)
        return idx

    def _catch_up(self, idx: _Index, *, verify: bool = True) -> bool:
        """Apply the events after `high`; False if the log is not the one indexed.

        `verify`: read the event at `high` again and compare it (else the caller
        has checked the incarnation, see `_index`).
        """
        after = idx.high - 1 if verify and idx.high > 0 else idx.high
        first = verify
        while True:
            events = self._events_after(idx.sid, after, _PAGE)
            if first and idx.high > 0:
                if not events or _mark(events[0]) != idx.high_mark:
                    return False
                events = events[1:]
                after = idx.high
            first = False
            if not events:
                return True
            for ev in events:
                self._advance(idx, ev)
                after = ev.sequence

    def _advance(self, idx: _Index, ev: JournalEvent) -> None:
        """Apply the event right after `high` (read, or just committed) and move `high` to it."""
        fp = _fp_of(ev)
        self._apply(idx, ev, forward=True, fp=fp)
        idx.high = ev.sequence
        idx.high_mark = _mark(ev)
        idx.high_fp = fp

    def _page_down(self, idx: _Index, until: int = 0) -> bool:
        """Index one more page of older events; False when already complete.

        `until`: the event the caller needs (a smaller page when it is near).
        """
        if idx.complete:
            return False
        limit = _PAGE if until <= 0 else max(16, min(_PAGE, idx.low - until))
        page = self._event_page(idx.sid, EventPageRequest(before_sequence=idx.low, limit=limit))
        for ev in page.events:  # newest first
            if ev.sequence < idx.low:
                self._apply(idx, ev, forward=False)
        if page.next_before_sequence is None or not page.events:
            idx.low = 1
        else:
            idx.low = min(ev.sequence for ev in page.events)
        return True

    def _cover(self, idx: _Index, put: _Put) -> _Put:
        """Page down until every event that may hold a write of `put` is indexed.

        Writes can be stored before their checkpoint (LangGraph's async
        durability); a put with a clean `fp` says from where, any other put
        needs the whole log.
        """
        while idx.low > put.writes_from and self._page_down(idx, put.writes_from):
            pass
        return put

    def _find(self, idx: _Index, checkpoint_id: str) -> _Put | None:
        while True:
            put = idx.puts.get(checkpoint_id)
            if put is not None:
                return None if put.id in idx.deleted else self._cover(idx, put)
            if not self._page_down(idx):
                return None

    def _latest(self, idx: _Index) -> _Put | None:
        while True:
            visible = [p for p in idx.puts.values() if p.id not in idx.deleted]
            if visible:
                best = max(visible, key=lambda p: p.seq)
                # A put below the covered range cannot be newer than a covered one.
                return self._cover(idx, best)
            if not self._page_down(idx):
                return None

    def _iter_puts(self, idx: _Index, before_seq: int | None) -> Iterator[_Put]:
        """Visible checkpoints newest first, paging older events in as needed."""
        done: set[str] = set()
        while True:
            low = idx.low
            for put in idx.ordered():
                if put.id in done or (before_seq is not None and put.seq >= before_seq):
                    continue
                done.add(put.id)
                # Paging down here only adds older puts (seen by the next round).
                yield self._cover(idx, put)
            if idx.low == low and not self._page_down(idx):
                return

    # ------------------------------------------------------------- fast path
    # A cold read of an old checkpoint finds its put by binary search over event
    # sequences (every event's `fp.last` names the newest put at or before it,
    # and put ids grow strictly while `fp.ok` holds), reads the chain of "late"
    # events (writes to older checkpoints, deletes) once, and pages from there:
    # O(log n + late + answer) event reads instead of everything newer than it.
    def _fast_usable(self, idx: _Index) -> bool:
        fp = idx.high_fp
        return (
            not idx.complete and idx.high > 0 and fp is not None and fp.seq == idx.high and fp.clean
        )

    def _event_at(self, idx: _Index, seq: int) -> tuple[JournalEvent, _Fp]:
        page = self._event_page(idx.sid, EventPageRequest(before_sequence=seq + 1, limit=1))
        if not page.events or page.events[0].sequence != seq:
            raise _NoFastPath
        ev = page.events[0]
        fp = _fp_of(ev)
        if fp is None:
            raise _NoFastPath
        return ev, fp

    def _load_late(self, idx: _Index) -> None:
        """Apply every late event below `low` (once per index)."""
        if idx.late_loaded:
            return
        fp = idx.high_fp
        assert fp is not None
        at = fp.seq if fp.is_late else fp.late
        reads = 0
        # Applied only once the whole chain is read: a chain given up on halfway
        # (too long, or not what it should be) leaves the index as it was, instead
        # of its first events applied and listed again at the next attempt.
        below: list[JournalEvent] = []
        chain: list[_Fp] = []
        while at > 0:
            reads += 1
            if reads > _MAX_LATE:
                raise _NoFastPath  # a long chain costs more than the scan saves
            ev, efp = self._event_at(idx, at)
            if not efp.is_late or efp.late >= at:
                raise _NoFastPath
            if at < idx.low:
                below.append(ev)
            chain.append(efp)
            at = efp.late
        for ev in below:
            self._apply(idx, ev, forward=False)
        idx.late_fps.extend(chain)
        idx.late_loaded = True

    def _locate(self, idx: _Index, checkpoint_id: str) -> int:
        """The first event below `low` at or after which the newest put id >= checkpoint_id.

        Returns `low` when every put below `low` has a smaller id.
        """
        hit = idx.located.get(checkpoint_id)
        if hit is not None and hit < idx.low:
            return hit
        ans = self._search(idx, checkpoint_id)
        if ans < idx.low:
            if len(idx.located) >= _PAGE:
                idx.located.clear()
            idx.located[checkpoint_id] = ans
        return ans

    def _search(self, idx: _Index, checkpoint_id: str) -> int:
        lo, hi, ans = 1, idx.low - 1, idx.low
        # Binary search; while LangGraph's uuid6 ids (time-ordered) let it, the
        # probe is guessed by interpolating the ids' timestamps between the two
        # puts seen that bracket the target most closely (else the last two seen;
        # after two guesses in a row that did not halve the range comes a plain
        # halving step, so never more than about 3*log2(n) probes: one guess that
        # lands just short of the target is usually followed by the answer). The
        # events of the late chain, already read, count as probes.
        target = _id_time(checkpoint_id)
        pts: list[tuple[int, int]] = []  # (event sequence of a put, its id's time)

        def seen(at: int, fp: _Fp) -> int | None:
            """Narrow the range by the `fp` of event `at`; the answer, if this is it."""
            nonlocal lo, hi, ans
            last = fp.last
            put_at = fp.lastseq if 0 < fp.lastseq <= at else 0
            if put_at and (t := _id_time(last)) is not None:
                pts.append((put_at, t))
            if not lo <= at <= hi:
                return None
            if last is not None and last >= checkpoint_id:
                if last == checkpoint_id and put_at:
                    return put_at  # the put itself: every event before it names an older id
                ans = put_at or at
                hi = ans - 1
            else:
                lo = at + 1
            return None

        top = idx.high_fp
        if top is not None and top.lastseq and (t := _id_time(top.last)) is not None:
            pts.append((top.lastseq, t))
        for fp in idx.late_fps:
            if fp.clean and fp.current and (found := seen(fp.seq, fp)) is not None:
                return found
        misses = 0  # guesses in a row that did not halve the range
        while lo <= hi:
            mid = (lo + hi) // 2
            if target is not None and misses < 2 and len(pts) >= 2:
                below = [p for p in pts if p[1] <= target]
                above = [p for p in pts if p[1] > target]
                if below and above:
                    (s1, t1), (s2, t2) = max(below), min(above)
                else:
                    (s1, t1), (s2, t2) = pts[-2], pts[-1]
                if t1 != t2:
                    guess = s1 + math.ceil((target - t1) * (s2 - s1) / (t2 - t1))
                    mid = min(max(guess, lo), hi)
            width = hi - lo
            _, fp = self._event_at(idx, mid)
            if (found := seen(mid, fp)) is not None:
                return found
            misses = 0 if hi - lo <= width // 2 else misses + 1
        return ans

    def _island_put(self, idx: _Index, seq: int) -> _Put:
        """The put whose event is `seq` (an event where `fp.last` changed)."""
        put = idx.iputs.get(seq)
        if put is None:
            ev, _ = self._event_at(idx, seq)
            if ev.event.msg.get("type") != EV_CHECKPOINT:
                raise _NoFastPath
            put = self._parse_put(idx, ev)
        return put

    def _add_range(self, idx: _Index, a: int, b: int) -> None:
        ranges = sorted([*idx.iranges, (a, b)])
        merged: list[tuple[int, int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        idx.iranges = merged

    def _island_events(self, idx: _Index, events: list[JournalEvent]) -> None:
        for ev in events:
            if ev.event.msg.get("type") == EV_CHECKPOINT:
                idx.iputs[ev.sequence] = self._parse_put(idx, ev)
            else:
                self._apply(idx, ev, forward=False)

    def _ensure_ahead(self, idx: _Index, put: _Put) -> None:
        """Apply the events `[ahead, put)` of a put below `low` (its writes stored before it)."""
        if not put.ahead:
            return
        lo, hi = put.ahead[0], put.event_seq - 1
        r = self._range_at(idx, lo)
        if r is not None and r[1] >= hi:
            return
        first = True
        after = lo - 1
        while after < hi:
            events = [
                ev
                for ev in self._events_after(idx.sid, after, min(hi - after, _PAGE))
                if ev.sequence <= hi
            ]
            if not events or (first and events[0].sequence != lo):
                raise _NoFastPath
            if first:
                msg = events[0].event.msg
                if msg.get("type") != EV_WRITES or msg.get("id") != put.id:
                    raise _NoFastPath  # not what the put says: trust nothing
                first = False
            self._island_events(idx, events)
            self._add_range(idx, after + 1, events[-1].sequence)
            after = events[-1].sequence

    def _range_at(self, idx: _Index, seq: int) -> tuple[int, int] | None:
        for a, b in idx.iranges:
            if a <= seq <= b:
                return a, b
        return None

    def _iter_island(self, idx: _Index, upper: int) -> Iterator[_Put]:
        """Visible puts whose event is below `upper` (< low), newest first."""
        pos = upper
        size = 32  # pages grow: a `list(limit=10)` reads a few dozen events
        while pos > 1:
            r = self._range_at(idx, pos - 1)
            if r is None:
                page = self._event_page(idx.sid, EventPageRequest(before_sequence=pos, limit=size))
                size = min(size * 2, _PAGE)
                events = [ev for ev in page.events if ev.sequence < pos]
                if not events:
                    return
                self._island_events(idx, events)
                a = 1 if page.next_before_sequence is None else events[-1].sequence
                self._add_range(idx, a, pos - 1)
                r = (a, pos - 1)
            a = r[0]
            for seq in sorted((e for e in idx.iputs if a <= e < pos), reverse=True):
                put = idx.iputs[seq]
                if put.id not in idx.deleted:
                    self._ensure_ahead(idx, put)
                    yield put
            pos = a

    def _fast_before(self, idx: _Index, before_id: str) -> Iterator[_Put] | None:
        """The puts older than `before_id`, newest first, without scanning (None: can't)."""
        if before_id in idx.puts or not self._fast_usable(idx):
            return None
        try:
            self._load_late(idx)
            at = self._locate(idx, before_id)
        except _NoFastPath:
            return None
        if at >= idx.low:
            return None  # older than every put below `low`? the scan decides
        return self._iter_island(idx, at)

    def _fast_find(self, idx: _Index, checkpoint_id: str) -> _Put | None:
        """`_find` for a checkpoint below `low`, without scanning; raises _NoFastPath."""
        if not self._fast_usable(idx):
            raise _NoFastPath
        self._load_late(idx)
        at = self._locate(idx, checkpoint_id)
        if at >= idx.low:
            return None  # every put below `low` is older; the covered ones are not it
        put = self._island_put(idx, at)
        if put.id != checkpoint_id:
            return None
        if self._range_at(idx, at) is None:
            # Its local writes: the events after it up to the next put (or `low`).
            after, end = at, idx.low - 1
            while after < end:
                events = [
                    ev for ev in self._events_after(idx.sid, after, 16) if ev.sequence < idx.low
                ]
                if not events:
                    break
                stop = next(
                    (ev for ev in events if ev.event.msg.get("type") == EV_CHECKPOINT), None
                )
                if stop is not None:
                    events = [ev for ev in events if ev.sequence < stop.sequence]
                    end = stop.sequence - 1
                self._island_events(idx, events)
                after = events[-1].sequence if events else end
            idx.iputs[at] = put
            self._add_range(idx, at, end)
        if put.id in idx.deleted:
            return None
        self._ensure_ahead(idx, put)
        return put

    def _ahead_from(self, idx: _Index, checkpoint_id: str) -> int | None:
        """For a write whose checkpoint is not put yet: where its earlier writes start.

        When the newest event is clean and `checkpoint_id` is newer than every put
        so far, every earlier write naming it was an ahead write, at or after the
        first one, which `pend` lists. None: unknown (or not an ahead write).
        """
        fp = idx.high_fp
        if fp is None or not fp.current or not fp.clean or fp.seq != idx.high:
            return None
        if fp.last is not None and not checkpoint_id > fp.last:
            return None
        resolve = self._resolver(idx)
        for s in fp.pend:
            named = resolve(s)
            if named is None:
                return None
            if named == checkpoint_id:
                return s
        return idx.high + 1

    def _resolver(self, idx: _Index) -> Callable[[int], str | None]:
        """`resolve` for `_fp_next`: the checkpoint id an ahead write event names."""

        def resolve(seq: int) -> str | None:
            cid = idx.wids.get(seq)
            if cid is not None:
                return cid
            try:
                page = self._event_page(idx.sid, EventPageRequest(before_sequence=seq + 1, limit=1))
            except JournalError:
                return None
            if not page.events or page.events[0].sequence != seq:
                return None
            msg = page.events[0].event.msg
            named = msg.get("id")
            if msg.get("type") != EV_WRITES or not isinstance(named, str):
                return None
            idx.wids[seq] = named
            return named

        return resolve

    def _forget(self, sid: str) -> None:
        with self._lock:
            self._indexes.pop(sid, None)

    def _forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for sid in [s for s, i in self._indexes.items() if i.thread_id == thread_id]:
                del self._indexes[sid]

    # ------------------------------------------------------------- sessions
    def _check_ours(self, cp: Checkpoint, sid: str) -> None:
        if not isinstance(cp.metadata.get("langgraph"), dict):
            raise InvalidInputError(
                f"journal session {sid!r} exists and was not written by the LangGraph saver"
            )

    def _placeholder(self, sid: str, thread_id: str, ns: str) -> Checkpoint:
        cp = Checkpoint(
            version=CHECKPOINT_VERSION,
            session_id=sid,
            session_context=SessionContext(owner_id=self.owner_id, origin_label=ORIGIN_LABEL),
        )
        cp.metadata = {"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}}
        return cp

    def _ensure_session(self, sid: str, thread_id: str, ns: str) -> None:
        """Create the session (and its thread's root) with an empty sequence-0 checkpoint."""
        if self.store.session_summary(sid) is not None:
            return
        root = self.session_id(thread_id)
        if ns:
            with self._slock(root):
                self._ensure_session(root, thread_id, "")
        placeholder = self._placeholder(sid, thread_id, ns)
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

    def _head_prefix(self, idx: _Index, items: int) -> tuple[int, int, list[Any]] | None:
        """(seq, epoch, the first `items` context items) of the head, read through the
        `_reading` block's reader (`SessionReader.load_prefix`: the rest of the
        context is not decoded). None outside such a block, or if the session is
        gone (`_head` then reads, or raises)."""
        try:
            reader = self._reader(idx.sid)
        except NotFoundError:
            return None
        if reader is None:
            return None
        cp = reader.load_prefix(items)
        if cp is None:
            return None
        self._check_ours(cp, idx.sid)
        return (cp.sequence, cp.context_epoch, cp.context)

    def _head(self, idx: _Index) -> tuple[int, int, list[Any]]:
        if idx.head is None:
            cp = self._load_cp(idx.sid)
            if cp is None:
                raise NotFoundError(f"session {idx.sid!r} does not exist")
            self._check_ours(cp, idx.sid)
            idx.head = (cp.sequence, cp.context_epoch, cp.context)
        return idx.head

    # ------------------------------------------------------------- put
    def put(
        self,
        config: RunnableConfig,
        checkpoint: LGCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: one journal commit (context tail + one event)."""
        thread_id, ns = self._target(config)
        sid = self.session_id(thread_id, ns)
        parent = (config.get("configurable") or {}).get("checkpoint_id")
        values: dict[str, Any] = dict(checkpoint.get("channel_values") or {})
        cc = self.context_channel
        ctx_channel: str | None = None
        items: list[Any] = []
        first_user: str | None = None
        if cc is not None and isinstance(values.get(cc), list):
            ctx_channel = cc
            listed = values.pop(cc)
            first_user = _first_user_message(listed)
        header = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        md = get_serializable_checkpoint_metadata(config, metadata)
        msg: dict[str, Any] = {
            "type": EV_CHECKPOINT,
            "n": _nonce(),
            "seq": 0,
            "id": checkpoint["id"],
            "parent": parent,
            "ts": checkpoint.get("ts"),
            "metadata": self._encode_metadata(dict(md)),
            "header": self._dump(header),
            "channels": {k: self._dump(v) for k, v in values.items()},
            "ctx": [ctx_channel, 0, 0],
        }
        with self._slock(sid):
            for attempt in range(3):
                idx = self._index(sid, thread_id, ns, mode="write")
                if idx is None:
                    self._ensure_session(sid, thread_id, ns)
                    idx = self._index(sid, thread_id, ns)
                    if idx is None:
                        continue
                if ctx_channel is not None:
                    items, idx.ser_cache = self._dump_items(listed, idx.ser_cache)
                head_seq, head_epoch, head_items = self._head(idx)
                n = len(head_items)
                epoch = head_epoch
                if n > len(items) or head_items != items[:n]:
                    epoch += 1
                msg["seq"] = head_seq + 1
                msg["fp"] = _fp_next(
                    idx.high_fp, idx.high, EV_CHECKPOINT, checkpoint["id"], self._resolver(idx)
                )
                msg["ctx"] = [ctx_channel, len(items), epoch]
                cp = Checkpoint(
                    version=CHECKPOINT_VERSION,
                    session_id=sid,
                    session_context=SessionContext(
                        owner_id=self.owner_id, origin_label=ORIGIN_LABEL
                    ),
                    sequence=head_seq + 1,
                    context=items,
                    context_epoch=epoch,
                    first_user_message=first_user,
                    metadata={
                        "langgraph": {
                            "thread_id": thread_id,
                            "checkpoint_ns": ns,
                            "checkpoint_id": checkpoint["id"],
                            "context_channel": ctx_channel,
                        }
                    },
                )
                event = TimestampedEvent(
                    recorded_at_ms=int(time.time() * 1000), event=Event(msg=msg)
                )
                try:
                    written = self.store.save_with_events(cp, events=[event])
                except ContractViolationError:
                    # Another writer moved the head: re-read it and try again.
                    idx.head = None
                    idx.ser_cache = None
                    self._forget(sid)
                    if attempt == 2:
                        raise
                    continue
                ev = written[0]
                if ev.sequence == idx.high + 1:
                    self._advance(idx, ev)
                    if idx.wids and idx.high_fp is not None:  # keep only what `pend` names
                        idx.wids = {s: idx.wids[s] for s in idx.high_fp.pend if s in idx.wids}
                else:
                    self._forget(sid)
                idx.head = (cp.sequence, epoch, items)
                break
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    # ------------------------------------------------------------- put_writes
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes: one journal commit, durable on return, never duplicated."""
        thread_id, ns = self._target(config)
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
            idx = self._index(sid, thread_id, ns, mode="cas")
            for attempt in range(_CAS_TRIES):
                if idx is None:
                    self._ensure_session(sid, thread_id, ns)
                    idx = self._index(sid, thread_id, ns)
                    if idx is None:
                        raise NotFoundError(f"session {sid!r} vanished")
                ahead = self._ahead_from(idx, checkpoint_id)
                if ahead is not None:  # its put is still to come: earlier writes are >= ahead
                    while idx.low > ahead and self._page_down(idx, ahead):
                        pass
                elif self._find(idx, checkpoint_id) is None:
                    while self._page_down(idx):  # writes for an unknown id: check them all
                        pass
                existing = idx.writes.get(checkpoint_id, {})
                entries: list[list[Any]] = []
                for i, (channel, value) in enumerate(writes):
                    wid = WRITES_IDX_MAP.get(channel, i)
                    if wid >= 0 and (task_id, wid) in existing:
                        continue
                    stored = dumped.get(i)
                    if stored is None:
                        stored = dumped[i] = self._dump(value)
                    entries.append([wid, channel, stored])
                if not entries:
                    return
                msg: dict[str, Any] = {
                    "type": EV_WRITES,
                    "n": _nonce(),
                    "id": checkpoint_id,
                    "task": task_id,
                    "path": task_path,
                    "w": entries,
                    "fp": _fp_next(
                        idx.high_fp, idx.high, EV_WRITES, checkpoint_id, self._resolver(idx)
                    ),
                }
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
                    # Another writer appended since: catch up (re-checking the event at
                    # `high`) and decide again what is stored already.
                    seen = idx.high
                    idx = self._index(sid, thread_id, ns)
                    if idx is not None and idx.high == seen:
                        # Nothing new is readable, yet the latest sequence moved (events
                        # the log does not keep): take it from a new index.
                        self._forget(sid)
                        idx = self._index(sid, thread_id, ns)
                    continue
                if ev.sequence == idx.high + 1:
                    self._advance(idx, ev)
                return

    # ------------------------------------------------------------- reads
    def _tuple(
        self,
        idx: _Index,
        put: _Put,
        context: dict[int, tuple[int, list[Any]]] | None = None,
    ) -> CheckpointTuple:
        where = f"session {idx.sid!r} checkpoint {put.id}"
        msg = put.msg
        header = self._load(msg.get("header"), where)
        if not isinstance(header, dict):
            raise CorruptionError(f"{where}: header is not a mapping")
        channels = msg.get("channels") or {}
        values: dict[str, Any] = {
            k: self._load(v, f"{where} channel {k}") for k, v in channels.items()
        }
        if put.ctx_channel is not None:  # before the writes: they may copy its items
            items = self._context_items(idx, put, context)
            values[put.ctx_channel] = self._load_list(items, f"{where} context")
        lg_cp: LGCheckpoint = {**header, "channel_values": values}  # type: ignore[typeddict-item]
        conf: RunnableConfig = {
            "configurable": {
                "thread_id": idx.thread_id,
                "checkpoint_ns": idx.ns,
                "checkpoint_id": put.id,
            }
        }
        parent_conf: RunnableConfig | None = None
        if put.parent:
            parent_conf = {
                "configurable": {
                    "thread_id": idx.thread_id,
                    "checkpoint_ns": idx.ns,
                    "checkpoint_id": put.parent,
                }
            }
        writes = idx.writes.get(put.id, {})
        ordered = sorted(writes.items(), key=lambda kv: writes_sort_key(kv[1].path, *kv[0]))
        pending: list[PendingWrite] = [
            (w.task_id, w.channel, self._load_write(w.value, f"{where} write")) for _, w in ordered
        ]
        md: CheckpointMetadata = dict(put.metadata)  # type: ignore[assignment]
        return CheckpointTuple(conf, lg_cp, md, parent_conf, pending)

    def _context_items(
        self, idx: _Index, put: _Put, cache: dict[int, tuple[int, list[Any]]] | None
    ) -> list[Any]:
        """The stored context of a put; `cache` maps epoch -> (seq, items) of a later put."""
        if put.ctx_len == 0:
            return []
        if cache is not None:
            hit = cache.get(put.epoch)
            if hit is not None and hit[0] >= put.seq and len(hit[1]) >= put.ctx_len:
                return hit[1][: put.ctx_len]
        head = idx.head
        top = idx.top
        older = idx.older
        if (
            head is None
            and top is not None
            and top[1] == put.epoch
            and top[0] >= put.seq
            and not _covers(older, put)
        ):
            # The head's context starts with this put's (same epoch): read only that
            # part of it if it is shorter (not the rest of a long context), else the
            # whole head if it is not much longer.
            pre = self._head_prefix(idx, put.ctx_len) if put.ctx_len < top[2] else None
            if pre is not None and _covers(pre, put):
                older = idx.older = pre
            elif top[2] <= _LOAD_ITEMS_PER_ITEM * put.ctx_len + _LOAD_ITEMS_FIXED:
                head = self._head(idx)
        if head is not None and head[0] == put.seq:
            items = head[2]
        elif (
            head is not None
            and head[1] == put.epoch
            and head[0] >= put.seq
            and len(head[2]) >= put.ctx_len
        ):
            # Within an epoch a later checkpoint's context extends an earlier one's
            # (the journal refuses a save that changes the prefix).
            items = head[2][: put.ctx_len]
        elif older is not None and _covers(older, put):
            items = older[2][: put.ctx_len]
        else:
            cp = self._checkpoint_at(idx.sid, put.seq)
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
        if len(items) != put.ctx_len:
            raise CorruptionError(
                f"session {idx.sid!r}: checkpoint {put.id} has {len(items)} context items,"
                f" expected {put.ctx_len}"
            )
        if cache is not None:
            cache[put.epoch] = (put.seq, items)
        return items

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by `checkpoint_id`, else the thread's newest one."""
        thread_id, ns = self._target(config)
        sid = self.session_id(thread_id, ns)
        checkpoint_id = get_checkpoint_id(config)
        with self._slock(sid), self._reading(sid):
            idx = self._index(sid, thread_id, ns)
            if idx is None:
                return None
            put: _Put | None = None
            if checkpoint_id and checkpoint_id not in idx.puts and not idx.complete:
                try:
                    return self._tuple_or_none(idx, self._fast_find(idx, checkpoint_id))
                except _NoFastPath:
                    pass
            put = self._find(idx, checkpoint_id) if checkpoint_id else self._latest(idx)
            if put is None:
                return None
            return self._tuple(idx, put)

    def _tuple_or_none(self, idx: _Index, put: _Put | None) -> CheckpointTuple | None:
        return None if put is None else self._tuple(idx, put)

    def _thread_sessions(self, thread_id: str | None) -> list[tuple[str, str, str]]:
        """(sid, thread_id, ns) of every LangGraph session (of one thread, if given)."""
        out: list[tuple[str, str, str]] = []

        def take(summaries: Iterable[SessionSummary]) -> None:
            for s in summaries:
                if s.session_context.origin_label != ORIGIN_LABEL:
                    continue
                parsed = self._parse_sid(s.session_id)
                if parsed is not None:
                    out.append((s.session_id, parsed[0], parsed[1]))

        if thread_id is not None:
            root = self.session_id(thread_id)
            summary = self.store.session_summary(root)
            take([summary] if summary is not None else [])
            return out + self._namespaces(thread_id)
        cursor = None
        while True:
            page = self.store.list_sessions_page(SessionPageRequest(cursor=cursor, limit=500))
            take(page.sessions)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        out.sort(key=lambda t: (t[1], t[2]))
        return out

    def _namespaces(self, thread_id: str) -> list[tuple[str, str, str]]:
        """(sid, thread_id, ns) of a thread's subgraph namespaces, by namespace.

        They are the sessions forked from the thread's root (what the catalog keeps
        per parent, not a walk of every session in the store) named as namespaces
        of this thread: another fork of the root (made with `Store.fork`, say) is
        not part of the thread.
        """
        out: list[tuple[str, str, str]] = []
        for s in self.store.child_sessions(self.session_id(thread_id)):
            if s.session_context.origin_label != ORIGIN_LABEL:
                continue
            parsed = self._parse_sid(s.session_id)
            if parsed is not None and parsed[0] == thread_id and parsed[1]:
                out.append((s.session_id, thread_id, parsed[1]))
        out.sort(key=lambda t: t[2])
        return out

    def _thread_targets(self, thread_id: str) -> Iterator[tuple[str, str, str]]:
        """`list`'s sessions of a thread: its root (whose index tells whether it
        exists), then its namespaces, looked up in the catalog only if a `list`
        gets past the root (one with a `limit` often does not)."""
        yield self.session_id(thread_id), thread_id, ""
        yield from self._namespaces(thread_id)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first; `before` a checkpoint, at most `limit`, metadata `filter`."""
        targets: Iterable[tuple[str, str, str]]
        checkpoint_id: str | None = None
        if config is not None:
            thread_id, _ = self._target(config)
            conf = config.get("configurable") or {}
            checkpoint_id = get_checkpoint_id(config)
            ns = conf.get("checkpoint_ns")
            if ns is None:
                targets = self._thread_targets(thread_id)
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
            sid, thread_id, ns = target
            with self._slock(sid), self._reading(sid):
                idx = self._index(sid, thread_id, ns)
                if idx is None:
                    continue
                found: _Tuples | None = None
                if before_id is not None:
                    puts = self._fast_before(idx, before_id)
                    if puts is not None:
                        try:  # the fast path yields only older puts
                            found = self._collect(
                                idx, puts, -1, before_id, checkpoint_id, filter, remaining
                            )
                        except _NoFastPath:
                            found = None
                if found is None:
                    before_seq: int | None = None
                    if before_id is not None:
                        anchor = self._find(idx, before_id)
                        before_seq = anchor.seq if anchor is not None else None
                    puts = self._iter_puts(idx, before_seq)
                    found = self._collect(
                        idx, puts, before_seq, before_id, checkpoint_id, filter, remaining
                    )
                if remaining is not None:
                    remaining -= len(found)
            yield from found

    def _collect(
        self,
        idx: _Index,
        puts: Iterator[_Put],
        before_seq: int | None,
        before_id: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> _Tuples:
        found: _Tuples = []
        cache: dict[int, tuple[int, list[Any]]] = {}
        for put in puts:
            if checkpoint_id is not None and put.id != checkpoint_id:
                continue
            if before_id is not None and before_seq is None and put.id >= before_id:
                continue
            if filter and not all(put.metadata.get(k) == v for k, v in filter.items()):
                continue
            found.append(self._tuple(idx, put, cache))
            if limit is not None and len(found) >= limit:
                break
        return found

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
                self._forget_thread(thread_id)

    def _hide(self, idx: _Index, ids: Sequence[str], reason: str) -> None:
        if not ids:
            return
        msg: dict[str, Any] = {
            "type": EV_DELETE,
            "n": _nonce(),
            "ids": [*ids],
            "reason": reason,
            "fp": _fp_next(idx.high_fp, idx.high, EV_DELETE, None, self._resolver(idx)),
        }
        ev = self.store.append_event(idx.sid, int(time.time() * 1000), Event(msg=msg))
        if ev.sequence == idx.high + 1:
            self._advance(idx, ev)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: hide all but each namespace's newest checkpoint; `delete`: delete."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"unknown prune strategy {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for sid, tid, ns in self._thread_sessions(str(thread_id)):
                with self._slock(sid):
                    idx = self._index(sid, tid, ns)
                    if idx is None:
                        continue
                    while self._page_down(idx):
                        pass
                    visible = idx.ordered()
                    self._hide(idx, [p.id for p in visible[1:]], "prune")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide every checkpoint whose metadata `run_id` is one of `run_ids` (and its writes)."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for sid, tid, ns in self._thread_sessions(None):
            with self._slock(sid):
                idx = self._index(sid, tid, ns)
                if idx is None:
                    continue
                while self._page_down(idx):
                    pass
                ids = [p.id for p in idx.ordered() if p.metadata.get("run_id") in wanted]
                self._hide(idx, ids, "delete_for_runs")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every namespace, checkpoint and write of a thread to a new thread.

        Replays the source's commits in order (same checkpoint ids, metadata and
        writes). Not atomic: after a crash the target may hold part of the copy
        (`delete_thread(target)` removes it). The target must not exist yet.
        """
        src = str(source_thread_id)
        dst = str(target_thread_id)
        if self.store.session_summary(self.session_id(dst)) is not None:
            raise ContractViolationError(f"copy_thread: target thread {dst!r} already exists")
        sessions = self._thread_sessions(src)
        sessions.sort(key=lambda t: (t[2] != "", t[2]))  # the root first
        for sid, _tid, ns in sessions:
            target = self.session_id(dst, ns)
            self._ensure_session(target, dst, ns)
            self._forget(target)
            after = 0
            seq = self.store.load(target)
            next_seq = (seq.sequence if seq is not None else 0) + 1
            # The target's own `fp` chain (the source's describes the source's log).
            top = self.store.event_page(target, EventPageRequest(limit=1))
            high = top.latest_sequence
            high_fp = _fp_of(top.events[0]) if top.events else None
            copied: dict[int, str] = {}  # target event sequence -> id of the writes copied there
            while True:
                events = self.store.events_after(sid, after, _PAGE)
                if not events:
                    break
                for ev in events:
                    after = ev.sequence
                    msg = dict(ev.event.msg)
                    kind = msg.get("type")
                    if kind not in (EV_CHECKPOINT, EV_WRITES, EV_DELETE):
                        continue
                    msg["n"] = _nonce()
                    cid = msg.get("id") if kind != EV_DELETE else None
                    msg["fp"] = _fp_next(
                        high_fp, high, str(kind), cid if isinstance(cid, str) else None, copied.get
                    )
                    if kind != EV_CHECKPOINT:
                        done = self.store.append_event(target, ev.recorded_at_ms, Event(msg=msg))
                        high, high_fp = done.sequence, _fp_of(done)
                        if kind == EV_WRITES and isinstance(cid, str):
                            copied[done.sequence] = cid
                        continue
                    cp = self.store.checkpoint_at(sid, int(msg["seq"]))
                    if cp is None:
                        raise CorruptionError(
                            f"session {sid!r}: checkpoint sequence {msg['seq']} is missing"
                        )
                    cp.session_id = target
                    cp.sequence = next_seq
                    lg = dict(cp.metadata.get("langgraph") or {})
                    lg["thread_id"] = dst
                    cp.metadata = {**cp.metadata, "langgraph": lg}
                    msg["seq"] = next_seq
                    stamped = TimestampedEvent(
                        recorded_at_ms=ev.recorded_at_ms, event=Event(msg=msg)
                    )
                    done = self.store.save_with_events(cp, events=[stamped])[0]
                    high, high_fp = done.sequence, _fp_of(done)
                    next_seq += 1

    # ------------------------------------------------------------- versions
    def get_next_version(self, current: str | None, channel: None) -> str:
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # ------------------------------------------------------------- async
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def run() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(run):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: LGCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, list(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, list(thread_ids), strategy=strategy)


# Errors of this module are journal's own.
_ = JournalError

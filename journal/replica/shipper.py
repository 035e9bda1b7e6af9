"""Shipping one session's committed log bytes into its chain of chunks.

A session's chain in the bucket (FORMAT.md section 14) is a dense sequence of
chunk objects, each written with `If-None-Match: *` into the next free slot. A
`SessionShipper` keeps where the chain ends (`next_n`) and how far the local log
is shipped (`shipped_end`, a commit boundary), and each `ship` puts the bytes
committed since as one DATA chunk per segment touched.

A slot that is taken already (a 412) is looked at before anything is concluded:
a chunk of this writer id and epoch is a sibling process's ship of the same
bytes, or this process's own PUT whose answer a timeout lost, and the shipper
moves past it; a chunk of a higher epoch is a fence (`take_over` on another
host), after which this shipper refuses every write (`FencedError`). Nothing is
decided by clocks.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from ..errors import CorruptionError, FencedError, ReplicaCorruptionError, ReplicaDivergedError
from ..layout import parse_replica_slot
from . import chunk as ck
from . import lease as leases
from .chain import get_chunk
from .objects import ObjectStore
from .tail import identity_bytes, read_tail, segment_bases

CHUNK_BYTES = 8 << 20  # a DATA chunk holds at most this much (more only for one big commit)
MERGE_SPAN = 64  # the shipper merges every 64 chunks it put itself into one object


@dataclass
class ShipContext:
    """What every shipper of one root shares."""

    objects: ObjectStore
    prefix: str
    root: str
    writer: bytes  # the root's writer id (lease.writer_id)


@dataclass
class Shipped:
    """What one `ship` did."""

    puts: int = 0
    commits: int = 0
    size: int = 0  # body bytes put
    merged: list[tuple[str, bytes]] = field(default_factory=list)  # merged objects to put


def _now_ms() -> int:
    return int(time.time() * 1000)


class SessionShipper:
    """The bucket side of one session directory, as one process writes it."""

    def __init__(self, ctx: ShipContext, directory: str, dir_name: str, session_id: str) -> None:
        self.ctx = ctx
        self.directory = directory
        self.dir_name = dir_name
        self.session_id = session_id
        self.lock = threading.Lock()  # one ship at a time: later callers find theirs shipped
        self.ready = False
        self.epoch = 0
        self.next_n = 0  # the chain's first free slot, as this shipper knows it
        self.begin_n = -1  # the slot of the current incarnation's BEGIN (-1: none yet)
        self.shipped_end = 0  # local log position shipped up to (a commit boundary)
        self.live = False  # the chain's newest incarnation is this directory's
        self.fenced = ""  # why this shipper may not write again
        self.unmerged: list[tuple[int, bytes]] = []  # (n, object) put since the last merge
        self.last_ship_ms = 0
        self.newest_shipped_ms = 0  # shipped_at_ms of the chain's newest chunk, as located

    # ------------------------------------------------------------------ keys
    def _key(self, n: int) -> str:
        return ck.chunk_key(self.ctx.prefix, self.dir_name, n)

    def _lease_key(self) -> str:
        return ck.lease_key(self.ctx.prefix, self.dir_name)

    def _get_chunk(self, n: int) -> ck.Chunk | None:
        return get_chunk(self.ctx.objects, self.ctx.prefix, self.dir_name, n)

    # ---------------------------------------------------------------- resume
    def prepare(self) -> None:
        """Claim the lease and learn where the chain ends (once; lock held)."""
        if self.fenced:
            raise FencedError(self.fenced)
        if self.ready:
            return
        self.epoch = leases.claim(
            self.ctx.objects, self._lease_key(), self.ctx.writer, self.session_id
        )
        self.locate()
        self.ready = True

    def _chain_keys_after(self, n: int) -> list[int]:
        """The slots the chain holds after slot `n` (-1: all), in order."""
        prefix = ck.chunks_prefix(self.ctx.prefix, self.dir_name)
        after = self._key(n) if n >= 0 else ""
        found: list[int] = []
        for info in self.ctx.objects.list(prefix, start_after=after):
            slot = parse_replica_slot(info.key)
            if slot is not None:
                found.append(slot)
        return found

    def locate(self) -> None:
        """Find the chain's end and this directory's place in it (the head object is
        a hint that bounds the listing; the chunks themselves decide)."""
        head = ck.read_head(self.ctx.objects, self.ctx.prefix, self.dir_name)
        hint = head.chunk if head is not None else -1
        later = self._chain_keys_after(hint)
        last = later[-1] if later else hint
        self.next_n = last + 1
        if last < 0:
            self.live, self.begin_n, self.shipped_end = False, -1, 0
            return
        # The newest chunk that is not a fence tells the incarnation's state. Chunks
        # newer than the head are few (it is written about once a second).
        begin_n = head.begin if head is not None else -1
        newest: ck.Chunk | None = None
        n = last
        while n >= 0:
            c = self._get_chunk(n)
            if c is None:
                raise ReplicaCorruptionError(
                    f"chain of session {self.session_id!r}: chunk {self._key(n)!r} is missing"
                    f" below the chain's end (slot {last})"
                )
            if c.kind == ck.KIND_BEGIN:
                begin_n = n
                newest = newest or c
                break
            if c.kind != ck.KIND_FENCE:
                newest = newest or c
                if c.kind == ck.KIND_DELETE or (n <= hint and begin_n >= 0):
                    break
            n -= 1
        if newest is not None:
            self.newest_shipped_ms = newest.shipped_at_ms
        if newest is None or newest.kind == ck.KIND_DELETE or begin_n < 0:
            self.live, self.begin_n, self.shipped_end = False, -1, 0
            return
        begin = newest if newest.kind == ck.KIND_BEGIN else self._get_chunk(begin_n)
        if begin is None or begin.kind != ck.KIND_BEGIN:
            raise ReplicaCorruptionError(
                f"chain of session {self.session_id!r}: {self._key(begin_n)!r} is not the"
                " BEGIN chunk the head object names"
            )
        if not os.path.isdir(self.directory):
            # Deleted here (a DELETE is what a shipper does with it now).
            self.live, self.begin_n, self.shipped_end = True, begin_n, -1
            return
        if begin.body != identity_bytes(self.directory):
            # The chain's live incarnation is another one: this directory is the
            # session created again; its first ship deletes that one and begins anew.
            self.live, self.begin_n, self.shipped_end = True, begin_n, -1
            return
        self.live, self.begin_n = True, begin_n
        self.shipped_end = newest.end if newest.kind == ck.KIND_DATA else 0
        if newest.kind == ck.KIND_DATA:
            self._check_local(newest)

    def _check_local(self, c: ck.Chunk) -> None:
        """The local log holds exactly the bytes of the chain's newest DATA chunk."""
        pieces = read_tail(self.directory, c.start, limit_bytes=c.end - c.start)
        local = b"".join(p.body for p in pieces)[: c.end - c.start]
        if len(local) < c.end - c.start:
            raise ReplicaDivergedError(
                f"session {self.session_id!r}: the local log's commits end before log"
                f" position {c.end}, which the bucket holds ({self._key(c.n)!r}); restore"
                " the session from the bucket (`journal restore`, or take_over)"
            )
        if local != c.body and not self._compacted(c):
            raise ReplicaDivergedError(
                f"session {self.session_id!r}: the local log differs from the bucket's"
                f" {self._key(c.n)!r} at log positions {c.start}..{c.end}"
            )

    def _compacted(self, c: ck.Chunk) -> bool:
        """Whether the local bytes differ from a shipped chunk because `compact`
        rewrote its segment: the segment is sealed (compaction seals the newest one
        first and rewrites only sealed ones), and the chunk's end is still a commit
        boundary there (compaction keeps the positions of the ends of commits)."""
        if not any(base > c.segment_base for base in segment_bases(self.directory)):
            return False
        try:
            read_tail(self.directory, c.end, limit_bytes=1)
        except CorruptionError:
            return False
        return True

    # ------------------------------------------------------------------ ship
    def ship(self) -> Shipped:
        """Put every commit made since the last ship (lock held by the caller)."""
        self.prepare()
        done = Shipped()
        if not self.live or self.shipped_end < 0:
            self._begin(done)
        while True:
            pieces = read_tail(self.directory, self.shipped_end, limit_bytes=CHUNK_BYTES)
            for piece in pieces:
                self._put_data(piece.segment_base, piece.start, piece.body, piece.commits, done)
            # Again only when the read stopped at the size limit: commits made while
            # this one PUT go with the next ship, so a busy writer still gets one PUT
            # per ship, not one per round trip.
            if sum(len(p.body) for p in pieces) < CHUNK_BYTES:
                break
        self.last_ship_ms = _now_ms()
        return done

    def _begin(self, done: Shipped) -> None:
        if self.live:  # another incarnation is the chain's live one: it was deleted
            self._put(ck.KIND_DELETE, b"", 0, 0, 0, done)
        self.begin_n = self.next_n
        # The head first: heads/ then lists every session whose chain has a BEGIN
        # (restore and `ls --replica` find sessions there, never by listing chains).
        ck.write_head(
            self.ctx.objects,
            self.ctx.prefix,
            ck.Head(
                session_id=self.session_id,
                dir=self.dir_name,
                chunk=self.next_n - 1,
                begin=self.next_n,
                end=0,
                epoch=self.epoch,
                deleted=False,
                updated_at_ms=_now_ms(),
            ),
        )
        self._put(ck.KIND_BEGIN, identity_bytes(self.directory), 0, 0, 0, done)
        self.live, self.shipped_end = True, 0

    def ship_delete(self) -> Shipped:
        """Put the DELETE chunk of a session deleted locally (lock held by the caller)."""
        done = Shipped()
        self.prepare()
        if self.live:
            self._put(ck.KIND_DELETE, b"", 0, 0, 0, done)
        self.live, self.begin_n, self.shipped_end = False, -1, 0
        return done

    def _put_data(self, base: int, start: int, body: bytes, commits: int, done: Shipped) -> None:
        self._put(ck.KIND_DATA, body, base, start, commits, done)  # moves shipped_end

    def _put(
        self, kind: int, body: bytes, base: int, start: int, commits: int, done: Shipped
    ) -> None:
        """Put one chunk into the next free slot, past slots a sibling filled."""
        while True:
            n = self.next_n
            c = ck.Chunk(
                kind=kind,
                n=n,
                epoch=self.epoch,
                segment_base=base,
                start=start,
                end=start + len(body) if kind == ck.KIND_DATA else 0,
                shipped_at_ms=_now_ms(),
                commits=commits,
                writer=self.ctx.writer,
                body=body,
            )
            data = ck.encode_chunk(c)
            if self.ctx.objects.put_if_absent(self._key(n), data):
                self.next_n = n + 1
                if kind == ck.KIND_DATA:
                    self.shipped_end = start + len(body)
                done.puts += 1
                done.commits += commits
                done.size += len(body)
                self._remember(n, data, done)
                return
            there = self._get_chunk(n)
            if there is None:
                continue  # a 412 with nothing there: the server changed its mind; retry
            self.next_n = n + 1
            if there.epoch > self.epoch:
                self.fenced = (
                    f"session {self.session_id!r}: fenced by writer {there.writer.hex()} at"
                    f" epoch {there.epoch} (chunk {self._key(n)!r}); this store's epoch is"
                    f" {self.epoch}. Its commits after log position {self.shipped_end} are"
                    " in no bucket, restore or other host"
                )
                raise FencedError(self.fenced)
            if there.writer != self.ctx.writer or there.epoch != self.epoch:
                raise ReplicaCorruptionError(
                    f"session {self.session_id!r}: slot {self._key(n)!r} holds a chunk of"
                    f" writer {there.writer.hex()} epoch {there.epoch} where this writer"
                    f" ({self.ctx.writer.hex()}, epoch {self.epoch}) holds the lease"
                )
            if there.kind == kind == ck.KIND_DATA and there.start == start:
                if there.body[: len(body)] == body:
                    self.shipped_end = there.end  # a sibling shipped all of ours, and more
                    return
                if body[: len(there.body)] != there.body:
                    raise ReplicaDivergedError(
                        f"session {self.session_id!r}: {self._key(n)!r} holds other bytes"
                        f" for log positions {there.start}..{there.end} than the local log"
                    )
                # A sibling (or our own retried PUT) shipped a prefix or all of it.
                body = body[len(there.body) :]
                start = there.end
                commits = max(0, commits - there.commits)
                self.shipped_end = start
                if not body:
                    return
                continue
            if there.kind == kind and there.body == body and kind != ck.KIND_DATA:
                return  # the same BEGIN / DELETE, put by a sibling or our lost answer
            if there.kind == ck.KIND_DATA and kind == ck.KIND_DATA:
                raise ReplicaDivergedError(
                    f"session {self.session_id!r}: {self._key(n)!r} ships log positions"
                    f" {there.start}..{there.end}, this writer is at {start}"
                )
            # A sibling moved the chain on (a DELETE or BEGIN of its own): resume.
            self.ready = False
            self.prepare()
            if kind == ck.KIND_DATA and start != self.shipped_end:
                return

    def _remember(self, n: int, data: bytes, done: Shipped) -> None:
        """Keep what this shipper put since the last merge boundary; a full span of
        MERGE_SPAN chunks becomes one merged object (put by the caller, off the
        commit's path)."""
        if self.unmerged and self.unmerged[-1][0] != n - 1:
            self.unmerged.clear()  # a gap (a sibling's chunk): this span is not ours whole
        if n % MERGE_SPAN == 0:
            self.unmerged.clear()
        self.unmerged.append((n, data))
        if len(self.unmerged) == MERGE_SPAN:
            first = self.unmerged[0][0]
            key = ck.merged_key(self.ctx.prefix, self.dir_name, first, n)
            done.merged.append((key, b"".join(d for _, d in self.unmerged)))
            self.unmerged.clear()

    # ------------------------------------------------------------- take over
    def take_over(self) -> tuple[int, int]:
        """Make this root the session's writer: raise the lease's epoch and put a FENCE
        into the chain's next slot. (epoch before, epoch now); equal when this root
        held the lease already (nothing is fenced then). Lock held by the caller."""
        before, epoch = leases.take(self.ctx.objects, self._lease_key(), self.ctx.writer)
        self.fenced = ""
        self.ready = False
        if before == epoch and before != 0:
            return before, epoch
        self.epoch = epoch
        head = ck.read_head(self.ctx.objects, self.ctx.prefix, self.dir_name)
        hint = head.chunk if head is not None else -1
        later = self._chain_keys_after(hint)
        n = (later[-1] if later else hint) + 1
        fence = ck.Chunk(
            kind=ck.KIND_FENCE,
            n=0,
            epoch=epoch,
            segment_base=0,
            start=0,
            end=0,
            shipped_at_ms=0,
            commits=0,
            writer=self.ctx.writer,
            body=b"",
        )
        # The fence goes into the first free slot. A writer that keeps writing may
        # take that slot first, again and again; so after a lost slot the fence goes
        # one slot further on, which that writer (whose slots are dense) cannot
        # reach first, and the slot between is then filled: by the writer's chunk
        # (from before the fence) or by a second fence. The chain stays dense.
        if not self._put_fence(fence, n):
            while not self._put_fence(fence, n + 2):
                n += 2  # it wrote n + 1 and n + 2 meanwhile: two slots on again
            self._put_fence(fence, n + 1)  # False: the previous writer's chunk holds it
        return before, epoch

    def _put_fence(self, fence: ck.Chunk, n: int) -> bool:
        """Put the fence into slot `n`: whether it landed (False: a chunk of the
        previous writer holds the slot); `FencedError` when a higher epoch does."""
        fence.n, fence.shipped_at_ms = n, _now_ms()
        if self.ctx.objects.put_if_absent(self._key(n), ck.encode_chunk(fence)):
            return True
        there = self._get_chunk(n)
        if there is not None and there.epoch > fence.epoch:
            raise FencedError(
                f"session {self.session_id!r}: another host took it over at epoch"
                f" {there.epoch} while this one took it at epoch {fence.epoch}"
            )
        return False

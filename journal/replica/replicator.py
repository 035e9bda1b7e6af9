"""A store's replication: its shippers, sync or async, and the background worker.

`Replicator` is what `journal.open(root, replica=...)` attaches to a `Store`. The
store calls it around its writes:

- `before_write(session_id)`: refuse a write to a session this store may not
  write any more (`FencedError`); in sync mode also claim the session's lease on
  the first write (a write to a session another host owns fails before anything
  is written).
- `committed(session_id)`: after a local commit. Sync mode ships it before the
  call returns, so a commit is acknowledged only once it is durable locally and in
  the bucket; concurrent commits share a PUT (whoever ships next ships everything
  committed so far, and the others find theirs shipped). Async mode marks the
  session and returns; the worker ships every marked session once per `lag`
  seconds, all its commits since the last ship in one PUT.
- `deleted(session_ids)`, `state_saved(scope, key)`: the same for deletes (a
  DELETE chunk in each session's chain) and middleware state (a new version).

`flush()` waits until everything committed before it is shipped and raises what
kept it from being (the store's `flush` calls it). The worker also writes each
shipped session's head object (at most about once a second per session) and the
merged objects of full spans of chunks.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ..errors import FencedError, JournalError, ReplicaError, ReplicaUnavailableError
from ..layout import dir_name, session_path, state_path
from . import chunk as ck
from .lease import writer_id
from .objects import ObjectStore, open_object_store
from .shipper import SessionShipper, ShipContext, Shipped
from .target import ReplicaTarget, parse_replica_url

ReplicaMode = Literal["sync", "async"]
HEAD_INTERVAL = 1.0  # seconds between two head objects of one session, at most
SYNC_PATIENCE = 30.0  # seconds a sync-mode commit retries an unavailable bucket


@dataclass
class SessionStatus:
    """What `status` says of one session this store ships."""

    session_id: str
    dir_name: str
    local_end: int  # the local log's committed end, as far as this store wrote it
    shipped_end: int  # the log position the bucket holds up to (-1: unknown yet)
    next_chunk: int
    epoch: int
    pending: bool  # commits wait for the next ship
    lag_seconds: float  # how long the oldest unshipped commit has waited (0: none)
    error: str  # the last failure, "" when none
    fenced: bool


class Replicator:
    """Replication of one store root to one bucket prefix."""

    def __init__(
        self,
        root: str,
        replica: str | ReplicaTarget,
        *,
        mode: ReplicaMode = "async",
        lag: float = 1.0,
        summary_of: Callable[[str], Any] | None = None,
        objects: ObjectStore | None = None,
    ) -> None:
        if mode not in ("sync", "async"):
            raise ReplicaError(f"replica_mode must be 'sync' or 'async', not {mode!r}")
        if not (0.01 <= lag <= 3600):
            raise ReplicaError(f"replica_lag must be between 0.01 and 3600 seconds, not {lag!r}")
        self.target = replica if isinstance(replica, ReplicaTarget) else parse_replica_url(replica)
        self.mode: ReplicaMode = mode
        self.lag = lag
        self.root = root
        self.summary_of = summary_of
        self.objects = objects if objects is not None else open_object_store(self.target)
        self.ctx = ShipContext(self.objects, self.target.prefix, root, writer_id(root))
        ck.ensure_marker(self.objects, self.target.prefix)
        self.shippers: dict[str, SessionShipper] = {}
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.dirty: dict[str, float] = {}  # session id -> when its oldest unshipped commit was
        self.deletes: list[str] = []  # session ids deleted locally, DELETE not yet shipped
        self.states: list[tuple[str, bytes]] = []  # state versions (key, body) to put
        self.errors: dict[str, str] = {}  # the last failure of each session, for status
        # Failures a retry does not mend (a fence, divergence, damage): a flush raises them.
        self.lasting: dict[str, JournalError] = {}
        self.heads_due: dict[str, float] = {}  # session id -> when its head was last put
        self.head_wanted: set[str] = set()
        self.merges: list[tuple[str, bytes]] = []
        self.shipping = 0  # worker rounds running now
        self.closed = False
        self.urgent = False  # a flush waits: the worker does not wait out the lag
        self.shipped_rounds = 0  # ships that succeeded (a flush waits while it grows)
        self.in_round: list[str] = []  # the sessions of the round in progress
        self.worker = threading.Thread(target=self._work, name="journal-replica", daemon=True)
        self.worker.start()

    # -------------------------------------------------------------- shippers
    def shipper(self, session_id: str) -> SessionShipper:
        with self.lock:
            found = self.shippers.get(session_id)
            if found is None:
                name = dir_name(session_id)
                found = SessionShipper(
                    self.ctx, session_path(self.root, session_id), name, session_id
                )
                self.shippers[session_id] = found
            return found

    def before_write(self, session_id: str) -> None:
        sh = self.shipper(session_id)
        if sh.fenced:
            raise FencedError(sh.fenced)
        if self.mode == "sync" and not sh.ready:
            with sh.lock:
                self._patiently(lambda: sh.prepare())

    def committed(self, session_id: str) -> None:
        if self.mode == "async":
            with self.lock:
                self.dirty.setdefault(session_id, time.monotonic())
                self.cond.notify_all()
            return
        sh = self.shipper(session_id)
        with sh.lock:
            done = self._patiently(sh.ship)
        self._after_ship(session_id, done)

    def deleted(self, session_ids: list[str]) -> None:
        if self.mode == "async":
            with self.lock:
                self.deletes.extend(session_ids)
                for sid in session_ids:
                    self.dirty.pop(sid, None)
                self.cond.notify_all()
            return
        for sid in session_ids:
            self._ship_delete(sid)

    def state_saved(self, scope: str, key: str) -> None:
        path = os.path.join(state_path(self.root, scope), dir_name(key))
        try:
            with open(path, "rb") as f:
                body = f.read()
        except FileNotFoundError:
            body = b""  # deleted with its session since: a deletion version
        except OSError as exc:
            raise ReplicaError(f"cannot read the state file {path} to ship it: {exc}") from exc
        name = ck.state_version_key(
            self.target.prefix,
            dir_name(scope),
            dir_name(key),
            int(time.time() * 1000),
            self.ctx.writer,
        )
        if self.mode == "async":
            with self.lock:
                self.states.append((name, body))
                self.cond.notify_all()
            return
        self._patiently(lambda: self.objects.put_if_absent(name, body))

    # ----------------------------------------------------------------- sync
    def _patiently(self, fn: Callable[[], Any]) -> Any:
        """`fn`, retried while the bucket is unavailable, up to SYNC_PATIENCE seconds."""
        give_up = time.monotonic() + SYNC_PATIENCE
        delay = 0.05
        while True:
            try:
                return fn()
            except ReplicaUnavailableError:
                if time.monotonic() + delay > give_up:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _ship_delete(self, session_id: str) -> None:
        sh = self.shipper(session_id)
        with sh.lock:
            if sh.fenced:
                raise FencedError(sh.fenced)
            self._patiently(sh.ship_delete)
        with self.lock:
            self.head_wanted.add(session_id)
            self.cond.notify_all()

    def _after_ship(self, session_id: str, done: Shipped) -> None:
        with self.lock:
            if done.merged:
                self.merges.extend(done.merged)
            if done.puts:
                self.head_wanted.add(session_id)
            self.cond.notify_all()

    # --------------------------------------------------------------- worker
    def _work(self) -> None:
        while True:
            with self.lock:
                while not self.closed and not self._due():
                    self.cond.wait(self.lag)
                if self.closed and not self._due():
                    return
                self.shipping += 1
                self.urgent = False
                dirty = list(self.dirty)
                self.in_round = dirty
                self.dirty.clear()
                deletes, self.deletes = self.deletes, []
                states, self.states = self.states, []
                merges, self.merges = self.merges, []
            try:
                self._round(dirty, deletes, states, merges)
            finally:
                with self.lock:
                    self.shipping -= 1
                    self.in_round = []
                    self.cond.notify_all()
            if self.mode == "async":
                with self.lock:  # commits of the next `lag` seconds share the next round
                    self.cond.wait_for(lambda: self.urgent or self.closed, timeout=self.lag)

    def _due(self) -> bool:
        return bool(self.dirty or self.deletes or self.states or self.merges or self._heads_due())

    def _heads_due(self) -> list[str]:
        now = time.monotonic()
        return [
            s
            for s in self.head_wanted
            if now - self.heads_due.get(s, 0.0) >= HEAD_INTERVAL or self.closed
        ]

    def _round(
        self,
        dirty: list[str],
        deletes: list[str],
        states: list[tuple[str, bytes]],
        merges: list[tuple[str, bytes]],
    ) -> None:
        started = time.monotonic()
        # Deletes first: a session deleted and created again since the last round
        # has its commits (the new incarnation's) in `dirty`, after its delete.
        for sid in deletes:
            self._attempt(sid, lambda sh: sh.ship_delete(), retry_at=None, delete=True)
        for sid in dirty:
            self._attempt(sid, lambda sh: sh.ship(), retry_at=started)
        for name, body in states:
            try:
                self.objects.put_if_absent(name, body)
            except JournalError as exc:
                with self.lock:
                    self.errors[name] = str(exc)
                    self.states.append((name, body))
        for name, body in merges:
            with contextlib.suppress(JournalError):
                self.objects.put_if_absent(name, body)
        with self.lock:
            heads = self._heads_due()
        for sid in heads:
            self._put_head(sid)

    def _attempt(
        self,
        session_id: str,
        fn: Callable[[SessionShipper], Shipped],
        *,
        retry_at: float | None,
        delete: bool = False,
    ) -> None:
        sh = self.shipper(session_id)
        try:
            with sh.lock:
                done = fn(sh)
        except FencedError as exc:
            with self.lock:
                self.errors[session_id] = str(exc)
                self.lasting[session_id] = exc
            return  # every later write of the session raises it (before_write)
        except JournalError as exc:
            with self.lock:
                self.errors[session_id] = str(exc)
                if not isinstance(exc, ReplicaUnavailableError):
                    self.lasting[session_id] = exc
                if delete:
                    self.deletes.append(session_id)
                else:
                    self.dirty.setdefault(session_id, retry_at or time.monotonic())
            return
        with self.lock:
            self.errors.pop(session_id, None)
            self.lasting.pop(session_id, None)
            self.shipped_rounds += 1
            self.cond.notify_all()
        self._after_ship(session_id, done)

    def _put_head(self, session_id: str) -> None:
        sh = self.shipper(session_id)
        if sh.fenced:
            with self.lock:
                self.head_wanted.discard(session_id)
            return
        summary = None
        if self.summary_of is not None and sh.live:
            with contextlib.suppress(JournalError):
                got = self.summary_of(session_id)
                summary = msgspec.to_builtins(got) if got is not None else None
        head = ck.Head(
            session_id=session_id,
            dir=sh.dir_name,
            chunk=sh.next_n - 1,
            begin=sh.begin_n,
            end=max(sh.shipped_end, 0),
            epoch=sh.epoch,
            deleted=not sh.live,
            updated_at_ms=int(time.time() * 1000),
            summary=summary,
        )
        try:
            ck.write_head(self.objects, self.target.prefix, head)
        except JournalError as exc:
            with self.lock:
                self.errors[session_id] = str(exc)
            return
        with self.lock:
            self.head_wanted.discard(session_id)
            self.heads_due[session_id] = time.monotonic()
            if session_id not in self.dirty:
                self.errors.pop(session_id, None)

    # ------------------------------------------------------------- lifecycle
    def flush(self, timeout: float = 60.0) -> None:
        """Wait until every commit, delete and state version made before the call is
        in the bucket; raise the first failure that kept one out."""
        give_up = time.monotonic() + timeout
        progress = self.shipped_rounds
        with self.lock:
            for sid in list(self.head_wanted):
                self.heads_due.pop(sid, None)  # heads too, now
            self.urgent = True
            self.cond.notify_all()
            while self.dirty or self.deletes or self.states or self.shipping or self.merges:
                if self.lasting:
                    break
                if self.shipped_rounds != progress:  # the bucket takes them: wait on
                    progress = self.shipped_rounds
                    give_up = time.monotonic() + timeout
                left = give_up - time.monotonic()
                if left <= 0:
                    last = next(iter(self.errors.values()), "")
                    raise ReplicaUnavailableError(
                        f"flush: the bucket {self.target.bucket!r} at"
                        f" {self.target.where} took nothing for {timeout:.0f} s"
                        f" ({len(self.dirty) + len(self.in_round)} sessions wait)"
                        + (f"; last error: {last}" if last else "")
                    )
                self.urgent = True
                self.cond.wait(min(left, 0.05))
            lasting = dict(self.lasting)
        for sid, exc in lasting.items():
            if isinstance(exc, FencedError):
                raise FencedError(str(exc))
            raise ReplicaError(f"replication of {sid!r} failed: {exc}")

    def close(self) -> None:
        with contextlib.suppress(JournalError):
            self.flush(timeout=10.0)
        with self.lock:
            self.closed = True
            self.cond.notify_all()
        self.worker.join(timeout=15.0)
        self.objects.close()

    def status(self) -> list[SessionStatus]:
        now = time.monotonic()
        with self.lock:
            shippers = list(self.shippers.items())
            dirty = dict(self.dirty)
            errors = dict(self.errors)
        out = []
        for sid, sh in shippers:
            since = dirty.get(sid)
            out.append(
                SessionStatus(
                    session_id=sid,
                    dir_name=sh.dir_name,
                    local_end=-1,
                    shipped_end=sh.shipped_end if sh.ready else -1,
                    next_chunk=sh.next_n,
                    epoch=sh.epoch,
                    pending=since is not None,
                    lag_seconds=now - since if since is not None else 0.0,
                    error=errors.get(sid, ""),
                    fenced=bool(sh.fenced),
                )
            )
        return out

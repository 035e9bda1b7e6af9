"""What one open session holds, and the facts about it every part needs.

`Session` is built in layers, one module each, each a subclass of the one below
it and using only what lies below:

    sessionstate  what a session holds (this module), whether it is still published
    fold          applying a commit to the head and the indexes
    catchup       adopting the caches, reading the log past them, remembering
                  damage, writing the caches again
    reads         loads and pages, answered from the head, the indexes and the log
    locking       the write lock protocol (threads, then processes) and recovery
    writes        commit, save, append, the dictionary's record
    session       opening and closing one

The log is the only source of truth. Everything else is derived from it: `Head`,
what the latest commit left behind (kept in memory and in the `snapshot` file, so
opening a session costs O(tail), not O(history)), and four `Index` files mapping
event / checkpoint / transcript / execution sequences to log positions, so pages
cost O(page).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import msgspec

from .appends import AppendQueue
from .cache import ReadCache
from .dictionary import Sampler
from .errors import (
    CorruptionError,
    NotFoundError,
)
from .eventrules import EventRules
from .index import (
    Index,
)
from .locks import FileLock
from .log import Log
from .scan import ScanState
from .sessiondir import SessionIdentity, file_key

T = TypeVar("T")


class Head(msgspec.Struct):
    """State derived from the log up to `covered` (also the snapshot's payload)."""

    covered: int = 0  # log position after the last applied commit
    anchor_pos: int = 0  # position and crc of that commit's closing record
    anchor_crc: int = 0
    sequence: int = -1  # latest checkpoint sequence; -1: no checkpoint yet
    checkpoint_pos: int = -1
    checkpoint_size: int = 0
    # latest checkpoint without its context (bytes: msgspec cannot decode `Raw | None`)
    header: bytes | None = None
    epoch: int = 0
    context: list[msgspec.Raw] = msgspec.field(default_factory=list)
    ctx_pos: int = -1  # newest checkpoint record that carries context items (this epoch)
    event_counter: int = 0
    rules: EventRules = msgspec.field(default_factory=EventRules)
    receipts: list[str] = msgspec.field(default_factory=list)
    created_at: int = 0
    updated_at: int = 0
    first_user_message: str | None = None
    transcripts: int = 0
    executions: int = 0
    commits: int = 0
    dict_pos: int = -1  # log position of the session's DICT record, or -1
    # Log position known synced when this snapshot was written (at most `covered`):
    # a log that no longer reaches it has lost committed data (FORMAT.md section 5).
    durable: int = 0
    # The session directory this snapshot was written in (`origin_of`): `durable` is
    # evidence only there, not in a copy made at another moment than its log.
    origin: int = 0
    # The highest checkpoint sequence known saved before an accepted loss (LOSS
    # records): a save must go past it. -1: none.
    sequence_floor: int = -1
    losses: list[int] = msgspec.field(default_factory=list)  # positions of LOSS records


class SessionOptions(msgspec.Struct):
    durable: bool = True
    segment_bytes: int = 64 << 20
    lock_timeout: float = 10.0
    max_record_bytes: int = 64 << 20
    snapshot_bytes: int = 1 << 20  # write a snapshot after this much new log
    index_flush_entries: int = 4096
    read_cache: ReadCache | None = None  # shared by a store's sessions
    # Train a zstd dictionary per session and compress with it (`dictionary.py`);
    # False: neither (records that use one stay readable).
    dictionary: bool = True


class Recovery(msgspec.Struct):
    """What opening for write had to drop (a torn tail), for reports."""

    path: str
    from_pos: int
    dropped_bytes: int
    detail: str


class SessionGone(NotFoundError):
    """The session this object opened was deleted (maybe created again since), or a
    pending delete dooms it: found under its lock, before anything was written.
    The store opens the id afresh and tries again."""


class KnownDamage(CorruptionError):
    """Damage a scan already found, raised again for a read that needs what lies behind it.

    A fresh exception each time: re-raising one object grows its traceback.
    """

    @classmethod
    def of(cls, damage: CorruptionError) -> KnownDamage:
        err = cls(damage.message, path=damage.path, offset=damage.offset)
        err.args = damage.args
        return err


class SessionState:
    """The attributes of a `Session` (set by `Session.__init__`), and its identity checks."""

    dir: str  # the session directory
    dir_name: str  # its name in sessions/
    id: str  # the session id
    options: SessionOptions
    durable: bool  # `options.durable`: commits are synced before they are acknowledged
    identity: SessionIdentity
    identity_path: str  # the identity file, checked on every call (`still_published`)
    # (device, inode, change time) of the identity file when opened; None: private
    _identity_key: tuple[int, int, int] | None
    origin: int  # `sessiondir.origin_of` this directory: which caches are evidence here
    log: Log
    flock: FileLock  # the writers' lock across processes
    _write_lock: threading.Lock  # the writers' lock within this process, taken first
    # Guards the head and the indexes against readers in other threads (an RLock:
    # a writer holding it applies its own commit).
    _state_lock: threading.RLock
    _private: bool  # a directory being built, not yet published: no locks, no syncs
    _writer_ready: bool  # the last `_acquire_writer` completed
    _quiet_mark: int  # flock acquisitions at our last writer's release (-1: none)
    _recovered: bool  # a writer scanned the tail strictly and cut a torn one
    recovery: Recovery | None  # what that recovery dropped, for reports
    head: Head
    indexes: dict[int, Index]
    _index_list: tuple[Index, ...]  # the same, for `after_commit` on every commit
    _receipts: set[str]  # `head.receipts`, as a set
    _dead_epoch: int | None  # an epoch whose items `compact` dropped
    _snapshot_covered: int  # `covered` of the snapshot file on disk
    _snapshot_size: int  # its size, in bytes
    # Damage a scan of the log ran into, and the end of the readable prefix before
    # it. Structures covering no more than `damage_end` lack what lies after it.
    damage: CorruptionError | None
    damage_end: int
    # (path, position) of the last unusable tail a reader classified, and the verdict
    _tail_checked: tuple[tuple[str, int], CorruptionError | None] | None
    tail_state: ScanState  # where the last scan of the log stopped, and why
    # The highest log position a cache file records as synced, and that file
    # (`_open_caches`): the log must reach it, or committed data was lost.
    durable_claim: tuple[int, str]
    sampler: Sampler  # payloads sampled for the session's dictionary
    appends: AppendQueue  # queued `append_event`s, the leader first
    _context_cache: tuple[list[msgspec.Raw], int, bytearray] | None  # `_joined_context`
    # Set by the store: hear that a private session's first commit is written, that
    # there are samples to train a dictionary on, whether a pending delete dooms it.
    on_written: Callable[[], None] | None
    on_samples: Callable[[], None] | None
    doomed: Callable[[], bool] | None
    users: int  # calls using this object now (the store's cache never closes those)
    retired: bool  # dropped from the store's cache: the last user closes it
    deleted: bool  # deleted by this process: closing it trims nothing
    closed: bool

    def still_published(self) -> bool:
        """Is the session this object opened still the one at its path?

        Not just "does the path exist": the session may have been deleted and
        created again under the same id (its directory name), by another process.
        This object's lock file and descriptors belong to the old one; writing
        through them would write into the new log from a stale position, or into
        an unlinked file. The identity file is written once per
        session, so its inode and change time identify the incarnation.
        """
        return file_key(self.identity_path) == self._identity_key

    def _check_still_published(self) -> None:
        if not self.still_published():
            raise SessionGone(f"session {self.id!r} was deleted")

"""The one exception hierarchy of `journal`.

Every failure the library reports is a `JournalError`. Subclasses name the kind
of failure so callers can branch on it; the message always says what went wrong
and where (session, file, byte offset) when that is known. Exceptions of our
dependencies (msgspec, portalocker, zstandard) and bare `OSError`s are wrapped
at the boundary and never reach the caller raw.
"""

from __future__ import annotations


class JournalError(Exception):
    """Base class of every error raised by `journal`."""


class InvalidInputError(JournalError, ValueError):
    """The caller passed a value the store cannot accept (bad id, NaN, limit 0, ...).

    Nothing was changed.
    """


class ContractViolationError(JournalError):
    """The call breaks a rule of the CheckpointStore contract.

    Examples: a checkpoint sequence that does not advance, a changed context
    prefix without a new epoch, a fork that is not clean. Nothing was changed.
    """


class NotFoundError(JournalError, LookupError):
    """A session, checkpoint or record that the call needs does not exist."""


class CorruptionError(JournalError):
    """Stored bytes fail a check (checksum, framing, identity).

    `path` and `offset` locate the damage when known. Committed data before the
    damage stays readable.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        where = ""
        if path is not None:
            where = f" (file {path}" + (f", offset {offset}" if offset is not None else "") + ")"
        super().__init__(message + where)
        self.message = message  # what is wrong, without where
        self.path = path
        self.offset = offset


class UnfinishedSessionError(NotFoundError):
    """A session directory whose log holds no complete commit.

    A new session is published with its first commit written, and that commit is
    synced before the call that creates it returns; a power loss in between can
    leave the directory without it. The store checks such a directory under its
    lock (`OpenSessions.get`): with no complete commit and no damage, the session
    does not exist (a writable store moves the directory to the trash); damage
    is reported as `CorruptionError`. `key` identifies the identity file seen.
    """

    def __init__(self, message: str, *, path: str, key: tuple[int, int, int] | None):
        super().__init__(f"{message} (directory {path})")
        self.path = path
        self.key = key


class LockTimeoutError(JournalError, TimeoutError):
    """A writer lock could not be taken in time; the message names the holder."""

    def __init__(self, message: str, *, holder: str | None = None):
        super().__init__(message)
        self.holder = holder


class SessionBusyError(LockTimeoutError):
    """A command that must be a session's only writer found another process using it
    (holding its lock, or registered as its writer); the message names the holder."""


class StorageError(JournalError, OSError):
    """The operating system refused an operation (disk full, permissions, ...).

    The message names the file and the operation; the original `OSError` is
    chained as `__cause__`.
    """


class FormatVersionError(JournalError):
    """The store or a file was written by an unsupported format version."""


__all__ = [
    "ContractViolationError",
    "CorruptionError",
    "FormatVersionError",
    "InvalidInputError",
    "JournalError",
    "LockTimeoutError",
    "NotFoundError",
    "SessionBusyError",
    "StorageError",
    "UnfinishedSessionError",
]


class ReplicaError(JournalError):
    """Replication to an object store failed (journal[s3]); the message names the
    endpoint, bucket and key when they are known."""


class ReplicaUnavailableError(ReplicaError):
    """The object store did not answer (connection refused or dropped, timeouts, 5xx)
    after the retries. A sync-mode commit that raises it is durable locally but not
    acknowledged; the next successful ship carries it."""


class ReplicaCorruptionError(ReplicaError, CorruptionError):
    """An object in the bucket fails its checks (magic, CRC, SHA-256, a gap or an
    overlap in a session's chain); the message names the key and what is wrong."""


class ReplicaDivergedError(ReplicaError):
    """The local log and the bucket disagree about bytes both hold (for example a
    local repair cut commits that were shipped, then wrote others in their place)."""


class FencedError(ReplicaError):
    """Another host took over this session (`Store.take_over`): this store may no longer
    write it. Nothing it writes after the fence reaches the bucket, a restore or the
    new writer."""

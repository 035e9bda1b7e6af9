"""A session directory on disk: building, filling and sealing one, its identity file.

A new session directory is built in private (`build`, or `build_spare` ahead of need
then `fill_spare`), gets its first commit through a private `Session`, is made
durable (`start_seal`) and only then is published by one rename
(`publish.py`). The identity file names the session and, by its inode and change
time, the directory's incarnation (`identity_key`, `origin_of`).
"""

from __future__ import annotations

import os
import struct
import zlib

import msgspec

from . import fsio
from .errors import CorruptionError, StorageError
from .layout import IDENTITY_FILE, LOCK_FILE, LOG_DIR
from .log import KIND_SESSION, Log
from .metafile import KIND_IDENTITY, META_HEADER_SIZE, encode_meta, read_meta, write_meta
from .scan import ScanState, Tail
from .segment import SEGMENT_HEADER_SIZE, segment_name

_encode = msgspec.msgpack.Encoder().encode

FORMAT_VERSION = 1
# A spare's files are laid out at these sizes, zero-filled and synced (`build_spare`):
# the first commit and the identity then overwrite allocated space, and their syncs
# flush data, not new file sizes (FORMAT.md section 9).
SPARE_SEGMENT_ZEROS = 64 << 10  # after the segment header: a writer's first preallocation
SPARE_IDENTITY_BYTES = 4096  # one block: an identity with ids of usual lengths


class SessionIdentity(msgspec.Struct):
    """The immutable identity file of a session directory."""

    session_id: str
    parent_session_id: str | None = None
    parent_sequence: int | None = None
    created_at: int = 0  # Unix seconds
    format: int = FORMAT_VERSION


_decode_identity = msgspec.msgpack.Decoder(SessionIdentity).decode


def read_identity(directory: str) -> SessionIdentity:
    """The identity file of a session directory (`CorruptionError` if missing or
    not decodable; other I/O errors as they come)."""
    path = os.path.join(directory, IDENTITY_FILE)
    try:
        raw = read_meta(path, KIND_IDENTITY)
    except FileNotFoundError as exc:
        raise CorruptionError("session identity file is missing", path=path) from exc
    try:
        return _decode_identity(raw)
    except msgspec.DecodeError as exc:
        raise CorruptionError(f"session identity does not decode: {exc}", path=path) from exc


def write_identity(directory: str, identity: SessionIdentity) -> None:
    write_meta(
        os.path.join(directory, IDENTITY_FILE), KIND_IDENTITY, _encode(identity), durable=True
    )


def build(directory: str, identity: SessionIdentity) -> None:
    """Lay out a new, empty session directory in private, without syncing anything.

    The caller writes the first commit into it, then `start_seal`s it and
    publishes it with one rename once that is done. Nothing here needs to be
    durable before `start_seal`: until the rename, a crash leaves only garbage
    in tmp/. Deferring the syncs lets the first commit's own fdatasync cover the
    segment file (3 fewer syncs per fork or new session than syncing each step).
    """
    _lay_out(directory)
    fill_spare(directory, identity)


def _lay_out(directory: str) -> None:
    """The files of a new session directory, unsynced, with an empty identity file
    (written in place later: nobody sees the directory before it is sealed)."""
    os.mkdir(directory)  # never its parents: a root replaced meanwhile stays empty
    Log.create(os.path.join(directory, LOG_DIR), KIND_SESSION, durable=False)
    for name in (IDENTITY_FILE, LOCK_FILE):
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)


def build_spare(directory: str) -> None:
    """Lay out an empty session directory ahead of need, every entry durable.

    The layout of `build` with no identity yet: log/ with its first segment
    (its header, then `SPARE_SEGMENT_ZEROS` zero bytes), LOCK, SESSION
    (`SPARE_IDENTITY_BYTES` zero bytes), each file synced and each directory
    synced after its entries. `fill_spare` later only writes the identity in
    place, so a new session's critical path creates no file, syncs no directory
    but `sessions/`, and its two file syncs persist no new file size (see
    `Publisher.stage`).
    """
    _lay_out(directory)
    log_dir = os.path.join(directory, LOG_DIR)
    segment = os.path.join(log_dir, segment_name(0))
    identity = os.path.join(directory, IDENTITY_FILE)
    for path, offset, size in (
        (segment, SEGMENT_HEADER_SIZE, SPARE_SEGMENT_ZEROS),
        (identity, 0, SPARE_IDENTITY_BYTES),
    ):
        fd = os.open(path, os.O_WRONLY)
        try:
            fsio.pwrite(fd, bytes(size), offset, path)
        finally:
            os.close(fd)
    fsio.sync_all(data_files=[segment, identity], files=[], dirs=[log_dir, directory])


def fill_spare(
    directory: str,
    identity: SessionIdentity,
    identity_fd: int = -1,
    paths: tuple[str, str] | None = None,
) -> None:
    """Make a directory from `build_spare` (or `_lay_out`) the private build of
    this session: write its identity at the start of its identity file, which
    holds zeros (or nothing) until then; bytes after the record are ignored.

    `identity_fd`: its identity file, open for reading and writing already (a
    `Spare`'s); otherwise it is opened here and closed again. `paths`: its
    identity file's and first segment's paths, if known already.
    """
    path, segment = paths or (
        os.path.join(directory, IDENTITY_FILE),
        os.path.join(directory, LOG_DIR, segment_name(0)),
    )
    # `access` and `pread`, not stats: a stat of a file about to be written makes
    # its fdatasync slower (see `Log.writer_at`); the segment's first commit and
    # this identity are both synced on the way to publishing the session.
    if not os.access(segment, os.F_OK):
        raise StorageError(f"spare session directory {directory} lacks its log")
    if identity_fd >= 0 and not os.access(path, os.F_OK):
        # the descriptor's file lost its name: the directory would lack its identity
        raise StorageError(f"spare session directory {directory} lacks its identity file")
    # Written in place into the file `_lay_out` made (no O_TRUNC: truncating even
    # an empty file cost more than the write here).
    fd = identity_fd if identity_fd >= 0 else os.open(path, os.O_RDWR)
    try:
        if os.pread(fd, META_HEADER_SIZE, 0).strip(b"\0"):
            raise StorageError(f"spare session directory {directory} has an identity already")
        fsio.pwrite(fd, encode_meta(KIND_IDENTITY, _encode(identity)), 0, path)
    finally:
        if identity_fd < 0:
            os.close(fd)


def identity_file(directory: str) -> str:
    return os.path.join(directory, IDENTITY_FILE)


def segment_files(directory: str) -> list[str]:
    """The segments of a directory being created (`build`, `build_spare`): its
    first commit is the first write to its log, which never starts a new segment."""
    return [os.path.join(directory, LOG_DIR, segment_name(0))]


def identity_key(directory: str) -> tuple[int, int, int] | None:
    """What identifies the incarnation of a session directory (see `still_published`)."""
    return file_key(os.path.join(directory, IDENTITY_FILE))


def has_commit(directory: str) -> bool:
    """Whether the log holds a complete commit, scanned as recovery scans it
    (call it holding the session's lock). Damage other than a torn tail raises
    `CorruptionError`."""
    log = open_log(directory)
    try:
        state = ScanState()
        for _ in log.committed(0, state, strict=True):
            return True
        if state.tail == Tail.CORRUPT:
            raise CorruptionError(
                f"{log.label}: {state.detail}", path=state.path, offset=state.file_offset
            )
        return False
    finally:
        log.close()


def start_seal(directory: str, *, spare: bool) -> fsio.Syncing:
    """Start making a directory from `build` or `fill_spare` durable, once its first
    commit is written (through a `private` Session, which synced nothing); it is
    published by rename only after every sync has finished (`Publisher.stage`).

    Its segment is fdatasynced; a directory from `build` also has its identity
    file, `log/` and the directory itself synced, concurrently: nothing is
    published until all are durable, so their order does not matter. Every
    directory is synced after all its entries exist: a sync of the session
    directory before `log/` exists lets a power loss leave a session without its
    log (tests/test_lost_writes.py). A spare's entries are synced when it is
    built, and its identity file's sync starts when it is written
    (`Publisher.stage`).
    """
    if spare:
        return fsio.start_sync(segment_files(directory), [], [])
    log_dir = os.path.join(directory, LOG_DIR)
    return fsio.start_sync(
        segment_files(directory),
        [identity_file(directory)],
        [log_dir, directory],
    )


def open_log(directory: str) -> Log:
    """A session directory's log, opened to read it (no writer, no read cache)."""
    return Log(
        os.path.join(directory, LOG_DIR),
        KIND_SESSION,
        segment_bytes=1 << 62,
        label=os.path.basename(directory),
    )


def origin_of(identity_key: tuple[int, int, int] | None) -> int:
    """What the caches of a session directory record as the directory they were
    written in: CRC-32 of its identity file's inode number and change time (1 when
    the CRC is 0; 0 for a directory not published yet). A copy (`cp -a`, rsync, an
    import) has a new identity file, so caches copied with it are not evidence of
    how far the copied log reached: they may have been copied at another moment."""
    if identity_key is None:
        return 0
    _, inode, ctime = identity_key
    return zlib.crc32(struct.pack("<QQ", inode, ctime & ((1 << 64) - 1))) or 1


def directory_origin(directory: str) -> int:
    """`origin_of` the session directory at `directory` (0 when it has no identity)."""
    try:
        return origin_of(file_key(os.path.join(directory, IDENTITY_FILE)))
    except StorageError:
        return 0


def file_key(path: str) -> tuple[int, int, int] | None:
    """(device, inode, change time) of a file, None if it is missing."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # not "deleted": the caller must not say so
        raise StorageError(f"cannot stat {path}: {exc.strerror}") from exc
    return (st.st_dev, st.st_ino, st.st_ctime_ns)

"""Every durability-relevant filesystem call of `journal`, in one place.

All writes to log segments, every fsync/fdatasync, every rename, truncate and
directory sync go through the module-level functions below. That makes this
module the fault-injection seam: tests replace `ops` with a recorder that keeps
what was made durable and can "lose power" (drop everything not yet synced,
tear the last write) at any step.

Errors are re-raised as `StorageError` naming the file and the operation, so no
bare `OSError` reaches a caller.
"""

from __future__ import annotations

import contextlib
import os
import queue
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from .errors import StorageError


class FileOps:
    """The real operations. Tests substitute a subclass (see tests/faults.py)."""

    # `sync_all` may run these from several threads at once. A recorder that
    # takes crash images before each operation says False and gets them one
    # at a time (a valid order of the concurrent version: see `sync_all`).
    concurrent = True

    def pwrite(self, fd: int, data: bytes, offset: int, path: str) -> None:
        written = os.pwrite(fd, data, offset)
        if written == len(data):  # the usual case: one call wrote it all
            return
        view = memoryview(data)[written:]
        offset += written
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written

    def sync_data(self, fd: int, path: str) -> None:
        _sync_data_call(fd)

    def sync_file(self, fd: int, path: str) -> None:
        os.fsync(fd)

    def sync_dir(self, path: str) -> None:
        if os.name == "nt":  # directories cannot be opened for fsync on Windows
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def truncate(self, fd: int, size: int, path: str) -> None:
        os.ftruncate(fd, size)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)


# Chosen once (it runs on every durable commit): plain fsync does not reach the
# platter on macOS; fdatasync does not exist everywhere.
_sync_data_call: Callable[[int], object]
if sys.platform == "darwin":
    import fcntl

    def _sync_data_call(fd: int) -> None:
        fcntl.fcntl(fd, fcntl.F_FULLFSYNC)

elif hasattr(os, "fdatasync"):
    _sync_data_call = os.fdatasync
else:
    _sync_data_call = os.fsync

ops: FileOps = FileOps()


@contextmanager
def _context(op: str, path: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise _failed(op, path, exc) from exc


def _failed(op: str, path: str, exc: OSError) -> StorageError:
    return StorageError(f"{op} failed on {path}: {exc.strerror or exc}")


# pwrite and sync_data run on every commit: a plain try/except, not `_context`
# (a generator-based context manager costs a few microseconds per call).
def pwrite(fd: int, data: bytes, offset: int, path: str) -> None:
    """Write all of `data` at `offset` (not yet durable)."""
    try:
        ops.pwrite(fd, data, offset, path)
    except OSError as exc:
        raise _failed("write", path, exc) from exc


def sync_data(fd: int, path: str) -> None:
    """Make the file's data (and size) durable: fdatasync, F_FULLFSYNC on macOS."""
    try:
        ops.sync_data(fd, path)
    except OSError as exc:
        raise _failed("fdatasync", path, exc) from exc


def sync_file(fd: int, path: str) -> None:
    """Make the file's data and metadata durable (fsync)."""
    with _context("fsync", path):
        ops.sync_file(fd, path)


def sync_dir(path: str) -> None:
    """Make a directory's entries durable (after create, rename, unlink)."""
    with _context("fsync of directory", path):
        ops.sync_dir(path)


def rename(src: str, dst: str) -> None:
    """Rename; fails if `dst` is a non-empty directory (used to publish directories)."""
    with _context(f"rename to {dst}", src):
        ops.rename(src, dst)


def replace(src: str, dst: str) -> None:
    """Atomically replace `dst` by `src`."""
    with _context(f"replace of {dst}", src):
        ops.replace(src, dst)


def truncate(fd: int, size: int, path: str) -> None:
    with _context(f"truncate to {size}", path):
        ops.truncate(fd, size, path)


def unlink(path: str) -> None:
    with _context("unlink", path):
        ops.unlink(path)


def is_dir(path: str) -> bool:
    """Whether `path` is a directory; unlike `os.path.isdir`, an error other than
    its absence (EIO on a lost disk, EACCES) raises `StorageError` instead of
    passing for "no such directory" (which callers turn into "no such session")."""
    try:
        return stat.S_ISDIR(ops.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise _failed("stat", path, exc) from exc


def remove_tree(path: str) -> None:
    """Remove a directory and everything in it, as far as it goes (what is left,
    a later cleanup of tmp/ or trash/ finds). shutil is imported here, when a
    tree is removed: it costs every process that imports journal 2 ms otherwise."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def sync_path(path: str, *, data_only: bool = False) -> None:
    """fsync (or fdatasync) a file that is not open here (written earlier without a sync)."""
    with _context("open", path):
        fd = os.open(path, os.O_RDONLY)
    try:
        if data_only:
            sync_data(fd, path)
        else:
            sync_file(fd, path)
    finally:
        os.close(fd)


class _Job:
    """One call for the sync threads; `done` is held until it has run."""

    __slots__ = ("args", "done", "error", "fn")

    def __init__(self, fn: Callable[..., object], args: tuple[object, ...]) -> None:
        self.fn = fn
        self.args = args
        self.error: BaseException | None = None
        self.done = threading.Lock()
        self.done.acquire()

    def wait(self) -> BaseException | None:
        """Once it has run: its failure, or None."""
        done = self.done
        done.acquire()
        done.release()
        return self.error


class _Pool:
    """A few daemon threads that run `_Job`s (the syncs of `start_sync`).

    Not a `concurrent.futures.ThreadPoolExecutor`: its submit and its futures (a
    Condition each, a semaphore per submit) run hundreds of lines of Python per
    fork on the calling thread; a job here is a lock and a queue entry, waited for
    in C. The first `size` submits each start a thread; later jobs
    wait in the queue for a free one. Daemon threads: a sync still running when the
    interpreter exits belongs to a call that has not returned.
    """

    def __init__(self, size: int) -> None:
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._size = size
        self._threads = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., object], *args: object) -> _Job:
        job = _Job(fn, args)
        if self._threads < self._size:
            with self._lock:
                if self._threads < self._size:
                    self._threads += 1
                    threading.Thread(
                        target=self._serve, name=f"journal-sync-{self._threads}", daemon=True
                    ).start()
        self._queue.put(job)
        return job

    def _serve(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            try:
                job.fn(*job.args)
            except BaseException as exc:  # the waiter raises it
                job.error = exc
            finally:
                job.done.release()


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _executor() -> _Pool:
    """A few threads for `start_sync`, made on first use."""
    pool = _pool
    if pool is not None:
        return pool
    return _new_pool()


def _new_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _Pool(4)
        return _pool


def _forget_pool_in_child() -> None:
    # A forked child inherits the pool object but not its threads (work submitted
    # to it would never run), and maybe a lock some other thread held: start over.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


class Syncing:
    """Syncs started by `start_sync`; `wait` returns once every one has finished."""

    def __init__(self, jobs: list[_Job]) -> None:
        self._jobs = jobs

    def wait_quietly(self) -> None:
        """Wait for every sync, ignoring failures (the caller is failing already)."""
        for job in self._jobs:
            job.wait()

    def wait(self) -> None:
        """Raise the first failure, after every sync has finished."""
        failures = [job.wait() for job in self._jobs]
        for failure in failures:
            if isinstance(failure, StorageError):
                raise failure
            if failure is not None:
                raise StorageError(f"sync failed: {type(failure).__name__}: {failure}") from failure


def start_sync(
    data_files: Sequence[str],
    files: Sequence[str],
    dirs: Sequence[str],
    *,
    keep_one: bool = False,
    open_data_files: Sequence[tuple[int, str]] = (),
    open_files: Sequence[tuple[int, str]] = (),
    begun: bool = False,
) -> Syncing:
    """Start making these files (fdatasync / fsync) and directories durable.

    The syncs run concurrently on a few pool threads while the caller goes on;
    `Syncing.wait` waits for them. With `keep_one`, the calling thread runs the
    first one itself before returning (it would only wait otherwise). They all
    run here, before this returns, when the file operations cannot run
    concurrently (`ops.concurrent` False: the power-loss recorder) and while the
    interpreter is exiting.

    `open_data_files` / `open_files`: (descriptor, path) of files the caller has
    open, fdatasynced / fsynced through that descriptor (nothing opened); the
    caller keeps each descriptor open until the sync has finished.

    With `begun`, return only once every pool thread has begun its sync (for a
    caller that goes on with Python code: a pool thread needs the GIL to get from
    the queue to its system call, and one that waited for a busy caller to let it
    have the GIL began its sync up to 0.5 ms late; two syncs begun apart also
    shared no journal commit). A scheduling matter only: the syncs are the same.
    """
    jobs: list[Callable[[], None]] = [
        *(lambda fd=fd, p=p: sync_data(fd, p) for fd, p in open_data_files),
        *(lambda fd=fd, p=p: sync_file(fd, p) for fd, p in open_files),
        *(lambda p=p: sync_path(p, data_only=True) for p in data_files),
        *(lambda p=p: sync_path(p) for p in files),
        *(lambda p=p: sync_dir(p) for p in dirs),
    ]
    mine = 1 if keep_one and jobs else 0
    submitted: list[_Job] = []
    gates: list[threading.Lock] = []
    if len(jobs) > mine and ops.concurrent and not sys.is_finalizing():
        try:
            pool = _executor()
            for job in jobs[mine:]:
                if begun:
                    gate = threading.Lock()
                    gate.acquire()
                    job = _opening(gate, job)
                    gates.append(gate)
                submitted.append(pool.submit(job))
        except RuntimeError:
            # "can't create new thread at interpreter shutdown": the interpreter is
            # exiting (an atexit handler, a thread outliving the main one). Do the
            # rest here.
            pass
        # Waiting releases the GIL to the pool threads (bounded: a hint, not a need;
        # with every pool thread busy it returns after 5 ms, a switch interval).
        for gate in gates[: len(submitted)]:
            gate.acquire(timeout=0.005)
    try:
        for job in [*jobs[:mine], *jobs[mine + len(submitted) :]]:
            job()
    except BaseException:
        Syncing(submitted).wait_quietly()
        raise
    return Syncing(submitted)


def _opening(gate: threading.Lock, job: Callable[[], None]) -> Callable[[], None]:
    """`job`, first opening `gate` (see `start_sync`'s `begun`): its thread then goes
    on to the system call without letting go of the GIL in between."""

    def run() -> None:
        gate.release()
        job()

    return run


def sync_dir_while(path: str, work: Callable[[], None]) -> None:
    """Sync directory `path` in this thread while `work` (Python code, no sync) runs
    in a pool thread; return once both are done. `work`'s failure is raised first,
    after the sync has finished; then the sync's.

    The other way round from `start_sync`: here the calling thread waits in the
    system call and the pool thread takes the GIL meanwhile, where a sync started
    in a pool thread begins only once that thread wakes and gets the GIL from a
    busy caller, and the caller wakes again only once it is done. With
    `ops.concurrent` False (the power-loss recorder), or while the interpreter
    exits, both run here, the sync first.
    """
    job: _Job | None = None
    if ops.concurrent and not sys.is_finalizing():
        try:
            job = _executor().submit(work)
        except RuntimeError:  # the interpreter is exiting: see `start_sync`
            job = None
    sync_failure: BaseException | None = None
    try:
        sync_dir(path)
    except BaseException as exc:
        sync_failure = exc
    failure = job.wait() if job is not None else None
    if failure is not None:
        raise failure  # its failure first, the sync's otherwise
    if sync_failure is not None:
        raise sync_failure
    if job is None:
        work()


def sync_all(data_files: Sequence[str], files: Sequence[str], dirs: Sequence[str]) -> None:
    """Make these files (fdatasync / fsync) and directories durable, concurrently.

    For parts whose order does not matter (the parts of a spare session
    directory, see `sessiondir.build_spare`): the
    syncs overlap instead of waiting for one another (a new session's four syncs
    took about as long as one or two here). Returns when all are done; raises
    the first failure after every sync has finished.
    """
    start_sync(data_files, files, dirs, keep_one=True).wait()


def write_file(path: str, data: bytes, *, durable: bool, sync_content: bool = False) -> None:
    """Create or replace `path` with `data` atomically (temp file + rename).

    With `durable`, the temp file is fsynced before the rename and the directory
    after it, so the new content survives power loss. Caches pass
    `durable=False`: a torn cache is detected by its checksum and rebuilt.
    `sync_content` without `durable` fsyncs the temp file but not the directory:
    after a power loss `path` holds the old content or the new, never an
    unsynced file that replaced a durable one (a rename can reach the disk
    before the data it names).
    """
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.tmp.{os.getpid()}.{id(data):x}"
    with _context("create", tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            pwrite(fd, data, 0, tmp)
            if durable or sync_content:
                sync_file(fd, tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)  # the write's error is the one to report
            raise
        with _context("close", tmp):
            os.close(fd)  # an error here (EIO on a lost disk) may mean lost data
        replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # nothing is left behind by a write that failed
        raise
    if durable:
        sync_dir(directory)


def create_new(path: str, data: bytes) -> bool:
    """Create `path` holding `data` durably unless it exists (False then, and nothing
    changes): written whole to a temp file, fsynced, linked to `path` (a link never
    replaces a file, so of two racing creators exactly one wins), then the directory
    is fsynced. Readers never see a partial file."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident():x}"
    with _context("create", tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            pwrite(fd, data, 0, tmp)
            sync_file(fd, tmp)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            with _context(f"link to {path}", tmp):
                os.link(tmp, path)
        except StorageError as exc:
            if isinstance(exc.__cause__, FileExistsError):
                return False
            raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    sync_dir(directory)
    return True

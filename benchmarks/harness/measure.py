"""Timing helpers: fresh directories, alternating repetitions, the floors, paging loops.

Nothing here asserts on a timing; the workloads report what these return.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import gc
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import msgspec

import journal

from .sides import Ev, Side

HERE = Path(__file__).resolve().parent.parent
T = TypeVar("T")


class Workdir:
    """A fresh directory for the whole run; every store gets its own subdirectory."""

    def __init__(self, base: Path, keep: bool) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix="run-", dir=base))
        self.keep = keep
        self._count = 0

    def fresh(self, name: str) -> Path:
        self._count += 1
        return self.path / f"{self._count:04d}-{name}"

    def cleanup(self) -> None:
        if not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def alternate(
    reps: int, names: Iterable[str], run: Callable[[str, int], float]
) -> dict[str, list[float]]:
    """`run(name, rep)` for every name, `reps` times, alternating the order (A B, B A, ...)."""
    order = list(names)
    samples: dict[str, list[float]] = {name: [] for name in order}
    for rep in range(reps):
        for name in order if rep % 2 == 0 else order[::-1]:
            gc.collect()
            samples[name].append(run(name, rep))
    return samples


def each(fn: Callable[[T], object], items: Iterable[T]) -> None:
    for item in items:
        fn(item)


def repeat(fn: Callable[[], object], n: int) -> None:
    for _ in range(n):
        fn()


def bind(sides: dict[str, Side], method: str, *args: Any) -> dict[str, Callable[[], object]]:
    """`side.method(*args)` for each side, as calls without arguments."""
    return {name: functools.partial(getattr(side, method), *args) for name, side in sides.items()}


def timed(fn: Callable[..., object], *args: Any) -> float:
    """Seconds taken by `fn(*args)`."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def floor_rate(path: Path, events: list[journal.Event], *, sync: bool, prealloc: bool) -> float:
    """Appends per second of the bare minimum: msgspec-encode one event, write it, fdatasync."""
    encode = msgspec.msgpack.encode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if prealloc:
            os.pwrite(fd, bytes(sum(len(encode(e)) for e in events) + 4096), 0)
            os.fsync(fd)
        gc.collect()
        start = time.perf_counter()
        if prealloc:
            offset = 0
            for event in events:
                data = encode(event)
                os.pwrite(fd, data, offset)
                offset += len(data)
                os.fdatasync(fd)
        else:
            for event in events:
                os.write(fd, encode(event))
                if sync:
                    os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return len(events) / elapsed


def creation_floor(root: Path, commit_bytes: int, count: int) -> float:
    """Seconds per new session of the bare durable steps that journal's creation of a
    session takes (FORMAT.md section 9), with no store and no Python work around them:
    on a spare directory prepared and synced beforehand (untimed), write an identity
    file and a first commit of `commit_bytes`, sync both (concurrently), rename the
    directory into sessions/, sync sessions/. The least a durable fork or first save
    can cost on this disk, whatever the code above it does."""
    sessions, tmp = root / "sessions", root / "tmp"
    sessions.mkdir(parents=True)
    tmp.mkdir()

    def sync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    spares = []
    for i in range(count):
        spare = tmp / f"spare-{i}"
        (spare / "log").mkdir(parents=True)
        for name in ("SESSION", "LOCK"):
            (spare / name).touch()
        with open(spare / "log" / "00000000000000000000.seg", "wb") as f:
            f.write(bytes(32))
            f.flush()
            os.fsync(f.fileno())
        sync_dir(spare / "log")
        sync_dir(spare)
        spares.append(spare)
    sync_dir(tmp)
    identity, commit = b"i" * 100, b"c" * commit_bytes
    pool = ThreadPoolExecutor(1)
    sessions_fd = os.open(sessions, os.O_RDONLY)
    try:
        gc.collect()
        start = time.perf_counter()
        for i, spare in enumerate(spares):
            ident = os.open(spare / "SESSION", os.O_WRONLY)
            segment = os.open(spare / "log" / "00000000000000000000.seg", os.O_WRONLY)
            os.pwrite(ident, identity, 0)
            os.pwrite(segment, commit, 32)
            synced = pool.submit(os.fsync, ident)
            os.fdatasync(segment)
            synced.result()
            os.rename(spare, sessions / f"s-{i}")
            os.fsync(sessions_fd)
            os.close(ident)
            os.close(segment)
        elapsed = time.perf_counter() - start
    finally:
        os.close(sessions_fd)
        pool.shutdown()
    return elapsed / count


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def page_through(
    side: Side,
    session_id: str,
    limit: int,
    seconds: float,
    after_first: Callable[[], None] | None = None,
) -> tuple[int, int, bool]:
    """Page newest to oldest until the end or `seconds`; return (pages, events, complete)."""
    deadline = time.perf_counter() + seconds
    before: int | None = None
    pages = seen = 0
    while True:
        count, before = side.event_page(session_id, before, limit)
        pages += 1
        seen += count
        if pages == 1 and after_first is not None:
            after_first()
        if before is None:
            return pages, seen, True
        if time.perf_counter() > deadline:
            return pages, seen, False


def traced_page_through(
    side: Side, session_id: str, limit: int, seconds: float
) -> tuple[int, int, bool, int, int]:
    """`page_through` under tracemalloc, adding the peak bytes of the first page (which opens
    the session) and the peak of all later pages."""
    peaks: list[int] = []

    def after_first() -> None:
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.reset_peak()

    tracemalloc.start()
    try:
        pages, seen, complete = page_through(side, session_id, limit, seconds, after_first)
        peaks.append(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    return pages, seen, complete, peaks[0], peaks[-1]


def seek_sessions(side: Side, skip: int) -> Any:
    """The cursor after the first `skip` sessions of the catalog."""
    cursor: Any = None
    seen = 0
    while seen < skip:
        count, cursor = side.list_sessions_page(cursor, min(500, skip - seen))
        seen += count
        if cursor is None:
            break
    return cursor


def run_threads(side: Side, targets: list[str], events: list[list[Ev]]) -> float:
    """Each thread appends its events to its target; seconds from the barrier to the last join."""
    barrier = threading.Barrier(len(targets) + 1)
    errors: list[BaseException] = []

    def worker(session_id: str, own: list[Ev]) -> None:
        try:
            side.append(session_id, own[0])  # warm-up (SQLite opens this thread's connection)
            barrier.wait()
            for event in own[1:]:
                side.append(session_id, event)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [
        threading.Thread(target=worker, args=(sid, own))
        for sid, own in zip(targets, events, strict=True)
    ]
    for thread in threads:
        thread.start()
    gc.collect()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def format_profile(profiler: cProfile.Profile, calls: int, top: int = 18) -> str:
    """Top functions by own time, with cumulative time, per call of the profiled operation."""
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in entries.values())
    rows = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:top]
    lines = [
        f"total {total * 1e3:.0f} ms over {calls} calls = {total / calls * 1e6:.0f} µs/call "
        "(profiler overhead included)",
        f"{'own µs/call':>11} {'own %':>6} {'cum µs/call':>11} {'ncalls':>8}  function",
    ]
    root = str(HERE.parent) + os.sep
    for (filename, line, name), (_, ncalls, tt, ct, _) in rows:
        where = filename.replace(root, "") if filename != "~" else ""
        func = f"{where}:{line}({name})" if where else name
        lines.append(
            f"{tt / calls * 1e6:>11.1f} {tt / total * 100:>5.1f}% {ct / calls * 1e6:>11.1f} "
            f"{ncalls:>8}  {func}"
        )
    return "\n".join(lines)

"""The writer's fast path: rules planned in place (undone on failure), and a lock
taken "quiet" (nobody else held it since our last commit) skipping the re-checks.

Each test here fails if the fast path trusts something it must not: rules keeping
the effects of an event that was never written, a writer taking the lock for quiet
after another process appended, trimmed or deleted, or after a delete in this
process, or after the directory was removed by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from faults import record_stats_and_writes
from helpers import delta, stamped, warning_event
from hypothesis import given, settings
from hypothesis import strategies as st

# reaches inside: the fast path's rules, lock and index reads are what these tests check
import journal
from journal import Checkpoint, Event, EventPageRequest, eventrules, fsio
from journal.eventrules import EventRules
from journal.index import Index
from journal.inspect import verify_store
from journal.layout import LOCK_FILE
from journal.locks import FileLock
from journal.session import Session

STEP = "step-1"


def _completed(step: str = STEP) -> Event:
    msg = {"type": "model_step_completed", "model_step_id": step, "outcome": "completed"}
    return Event(msg=msg)


def _rules_state(rules: EventRules) -> Any:
    """Everything `plan` depends on, key order included (eviction pops the oldest)."""
    return (
        list(rules.message_deltas.items()),
        [(k, [msgspec.structs.astuple(d) for d in v]) for k, v in rules.step_deltas.items()],
        rules.token_count,
    )


# ------------------------------------------------------------------ rules undo

_kinds = st.sampled_from(
    ["message_delta", "message", "delta", "assistant_message", "token_count", "completed", "failed"]
)
_keys = st.sampled_from(["a", "b", "c", "d", "e"])


def _event(kind: str, key: str) -> Event:
    if kind == "message_delta":
        return Event(msg={"type": "message_delta", "delta": "x"}, submission_id=key)
    if kind == "message":
        return Event(msg={"type": "message", "text": "x"}, submission_id=key)
    if kind == "delta":
        return delta("xy", key)
    if kind == "assistant_message":
        return Event(msg={"type": "assistant_message", "model_step_id": key, "content": "x"})
    if kind == "token_count":
        return Event(msg={"type": "token_count", "total": 3})
    outcome = "completed" if kind == "completed" else "failed"
    return Event(msg={"type": "model_step_completed", "model_step_id": key, "outcome": outcome})


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(st.tuples(_kinds, _keys), max_size=30),
    tried=st.lists(st.tuples(_kinds, _keys), min_size=1, max_size=12),
    keep=st.integers(0, 12),
)
def test_undo_restores_the_rules_exactly(
    before: list[tuple[str, str]], tried: list[tuple[str, str]], keep: int
) -> None:
    """Plan some events with undo records, take back all but the first `keep`: the
    rules equal those that planned only the first `keep` (eviction order included)."""
    saved = eventrules.MAX_TRACKED
    eventrules.MAX_TRACKED = 3  # evictions happen
    try:
        rules, reference = EventRules(), EventRules()
        seq = 0
        for kind, key in before:
            seq += 1
            eventrules.plan(rules, seq, seq, _event(kind, key))
            eventrules.plan(reference, seq, seq, _event(kind, key))
        changes: eventrules.Undo = []
        marks = []
        for i, (kind, key) in enumerate(tried):
            marks.append(len(changes))
            eventrules.plan(rules, seq + i + 1, seq + i + 1, _event(kind, key), changes)
            if i < keep:
                eventrules.plan(reference, seq + i + 1, seq + i + 1, _event(kind, key))
        keep = min(keep, len(tried))
        eventrules.undo(rules, changes, marks[keep] if keep < len(tried) else len(changes))
        assert _rules_state(rules) == _rules_state(reference)
        eventrules.undo(rules, changes)  # and all of it
        fresh = EventRules()
        for n, (kind, key) in enumerate(before, 1):
            eventrules.plan(fresh, n, n, _event(kind, key))
        assert _rules_state(rules) == _rules_state(fresh)
    finally:
        eventrules.MAX_TRACKED = saved


def _metrics_after(store: journal.Store, sid: str) -> list[Any]:
    done = store.append_event(sid, 10_000, _completed())
    return [msgspec.structs.asdict(m) for m in done.stream_metrics]


def test_an_append_too_large_leaves_the_rules_as_they_were(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os", max_record_bytes=2048)
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, delta("abc", STEP))
        with pytest.raises(journal.InvalidInputError):
            store.append_event("a", 2, delta("x" * 4096, STEP))  # too large: not appended
        store.append_event("a", 3, delta("de", STEP))
        metrics = _metrics_after(store, "a")
        assert [(m["chunk_count"], m["utf8_bytes"]) for m in metrics] == [(2, 5)]
    finally:
        store.close()


class _FailingWrites(fsio.FileOps):
    """Fails the next `fail` writes of records into published sessions' logs (not
    preallocation zeros, not the spare directories a background thread prepares)."""

    def __init__(self) -> None:
        self.fail = 0

    def pwrite(self, fd: int, data: bytes, offset: int, path: str) -> None:
        published = f"{os.sep}sessions{os.sep}" in path and path.endswith(".seg")
        if self.fail and published and data.strip(b"\0"):
            self.fail -= 1
            raise OSError(5, "Input/output error (injected)")
        super().pwrite(fd, data, offset, path)


@pytest.mark.parametrize("how", ["append", "save"])
def test_a_failed_write_leaves_the_rules_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    ops = _FailingWrites()
    monkeypatch.setattr(fsio, "ops", ops)
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, delta("abc", STEP))
        ops.fail = 1
        with pytest.raises(journal.StorageError):
            if how == "append":
                store.append_event("a", 2, delta("lost!", STEP))
            else:
                cp = Checkpoint.empty("a")
                cp.sequence = 1
                events = [stamped(2, delta("lost!", STEP))]
                store.save_with_events(cp, [], None, events)
        assert ops.fail == 0
        metrics = _metrics_after(store, "a")
        assert [(m["chunk_count"], m["utf8_bytes"]) for m in metrics] == [(1, 3)]
        page = store.event_page("a", EventPageRequest(limit=10))
        assert [e.sequence for e in page.events] == [2, 1]  # the failed one took no number
    finally:
        store.close()


# ------------------------------------------------------------------- the lock


def test_acquire_tells_whether_anyone_else_held_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "LOCK")
    mine, other = FileLock(path, "test"), FileLock(path, "test")
    try:
        assert mine.acquire(1) is False  # nothing of ours on file yet
        mine.release()
        assert mine.acquire(1) is True
        mine.release()
        assert other.acquire(1) is False
        other.release()
        assert mine.acquire(1) is False  # `other` held it meanwhile
        mine.release()
        line = Path(path).read_bytes()
        assert line.startswith(f"pid={os.getpid()} ".encode()) and b" lock=" in line
        assert len(line) == 160 and line.endswith(b"\n")
        assert mine.acquisitions == 3 and other.acquisitions == 1
    finally:
        mine.close()
        other.close()


def test_a_holder_line_that_cannot_be_written_is_blanked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another holder's line must not stay on file (it would tell that holder that
    nobody else held the lock); if even blanking fails, the lock is not taken."""
    path = str(tmp_path / "LOCK")
    other, mine = FileLock(path, "test"), FileLock(path, "test")
    other.acquire(1)
    other.release()
    real_pwrite, real_truncate = os.pwrite, os.ftruncate

    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    assert mine.acquire(1) is False
    mine.release()
    assert Path(path).read_bytes() == b""
    assert other.acquire(1) is False  # blank: not its line any more
    other.release()

    def failing_truncate(fd: int, size: int) -> None:
        raise OSError(5, "Input/output error (injected)")

    monkeypatch.setattr(os, "ftruncate", failing_truncate)
    with pytest.raises(journal.StorageError, match="cannot record the holder"):
        mine.acquire(1)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    monkeypatch.setattr(os, "ftruncate", real_truncate)
    assert other.try_acquire()  # the failed acquire released the lock
    other.release()
    mine.close()
    other.close()


# ------------------------------------------------- what a quiet lock must notice

_CHILD = textwrap.dedent(
    """
    import sys, journal
    from journal import Event
    root, sid, what = sys.argv[1:4]
    store = journal.open(root, durability="os")
    if what == "append":
        e = store.append_event(sid, 5, Event(msg={"type": "warning", "message": "child"}))
        print(e.sequence)
    elif what == "delete-and-recreate":
        assert store.delete_sessions([sid])
        store.save(journal.Checkpoint.empty(sid))
    store.close()
    """
)


def _child(root: Path, sid: str, what: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), sid, what],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_append_by_another_process_is_seen_by_the_next_commit(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        assert store.append_event("a", 1, warning_event("one")).sequence == 1
        assert store.append_event("a", 2, warning_event("two")).sequence == 2
        assert _child(root, "a", "append") == "3"  # and its close trims the zeros
        assert store.append_event("a", 4, warning_event("four")).sequence == 4
        assert _child(root, "a", "append") == "5"
        assert store.append_event("a", 6, warning_event("six")).sequence == 6
        page = store.event_page("a", EventPageRequest(limit=10))
        assert [e.sequence for e in page.events] == [6, 5, 4, 3, 2, 1]
        assert [e.event.msg["message"] for e in page.events[:2]] == ["six", "child"]
    finally:
        store.close()
    assert [f for _, found in verify_store(str(root)) for f in found] == []


def test_an_append_after_another_process_recreated_the_session(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, warning_event("old"))
        _child(root, "a", "delete-and-recreate")
        event = store.append_event("a", 2, warning_event("new"))
        assert event.sequence == 1  # the new session's first event
        page = store.event_page("a", EventPageRequest(limit=10))
        assert [e.event.msg["message"] for e in page.events] == ["new"]
    finally:
        store.close()
    assert [f for _, found in verify_store(str(root)) for f in found] == []


@pytest.mark.parametrize("trash_emptied", [True, False])
def test_a_delete_here_refuses_the_append_that_was_waiting_for_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trash_emptied: bool
) -> None:
    """A delete in this process locks the session through the same FileLock object,
    so the holder line cannot tell: the lock's acquisition count does. (With the
    trash emptied, the unlinked segment would tell too.)"""
    store = journal.open(tmp_path / "s", durability="os")
    if not trash_emptied:
        store.tree.empty_trash_soon = lambda: None  # type: ignore[method-assign]
    reached, gate = threading.Event(), threading.Event()
    # reaches inside: pauses the writer between taking the lock and trusting it
    original = Session._acquire_writer

    def paused(self: Session) -> None:
        if threading.current_thread().name == "appender":
            reached.set()
            gate.wait(10)
        original(self)

    outcome: list[object] = []

    def append() -> None:
        try:
            outcome.append(store.append_event("a", 2, warning_event("into the trash?")))
        except journal.JournalError as exc:
            outcome.append(exc)

    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, warning_event("one"))  # the writer is open and quiet
        monkeypatch.setattr(Session, "_acquire_writer", paused)
        appender = threading.Thread(target=append, name="appender")
        appender.start()
        assert reached.wait(10)  # pinned the cached session, about to lock it
        assert store.delete_sessions(["a"])
        gate.set()
        appender.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], journal.NotFoundError), outcome
        assert store.load("a") is None
        if not trash_emptied:
            trashed = list((tmp_path / "s" / "trash").glob("*/log/*.seg"))
            assert len(trashed) == 1 and b"into the trash?" not in trashed[0].read_bytes()
    finally:
        gate.set()
        store.close()


def test_a_session_directory_removed_by_hand_refuses_appends(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, warning_event("one"))
        shutil.rmtree(store.session_dir("a"))
        with pytest.raises(journal.NotFoundError):
            store.append_event("a", 2, warning_event("lost?"))
    finally:
        store.close()


def test_a_dead_deleters_intent_dooms_the_session_for_a_quiet_writer(tmp_path: Path) -> None:
    """A deleter that died after its intent became durable held the session's lock
    (its holder line is on file): the next writer is not quiet, finds the intent,
    finishes the delete and appends nothing."""
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, warning_event("one"))
        code = textwrap.dedent(
            """
            import os, sys, journal
            # reaches inside: a dead deleter's intent is written by hand
            from journal import tree
            store = journal.open(sys.argv[1], durability="os")
            def die(self, path, intent, **kwargs):
                os._exit(0)  # after the intent is durable, before any rename
            tree.Tree.carry_out = die
            store.delete_sessions(["a"])
            """
        )
        subprocess.run([sys.executable, "-c", code, str(root)], check=True, timeout=60)
        assert os.listdir(root / "txn")  # the orphaned intent
        lock_line = (Path(store.session_dir("a")) / LOCK_FILE).read_bytes()
        assert f"pid={os.getpid()} ".encode() not in lock_line  # the deleter's line
        with pytest.raises(journal.NotFoundError):
            store.append_event("a", 2, warning_event("doomed"))
        assert not os.path.exists(store.session_dir("a"))
        assert store.load("a") is None
    finally:
        store.close()


# ------------------------------------------------------------------ point reads


def test_a_point_read_checks_only_the_index_entries_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`events_after(s - 1, 1)` reads one flushed index entry, not a whole block of
    256 (each entry is unpacked and checked in Python: a point read cost 0.2 ms)."""
    # reaches inside: counts the index entries a point read takes

    store = journal.open(tmp_path / "s", durability="os")
    try:
        store.save(Checkpoint.empty("a"))
        events = [stamped(n, warning_event(f"e{n}")) for n in range(1, 2001)]
        cp = Checkpoint.empty("a")
        cp.sequence = 1
        store.save_with_events(cp, [], None, events)
        store.close()
        store = journal.open(tmp_path / "s", durability="os")  # the index is flushed now
        read: list[int] = []
        # reaches inside: counts the index entries a point read takes
        original = Index._read_flushed

        def counting(self: Index, lo: int, stop: int) -> list[tuple[int, int, int, int]]:
            read.append(stop - lo)
            return original(self, lo, stop)

        monkeypatch.setattr(Index, "_read_flushed", counting)
        for s in (700, 1500, 1999):
            [event] = store.events_after("a", s - 1, 1)
            assert event.sequence == s and event.event.msg["message"] == f"e{s}"
        assert read and max(read) <= 2, read
        assert [e.sequence for e in store.events_after("a", 1000, 3)] == [1001, 1002, 1003]
    finally:
        store.close()


# ------------------------------------------------------------------ quiet reads


def test_reads_after_our_own_commit_see_what_others_did_since(tmp_path: Path) -> None:
    """A read right after this process's commit skips the log's probes only while
    nobody else held the lock: each of these must still be seen."""
    root = tmp_path / "s"
    store = journal.open(root, durability="os")
    other = journal.open(root, durability="os")  # in this process, its own lock object
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, warning_event("ours"))
        assert _child(root, "a", "append") == "2"  # another process
        assert [e.sequence for e in store.events_after("a", 0, 10)] == [1, 2]
        store.append_event("a", 3, warning_event("ours again"))
        other.append_event("a", 4, warning_event("another store here"))
        assert store.event_page("a", EventPageRequest(limit=1)).events[0].sequence == 4
        store.append_event("a", 5, warning_event("and again"))
        _child(root, "a", "delete-and-recreate")
        loaded = store.load("a")
        assert loaded is not None and loaded.sequence == 0
        assert store.events_after("a", 0, 10) == []  # the new session has no events
        store.append_event("a", 6, warning_event("new incarnation"))
        shutil.rmtree(store.session_dir("a"))
        assert store.load("a") is None
        assert store.events_after("a", 0, 10) == []
    finally:
        store.close()
        other.close()


def test_a_read_after_a_delete_here_finds_nothing(tmp_path: Path) -> None:
    store = journal.open(tmp_path / "s", durability="os")
    store.tree.empty_trash_soon = lambda: None  # type: ignore[method-assign]
    try:
        store.save(Checkpoint.empty("a"))
        store.append_event("a", 1, warning_event("one"))
        assert store.delete_sessions(["a"])
        assert store.load("a") is None
        assert store.events_after("a", 0, 10) == []
    finally:
        store.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names descriptors through /proc")
def test_no_segment_is_stat_on_the_commit_and_read_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stat of a file makes its next write take a fine-grained timestamp on Linux
    6.13+ (multigrain timestamps), and that write's fdatasync then costs about
    50 us more: no segment may be stat'ed per commit or per read."""
    store = journal.open(tmp_path / "s")
    try:
        store.save(Checkpoint.empty("a"))
        for n in range(3):  # settle: recovery, the first preallocation, the catalog
            store.append_event("a", n, warning_event(f"warm {n}"))
        store.spares.wait()  # and the new session's warm-up (its recovery checks)
        stat_of: list[str] = []
        real_fstat, real_stat = os.fstat, os.stat

        def fstat(fd: int) -> os.stat_result:
            stat_of.append(os.readlink(f"/proc/self/fd/{fd}"))
            return real_fstat(fd)

        def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            stat_of.append(os.fspath(path))
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(os, "fstat", fstat)
        monkeypatch.setattr(os, "stat", stat)
        for n in range(10):
            store.append_event("a", 10 + n, warning_event(f"e{n}"))
            store.event_page("a", EventPageRequest(limit=5))
            cp = store.load("a")
            assert cp is not None
            cp.sequence += 1
            store.save(cp)
        monkeypatch.undo()
        segments = [p for p in stat_of if p.endswith(".seg") and f"{os.sep}sessions{os.sep}" in p]
        assert segments == [], segments[:5]
    finally:
        store.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names descriptors through /proc")
def test_no_file_is_stat_then_written_on_the_save_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stat of any file followed by a write to it before a save's fdatasync made
    that fdatasync about 45 us slower (Linux 6.13+): the catalog's segment, written
    by every save, must not be stat'ed either."""
    store = journal.open(tmp_path / "s")
    try:
        cp = Checkpoint.empty("a")
        store.save(cp)
        for n in range(1, 4):
            cp.sequence = n
            store.save(cp)  # settle
        store.spares.wait()  # and the new session's warm-up (its recovery checks)
        stat_of, written = record_stats_and_writes(monkeypatch)
        for n in range(4, 12):
            cp.sequence = n
            store.save(cp)
        monkeypatch.undo()
        hot = {p for p in stat_of & written if not p.endswith("LOCK")}
        assert hot == set(), hot
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_lock_inherited_through_fork_is_the_childs_own(tmp_path: Path) -> None:
    """A forked child's copy of a lock object shares the parent's open file, which
    flock does not tell apart, and the parent's token: it takes a descriptor and a
    token of its own, so parent and child exclude each other and neither takes the
    other's holder line for its own."""
    path = str(tmp_path / "LOCK")
    lock = FileLock(path, "test")
    assert lock.acquire(1) is False
    lock.release()
    assert lock.acquire(1) is True  # the parent's own line, quiet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child, while the parent holds the lock
        os.close(read)
        try:
            got = lock.try_acquire()
            quiet = lock.line_is_ours()
            os.write(write, f"{int(got)}{int(quiet)}".encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"00"  # the parent's lock excluded the child; its line is not the child's
    lock.release()
    lock.close()

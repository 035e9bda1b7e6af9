"""The catalog tells the truth about which sessions exist: under creation/delete
races between threads and processes, when its append fails after a durable
commit, after a power loss that kept its bytes but not a new session's rename,
and when deleting a parent finds children it does not list.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from faults import catalog_outlived_a_save, save_whose_catalog_append_fails
from helpers import listed_ids, listed_sequences, lock_held_elsewhere

# reaches inside: boot ids, paused deletes, failed refreshes, counted syncs and hashing
import journal
import journal.fsio as fsio
import journal.registry as jc
import journal.store as js
import journal.upkeep as ju
from journal import Checkpoint
from journal.inspect import dir_name
from journal.session import Session

N = 120


def _ids() -> list[str]:
    return [f"race-{i}" for i in range(N)]


def _check_consistent(root: Path) -> None:
    store = journal.open(root)
    try:
        listed = listed_ids(store)
        present = {sid for sid in _ids() if store.load(sid) is not None}
        assert listed == present, (
            f"listed but absent: {sorted(listed - present)};"
            f" present but unlisted: {sorted(present - listed)}"
        )
    finally:
        store.close()


_CREATOR = textwrap.dedent(
    """
    import sys, journal
    from journal import Checkpoint
    root, n = sys.argv[1], int(sys.argv[2])
    s = journal.open(root)
    for i in range(n):
        try:
            s.save(Checkpoint.empty(f"race-{i}", owner_id="o"))
        except journal.ContractViolationError:
            pass  # the other creator won
    s.close()
    """
)

_DELETER = textwrap.dedent(
    """
    import sys, time, journal
    root, n = sys.argv[1], int(sys.argv[2])
    s = journal.open(root)
    deadline = time.monotonic() + 60
    i = 0
    deleted = 0
    while i < n and time.monotonic() < deadline:
        if s.delete_sessions([f"race-{i}"]):
            deleted += 1
            i += 1
        elif s.load(f"race-{i + 1}") is not None:
            i += 1  # missed it (deleted already? created later?): move on
    s.close()
    print(deleted)
    """
)


@pytest.mark.slow
def test_first_saves_racing_deletes_across_processes_keep_the_catalog_true(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    journal.open(root).close()
    a = subprocess.Popen([sys.executable, "-c", _CREATOR, str(root), str(N)])
    d = subprocess.Popen(
        [sys.executable, "-c", _DELETER, str(root), str(N)], stdout=subprocess.PIPE, text=True
    )
    assert a.wait(120) == 0
    out, _ = d.communicate(timeout=120)
    assert d.returncode == 0
    print("deleted", out.strip())
    _check_consistent(root)


@pytest.mark.slow
def test_two_processes_creating_the_same_ids_list_each_once(tmp_path: Path) -> None:
    root = tmp_path / "s"
    journal.open(root).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", _CREATOR, str(root), str(N)]) for _ in range(2)
    ]
    for p in procs:
        assert p.wait(120) == 0
    store = journal.open(root)
    try:
        assert listed_ids(store) == set(_ids())
    finally:
        store.close()


def test_first_saves_racing_deletes_across_threads_keep_the_catalog_true(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    done = threading.Event()
    errors: list[BaseException] = []

    def create() -> None:
        try:
            for sid in _ids():
                store.save(Checkpoint.empty(sid, owner_id="o"))
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def delete() -> None:
        try:
            i = 0
            ids = _ids()
            while i < len(ids):
                gone = done.is_set() and store.load(ids[i]) is None
                if store.delete_sessions([ids[i]]) or gone:
                    i += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create), threading.Thread(target=delete)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert listed_ids(store) == {sid for sid in _ids() if store.load(sid) is not None}
    store.close()
    _check_consistent(root)


def _eventually_listed(store: journal.Store, sid: str, seconds: float = 10.0) -> bool:
    """Whether listings show `sid` within `seconds`: an entry a failed attempt could
    not re-derive is tried again about a second later."""
    deadline = time.monotonic() + seconds
    while sid not in listed_ids(store):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("recovers", ["before the next listing", "at the next open"])
def test_a_failed_catalog_append_after_a_durable_commit_is_made_good(
    tmp_path: Path, recovers: str
) -> None:
    """A save whose catalog append fails returns (the catalog is a cache): its
    commit is durable (for a first save: the session is published), and a retry of
    the same save is refused (the sequence did not advance). The listing must not
    stay behind: the next listing re-derives the entries, or, if the catalog still
    fails until close, the next open does."""
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("x", owner_id="o"))
    real = store.catalog.append

    def failing(records: object) -> None:
        raise journal.StorageError("injected: catalog append failed")

    store.catalog.append = failing  # type: ignore[method-assign]
    store.save(Checkpoint.empty("y", owner_id="o"))
    x1 = Checkpoint.empty("x", owner_id="o")
    x1.sequence = 1
    store.save(x1)
    assert store.load("y") is not None  # it exists, durably
    with pytest.raises(journal.ContractViolationError):
        store.save(Checkpoint.empty("y", owner_id="o"))  # the caller cannot redo it
    if recovers == "before the next listing":
        store.catalog.append = real  # type: ignore[method-assign]
        assert listed_sequences(store) == {"x": 1, "y": 0}
        store.close()
        assert not os.listdir(root / "procs")  # nothing left to reconcile
    else:
        store.close()  # still failing: the registration is left for the next open
        assert os.listdir(root / "procs"), "a registration to reconcile must remain"
    reopened = journal.open(root)
    try:
        assert listed_sequences(reopened) == {"x": 1, "y": 0}
    finally:
        reopened.close()


def test_a_stray_copy_of_a_child_does_not_make_a_delete_take_another_session(
    tmp_path: Path,
) -> None:
    """Unlisted directories are placed in the tree by their identity file only when
    they are that session's directory: a stray copy of an old incarnation of "kid"
    (forked from "p") must not make deleting "p" delete the live "kid", now a child
    of "q"."""
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(Checkpoint.empty("p", owner_id="o"))
        store.save(Checkpoint.empty("q", owner_id="o"))
        store.fork("p", 0, Checkpoint.empty("kid", owner_id="o"))
        old_copy = tmp_path / "kid-backup"
        shutil.copytree(store.session_dir("kid"), old_copy)
        assert store.delete_sessions(["kid"])
        store.fork("q", 0, Checkpoint.empty("kid", owner_id="o"))  # a new incarnation
        # The backup is restored next to it under another name (e.g. a restore tool
        # that appends a suffix); it is not listed (its name is no session's).
        shutil.copytree(old_copy, Path(root) / "sessions" / "kid-restored")
        assert store.delete_sessions(["p"])
        # "kid" is q's child, not p's: it must survive the delete of p.
        assert store.load("kid") is not None, "deleting p deleted q's child 'kid'"
    finally:
        store.close()


def test_a_delete_does_not_hash_every_listed_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding unlisted children compares `sessions/` with the directory names the
    catalog keeps, instead of computing every listed id's directory name on each
    delete (a cost that grows with the number of sessions)."""
    # reaches inside: counts the directory names a delete computes

    root = tmp_path / "s"
    store = journal.open(root)
    try:
        for i in range(300):
            store.save(Checkpoint.empty(f"s{i}", owner_id="o"))
        calls = 0
        real = js.dir_name

        def counting(ident: str) -> str:
            nonlocal calls
            calls += 1
            return real(ident)

        monkeypatch.setattr(js, "dir_name", counting)
        monkeypatch.setattr(ju, "dir_name", counting)
        assert store.delete_sessions(["s7"]) is True
        assert calls < 50, f"{calls} directory names computed for one delete"
        assert store.load("s7") is None and store.load("s8") is not None
    finally:
        store.close()


@pytest.mark.parametrize("boot", ["a new boot id", "no boot id"])
def test_a_catalog_entry_that_outlived_a_lost_creation_is_dropped_after_reboot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boot: str
) -> None:
    """A new session's catalog entry is appended while the sync of its rename runs:
    a power loss can keep the (unsynced) catalog bytes and lose the rename. The
    reboot is what tells: a new boot id, or, where there is none (not Linux), every
    open re-checks. Emulated: the disk as before the first save of "y", with the
    catalog as that save left it, in the same directory (same inode); the
    registration line was never synced either."""
    # reaches inside: the machine's boot id is what tells a reboot

    # Without a boot id, BOOT holds the same line before and after: only the rule
    # that every such open re-checks can drop the entry.
    before_boot = "before-the-power-loss" if boot == "a new boot id" else ""
    monkeypatch.setattr(jc, "boot_id", lambda: before_boot)
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("x", owner_id="o"))
    store.close()
    catalog_outlived_a_save(root, tmp_path, lambda s: s.save(Checkpoint.empty("y", owner_id="o")))
    after = "after-the-reboot" if boot == "a new boot id" else ""
    monkeypatch.setattr(jc, "boot_id", lambda: after)
    store = journal.open(root)
    try:
        assert store.load("y") is None
        assert listed_ids(store) == {"x"}, "a session that does not exist is listed"
    finally:
        store.close()


def test_without_a_boot_id_every_open_counts_as_after_a_reboot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a boot id, the BOOT line written by one open matches the next; without
    one (not Linux) a reboot cannot be told from a restart, so every open re-checks
    (by that rule, not by a BOOT line that never matches)."""

    root = tmp_path / "s"
    monkeypatch.setattr(jc, "boot_id", lambda: "stable")
    journal.open(root).close()
    catalog_dir = str(root / "catalog")
    assert jc.check_boot(catalog_dir, str(root)) == (False, None)
    assert (root / "catalog" / "BOOT").read_text() == jc.machine_and_place(str(root)).strip()
    monkeypatch.setattr(jc, "boot_id", lambda: "")
    changed, line = jc.check_boot(catalog_dir, str(root))
    assert changed is True and line is not None  # the line changed
    jc.record_boot(catalog_dir, line)
    assert jc.check_boot(catalog_dir, str(root)) == (True, None)  # and stays "changed"
    assert (root / "catalog" / "BOOT").read_text() == jc.machine_and_place(str(root)).strip()


# reaches inside: the child pauses inside its delete, after the intent
_SLOW_DELETER = textwrap.dedent(
    """
    import sys, time, journal
    import journal.tree as jt
    root, flag = sys.argv[1], sys.argv[2]
    real = jt.Tree.carry_out

    def carry_out(self, path, intent, **kwargs):
        real(self, path, intent, **kwargs)  # dirs in trash/, intent removed: delete complete
        open(flag, "w").close()        # ... but the catalog's OP_DELETE is not appended yet
        time.sleep(3)                  # a descheduled / slow process (page fault, fsync, GIL)

    jt.Tree.carry_out = carry_out
    s = journal.open(root)
    assert s.delete_sessions(["kid"])
    s.close()
    """
)


def test_a_completed_delete_is_never_listed(tmp_path: Path) -> None:
    """Once a delete is complete (directories in the trash, intent retired), no
    other process lists the deleted sessions: the catalog's delete records come
    before the intent is retired, so child_sessions and list_sessions_page never
    list a child that load reports absent."""
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("p", owner_id="o"))
    store.fork("p", 0, Checkpoint.empty("kid", owner_id="o"))
    flag = tmp_path / "in-window"
    deleter = subprocess.Popen([sys.executable, "-c", _SLOW_DELETER, str(root), str(flag)])
    try:
        deadline = time.monotonic() + 30
        while not flag.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert store.load("kid") is None  # the delete is visible to readers
        assert not os.path.isdir(store.session_dir("kid"))
        kids = [k.session_id for k in store.child_sessions("p")]
        listed = listed_ids(store)
        assert kids == [] and "kid" not in listed, (
            f"a deleted session is still listed: child_sessions={kids}, listed={sorted(listed)}"
        )
    finally:
        assert deleter.wait(30) == 0
        store.close()


def test_a_save_whose_catalog_append_fails_is_still_made_durable(tmp_path: Path) -> None:
    """A save whose catalog append fails raises, but its commit, already visible
    (and a retry refused), is made durable first: the exception does not skip the
    fdatasync."""
    root = tmp_path / "s"
    store = journal.open(root)  # durability="fsync"
    try:
        store.save(Checkpoint.empty("x", owner_id="o"))
        synced: list[str] = []
        # reaches inside: records the syncs a failing catalog append leaves done

        real_sync = fsio.sync_data

        def spy(fd: int, path: str) -> None:
            synced.append(path)
            real_sync(fd, path)

        fsio.sync_data = spy  # type: ignore[assignment]

        x1 = Checkpoint.empty("x", owner_id="o")
        x1.sequence = 1
        try:
            save_whose_catalog_append_fails(store, x1)
        finally:
            fsio.sync_data = real_sync  # type: ignore[assignment]
        loaded = store.load("x")
        assert loaded is not None and loaded.sequence == 1  # visible, retry impossible
        sess = store.open_sessions.peek("x")
        assert sess is not None
        w = sess.log._writer  # reaches inside: how far the writer synced is its own
        assert w is not None
        assert w.synced_end >= w.data_end, (
            f"commit visible but not durable: synced_end={w.synced_end} < data_end={w.data_end};"
            f" fdatasync calls during the save: {synced}"
        )
    finally:
        store.close()


def test_a_concurrent_listing_waits_for_a_session_being_reannounced(tmp_path: Path) -> None:
    """A listing that starts while another thread is re-deriving a missing entry
    waits for it instead of missing the session."""
    root = tmp_path / "s"
    store = journal.open(root)
    try:
        store.save(Checkpoint.empty("x", owner_id="o"))

        save_whose_catalog_append_fails(store, Checkpoint.empty("y", owner_id="o"))
        # reaches inside: the throttle's clock, to leave dead-process probes out
        store.upkeep._last_reconcile = time.monotonic() + 3600

        entered, release = threading.Event(), threading.Event()
        real = store.upkeep.reconcile

        def slow(names: list[str]) -> set[str]:
            if dir_name("y") in names:
                entered.set()
                release.wait(10)
            return real(names)

        store.upkeep.reconcile = slow  # type: ignore[method-assign]
        first: list[set[str]] = []
        second: list[set[str]] = []
        t = threading.Thread(target=lambda: first.append(listed_ids(store)))
        t.start()
        assert entered.wait(10)
        u = threading.Thread(target=lambda: second.append(listed_ids(store)))
        u.start()
        u.join(0.2)  # it must wait for the first, not list without "y"
        release.set()
        t.join(10)
        u.join(10)
        assert first == [{"x", "y"}]
        assert second == [{"x", "y"}], f"second listing: {second}"
    finally:
        store.close()


# --------------------------------------------------------------------------- 4
def test_a_transient_error_while_reannouncing_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One transient error (EMFILE) while re-deriving a missing entry keeps it
    for the next try, and the next open: it is not dropped for good."""

    monkeypatch.setattr(jc, "boot_id", lambda: "same-boot")
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("x", owner_id="o"))

    save_whose_catalog_append_fails(store, Checkpoint.empty("y", owner_id="o"))

    real_refresh = Session.refresh
    failures = [1]

    def flaky(self: Session, *a: object, **k: object) -> object:
        if self.id == "y" and failures:
            failures.pop()
            raise journal.StorageError("injected: EMFILE once") from OSError(
                errno.EMFILE, "Too many open files"
            )
        return real_refresh(self, *a, **k)

    monkeypatch.setattr(Session, "refresh", flaky)
    listed_ids(store)  # may miss y (transient), but must try again next time
    monkeypatch.setattr(Session, "refresh", real_refresh)
    try:
        assert _eventually_listed(store, "y"), "y no longer kept for later after one failure"
    finally:
        store.close()
        reopened = journal.open(root)
        try:
            assert reopened.load("y") is not None
            assert listed_ids(reopened) == {"x", "y"}, "y exists but no open lists it again"
        finally:
            reopened.close()


def test_listings_still_answer_while_the_catalog_cannot_be_written(tmp_path: Path) -> None:
    """While the catalog cannot be written (another process holds its lock past
    lock_timeout), listing calls still answer from the catalog as it is; the
    missing entry is re-derived later; no listing raises."""
    root = tmp_path / "s"
    store = journal.open(root, lock_timeout=0.3)
    store.save(Checkpoint.empty("p", owner_id="o"))
    store.fork("p", 0, Checkpoint.empty("kid", owner_id="o"))
    try:
        with lock_held_elsewhere(root / "catalog" / "LOCK"):
            # Committed; its catalog append timed out: the save returns all the same.
            store.save(Checkpoint.empty("y", owner_id="o"))
            errors = []
            for name, call in [
                ("list_sessions_page", lambda: listed_ids(store)),
                ("child_sessions", lambda: store.child_sessions("p")),
                ("recent_executions", lambda: store.recent_executions(5)),
            ]:
                try:
                    call()
                except journal.JournalError as exc:
                    errors.append(f"{name}: {type(exc).__name__}")
            assert not errors, f"read-only listing calls now fail: {errors}"
        assert _eventually_listed(store, "y")  # re-derived once the catalog works
        assert listed_ids(store) == {"p", "kid", "y"}
    finally:
        store.close()


_FORKER = textwrap.dedent(
    """
    import sys, journal
    from journal import Checkpoint
    s = journal.open(sys.argv[1])
    for i in range(int(sys.argv[2])):
        s.fork("p", 0, Checkpoint.empty(f"kid-{i}", owner_id="o"))
        print(i, flush=True)
        sys.stdin.readline()
    s.close()
    """
)


@pytest.mark.parametrize("read_only", [False, True])
def test_child_sessions_sees_a_fork_another_process_just_made(
    tmp_path: Path, read_only: bool
) -> None:
    """Once another process's fork returned, child_sessions here lists it, in a
    writable or a read-only store."""
    root = tmp_path / "s"
    with journal.open(root) as s:
        s.save(Checkpoint.empty("p", owner_id="o"))
    store = journal.open(root, read_only=read_only)
    n = 30
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORKER, str(root), str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for i in range(n):
            assert int(proc.stdout.readline()) == i
            kids = {k.session_id for k in store.child_sessions("p")}
            assert kids == {f"kid-{j}" for j in range(i + 1)}
            proc.stdin.write("\n")
            proc.stdin.flush()
    finally:
        proc.wait(30)
        store.close()


def test_an_open_succeeds_while_the_catalog_is_busy_with_a_kept_registration(
    tmp_path: Path,
) -> None:
    """A registration kept at close (a catalog entry still missing) does not make
    the next open fail while the catalog lock is busy: it stays for later."""
    root = tmp_path / "s"
    store = journal.open(root, lock_timeout=0.3)
    store.save(Checkpoint.empty("p", owner_id="o"))
    with lock_held_elsewhere(root / "catalog" / "LOCK"):
        store.save(Checkpoint.empty("y", owner_id="o"))  # its catalog append timed out
        store.close()
        assert os.listdir(root / "procs")
        try:
            other = journal.open(root, lock_timeout=0.3)
        except journal.JournalError as exc:
            pytest.fail(f"journal.open failed: {type(exc).__name__}: {exc}")
        other.close()
    reopened = journal.open(root)  # the catalog works again: the kept file is reconciled
    try:
        assert listed_ids(reopened) == {"p", "y"}
        assert not os.listdir(root / "procs")
    finally:
        reopened.close()

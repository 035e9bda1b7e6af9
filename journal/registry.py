"""Who writes the store, and on which boot: what tells the catalog it may be wrong.

`ProcessRegistry` keeps `ROOT/procs/<token>` locked while a Store that writes
lives, listing the session directories it wrote: a registration whose lock is
free belongs to a dead process, whose sessions are re-derived (upkeep.py).
`check_boot` / `record_boot` keep `catalog/BOOT`: a changed boot id or store
directory (a reboot, a copy) calls for re-checking every session.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid

from . import fsio
from .errors import JournalError, StorageError
from .layout import BOOT_FILE, PROCS_DIR
from .locks import FileLock
from .rootcheck import mkdir_below


class ProcessRegistry:
    """`ROOT/procs/<token>`: held locked while this Store lives; lists sessions it wrote."""

    def __init__(self, root: str):
        self.dir = os.path.join(root, PROCS_DIR)
        if mkdir_below(self.dir):
            fsio.sync_dir(root)  # its entry durable before a registration relies on it
        self._pid = os.getpid()
        self.path = os.path.join(self.dir, f"{self._pid}-{uuid.uuid4().hex[:12]}")
        self._lock = FileLock(self.path, "process registration")
        self._fd: int | None = None
        self._noted: set[str] = set()
        self._mutex = threading.Lock()

    def note(self, session_dir_name: str) -> None:
        """Record (once) that this process writes to a session, before its first write."""
        if session_dir_name in self._noted:
            return
        with self._mutex:
            if session_dir_name in self._noted:
                return
            if self._fd is None:
                self._register()
            assert self._fd is not None
            os.write(self._fd, session_dir_name.encode() + b"\n")
            self._noted.add(session_dir_name)

    def _register(self) -> None:
        """Publish the registration file already locked.

        Created under its final name and locked afterwards, it could be found
        unlocked in between by another process, taken for a dead process's,
        reconciled and removed: later notes would go to a deleted file, and a
        crash of this process would then leave its sessions unreconciled. So the
        file is created and locked under a hidden temporary name (which probes
        skip) and renamed into place with the lock held.
        """
        tmp = os.path.join(self.dir, f".{os.path.basename(self.path)}.tmp")
        lock = FileLock(tmp, "process registration")
        if not lock.try_acquire():
            lock.close()
            raise StorageError(f"cannot lock new process registration {tmp}")
        try:
            fsio.rename(tmp, self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            lock.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        lock.path = self.path
        self._lock.close()
        self._lock = lock

    def dead_registrations(self) -> list[tuple[str, list[str]]]:
        """(path, session dir names) of registrations whose process is gone."""
        out = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        for name in names:
            path = os.path.join(self.dir, name)
            if path == self.path:
                continue
            if name.startswith("."):
                self._remove_abandoned(path)
                continue
            lock = FileLock(path, "process registration")
            try:
                if not lock.try_acquire():
                    continue
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
                sessions = [ln.strip() for ln in text.splitlines() if ln.strip()]
                out.append((path, sessions))
            except OSError:
                continue
            finally:
                lock.close()
        return out

    @staticmethod
    def _remove_abandoned(path: str) -> None:
        """A temporary registration of a process that died before publishing it.

        Only old ones are touched: a young one may be in the middle of being
        published, and taking its lock then would make that registration fail.
        """
        try:
            if time.time() - os.stat(path).st_mtime < 60:
                return
        except OSError:
            return
        lock = FileLock(path, "process registration")
        try:
            if lock.try_acquire():
                with contextlib.suppress(OSError):
                    os.unlink(path)
        except JournalError:
            pass
        finally:
            lock.close()

    def forget(self, path: str) -> None:
        with contextlib.suppress(JournalError):
            fsio.unlink(path)

    def close(self, *, keep: bool = False) -> None:
        """Release the registration; `keep` leaves the file for the next open to
        reconcile, as a dead process's (some catalog entries may be missing)."""
        registered = self._fd is not None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        # A clean exit leaves nothing to reconcile: remove the file while still
        # holding its lock, so no probe takes it for a dead process's meanwhile.
        # Not from a forked child closing a store it inherited: the registration
        # is the parent's (found by review).
        if registered and not keep and os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self._lock.close()


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def machine_and_place(root: str, boot: str | None = None) -> str:
    """The boot id (`boot`, else read now) and the store directory's identity
    (device and inode), as one line."""
    try:
        st = os.stat(root)
        place = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        place = ""
    return f"{boot_id() if boot is None else boot} {place}"


def check_boot(catalog_dir: str, root: str) -> tuple[bool, str | None]:
    """(changed, line): whether the catalog may disagree with the sessions
    wholesale, and the BOOT line to record once the re-check that calls for is
    done (`record_boot`; None when BOOT holds it already).

    Changed after a reboot (unsynced catalog records may have been lost, or have
    outlived the session bytes they describe) and when the store directory is
    not the one the catalog was last used in: a copy (`cp -a`) or a restored
    backup, whose catalog was copied at another moment than its sessions. Both
    call for re-checking every session. Without a boot id (no
    /proc/sys/kernel/random/boot_id: not Linux) a reboot cannot be told from a
    restart, so every open counts as one: slower opens, but a power loss is never
    mistaken for a clean restart. A missing BOOT counts as changed too.
    """
    boot = boot_id()
    current = machine_and_place(root, boot).strip()
    try:
        with open(os.path.join(catalog_dir, BOOT_FILE)) as f:
            seen: str | None = f.read().strip()
    except FileNotFoundError:
        seen = None
    # No BOOT beside a catalog: it was never made durable (it is written without a
    # sync), so a power loss may have passed since: re-check, as after a reboot.
    changed = seen != current or not boot
    return changed, None if seen == current else current


def record_boot(catalog_dir: str, line: str) -> None:
    """Remember this boot and place (the line `check_boot` gave)."""
    fsio.write_file(os.path.join(catalog_dir, BOOT_FILE), line.encode(), durable=False)

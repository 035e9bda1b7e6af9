"""`journal replicate`: ship a store that other processes write, from beside it.

Like litestream beside an application: the sidecar never takes a writer lock and
never opens a session for writing. Every `interval` seconds it looks at each
session directory's newest segment (one `listdir` of `log/` and one `stat`), and
ships a session whose segment changed from where its chain in the bucket ends:
only the bytes after the shipped end are read, never the whole log again. A
session directory that is gone on two looks in a row was deleted (a DELETE chunk
goes into its chain); a state file whose size or mtime changed is shipped as a
new version. On start it knows nothing: each shipper learns from the bucket where
its chain ends (shipper.py), so a restarted sidecar goes on where the bucket is.

The writer id is the root's (`ROOT/replica.id`), so a store opened with
`replica=` on the same root and this sidecar are siblings, not rivals.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CorruptionError, JournalError
from ..layout import IDENTITY_FILE, LOG_DIR, SESSIONS_DIR, STATE_DIR
from ..sessiondir import read_identity
from ..state import read_value
from .chunk import lease_key, read_head
from .lease import read_lease
from .replicator import Replicator
from .restore import bucket_sessions
from .target import ReplicaTarget

Stamp = tuple[str, int, int]  # newest segment's name, size, mtime_ns


@dataclass
class FollowReport:
    """What one look found and shipped."""

    sessions: int = 0
    changed: int = 0
    deleted: int = 0
    states: int = 0


class Follower:
    """Follows one root's sessions and state into one replica."""

    def __init__(
        self,
        root: str,
        replica: str | ReplicaTarget,
        *,
        interval: float = 1.0,
        summary_of: Callable[[str], object] | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        self.interval = interval
        self.replica = Replicator(
            self.root, replica, mode="async", lag=interval, summary_of=summary_of
        )
        self.seen: dict[str, Stamp] = {}  # session dir -> stamp shipped
        self.ids: dict[str, str] = {}  # session dir -> session id
        self.missing: set[str] = set()  # dirs gone on the last look
        self.state_seen: dict[str, tuple[int, int]] = {}  # state file path -> size, mtime
        self.stop = threading.Event()
        self._adopt_bucket_sessions()

    def _adopt_bucket_sessions(self) -> None:
        """Sessions the bucket holds live, written by this root, count as seen: one
        deleted while no sidecar ran is then found gone and its DELETE shipped.
        Sessions other roots write (the handoff case) are never touched."""
        ctx = self.replica.ctx
        for name, sid in bucket_sessions(ctx.objects, ctx.prefix).items():
            head = read_head(ctx.objects, ctx.prefix, name)
            if head is None or head.deleted:
                continue
            found = read_lease(ctx.objects, lease_key(ctx.prefix, name))
            if found is not None and found[0].owner == ctx.writer.hex():
                self.seen[name] = ("", -1, -1)
                self.ids[name] = sid

    def look(self) -> FollowReport:
        """One pass over the root: mark what changed for the replicator's worker."""
        report = FollowReport()
        sessions = os.path.join(self.root, SESSIONS_DIR)
        try:
            names = set(os.listdir(sessions))
        except FileNotFoundError:
            names = set()
        for name in sorted(names):
            stamp = _stamp(os.path.join(sessions, name))
            if stamp is None:
                continue
            report.sessions += 1
            self.missing.discard(name)
            if self.seen.get(name) == stamp:
                continue
            sid = self.ids.get(name) or _session_id(os.path.join(sessions, name))
            if sid is None:
                continue
            self.ids[name] = sid
            self.seen[name] = stamp
            self.replica.committed(sid)
            report.changed += 1
        gone = [n for n in self.seen if n not in names]
        confirmed = [n for n in gone if n in self.missing]
        self.missing = set(gone)
        if confirmed:
            self.replica.deleted([self.ids[n] for n in confirmed if n in self.ids])
            for n in confirmed:
                self.seen.pop(n, None)
                self.ids.pop(n, None)
            report.deleted = len(confirmed)
        report.states = self._look_at_state()
        return report

    def _look_at_state(self) -> int:
        state = os.path.join(self.root, STATE_DIR)
        shipped = 0
        try:
            scopes = os.listdir(state)
        except FileNotFoundError:
            return 0
        for scope_dir in scopes:
            directory = os.path.join(state, scope_dir)
            try:
                keys = os.listdir(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for key_name in keys:
                if ".tmp." in key_name:
                    continue
                path = os.path.join(directory, key_name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                mark = (st.st_size, st.st_mtime_ns)
                if self.state_seen.get(path) == mark:
                    continue
                try:
                    item = read_value(path)
                except (JournalError, OSError, ValueError):
                    continue  # being replaced now: the next look ships it
                self.state_seen[path] = mark
                self.replica.state_saved(item.scope, item.key)
                shipped += 1
        return shipped

    def run(
        self, *, once: bool = False, on_look: Callable[[FollowReport], None] | None = None
    ) -> None:
        """Look every `interval` seconds until `stop` is set (or once, then flush)."""
        while not self.stop.is_set():
            report = self.look()
            if on_look is not None:
                on_look(report)
            if once:
                if self.missing:  # gone once: look again, so its delete ships now
                    self.stop.wait(min(self.interval, 0.5))
                    self.look()
                self.replica.flush()
                return
            self.stop.wait(self.interval)

    def close(self) -> None:
        self.stop.set()
        self.replica.close()


def _stamp(directory: str) -> Stamp | None:
    """The newest segment's (name, size, mtime_ns); None for what is no session."""
    try:
        segments = sorted(
            n for n in os.listdir(os.path.join(directory, LOG_DIR)) if n.endswith(".seg")
        )
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not segments:
        return None
    try:
        st = os.stat(os.path.join(directory, LOG_DIR, segments[-1]))
    except FileNotFoundError:
        return None
    return segments[-1], st.st_size, st.st_mtime_ns


def _session_id(directory: str) -> str | None:
    if not os.path.exists(os.path.join(directory, IDENTITY_FILE)):
        return None
    try:
        return read_identity(directory).session_id
    except (CorruptionError, OSError):
        return None

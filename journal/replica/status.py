"""`journal replica status`: per local session, what the bucket holds of it.

Read-only on both sides: each session's chain is located the way a shipper
locates it (the head hint, a listing after it, the newest chunks), and the local
log is read only after what the bucket holds, so a store that is shipped up to
date costs a few requests and no log reads per session.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..errors import JournalError, ReplicaDivergedError
from ..layout import SESSIONS_DIR
from ..sessiondir import read_identity
from . import lease
from .chunk import lease_key
from .objects import ObjectStore
from .shipper import SessionShipper, ShipContext
from .tail import committed_end


@dataclass
class ReplicaStatus:
    """One local session against its chain in the bucket."""

    session_id: str
    state: str  # "ok", "diverged"
    local_end: int = -1  # the local log's committed end
    shipped_end: int = -1  # the bucket's, for this incarnation (0: none shipped)
    unshipped_bytes: int = 0
    lag_seconds: float = 0.0  # at most this long since the oldest unshipped commit
    last_shipped_ms: int = 0
    writer_host: str | None = None  # the lease holder's host name
    writer_is_this_root: bool = False
    error: str = ""


def replica_status(root: str, objects: ObjectStore, prefix: str) -> list[ReplicaStatus]:
    ctx = ShipContext(objects, prefix, root, lease.writer_id(root))
    sessions = os.path.join(root, SESSIONS_DIR)
    now = int(time.time() * 1000)
    out: list[ReplicaStatus] = []
    for name in sorted(os.listdir(sessions)):
        directory = os.path.join(sessions, name)
        try:
            sid = read_identity(directory).session_id
        except JournalError:
            continue  # no session (yet): a creation's leftovers, a damaged identity
        sh = SessionShipper(ctx, directory, name, sid)
        try:
            sh.locate()
        except ReplicaDivergedError as exc:
            out.append(ReplicaStatus(sid, "diverged", error=str(exc)))
            continue
        shipped = sh.shipped_end if sh.live and sh.shipped_end >= 0 else 0
        local = committed_end(directory, shipped)
        found = lease.read_lease(objects, lease_key(prefix, name))
        last = sh.newest_shipped_ms
        unshipped = local - shipped
        out.append(
            ReplicaStatus(
                sid,
                "ok",
                local_end=local,
                shipped_end=shipped,
                unshipped_bytes=unshipped,
                lag_seconds=(now - last) / 1000 if unshipped and last else 0.0,
                last_shipped_ms=last,
                writer_host=found[0].host if found is not None else None,
                writer_is_this_root=found is not None and found[0].owner == ctx.writer.hex(),
            )
        )
    return out

"""`journal restore`: rebuild sessions (forks and state with them) from a bucket.

Each session's chain is read and checked (chain.py), cut where asked, and its
incarnation rebuilt as a session directory: the SESSION file as shipped, and each
segment file as its header (FORMAT.md section 3) followed by the bytes the DATA
chunks carried at their offsets. The rebuilt sessions and the state versions in
force at the cut are written as one bundle and installed through the bundle
import, which verifies every log, installs parents before children, and
publishes each session with one rename: a half-restored session never appears,
and the result passes `journal verify`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import fsio
from ..errors import InvalidInputError, ReplicaCorruptionError
from ..layout import (
    IDENTITY_FILE,
    LOG_DIR,
    dir_name,
    parse_replica_state,
    replica_heads_prefix,
    replica_state_prefix,
    session_path,
    state_path,
)
from ..log import KIND_SESSION
from ..record import OK, SEAL, parse_at
from ..segment import encode_segment_header, segment_name
from ..sessiondir import read_identity
from .chain import FETCHERS, Incarnation, read_incarnation
from .chunk import decode_head
from .objects import ObjectStore

Progress = Callable[[str], None]


@dataclass
class RestoreReport:
    """What a restore installed."""

    sessions: list[str] = field(default_factory=list)  # session ids, parents first
    absent: list[str] = field(default_factory=list)  # asked for, but none at the cut
    state_keys: int = 0
    bytes: int = 0


def rebuild_session_dir(inc: Incarnation, dest: str) -> None:
    """Write the incarnation as a session directory at `dest` (created; synced)."""
    os.makedirs(os.path.join(dest, LOG_DIR))
    fsio.write_file(os.path.join(dest, IDENTITY_FILE), inc.identity, durable=True)
    segments: dict[int, list[bytes]] = {}
    ends: dict[int, int] = {}
    for piece in inc.pieces:
        parts = segments.setdefault(piece.segment_base, [])
        expected = ends.get(piece.segment_base, piece.segment_base)
        if piece.start != expected:
            raise ReplicaCorruptionError(
                f"{dest}: the chain's bytes for segment {piece.segment_base} start at log"
                f" position {piece.start}, not {expected}"
            )
        parts.append(piece.body)
        ends[piece.segment_base] = piece.end
    if not segments:
        segments[0] = []
    newest = max(segments)
    if segments[newest] and _ends_with_seal(segments[newest][-1]):
        # A SEAL names its successor (FORMAT.md section 3): a chain whose newest
        # DATA ends with one (a roll, or `compact`, before the next commit; or a cut
        # between a ship's two segments) gets it, holding only its header.
        segments[ends[newest]] = []
    for base, parts in segments.items():
        data = encode_segment_header(KIND_SESSION, base) + b"".join(parts)
        fsio.write_file(os.path.join(dest, LOG_DIR, segment_name(base)), data, durable=True)
    fsio.sync_dir(os.path.join(dest, LOG_DIR))


def _ends_with_seal(body: bytes) -> bool:
    """Whether the last record of `body` (whole records) is a SEAL."""
    off = 0
    last = 0
    while off < len(body):
        outcome, rtype, _, _, end = parse_at(body, off)
        if outcome != OK:
            return False
        off, last = end, rtype
    return last == SEAL


def bucket_sessions(objects: ObjectStore, prefix: str) -> dict[str, str]:
    """dir name -> session id of every session the bucket has a head object of."""
    keys = [info.key for info in objects.list(replica_heads_prefix(prefix))]

    def read(key: str) -> tuple[str, str] | None:
        got = objects.get(key)
        if got is None:
            return None
        head = decode_head(got[0], key)
        return head.dir, head.session_id

    with ThreadPoolExecutor(max_workers=FETCHERS) as pool:
        return dict(found for found in pool.map(read, keys) if found is not None)


def restore(
    objects: ObjectStore,
    prefix: str,
    root: str,
    *,
    session_ids: list[str] | None = None,
    at_time_ms: int | None = None,
    at_sequence: int | None = None,
    progress: Progress | None = None,
) -> RestoreReport:
    """Rebuild sessions from the bucket into the store at `root` (see the module doc).
    `at_sequence` needs exactly one session."""
    from ..bundle import export_sessions, import_bundle

    if at_sequence is not None and (session_ids is None or len(session_ids) != 1):
        raise InvalidInputError("--at-sequence restores one session: name it with --session")
    if at_time_ms is not None and at_sequence is not None:
        raise InvalidInputError("--at-time and --at-sequence contradict each other")
    wanted = (
        {dir_name(s): s for s in session_ids}
        if session_ids is not None
        else bucket_sessions(objects, prefix)
    )
    report = RestoreReport()
    work = tempfile.mkdtemp(prefix="journal-restore-")
    try:
        built: dict[str, str] = {}  # session id -> rebuilt directory
        queue = sorted(wanted.items())

        def fetch(entry: tuple[str, str]) -> Incarnation | None:
            if progress:
                progress(f"fetch {entry[1]}")
            return read_incarnation(
                objects, prefix, entry[0], at_time_ms=at_time_ms, at_sequence=at_sequence
            )

        fetched: dict[str, Incarnation | None] = {}
        while queue:
            name, sid = queue.pop(0)
            if sid in built or sid in report.absent:
                continue
            if sid not in fetched:
                # this one and those queued after it, several chains at a time
                wave = [e for e in [(name, sid), *queue] if e[1] not in fetched]
                with ThreadPoolExecutor(max_workers=FETCHERS) as pool:
                    fetched.update(zip([e[1] for e in wave], pool.map(fetch, wave), strict=True))
            inc = fetched[sid]
            if inc is None or not inc.pieces:
                report.absent.append(sid)
                continue
            dest = session_path(work, sid)
            rebuild_session_dir(inc, dest)
            identity = read_identity(dest)
            if identity.session_id != sid:
                raise ReplicaCorruptionError(
                    f"the bucket's session directory {name!r} holds session"
                    f" {identity.session_id!r}, not {sid!r}"
                )
            built[sid] = dest
            report.bytes += sum(len(p.body) for p in inc.pieces)
            parent = identity.parent_session_id
            if parent is not None and parent not in built:
                queue.append((dir_name(parent), parent))  # a fork comes with its parent
        states = bucket_state(objects, prefix, set(built), at_time_ms)
        for scope, keys in states.items():
            scope_dir = state_path(work, scope)
            os.makedirs(scope_dir, exist_ok=True)
            for key_dir, body in keys.items():
                fsio.write_file(os.path.join(scope_dir, key_dir), body, durable=False)
            report.state_keys += len(keys)
        if not built:
            return report
        # The rebuilt directories form a store of their own: export checks each
        # log and packs it with its state, import installs it (section above).
        bundle = os.path.join(work, "restore.jrnl")
        export_sessions(work, list(built), bundle, progress=progress)
        imported = import_bundle(root, bundle, progress=progress)
        report.sessions = [sid for sid, _ in imported.installed]
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bucket_state(
    objects: ObjectStore, prefix: str, session_ids: set[str], at_time_ms: int | None
) -> dict[str, dict[str, bytes]]:
    """scope -> key dir -> state file bytes in force at the cut, for the scopes of the
    restored sessions (a scope named after a session goes with it, as in a bundle)."""
    scopes = {dir_name(s): s for s in session_ids}
    newest: dict[tuple[str, str], tuple[int, str]] = {}
    for info in objects.list(replica_state_prefix(prefix)):
        parsed = parse_replica_state(info.key)
        if parsed is None or parsed[0] not in scopes:
            continue
        scope_dir, key_dir, at = parsed
        if at_time_ms is not None and at > at_time_ms:
            continue
        best = newest.get((scope_dir, key_dir))
        if best is None or (at, info.key) > best:
            newest[(scope_dir, key_dir)] = (at, info.key)
    out: dict[str, dict[str, bytes]] = {}
    for (scope_dir, key_dir), (_, key) in sorted(newest.items()):
        got = objects.get(key)
        if got is None or not got[0]:
            continue  # deleted at that time
        out.setdefault(scopes[scope_dir], {})[key_dir] = got[0]
    return out

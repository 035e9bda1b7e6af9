"""Offline checks: read every byte of a store and report what is wrong, precisely.

`verify` never takes a lock and never writes, so it can run beside a live
writer (a commit being written at that moment is simply not yet visible). Each
problem is one `Finding` naming the session, the file and the byte offset.
Findings about the log are data problems; findings about caches (indexes,
snapshot) say the cache will be rebuilt, since caches are never trusted blindly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec

from . import dictionary, payloads
from .errors import CorruptionError, FormatVersionError, JournalError
from .fold import INDEX_OF, compacted_stub
from .index import (
    INDEX_FILES,
    INDEX_HEADER_SIZE,
    KIND_EVENTS,
    REMOVED,
    Index,
    read_evidence,
)
from .layout import IDENTITY_FILE, LOG_DIR, LOSS_PENDING_FILE, SNAPSHOT_FILE, dir_name
from .log import KIND_SESSION, Log
from .metafile import KIND_IDENTITY, KIND_SNAPSHOT, KIND_STATE, read_meta
from .payloads import CheckpointPayload, EventPayload, LossPayload
from .record import CHECKPOINT, DICT, EVENT, LOSS, PAD, SEAL, TYPE_NAMES, Record
from .scan import ScanState, Tail
from .segment import SEGMENT_HEADER_SIZE
from .sessiondir import SessionIdentity, directory_origin
from .sessionstate import Head

SEVERITY_DATA = "data"  # the log or an identity/state file is damaged, or data was lost
SEVERITY_CACHE = "cache"  # a derived file disagrees with the log (the next open rebuilds it)
SEVERITY_TAIL = "tail"  # an unfinished final commit (the next writer drops it)
SEVERITY_NOTE = "loss"  # a loss accepted earlier (`journal repair --accept-loss`): not damage

_ADVICE = {
    SEVERITY_DATA: "`journal salvage {sid} --to NEW_ID` copies what is readable;"
    " `journal repair {sid} --accept-loss` cuts the damage and keeps the session",
    SEVERITY_CACHE: "nothing to do: a cache, which the next writable open rebuilds"
    " (`journal repair {sid}` rebuilds it now)",
    SEVERITY_TAIL: "nothing to do: the next writer finishes it"
    " (`journal repair {sid}` does it now)",
    SEVERITY_NOTE: "nothing to do: recorded by `journal repair --accept-loss`",
}


@dataclass(frozen=True)
class Finding:
    severity: str
    session: str | None
    path: str
    offset: int | None
    message: str

    @property
    def advice(self) -> str:
        """The command that addresses this finding."""
        sid = self.session if self.session is not None else "SESSION"
        return _ADVICE[self.severity].format(sid=sid)

    def __str__(self) -> str:
        where = self.path + (f" at offset {self.offset}" if self.offset is not None else "")
        who = f"session {self.session!r}: " if self.session is not None else ""
        return f"{self.severity}: {who}{self.message} ({where})"


@dataclass
class SessionReport:
    session_id: str | None
    directory: str
    commits: int = 0
    events: int = 0
    checkpoints: int = 0
    last_checkpoint: int = -1
    log_bytes: int = 0
    losses: list[LossPayload] = field(default_factory=list)  # accepted losses, oldest first


_IDX_OF = INDEX_OF  # record type -> index kind, as the session applies it
_DECODERS = payloads.DECODERS


def verify_session_dir(directory: str) -> tuple[SessionReport, list[Finding]]:
    """Check one session directory completely (read-only)."""
    findings: list[Finding] = []
    report = SessionReport(None, directory)
    ident_path = os.path.join(directory, IDENTITY_FILE)
    try:
        ident = msgspec.msgpack.decode(read_meta(ident_path, KIND_IDENTITY), type=SessionIdentity)
        report.session_id = ident.session_id
        if dir_name(ident.session_id) != os.path.basename(directory):
            findings.append(
                Finding(
                    SEVERITY_DATA,
                    ident.session_id,
                    ident_path,
                    None,
                    "identity does not match the directory name",
                )
            )
    except FileNotFoundError:
        findings.append(Finding(SEVERITY_DATA, None, ident_path, None, "identity file is missing"))
    except (JournalError, msgspec.DecodeError) as exc:
        offset = exc.offset if isinstance(exc, CorruptionError) else None
        findings.append(Finding(SEVERITY_DATA, None, ident_path, offset, _msg(exc)))
    sid = report.session_id
    label = f"session {sid!r}" if sid is not None else directory
    try:
        log = Log(
            os.path.join(directory, LOG_DIR), KIND_SESSION, segment_bytes=1 << 62, label=label
        )
    except (JournalError, OSError) as exc:
        findings.append(_finding(exc, sid, os.path.join(directory, LOG_DIR)))
        return report, findings
    try:
        expected = _scan(log, sid, report, findings)
    finally:
        log.close()
    pending = os.path.join(directory, LOSS_PENDING_FILE)
    if os.path.exists(pending):
        findings.append(
            Finding(
                SEVERITY_DATA,
                sid,
                pending,
                None,
                "accepting a loss did not finish: run `journal repair --accept-loss` again",
            )
        )
    if expected is not None and not any(f.severity == SEVERITY_DATA for f in findings):
        lost = _lost_by_evidence(directory, sid, report)
        if lost is not None:
            # One damage, one finding: the caches are the evidence, not faults of their
            # own, and a cut-off record at the end is part of what was lost, not torn.
            findings[:] = [f for f in findings if f.severity != SEVERITY_TAIL]
            findings.append(lost)
        else:
            findings.extend(_check_indexes(directory, sid, expected))
            findings.extend(_check_snapshot(directory, sid, report, log))
    for note in report.losses:
        findings.append(Finding(SEVERITY_NOTE, sid, log.dir, None, describe_loss(note)))
    return report, findings


def first_damage(directory: str) -> CorruptionError | None:
    """The first data finding of `verify_session_dir` on a session directory, as an
    error (None: no damage): what the tools that refuse a damaged session report."""
    try:
        _, findings = verify_session_dir(directory)
    except CorruptionError as exc:
        return exc
    for f in findings:
        if f.severity == SEVERITY_DATA:
            return CorruptionError(f.message, path=f.path, offset=f.offset)
    return None


def describe_loss(note: LossPayload) -> str:
    """One line about an accepted loss: what went, and where the cut bytes are kept."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(note.accepted_at))
    events = (
        f"events {note.events_kept + 1}..{note.events_through}"
        if note.events_through > note.events_kept
        else "no events"
    )
    cps = (
        f"checkpoints after {note.checkpoint_kept} up to {note.checkpoints_through}"
        if note.checkpoints_through > note.checkpoint_kept
        else "no checkpoints"
    )
    kept = ", ".join(r.kept_as for r in note.ranges) or "nothing was left to keep"
    return (
        f"loss accepted {when} at log position {note.cut_at}: {events} and {cps} were"
        f" lost ({note.reason}); cut bytes kept in {kept}"
    )


def _lost_by_evidence(directory: str, sid: str | None, report: SessionReport) -> Finding | None:
    """A cache that records a durable position the log no longer reaches proves a loss."""
    origin = directory_origin(directory)
    claims: list[tuple[int, str]] = []
    for kind, name in INDEX_FILES.items():
        evidence = read_evidence(os.path.join(directory, name), kind)
        if evidence is not None and evidence.origin == origin:
            claims.append((evidence.durable, name))
    path = os.path.join(directory, SNAPSHOT_FILE)
    try:
        head = msgspec.msgpack.decode(read_meta(path, KIND_SNAPSHOT), type=Head)
        if head.durable <= head.covered and head.origin == origin:
            claims.append((head.durable, SNAPSHOT_FILE))
    except (JournalError, msgspec.DecodeError, OSError):
        pass
    if not claims:
        return None
    durable, name = max(claims)
    if durable <= report.log_bytes:
        return None
    return Finding(
        SEVERITY_DATA,
        sid,
        os.path.join(directory, LOG_DIR),
        None,
        f"committed data is missing: the log ends at position {report.log_bytes}, but"
        f" {name} records it durable up to position {durable} (a segment removed or"
        " truncated)",
    )


def _scan(
    log: Log, sid: str | None, report: SessionReport, findings: list[Finding]
) -> dict[int, list[tuple[int, int, int, int]]] | None:
    """Walk every commit; return the index entries the log implies."""
    walk = _Walk(log, sid, report, findings)
    state = ScanState()
    try:
        for commit in log.committed(0, state, strict=True):
            report.commits += 1
            for rec in commit:
                walk.record(rec, commit)
    except CorruptionError as exc:
        findings.append(Finding(SEVERITY_DATA, sid, exc.path or log.dir, exc.offset, _msg(exc)))
        return None
    except (JournalError, OSError) as exc:
        findings.append(_finding(exc, sid, log.label))
        return None
    report.events = walk.counter
    report.last_checkpoint = walk.last_cp
    report.log_bytes = state.end
    if state.tail == Tail.CORRUPT:
        findings.append(Finding(SEVERITY_DATA, sid, state.path, state.file_offset, state.detail))
    else:
        unfinished = {
            Tail.UNSEALED: f"a segment roll that did not finish ({state.detail}); nothing was lost",
            Tail.TORN: f"unfinished final commit ({state.detail})",
        }.get(state.tail)
        if unfinished is not None:
            findings.append(Finding(SEVERITY_TAIL, sid, state.path, state.file_offset, unfinished))
    return walk.expected


class _Walk:
    """What `_scan` learns from the records of a log, one at a time, as the session
    folds them: the index entries they imply, and every rule a record breaks."""

    def __init__(
        self, log: Log, sid: str | None, report: SessionReport, findings: list[Finding]
    ) -> None:
        self.log, self.sid, self.report, self.findings = log, sid, report, findings
        self.expected: dict[int, list[tuple[int, int, int, int]]] = {k: [] for k in INDEX_FILES}
        self.last_cp = -1
        self.counter = 0
        self.context_len = 0
        self.epoch = 0
        self.dead_epoch: int | None = None

    def _bad(self, rec: Record, message: str) -> None:
        self.findings.append(_at(self.log, self.sid, rec.pos, message))

    def record(self, rec: Record, commit: list[Record]) -> None:
        if rec.rtype in (PAD, SEAL):
            return  # filler left by compact; the end of a sealed segment
        if rec.rtype == DICT and not dictionary.well_placed(commit):
            self._bad(rec, dictionary.MISPLACED)
        decoder = _DECODERS.get(rec.rtype)
        if decoder is None:
            self.findings.append(
                Finding(
                    SEVERITY_DATA,
                    self.sid,
                    self.log.label,
                    rec.pos,
                    f"unexpected record type {rec.rtype}",
                )
            )
            return
        try:
            p = decoder.decode(rec.payload)
        except msgspec.DecodeError as exc:
            self._bad(rec, f"{TYPE_NAMES[rec.rtype]} payload does not decode: {exc}")
            return
        if rec.rtype == LOSS:
            self._loss(rec, p)
            return
        kind = _IDX_OF.get(rec.rtype)
        if kind is None:
            return
        flags = 0
        if rec.rtype == EVENT:
            flags = self._event(rec, p)
        elif rec.rtype == CHECKPOINT:
            self._checkpoint(rec, p)
        self.expected[kind].append((p.sequence, rec.pos, rec.size, flags))

    def _loss(self, rec: Record, p: LossPayload) -> None:
        for seq in range(self.counter + 1, p.events_through + 1):
            self.expected[KIND_EVENTS].append((seq, rec.pos, rec.size, REMOVED))
        self.report.losses.append(p)
        self.counter = max(self.counter, p.events_through)
        self.last_cp = max(self.last_cp, p.checkpoints_through)

    def _event(self, rec: Record, p: EventPayload) -> int:
        """Check an event's sequence, apply what it removes; return its index flags."""
        self.counter += 1
        if p.sequence != self.counter:
            self._bad(rec, f"event sequence {p.sequence}, expected {self.counter}")
        events = self.expected[KIND_EVENTS]
        for r in p.removes:
            if 0 < r <= len(events):
                k, pos, size, f = events[r - 1]
                events[r - 1] = (k, pos, size, f | REMOVED)
        return REMOVED if p.transient else 0

    def _checkpoint(self, rec: Record, p: CheckpointPayload) -> None:
        """Check that a checkpoint advances and extends the context stored so far."""
        if p.sequence <= self.last_cp:
            self._bad(rec, f"checkpoint {p.sequence} does not advance {self.last_cp}")
        stub = compacted_stub(p.header)
        if stub is not None and stub.get("items_dropped"):
            self.dead_epoch = p.epoch  # compact dropped this epoch's items
        if (
            self.last_cp >= 0
            and p.epoch == self.epoch
            and p.epoch != self.dead_epoch
            and p.base != self.context_len
        ):
            self._bad(
                rec,
                f"checkpoint {p.sequence} keeps {p.base} context"
                f" items but {self.context_len} are stored",
            )
        self.context_len = p.base + len(p.items)
        self.epoch = p.epoch
        self.last_cp = p.sequence
        self.report.checkpoints += 1


def _check_indexes(
    directory: str, sid: str | None, expected: dict[int, list[tuple[int, int, int, int]]]
) -> Iterator[Finding]:
    for kind, name in INDEX_FILES.items():
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            continue  # not written yet: the first writer flushes it
        idx = Index(directory, kind)
        try:
            if not idx.load():
                yield Finding(SEVERITY_CACHE, sid, path, 0, "index header is damaged")
                continue
            want = expected[kind]
            if idx.flushed > len(want):
                yield Finding(
                    SEVERITY_CACHE,
                    sid,
                    path,
                    None,
                    f"index has {idx.flushed} entries, the log only {len(want)}",
                )
                continue
            got = idx.read_block(0, idx.flushed)
            for i, (a, b) in enumerate(zip(got, want, strict=False)):
                key_ok = a[0] == b[0] and a[1] == b[1] and a[2] == b[2]
                flags_ok = (
                    kind != KIND_EVENTS
                    or (a[3] & REMOVED) == (b[3] & REMOVED)
                    or (
                        # a removal recorded after the index was flushed is not a fault
                        not a[3] & REMOVED and b[3] & REMOVED
                    )
                )
                if not key_ok or not flags_ok:
                    entry = idx.entry.size
                    yield Finding(
                        SEVERITY_CACHE,
                        sid,
                        path,
                        INDEX_HEADER_SIZE + i * entry,
                        f"index entry {i} disagrees with the log",
                    )
                    break
        except Exception as exc:  # any failure reading a cache is a finding, never a crash
            yield Finding(SEVERITY_CACHE, sid, path, None, f"index unreadable: {exc}")
        finally:
            idx.close()


def _check_snapshot(
    directory: str, sid: str | None, report: SessionReport, log: Log
) -> Iterator[Finding]:
    path = os.path.join(directory, SNAPSHOT_FILE)
    if not os.path.exists(path):
        return
    try:
        head = msgspec.msgpack.decode(read_meta(path, KIND_SNAPSHOT), type=Head)
    except (JournalError, msgspec.DecodeError) as exc:
        yield Finding(
            SEVERITY_CACHE,
            sid,
            path,
            getattr(exc, "offset", None),
            f"snapshot unreadable ({_msg(exc)})",
        )
        return
    if head.covered > report.log_bytes:
        yield Finding(
            SEVERITY_CACHE,
            sid,
            path,
            None,
            f"snapshot covers position {head.covered} beyond the log's end at {report.log_bytes}",
        )
        return
    in_log = log.dictionary.pos if log.dictionary is not None else -1
    if head.dict_pos >= 0 and head.dict_pos != in_log:
        yield Finding(
            SEVERITY_CACHE,
            sid,
            path,
            None,
            f"snapshot names a dictionary record at position {head.dict_pos}, the log has"
            f" {'none' if in_log < 0 else f'one at {in_log}'}",
        )


def verify_state_dir(directory: str) -> Iterator[Finding]:
    for name in sorted(os.listdir(directory)):
        if ".tmp." in name:
            continue
        path = os.path.join(directory, name)
        try:
            read_meta(path, KIND_STATE)
        except (JournalError, OSError) as exc:
            yield _finding(exc, None, path)


def verify_store(
    root: str, session_dirs: list[str] | None = None
) -> Iterator[tuple[SessionReport | None, list[Finding]]]:
    """Yield (report, findings) per session directory, then for state and the manifest."""
    from .metafile import KIND_MANIFEST

    manifest = os.path.join(root, "JOURNAL")
    try:
        read_meta(manifest, KIND_MANIFEST)
    except FileNotFoundError:
        yield None, [Finding(SEVERITY_DATA, None, manifest, None, "store manifest is missing")]
    except (JournalError, FormatVersionError) as exc:
        yield None, [_finding(exc, None, manifest)]
    sessions_root = os.path.join(root, "sessions")
    names = session_dirs if session_dirs is not None else sorted(os.listdir(sessions_root))
    for name in names:
        yield verify_session_dir(os.path.join(sessions_root, name))
    if session_dirs is None:
        state_root = os.path.join(root, "state")
        if os.path.isdir(state_root):
            for scope in sorted(os.listdir(state_root)):
                found = list(verify_state_dir(os.path.join(state_root, scope)))
                if found:
                    yield None, found


def _at(log: Log, sid: str | None, pos: int, message: str) -> Finding:
    """A data finding about the record at log position `pos` (file and file offset)."""
    return Finding(SEVERITY_DATA, sid, _seg_path(log, pos), _file_offset(log, pos), message)


def _seg_path(log: Log, pos: int) -> str:
    return log.segment_for(pos)[1].path


def _file_offset(log: Log, pos: int) -> int:
    seg = log.segment_for(pos)[1]
    return SEGMENT_HEADER_SIZE + pos - seg.base


def _msg(exc: BaseException) -> str:
    """What went wrong, without where (a finding names the file and offset itself)
    and without the session's name (the finding names it once)."""
    text = exc.message if isinstance(exc, CorruptionError) else str(exc)
    while text.startswith("session '") and "': " in text:
        text = text.split("': ", 1)[1]
    return text


def _finding(exc: BaseException, sid: str | None, path: str) -> Finding:
    if isinstance(exc, CorruptionError):
        return Finding(SEVERITY_DATA, sid, exc.path or path, exc.offset, _msg(exc))
    return Finding(SEVERITY_DATA, sid, path, None, _msg(exc))

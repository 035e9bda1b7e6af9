"""Conservative repair of one session: cut an unfinished tail, rebuild the caches.

Repair takes the session's writer lock (so no writer is active), then:
- a torn tail (an unfinished final commit) is copied aside to
  `<session>/repair/<time>-<segment>.tail` and cut off;
- damage (a bad record with data after it, anything wrong in a sealed segment, a
  lost segment or a log shorter than its caches record) is refused: cutting it
  would drop acknowledged commits, which only `journal repair --accept-loss`
  (`journal.loss`) does, recording the loss;
- every cache (indexes, snapshot) is deleted and rebuilt from the log.

It reports exactly what it dropped: the byte range of the segment file and the
last checkpoint and event sequences that remain.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from . import fsio
from .errors import CorruptionError, UnfinishedSessionError
from .index import INDEX_FILES
from .layout import SNAPSHOT_FILE
from .scan import ScanState, Tail
from .segment import SEGMENT_HEADER_SIZE
from .session import Session
from .sessionstate import SessionOptions


@dataclass
class RepairReport:
    session_id: str
    dropped: list[tuple[str, int, int, str]] = field(default_factory=list)  # path, from, to, why
    saved_to: list[str] = field(default_factory=list)
    caches_rebuilt: list[str] = field(default_factory=list)
    last_checkpoint: int = -1
    last_event: int = 0
    refused: str = ""


_DAMAGED = (
    "; the session is damaged, not torn, and repair cuts only an unfinished tail:"
    " `journal salvage {sid} --to NEW_ID` copies what is readable, and"
    " `journal repair {sid} --accept-loss` cuts the damage, keeps the cut bytes and"
    " records what was lost"
)


def repair_session(directory: str, session_id: str, *, lock_timeout: float = 10.0) -> RepairReport:
    report = RepairReport(session_id)
    options = SessionOptions(lock_timeout=lock_timeout)
    damaged = _DAMAGED.format(sid=session_id)
    # Opening reads the log only up to the first problem; it never writes.
    try:
        sess = Session(directory, session_id, options)
    except CorruptionError as exc:
        report.refused = f"{exc}{damaged}"
        return report
    except UnfinishedSessionError as exc:
        report.refused = (
            f"{exc}: a session whose creation never finished, which the store reads as"
            " absent (a writable open moves it to the trash); nothing to repair"
        )
        return report
    try:
        if sess.damage is not None:
            # The caches may be the evidence of a loss: they are not deleted here.
            report.refused = f"{sess.damage}{damaged}"
            return report
        sess.flock.acquire(lock_timeout)
        try:
            state = ScanState()
            try:
                for _ in sess.log.committed(0, state, strict=True):
                    pass
            except CorruptionError as exc:
                report.refused = f"{exc}{damaged}"
                return report
            if state.tail == Tail.CORRUPT:
                report.refused = (
                    f"damaged record in the newest segment at file offset {state.file_offset}"
                    f" ({state.detail}); commits after it may exist{damaged}"
                )
                return report
            if state.tail in (Tail.TORN, Tail.CORRUPT) and state.end == 0:
                report.refused = (
                    f"the damage is in the first commit (file offset {state.file_offset}):"
                    " cutting there would leave no commit, and the session would read as"
                    " absent. Restore the file from a copy instead."
                )
                return report
            if state.tail in (Tail.TORN, Tail.CORRUPT):
                _cut(sess, state, report)
            for name in [*INDEX_FILES.values(), SNAPSHOT_FILE]:
                path = os.path.join(directory, name)
                if os.path.exists(path):
                    fsio.unlink(path)
                    report.caches_rebuilt.append(name)
        finally:
            sess.flock.release()
    finally:
        sess.close()
    rebuilt = Session(directory, session_id, options)
    try:
        with rebuilt.writing():
            rebuilt.flush_caches()
        report.last_checkpoint = rebuilt.head.sequence
        report.last_event = rebuilt.head.event_counter
    finally:
        rebuilt.close()
    return report


def _cut(sess: Session, state: ScanState, report: RepairReport) -> None:
    seg = sess.log.segments[-1]
    start = SEGMENT_HEADER_SIZE + state.end - seg.base
    with open(seg.path, "rb") as f:
        f.seek(start)
        tail = f.read()
    data = tail.rstrip(b"\x00")
    keep_dir = os.path.join(sess.dir, "repair")
    os.makedirs(keep_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    saved = os.path.join(keep_dir, f"{stamp}-{os.path.basename(seg.path)}.tail")
    fsio.write_file(saved, data, durable=True)
    report.saved_to.append(saved)
    report.dropped.append((seg.path, start, start + len(data), state.detail or state.tail))
    sess.log.truncate_tail(state.end)

"""Reading every verifiable commit of a damaged log, and copying them to a new session.

A scan for recovery stops at the first damage: after it, nothing is trusted. Salvage
looks further. It reads each segment file on its own, and wherever a record fails its
checks it looks for the next place where a valid record frame starts (`next_frame`)
and goes on from there. A commit counts only when every one of its records is valid
and they follow each other without a gap. A commit that a hole cuts through is
skipped whole, and so is every record that cannot be decoded (a record compressed
with a dictionary that was lost, say). What was skipped is reported by file and
offset.

`salvage_session` copies what the scan found into a new session through the store's
public calls, so the copy obeys every rule of the contract (sequences, the growing
context) and is a healthy session of its own. Its event sequences are its own: they
count from 1 again, and the report maps the old ones to the new.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .dictionary import SessionDictionary, from_record
from .errors import CorruptionError, InvalidInputError, JournalError, NotFoundError
from .layout import LOG_DIR
from .log import KIND_SESSION
from .payloads import (
    TranscriptItemsPayload,
    checkpoint_decoder,
    event_decoder,
    execution_decoder,
    transcript_items_decoder,
)
from .record import (
    CHECKPOINT,
    DICT,
    END,
    EVENT,
    EXECUTION,
    FLAG_COMMIT,
    LOSS,
    OK,
    TRANSCRIPT,
    TYPE_NAMES,
    Record,
    next_frame,
    open_payload,
    parse_at,
)
from .segment import SEGMENT_HEADER_SIZE, SEGMENT_SUFFIX, check_segment_header
from .types import Checkpoint, TimestampedEvent


@dataclass
class Skipped:
    """Bytes of a segment file that no verifiable commit covers."""

    segment: str  # the file's name
    start: int  # file offsets [start, end)
    end: int
    why: str

    def __str__(self) -> str:
        return f"{self.segment} bytes {self.start}..{self.end}: {self.why}"


@dataclass
class Found:
    commits: list[list[Record]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def segment_files(log_dir: str) -> list[tuple[int, str]]:
    """(base, path) of every file named like a segment in `log_dir`, by base."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        stem = name[: -len(SEGMENT_SUFFIX)]
        if name.endswith(SEGMENT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            out.append((int(stem), os.path.join(log_dir, name)))
    return sorted(out)


def scan(log_dir: str, *, after: int = -1) -> Found:
    """Every verifiable commit of the log in `log_dir` (of records at positions
    after `after`, when given), and what was skipped."""
    found = Found()
    dictionary: SessionDictionary | None = None
    for base, path in segment_files(log_dir):
        name = os.path.basename(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            found.skipped.append(Skipped(name, 0, 0, f"cannot read: {exc.strerror}"))
            continue
        try:
            check_segment_header(data[:SEGMENT_HEADER_SIZE], path, KIND_SESSION, base)
        except JournalError as exc:
            found.skipped.append(Skipped(name, 0, SEGMENT_HEADER_SIZE, f"bad header: {exc}"))
        dictionary = _scan_file(data, base, name, path, after, dictionary, found)
    return found


def _scan_file(
    data: bytes,
    base: int,
    name: str,
    path: str,
    after: int,
    dictionary: SessionDictionary | None,
    found: Found,
) -> SessionDictionary | None:
    off = SEGMENT_HEADER_SIZE
    pending: list[Record] = []
    pending_from = off

    def skip(start: int, end: int, why: str) -> None:
        nonlocal pending
        if pending:
            start, why = pending_from, f"{why} (an unfinished commit before it is dropped)"
            pending = []
        found.skipped.append(Skipped(name, start, end, why))

    while off < len(data):
        outcome, rtype, flags, pstart, pend = parse_at(data, off)
        if outcome == END:
            resume = next_frame(data, off)
            if resume is None:
                break  # zeros to the end: preallocated space
            skip(off, resume, "zeroed bytes")
            off = resume
            continue
        if outcome != OK:
            resume = next_frame(data, off + 1)
            why = f"damaged {TYPE_NAMES.get(rtype, 'record')} frame"
            skip(off, len(data) if resume is None else resume, why)
            if resume is None:
                break
            off = resume
            continue
        pos = base + off - SEGMENT_HEADER_SIZE
        try:
            payload = open_payload(
                flags, data[pstart:pend], path=path, offset=off, dictionary=dictionary
            )
            if rtype == DICT and flags == FLAG_COMMIT and dictionary is None:
                dictionary = from_record(payload, pos, path=path, offset=off)
        except CorruptionError as exc:
            skip(off, pend, f"undecodable {TYPE_NAMES.get(rtype, 'record')}: {exc.message}")
            off = pend
            continue
        if not pending:
            pending_from = off
        crc = int.from_bytes(data[off : off + 4], "little")
        pending.append(Record(pos, pend - off, rtype, flags, payload, crc))
        off = pend
        if flags & FLAG_COMMIT:
            if pending[0].pos > after:
                found.commits.append(pending)
            pending = []
    if pending:
        skip(pending_from, off, "a commit without its closing record")
    return dictionary


# ----------------------------------------------------------------- copying
@dataclass
class SalvageReport:
    session_id: str
    new_id: str
    saves: int = 0  # checkpoints copied
    events: int = 0  # events copied
    renumbered: list[tuple[int, int, int]] = field(default_factory=list)  # old a..b -> new c..
    skipped: list[str] = field(default_factory=list)
    losses_before: int = 0  # LOSS notes the damaged session already carried


class _Copier:
    """Replays salvaged commits into the new session through the store's calls."""

    def __init__(self, store: Any, report: SalvageReport):
        self.store = store
        self.report = report
        self.context: list[Any] | None = None  # the context being rebuilt (this epoch)
        self.epoch = -1
        self.exists = False
        self.last_old = 0  # the last old event sequence copied
        self.last_new = 0

    def copy(self, commit: list[Record]) -> None:
        kinds = {r.rtype for r in commit}
        if LOSS in kinds:
            self.report.losses_before += 1
            return
        if not kinds & {CHECKPOINT, EVENT}:
            return  # a dictionary, a seal, filler: the new session makes its own
        cps = [r for r in commit if r.rtype == CHECKPOINT]
        events = [r for r in commit if r.rtype == EVENT]
        transcript = [r for r in commit if r.rtype == TRANSCRIPT]
        items = transcript_items_decoder.decode(transcript[0].payload) if transcript else None
        stamped = [self._event(r, items) for r in events]
        checkpoint = self._checkpoint(cps[0]) if cps else None
        if cps and checkpoint is None:
            self.report.skipped.append(
                f"checkpoint at log position {cps[0].pos}: its context builds on items"
                " that were lost; its transcript batch and execution record are skipped"
                " with it, its events are copied on their own"
            )
        if checkpoint is not None:
            execution = [r for r in commit if r.rtype == EXECUTION]
            record = execution_decoder.decode(execution[0].payload).record if execution else None
            if record is not None:
                record = msgspec.structs.replace(record, session_id=self.report.new_id)
            delta = msgspec.to_builtins(items.items) if items is not None else []
            got = self.store.save_with_events(
                checkpoint, delta, record, [e for _, e in stamped if e is not None]
            )
            self.exists = True
            self.report.saves += 1
            self._map([old for old, e in stamped if e is not None], [g.sequence for g in got])
            return
        if not self.exists:
            self.report.skipped.append(
                f"{len(stamped)} event(s) at log position {commit[0].pos}: no checkpoint"
                " before them could be copied, so the new session does not exist yet"
            )
            return
        for old, event in stamped:
            if event is None:
                continue
            got = self.store.append_event(self.report.new_id, event.recorded_at_ms, event.event)
            self._map([old], [got.sequence])

    def _checkpoint(self, rec: Record) -> Checkpoint | None:
        p = checkpoint_decoder.decode(rec.payload)
        if p.base == 0:
            self.context = [msgspec.msgpack.decode(i) for i in p.items]
        elif self.context is not None and p.epoch == self.epoch and p.base == len(self.context):
            self.context.extend(msgspec.msgpack.decode(i) for i in p.items)
        else:
            self.context = None
            self.epoch = p.epoch
            return None
        self.epoch = p.epoch
        cp = msgspec.msgpack.decode(p.header, type=Checkpoint)
        return msgspec.structs.replace(
            cp, session_id=self.report.new_id, context=list(self.context)
        )

    def _event(
        self, rec: Record, items: TranscriptItemsPayload | None
    ) -> tuple[int, TimestampedEvent | None]:
        p = event_decoder.decode(rec.payload)
        event = p.event
        if p.output_ref is not None:
            batch, index = p.output_ref
            item = None
            if items is not None and items.sequence == batch and 0 <= index < len(items.items):
                item = items.items[index]
            if not isinstance(item, dict) or "output" not in item:
                self.report.skipped.append(
                    f"event {p.sequence}: its output lies in a transcript item that was lost"
                )
                return p.sequence, None
            event = msgspec.structs.replace(event, msg={**event.msg, "output": item["output"]})
        return p.sequence, TimestampedEvent(recorded_at_ms=p.recorded_at_ms, event=event)

    def _map(self, old: list[int], new: list[int]) -> None:
        for o, n in zip(old, new, strict=True):
            runs = self.report.renumbered
            if runs and o == self.last_old + 1 and n == self.last_new + 1:
                a, _, c = runs[-1]
                runs[-1] = (a, o, c)
            else:
                runs.append((o, o, n))
            self.last_old, self.last_new = o, n
            self.report.events += 1


def salvage_session(store: Any, session_id: str, new_id: str) -> SalvageReport:
    """Copy every verifiable commit of `session_id` (damaged or not) into the new
    session `new_id` of the same store, and report what could not be copied."""
    directory = store.session_dir(session_id)
    if not os.path.isdir(directory):
        raise NotFoundError(f"session does not exist: {session_id!r}")
    return salvage_directory(directory, session_id, store, new_id)


def salvage_directory(directory: str, session_id: str, store: Any, new_id: str) -> SalvageReport:
    """`salvage_session` of the session directory `directory` (of any store, or
    none), into the session `new_id` of `store`."""
    if store.read_only:
        raise InvalidInputError("salvage writes a new session: open the store writable")
    log_dir = os.path.join(directory, LOG_DIR)
    if os.path.exists(store.session_dir(new_id)):
        raise InvalidInputError(f"session {new_id!r} exists already: choose another id")
    report = SalvageReport(session_id, new_id)
    found = scan(log_dir)
    report.skipped.extend(str(s) for s in found.skipped)
    copier = _Copier(store, report)
    for commit in found.commits:
        copier.copy(commit)
    if not copier.exists:
        raise CorruptionError(
            f"session {session_id!r}: no checkpoint could be read, so there is nothing"
            " to salvage into a new session",
            path=log_dir,
        )
    return report

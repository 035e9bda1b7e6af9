"""Erase declarations: compaction frees what they name, in every segment, and every
reader keeps working on the stubs it leaves (sequences kept, the journal gap-free)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest

import journal
from journal import Checkpoint, Event, EventPageRequest, TimestampedEvent
from journal.compact import compact_session
from journal.erase import (
    ERASE_KEY,
    ERASED_TYPE,
    erase_declaration,
    erase_event,
    is_erased,
)
from journal.inspect import dir_name, export_sessions, first_damage, import_bundle, verify_store

SID = "erasing"


def note(i: int, size: int = 6000) -> Event:
    text = random.Random(i).randbytes(size // 2).hex()
    return Event(msg={"type": "note", "i": i, "text": text})


def build(root: Path, n: int = 120, **opts: Any) -> journal.Store:
    store = journal.open(root, **opts)
    cp = Checkpoint.empty(SID, owner_id="me")
    cp.first_user_message = "hello"
    store.save_with_events(cp, [{"role": "user", "content": "hello"}], None, [])
    for i in range(n):
        store.append_event(SID, i, note(i))
    return store


def all_events(store: journal.Store, sid: str = SID) -> list[journal.JournalEvent]:
    page = store.event_page(sid, EventPageRequest(limit=100_000))
    return list(reversed(page.events))


def log_bytes(root: Path, sid: str = SID) -> int:
    log = root / "sessions" / dir_name(sid) / "log"
    return sum(os.stat(p).st_blocks * 512 for p in log.iterdir())


def test_a_declaration_frees_the_named_events_of_the_only_segment(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = build(root)
    delta = store.append_event(SID, 0, Event(msg={"type": "token_count", "n": 1}))
    decl = erase_declaration(ranges=[(1, 100)], events=[delta.sequence], types=["note"])
    hide = store.append_event(SID, 1, Event(msg={"type": "app_hide", ERASE_KEY: decl}))
    before = all_events(store)
    loaded = store.load(SID)
    store.close()
    assert len(os.listdir(root / "sessions" / dir_name(SID) / "log")) == 1
    du_before = log_bytes(root)

    directory = str(root / "sessions" / dir_name(SID))
    dry = compact_session(directory, SID, dry_run=True)
    assert dry.erased_events == list(range(1, 101)) and dry.freed > 0
    assert log_bytes(root) == du_before  # a dry run writes nothing

    report = compact_session(directory, SID)
    assert report.rolled and report.segments_rewritten == 1 and report.declarations == 1
    assert report.erased_events == list(range(1, 101))  # not the token_count (a rule kind)
    du_after = log_bytes(root)
    assert du_after < du_before * 0.3, (du_before, du_after)
    assert report.freed == du_before - du_after or report.freed > 0

    store = journal.open(root)
    after = all_events(store)
    assert [e.sequence for e in after] == [e.sequence for e in before]  # gap-free, same numbers
    for old, new in zip(before, after, strict=True):
        if old.sequence <= 100:
            assert is_erased(new) and new.event.msg == {"type": ERASED_TYPE, "erased_type": "note"}
            assert new.recorded_at_ms == old.recorded_at_ms
        else:
            assert new == old
    assert after[-1].sequence == hide.sequence and ERASE_KEY in after[-1].event.msg
    assert store.load(SID) == loaded
    assert store.events_after(SID, 95, 10) == after[95:105]
    nxt = store.append_event(SID, 2, note(999))
    assert nxt.sequence == hide.sequence + 1
    store.close()
    assert first_damage(directory) is None
    findings = [f for _, found in verify_store(str(root)) for f in found]
    assert findings == []
    again = compact_session(directory, SID)
    assert again.erased_events == [] and not again.rolled and again.segments_rewritten == 0


def test_a_declaration_erases_only_what_came_before_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = build(root, n=10)
    # names 1..20, but only 1..10 exist before it: the later ones are never touched
    store.append_event(SID, 0, erase_event(erase_declaration(ranges=[(1, 20)])))
    for i in range(10, 20):
        store.append_event(SID, i, note(i))
    store.append_event(SID, 0, Event(msg={"type": "x", ERASE_KEY: {"ranges": "junk"}}))
    store.close()
    report = compact_session(str(root / "sessions" / dir_name(SID)), SID)
    assert report.erased_events == list(range(1, 11))
    store = journal.open(root)
    evs = all_events(store)
    assert [is_erased(e) for e in evs[:21]] == [True] * 10 + [False] * 11
    store.close()


def test_erased_sessions_export_import_and_fork(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = build(root, n=40)
    store.append_event(SID, 0, erase_event(erase_declaration(ranges=[(1, 30)])))
    store.close()
    compact_session(str(root / "sessions" / dir_name(SID)), SID)
    store = journal.open(root)
    expected = all_events(store)
    cp = store.load(SID)
    assert cp is not None
    child = msgspec.structs.replace(Checkpoint.empty("kid", owner_id="me"), sequence=0)
    store.fork(SID, cp.sequence, child)
    store.close()
    export_sessions(str(root), [SID], str(tmp_path / "b.bundle"))
    other = tmp_path / "other"
    journal.open(other).close()
    import_bundle(str(other), str(tmp_path / "b.bundle"))
    store = journal.open(other)
    assert all_events(store) == expected
    store.close()


def test_checkpoints_named_lose_their_headers_but_not_their_context(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    cp = Checkpoint.empty(SID, owner_id="me")
    saved = []
    for seq in range(8):
        cp = msgspec.structs.replace(
            cp,
            sequence=seq,
            context=[*cp.context, {"turn": seq, "text": "t" * 3000}],
            metadata={"blob": random.Random(seq).randbytes(9000).hex()},
        )
        store.save(cp)
        saved.append(cp)
    store.append_event(SID, 0, erase_event(erase_declaration(checkpoints=[1, 2, 3, 7])))
    store.close()
    report = compact_session(str(root / "sessions" / dir_name(SID)), SID)
    assert report.compacted == [1, 2, 3]  # never the newest (the head `load` returns)
    store = journal.open(root)
    assert store.load(SID) == saved[-1]
    for seq in (0, 4, 5, 6):
        assert store.checkpoint_at(SID, seq) == saved[seq]
    with pytest.raises(journal.NotFoundError, match="compacted"):
        store.checkpoint_at(SID, 2)
    store.close()
    assert first_damage(str(root / "sessions" / dir_name(SID))) is None


def test_many_segments_and_the_saves_between(tmp_path: Path) -> None:
    """Sealed segments of 64 KiB, saves with context between the erased events."""
    root = tmp_path / "s"
    store = journal.open(root, segment_bytes=64 << 10)
    cp = Checkpoint.empty(SID, owner_id="me")
    for seq in range(60):
        cp = msgspec.structs.replace(
            cp, sequence=seq, context=[*cp.context, {"turn": seq, "text": "c" * 500}]
        )
        ev = TimestampedEvent(recorded_at_ms=seq, event=note(seq, 3000))
        store.save_with_events(cp, [{"t": seq}], None, [ev])
        store.append_event(SID, seq, note(-seq, 5000))
    decl = erase_declaration(ranges=[(1, 110)], types=["note"])
    store.append_event(SID, 0, Event(msg={"type": "hide", ERASE_KEY: decl}))
    before = all_events(store)
    ctx = {s: store.checkpoint_at(SID, s) for s in (0, 10, 30, 59)}
    store.close()
    du_before = log_bytes(root)
    directory = str(root / "sessions" / dir_name(SID))
    report = compact_session(directory, SID)
    assert report.segments_rewritten > 3 and report.segments_skipped == 0
    assert log_bytes(root) < du_before * 0.6, (du_before, log_bytes(root))
    store = journal.open(root)
    after = all_events(store)
    assert [e.sequence for e in after] == [e.sequence for e in before]
    assert all(is_erased(a) == (b.sequence <= 110) for a, b in zip(after, before, strict=True))
    assert all(a == b for a, b in zip(after, before, strict=True) if b.sequence > 110)
    for s, c in ctx.items():
        assert store.checkpoint_at(SID, s) == c  # context chains followed their targets
    store.close()
    assert first_damage(directory) is None


def test_a_checkpoint_that_grows_when_re_encoded_pins_its_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint whose `prev_ctx` target moved is re-encoded; when that makes it
    larger than the bytes it had (here: always, stored uncompressed) and nothing after
    it gives them back (the newest checkpoint, followed by no erased record), its
    target is pinned instead and the segment still packs."""
    from journal import compact
    from journal.record import CHECKPOINT, frame

    def uncompressed(self: Any, payload: bytes, flags: int, size: int) -> bytes:
        return frame(CHECKPOINT, payload, commit=False, compress=False)

    monkeypatch.setattr(compact._Plan, "_smallest", uncompressed)  # internal: forces growth
    root = tmp_path / "s"
    store = journal.open(root)
    cp = Checkpoint.empty(SID, owner_id="me")
    for seq in range(12):
        cp = msgspec.structs.replace(
            cp, sequence=seq, context=[*cp.context, {"turn": seq, "text": "x" * 4000}]
        )
        store.save_with_events(
            cp, [], None, [TimestampedEvent(recorded_at_ms=seq, event=note(seq))]
        )
    store.append_event(SID, 0, erase_event(erase_declaration(ranges=[(1, 12)], types=["note"])))
    expected = {s: store.checkpoint_at(SID, s) for s in range(12)}
    store.close()
    directory = str(root / "sessions" / dir_name(SID))
    report = compact_session(directory, SID)
    assert report.segments_rewritten == 1 and report.segments_skipped == 0
    assert report.erased_events == list(range(1, 13))
    store = journal.open(root)
    assert {s: store.checkpoint_at(SID, s) for s in range(12)} == expected
    assert store.load(SID) == cp
    store.close()
    assert first_damage(directory) is None

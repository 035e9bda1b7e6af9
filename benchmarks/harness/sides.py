"""The stores under test, behind one small adapter each, and the payloads they share.

`Side` is the set of calls every workload makes; `JournalSide` runs them on `journal`,
`SqliteSide` on mobius's schema (`sqlite_mobius.py`), `TunedSide` on the tuned SQLite store
(`sqlite_tuned.py`). Payloads are built once as plain JSON (`payloads.py`) and converted to
journal's types outside every timed region (`Ev`, `Save`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import msgspec
import payloads
from sqlite_mobius import SqliteMobiusStore, Synchronous
from sqlite_tuned import SqliteTunedStore

import journal

from .disk import disk_usage

Json = Any
BULK_REOPEN = 2000
"""Sessions a journal bulk loop writes per store object (files it keeps open)."""
BULK_BATCH = 1000
"""Saves per transaction in the tuned SQLite bulk path."""


class Mode(NamedTuple):
    name: str
    durability: str  # journal.open(durability=...)
    synchronous: Synchronous  # SQLite PRAGMA synchronous

    @property
    def label(self) -> str:
        return f"[{self.name}]"

    @property
    def legend(self) -> str:
        return f"[{self.name}] = journal {self.durability!r} vs SQLite {self.synchronous}"


DURABLE = Mode("durable", "fsync", "FULL")
OS_ONLY = Mode("os", "os", "NORMAL")
MODES = (DURABLE, OS_ONLY)
# Store options beyond the mode (`--no-dictionary` sets dictionary=False)
JOURNAL_OPTIONS: dict[str, Any] = {}


# ----------------------------------------------------------------------------------- payloads


class Ev(NamedTuple):
    """One event, as plain JSON for SQLite and as a `journal.Event`."""

    at: int
    plain: dict[str, Json]
    typed: journal.Event


class Save(NamedTuple):
    """The arguments of one save, as plain JSON for SQLite and typed for journal."""

    plain: payloads.SaveArgs
    typed: tuple[Any, ...]

    @property
    def session_id(self) -> str:
        session_id: str = self.plain.checkpoint["session_id"]
        return session_id


def typed_save(args: payloads.SaveArgs) -> Save:
    return Save(
        args,
        args.convert(
            journal.Checkpoint,
            execution_type=journal.ExecutionRecord,
            timestamped_event_type=journal.TimestampedEvent,
        ),
    )


def make_events(
    gen: payloads.PayloadGenerator, session_id: str, n: int, kind: str | None = None
) -> list[Ev]:
    return [
        Ev(at, event, payloads.convert(event, journal.Event))
        for at, event in gen.timestamped_events(session_id, n, kind)
    ]


def json_size(value: Json) -> int:
    return len(msgspec.json.encode(value))


# ----------------------------------------------------------------------------------- adapters


class Side(Protocol):
    """The same calls on every store (a thin adapter; results are reduced to small tuples)."""

    name: str

    def save(self, save: Save) -> None: ...
    def save_events(self, save: Save, sequence: int, events: Sequence[Ev]) -> None: ...
    def append(self, session_id: str, event: Ev) -> None: ...
    def event_page(self, session_id: str, before: int | None, limit: int) -> tuple[int, Any]: ...
    def load(self, session_id: str) -> int: ...
    def transcript_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]: ...
    def execution_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]: ...
    def list_sessions_page(self, cursor: Any, limit: int) -> tuple[int, Any]: ...
    def recent_executions(self, limit: int) -> int: ...
    def fork(self, parent: str, sequence: int, child: Save) -> None: ...
    def delete_sessions(self, session_ids: list[str]) -> bool: ...
    def save_state(self, scope: str, key: str, value: Json) -> None: ...
    def load_state(self, scope: str, key: str) -> Json: ...
    def bulk_create(self, saves: Sequence[Save]) -> None: ...
    def settle(self) -> None: ...
    def close(self) -> None: ...
    def disk(self) -> int: ...


class JournalSide:
    name = "journal"

    def __init__(self, root: Path, mode: Mode) -> None:
        self.root = root
        self.mode = mode
        self.store = journal.open(root, durability=mode.durability, **JOURNAL_OPTIONS)

    def save(self, save: Save) -> None:
        self.store.save_with_events(*save.typed)

    def save_events(self, save: Save, sequence: int, events: Sequence[Ev]) -> None:
        checkpoint = msgspec.structs.replace(save.typed[0], sequence=sequence)
        batch = [journal.TimestampedEvent(recorded_at_ms=e.at, event=e.typed) for e in events]
        self.store.save_with_events(checkpoint, [], None, batch)

    def append(self, session_id: str, event: Ev) -> None:
        self.store.append_event(session_id, event.at, event.typed)

    def event_page(self, session_id: str, before: int | None, limit: int) -> tuple[int, Any]:
        request = journal.EventPageRequest(limit=limit, before_sequence=before)
        page = self.store.event_page(session_id, request)
        return len(page.events), page.next_before_sequence

    def load(self, session_id: str) -> int:
        checkpoint = self.store.load(session_id)
        assert checkpoint is not None
        return len(checkpoint.context)

    def transcript_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        request = journal.TranscriptPageRequest(max_batches=n, before_sequence=before)
        page = self.store.transcript_page(session_id, request)
        return len(page.batches), page.next_before_sequence

    def execution_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        request = journal.ExecutionPageRequest(limit=n, before_sequence=before)
        page = self.store.execution_page(session_id, request)
        return len(page.executions), page.next_before_sequence

    def list_sessions_page(self, cursor: Any, limit: int) -> tuple[int, Any]:
        request = journal.SessionPageRequest(limit=limit, cursor=cursor)
        page = self.store.list_sessions_page(request)
        return len(page.sessions), page.next_cursor

    def recent_executions(self, limit: int) -> int:
        return len(self.store.recent_executions(limit))

    def fork(self, parent: str, sequence: int, child: Save) -> None:
        self.store.fork(parent, sequence, child.typed[0])

    def delete_sessions(self, session_ids: list[str]) -> bool:
        return bool(self.store.delete_sessions(session_ids))

    def save_state(self, scope: str, key: str, value: Json) -> None:
        self.store.save_state(scope, key, value)

    def load_state(self, scope: str, key: str) -> Json:
        return self.store.load_state(scope, key)

    def bulk_create(self, saves: Sequence[Save]) -> None:
        """journal has no bulk API: the best loop is `save_with_events` per session, the
        store reopened every BULK_REOPEN sessions (it keeps files of the sessions it wrote
        open until close)."""
        for i, save in enumerate(saves):
            if i and i % BULK_REOPEN == 0:
                self.store.close()
                self.store = journal.open(
                    self.root, durability=self.mode.durability, **JOURNAL_OPTIONS
                )
            self.store.save_with_events(*save.typed)

    def settle(self) -> None:
        """Wait for background work (spare session directories being prepared after a
        fork or first save), untimed, so that it never overlaps the other side's turn or
        a timed section that follows untimed setup."""
        self.store.spares.wait()

    def close(self) -> None:
        self.store.close()

    def disk(self) -> int:
        """Allocated bytes of the store (`du`), after a clean close flushed the caches."""
        self.store.close()
        size = disk_usage(self.root)
        self.store = journal.open(self.root, durability=self.mode.durability, **JOURNAL_OPTIONS)
        return size


class SqliteSide:
    """mobius's schema (`sqlite_mobius.py`)."""

    name = "mobius"
    store: SqliteMobiusStore | SqliteTunedStore

    def __init__(self, root: Path, mode: Mode) -> None:
        self.root = root
        self.store = SqliteMobiusStore(root / "mobius.sqlite", mode.synchronous)

    def save(self, save: Save) -> None:
        self.store.save_with_events(*save.plain)

    def save_events(self, save: Save, sequence: int, events: Sequence[Ev]) -> None:
        checkpoint = dict(save.plain.checkpoint, sequence=sequence)
        self.store.save_with_events(checkpoint, [], None, [(e.at, e.plain) for e in events])

    def append(self, session_id: str, event: Ev) -> None:
        self.store.append_event(session_id, event.at, event.plain)

    def event_page(self, session_id: str, before: int | None, limit: int) -> tuple[int, Any]:
        page = self.store.event_page(session_id, before, limit)
        return len(page.events), page.next_before_sequence

    def load(self, session_id: str) -> int:
        checkpoint = self.store.load(session_id)
        assert checkpoint is not None
        return len(checkpoint["context"])

    def transcript_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        page = self.store.transcript_page(session_id, before, n)
        return len(page.batches), page.next_before_sequence

    def execution_page(self, session_id: str, before: int | None, n: int) -> tuple[int, Any]:
        page = self.store.execution_page(session_id, before, n)
        return len(page.executions), page.next_before_sequence

    def list_sessions_page(self, cursor: Any, limit: int) -> tuple[int, Any]:
        page = self.store.list_sessions_page(None, cursor, limit)
        return len(page.sessions), page.next_cursor

    def recent_executions(self, limit: int) -> int:
        return len(self.store.recent_executions(limit))

    def fork(self, parent: str, sequence: int, child: Save) -> None:
        self.store.fork(parent, sequence, child.plain.checkpoint)

    def delete_sessions(self, session_ids: list[str]) -> bool:
        return self.store.delete_sessions(session_ids)

    def save_state(self, scope: str, key: str, value: Json) -> None:
        self.store.save_state(scope, key, value)

    def load_state(self, scope: str, key: str) -> Json:
        return self.store.load_state(scope, key)

    def bulk_create(self, saves: Sequence[Save]) -> None:
        """mobius has no bulk API either: one save (one transaction) per session."""
        for save in saves:
            self.store.save_with_events(*save.plain)

    def settle(self) -> None:
        """Nothing runs in the background."""

    def close(self) -> None:
        self.store.close()

    def disk(self) -> int:
        """Allocated bytes of the database and its WAL (`du`), after a TRUNCATE checkpoint."""
        self.store.disk_bytes()
        return disk_usage(self.root)


class TunedSide(SqliteSide):
    """The tuned SQLite store (`sqlite_tuned.py`): the same calls, the same plain payloads."""

    name = "tuned"

    def __init__(self, root: Path, mode: Mode) -> None:
        self.root = root
        self.store = SqliteTunedStore(root / "tuned.sqlite", mode.synchronous)

    def bulk_create(self, saves: Sequence[Save]) -> None:
        """SQLite's bulk path: `save_many`, BULK_BATCH saves per transaction."""
        store = self.store
        assert isinstance(store, SqliteTunedStore)
        for start in range(0, len(saves), BULK_BATCH):
            store.save_many([save.plain for save in saves[start : start + BULK_BATCH]])


SideFactory = Callable[[Path, Mode], Side]
SIDES: dict[str, SideFactory] = {"journal": JournalSide, "mobius": SqliteSide, "tuned": TunedSide}
"""Every store a workload runs, in the order of the table's columns."""
BASELINES = ("mobius", "tuned")
SQLITE_SIDES = (SqliteSide, TunedSide)

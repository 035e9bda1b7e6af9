"""Hostile input: odd session ids, values JSON cannot hold, oversized records, wrong types.

Every rejection must be a `journal.JournalError` subclass (no msgspec, OS or type
error escapes), and a rejected call must change nothing: the same answers from
every read method and the same files with the same bytes. Session ids of any
shape map to directories under `ROOT/sessions/` with portable names.
"""

from __future__ import annotations

import hashlib
import math
import os
import unicodedata
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import helpers
import msgspec
import pytest
from helpers import active_execution, event, incompressible, stamped

import journal
from journal import (
    CHECKPOINT_VERSION,
    Checkpoint,
    ContractViolationError,
    Event,
    EventPageRequest,
    ExecutionPageRequest,
    ExecutionRecord,
    InvalidInputError,
    JournalError,
    NotFoundError,
    QueuedMessage,
    TranscriptPageRequest,
)

replace = msgspec.structs.replace

# --- helpers -----------------------------------------------------------------------------


@pytest.fixture
def fast_store(root: Path) -> Iterator[journal.Store]:
    """For the large parametrised tables: one durability mode is enough there."""
    s = journal.open(root, durability="os")
    yield s
    s.close()


BASE = [{"type": "message", "text": "hello"}]
"""The context of the baseline session; later checkpoints keep it as their prefix."""


def checkpoint(
    session_id: Any, sequence: Any = 0, context: list[Any] | None = None, **fields: Any
) -> Checkpoint:
    """A valid idle checkpoint; the context defaults to BASE."""
    return helpers.checkpoint(
        session_id, sequence, BASE if context is None else context, owner="owner-1", **fields
    )


def execution(session_id: str = "s", **changes: Any) -> ExecutionRecord:
    """Turn 1 of `session_id`, from 1,000 ms to 2,000 ms, with `changes`."""
    fields = {"author": {"type": "user"}, **changes}
    return helpers.execution(session_id, 1, started=1_000, elapsed=1_000, **fields)


RUNTIME_DIRS = ("procs",)
"""Per-process registrations of the live Store (removed on close): runtime, not stored data."""


def _runtime(rel: str) -> bool:
    """Runtime paths, not stored data: process registrations, and the spare session
    directories a live Store prepares in tmp/ (journal/spares.py; removed on close)."""
    parts = rel.split(os.sep)
    return parts[0] in RUNTIME_DIRS or (
        parts[0] == "tmp" and len(parts) > 1 and parts[1].startswith("spare-")
    )


def file_tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under root: (size, sha256); lock files are compared by size only."""
    out: dict[str, tuple[int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if _runtime(os.path.relpath(dirpath, root)):
            continue
        for name in dirnames:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if not _runtime(rel):
                out[rel + "/"] = (0, "dir")
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                data = f.read()
            digest = "" if name == "LOCK" else hashlib.sha256(data).hexdigest()
            out[os.path.relpath(path, root)] = (len(data), digest)
    return out


def answers(store: journal.Store, session_ids: list[str]) -> Any:
    """What every read method says about these sessions, as plain data."""
    out: dict[str, Any] = {}
    for sid in session_ids:
        cp = store.load(sid)
        top = cp.sequence if cp is not None else 0
        try:
            events: Any = msgspec.to_builtins(store.event_page(sid, EventPageRequest(limit=1000)))
        except NotFoundError:
            events = "missing"
        out[sid] = {
            "load": msgspec.to_builtins(cp),
            "history": [msgspec.to_builtins(store.checkpoint_at(sid, q)) for q in range(top + 2)],
            "events": events,
            "events_after": msgspec.to_builtins(store.events_after(sid, 0, 1000)),
            "transcript": msgspec.to_builtins(
                store.transcript_page(sid, TranscriptPageRequest(max_batches=1000))
            ),
            "executions": msgspec.to_builtins(
                store.execution_page(sid, ExecutionPageRequest(limit=1000))
            ),
            "receipts": [store.message_accepted(sid, m) for m in ("m0", "m1", "m2")],
            "state": store.load_state(sid, "k"),
        }
    return out


SESSIONS = ["s", "new"]


def baseline(store: journal.Store) -> None:
    """Session "s" at sequence 0 with context, a transcript batch, an event and state."""
    store.save_with_events(
        checkpoint(
            "s",
            0,
            BASE,
            pending_messages=[QueuedMessage(owner="owner-1", id="m0")],
        ),
        list(BASE),
        None,
        [stamped(1, event("warning", message="one"))],
    )
    store.save_state("s", "k", {"v": 1})


class Unchanged:
    """Captures answers and files, then checks nothing changed (plus no escape from root)."""

    def __init__(self, store: journal.Store, root: Path, sessions: list[str] = SESSIONS):
        self.store, self.root, self.sessions = store, root, sessions
        # Background work of earlier calls (spares, a new session's warm-up, which
        # preallocates its segment) settles first: it is not the rejected call's doing.
        store.spares.wait()
        self.answers = answers(store, sessions)
        self.files = file_tree(root)

    def check(self) -> None:
        assert answers(self.store, self.sessions) == self.answers
        assert file_tree(self.root) == self.files
        assert sorted(os.listdir(self.root.parent)) == [self.root.name]


def rejects(kind: type[JournalError], call: Callable[[], Any]) -> JournalError:
    """`call` must raise exactly a `kind` (a JournalError); anything else fails the test."""
    try:
        call()
    except JournalError as exc:
        assert isinstance(exc, kind), f"expected {kind.__name__}, got {type(exc).__name__}: {exc}"
        return exc
    except BaseException as exc:
        pytest.fail(f"{type(exc).__module__}.{type(exc).__name__} escaped: {exc!r}")
    pytest.fail(f"expected {kind.__name__}, the call succeeded")


# --- session ids -------------------------------------------------------------------------

WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {
    f"{port}{n}" for port in ("COM", "LPT") for n in "123456789"
}
UNSAFE_CHARS = set('<>:"/\\|?*') | {chr(c) for c in range(32)} | {"\x7f"}

HOSTILE_IDS = {
    "dotdot-slash-x": "../x",
    "deep-traversal": "../../../../etc/passwd",
    "slash": "/",
    "absolute": "/tmp/evil",
    "dot": ".",
    "dotdot": "..",
    "dotfile": ".hidden",
    "nul-inside": "a\x00b",
    "backslash-traversal": "..\\..\\x",
    "drive": "C:\\Windows",
    "subdir": "a/b",
    "trailing-dot": "x.",
    "trailing-space": "x ",
    "control-chars": "a\nb\tc\x1b",
    "windows-unsafe": '*?<>|:"',
    "tilde": "~",
    "store-names": "sessions",
    "manifest-name": "JOURNAL",
    "CON": "CON",
    "nul": "nul",
    "com1": "COM1",
    "lpt9-ext": "lpt9.txt",
    "aux-ext": "AUX.json",
    "unicode": "séssion-日本語",
    "emoji": "🦀💾🚀",
    "rtl": "\u202eevil",
    "zero-width": "a\u200bb",
    "4096-ascii": "a" * 4096,
    "4096-two-byte": "é" * 2048,
    "4096-four-byte": "🦀" * 1024,
    "long-dots": "." * 300,
    "long-slashes": "/" * 4096,
}


def check_safe_name(name: str) -> None:
    assert name, "empty path component"
    assert not name.startswith("."), name
    assert not set(name) & UNSAFE_CHARS, name
    assert not name.endswith((".", " ")), name
    assert name.split(".")[0].upper() not in WINDOWS_RESERVED, name
    assert len(name.encode("utf-8")) <= 255, name


def check_created_paths(
    root: Path,
    before: set[str],
    *,
    under: str,
    store_level: AbstractSet[str] = frozenset(),
) -> list[str]:
    """Every new path is inside the root, has a portable name, and is under ROOT/<under>/.

    `store_level` lists the paths outside `under` that the same calls create for a
    plain id (derived store-level files such as a catalog): those may appear too,
    because their names do not depend on the id.
    """
    assert sorted(os.listdir(root.parent)) == [root.name], "something was created beside the root"
    real_root = os.path.realpath(root)
    created = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            assert not os.path.islink(path), rel
            assert os.path.realpath(path).startswith(real_root + os.sep), rel
            if rel in before:
                continue
            created.append(rel)
            parts = rel.split(os.sep)
            assert parts[0] == under or rel in store_level or _runtime(rel), (
                f"{rel} is not under {under}/"
            )
            for part in parts:
                check_safe_name(part)
    left = [n for n in os.listdir(root / "tmp") if not _runtime(os.path.join("tmp", n))]
    assert left == [], "work directories left behind in tmp/"
    return created


def store_level_paths(
    factory: pytest.TempPathFactory, under: str, action: Callable[[journal.Store], Any]
) -> set[str]:
    """Paths outside ROOT/<under>/ that `action` creates in a fresh store (a control run)."""
    root = factory.mktemp("control") / "store"
    store = journal.open(root, durability="os")
    before = initial_paths(root)
    action(store)
    store.close()
    return {p for p in initial_paths(root) - before if p.split(os.sep)[0] != under}


def initial_paths(root: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def exercise(store: journal.Store, sid: str) -> None:
    """Every session method on one id; each answer must belong to that id."""
    cp = checkpoint(sid, 0, [{"id": sid}], pending_messages=[QueuedMessage(owner="o", id="m1")])
    got = store.save_with_events(cp, [{"id": sid}], None, [stamped(1, event(message=sid))])
    assert [e.sequence for e in got] == [1]
    store.save(checkpoint(sid, 1, [{"id": sid}, "more"]), ["more"], execution(sid))
    assert store.append_event(sid, 2, event(message="two")).sequence == 2
    assert store.load(sid) == checkpoint(sid, 1, [{"id": sid}, "more"])
    assert store.checkpoint_at(sid, 0) == cp
    page = store.event_page(sid, EventPageRequest(limit=10))
    assert [e.event.msg["message"] for e in page.events] == ["two", sid]
    assert [e.sequence for e in store.events_after(sid, 0, 10)] == [1, 2]
    batches = store.transcript_page(sid, TranscriptPageRequest(max_batches=10)).batches
    assert [b.items for b in batches] == [["more"], [{"id": sid}]]
    assert store.execution_page(sid, ExecutionPageRequest(limit=5)).executions == [execution(sid)]
    assert store.message_accepted(sid, "m1") is True


@pytest.mark.parametrize("sid", list(HOSTILE_IDS.values()), ids=list(HOSTILE_IDS))
def test_hostile_session_id_stays_inside_sessions_dir(
    root: Path, fast_store: journal.Store, sid: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    allowed = store_level_paths(tmp_path_factory, "sessions", lambda s: exercise(s, "control"))
    before = initial_paths(root)
    exercise(fast_store, sid)
    fast_store.close()
    created = check_created_paths(root, before, under="sessions", store_level=allowed)
    created = [p for p in created if p.split(os.sep)[0] == "sessions"]
    session_dirs = {p.split(os.sep)[1] for p in created}
    assert len(session_dirs) == 1
    reopened = journal.open(root, durability="os")
    assert reopened.load(sid) == checkpoint(sid, 1, [{"id": sid}, "more"])
    assert [e.sequence for e in reopened.events_after(sid, 0, 10)] == [1, 2]
    reopened.close()


def test_hostile_ids_are_all_distinct_sessions(
    root: Path, store: journal.Store, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ids = [
        *HOSTILE_IDS.values(),
        "Abc",
        "abc",
        "ABC",
        "con",
        "Con",
        "\u00e9",  # é, precomposed (NFC)
        "e\u0301",  # é, decomposed (NFD)
        "a" * 4095,
        "a" * 4095 + "A",
    ]
    assert len(set(ids)) == len(ids)

    def write(s: journal.Store, session_ids: list[str]) -> None:
        for n, sid in enumerate(session_ids):
            s.save(checkpoint(sid, n, [{"n": n}]), [{"n": n}])
            s.append_event(sid, n, event(message=str(n)))

    allowed = store_level_paths(
        tmp_path_factory, "sessions", lambda s: write(s, [f"control-{n}" for n in range(3)])
    )
    before = initial_paths(root)
    write(store, ids)
    created = check_created_paths(root, before, under="sessions", store_level=allowed)
    session_dirs = {p.split(os.sep)[1] for p in created if p.startswith("sessions" + os.sep)}
    assert len(session_dirs) == len(ids)
    # Portable: still distinct on case-insensitive, normalising filesystems.
    folded = {unicodedata.normalize("NFC", d).casefold() for d in session_dirs}
    assert len(folded) == len(ids)
    for n, sid in enumerate(ids):
        assert store.load(sid) == checkpoint(sid, n, [{"n": n}]), repr(sid)[:40]
        assert [e.event.msg["message"] for e in store.events_after(sid, 0, 10)] == [str(n)]


def test_ids_differing_only_in_case_stay_distinct(store: journal.Store) -> None:
    store.save(checkpoint("Abc", 0, ["upper"]))
    store.save(checkpoint("abc", 5, ["lower"]))
    store.save_state("Abc", "k", "upper")
    store.save_state("abc", "k", "lower")
    assert store.load("Abc") == checkpoint("Abc", 0, ["upper"])
    assert store.load("abc") == checkpoint("abc", 5, ["lower"])
    assert store.load("ABC") is None
    assert store.load_state("Abc", "k") == "upper"
    assert store.load_state("abc", "k") == "lower"
    assert store.load_state("ABC", "k") is None
    # Advancing one does not advance the other.
    store.save(checkpoint("Abc", 1, ["upper"]))
    rejects(ContractViolationError, lambda: store.save(checkpoint("abc", 5, ["lower"])))


@pytest.mark.parametrize("name", ["CON", "nul", "Aux", "com1", "LPT1", "con.txt", "PRN"])
def test_windows_device_names_work(root: Path, store: journal.Store, name: str) -> None:
    before = initial_paths(root)  # every name created, store-level ones included, is portable
    store.save(checkpoint(name, 0, [name]))
    store.save_state(name, name, name)
    assert store.load(name) == checkpoint(name, 0, [name])
    assert store.load_state(name, name) == name
    assert store.load(name.swapcase()) is None
    for rel in initial_paths(root) - before:
        for part in rel.split(os.sep):
            check_safe_name(part)


ID_LIMIT_CASES = {
    "ascii": ("a" * 4096, "a" * 4097),
    "two-byte": ("é" * 2048, "é" * 2048 + "a"),
    "four-byte": ("🦀" * 1024, "🦀" * 1023 + "é" * 2 + "a"),
    "three-byte-straddle": ("€" * 1365 + "a", "€" * 1366),
}


@pytest.mark.parametrize("ok, too_long", list(ID_LIMIT_CASES.values()), ids=list(ID_LIMIT_CASES))
def test_session_id_4096_bytes_ok_4097_rejected(
    root: Path, fast_store: journal.Store, ok: str, too_long: str
) -> None:
    assert len(ok.encode()) == 4096
    assert len(too_long.encode()) in (4097, 4098)
    fast_store.save(checkpoint(ok, 0, [1]))
    fast_store.append_event(ok, 1, event())
    assert fast_store.load(ok) == checkpoint(ok, 0, [1])
    unchanged = Unchanged(fast_store, root, [ok])
    for call in session_calls(fast_store, too_long):
        rejects(InvalidInputError, call)
    unchanged.check()


def session_calls(store: journal.Store, sid: Any) -> list[Callable[[], Any]]:
    """Every method taking a session id (or state scope/key), called with `sid`."""
    return [
        lambda: store.load(sid),
        lambda: store.save(checkpoint(sid, 0)),
        lambda: store.save_with_events(checkpoint(sid, 0), [], None, [stamped(1, event())]),
        lambda: store.append_event(sid, 1, event()),
        lambda: store.event_page(sid, EventPageRequest(limit=1)),
        lambda: store.events_after(sid, 0, 1),
        lambda: store.message_accepted(sid, "m1"),
        lambda: store.transcript_page(sid, TranscriptPageRequest(max_batches=1)),
        lambda: store.execution_page(sid, ExecutionPageRequest(limit=1)),
        lambda: store.checkpoint_at(sid, 0),
        lambda: store.load_state(sid, "k"),
        lambda: store.load_state("s", sid),
        lambda: store.save_state(sid, "k", 1),
        lambda: store.save_state("s", sid, 1),
    ]


BAD_IDS = {
    "empty": "",
    "space": " ",
    "whitespace": "\t\n\u3000",
    "lone-surrogate": "a\ud800b",
    "int": 5,
    "none": None,
    "bytes": b"abc",
    "list": ["a"],
    "float": 1.5,
    "path": Path("abc"),
}


@pytest.mark.parametrize("sid", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_bad_session_ids_rejected_everywhere(
    root: Path, fast_store: journal.Store, sid: Any
) -> None:
    """Blank, non-UTF-8 and non-string ids: InvalidInputError from every method."""
    baseline(fast_store)
    unchanged = Unchanged(fast_store, root)
    for call in session_calls(fast_store, sid):
        rejects(InvalidInputError, call)
    unchanged.check()


def test_state_scopes_and_keys_stay_inside_state_dir(
    root: Path, store: journal.Store, tmp_path_factory: pytest.TempPathFactory
) -> None:
    allowed = store_level_paths(tmp_path_factory, "state", lambda s: s.save_state("c", "k", 1))
    before = initial_paths(root)
    names = ["../x", "/", ".", "..", "a\x00b", "CON", "Abc", "abc", "🦀", "k" * 4096]
    for scope in names:
        for key in names:
            store.save_state(scope, key, [scope, key])
    for scope in names:
        for key in names:
            assert store.load_state(scope, key) == [scope, key]
    check_created_paths(root, before, under="state", store_level=allowed)


# --- values JSON cannot hold -------------------------------------------------------------


def _cycle() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


BAD_VALUES = {
    "nan": float("nan"),
    "inf": math.inf,
    "-inf": -math.inf,
    "bytes": b"\x00\x01",
    "bytearray": bytearray(b"x"),
    "set": {1, 2},
    "frozenset": frozenset({1}),
    "object": object(),
    "tuple": (1, 2),
    "complex": 1j,
    "int-too-big": 2**64,
    "int-too-small": -(2**63) - 1,
    "non-str-key": {1: "a"},
    "tuple-key": {(1, 2): "a"},
    "lone-surrogate": "a\udc80",
    "surrogate-key": {"\ud800": 1},
    "cycle": _cycle(),
    "too-deep": _deep(10_000),
    "path": Path("/etc"),
    "type": int,
}


def _pending_tool(bad: Any) -> Checkpoint:
    tool = {"call_id": "c", "name": "n", "arguments": bad}
    return checkpoint("s", 1, active_execution=active_execution(), pending_tools=[tool])


def _queued(bad: Any) -> Checkpoint:
    message = QueuedMessage(owner="owner-1", id="m1", message=bad)
    return checkpoint("s", 1, pending_messages=[message])


# Where a bad value can hide: each entry calls the store with `bad` placed there.
PLACES: dict[str, Callable[[journal.Store, Any], Any]] = {
    "context-tail": lambda s, bad: s.save(checkpoint("s", 1, [*BASE, {"v": bad}])),
    "context-new-session": lambda s, bad: s.save(checkpoint("new", 0, [bad])),
    "metadata": lambda s, bad: s.save(checkpoint("s", 1, metadata={"v": bad})),
    "metadata-new-session": lambda s, bad: s.save(checkpoint("new", 0, metadata={"v": bad})),
    "transcript": lambda s, bad: s.save(checkpoint("s", 1), [{"v": bad}]),
    "transcript-item": lambda s, bad: s.save(checkpoint("new", 0), [bad]),
    "state": lambda s, bad: s.save_state("s", "k", {"v": bad}),
    "state-new-key": lambda s, bad: s.save_state("new", "k", bad),
    "append-event": lambda s, bad: s.append_event("s", 5, event(message=bad)),
    "event-in-save": lambda s, bad: s.save_with_events(
        checkpoint("s", 1), [], None, [stamped(5, event()), stamped(6, event(payload=[bad]))]
    ),
    "event-in-first-save": lambda s, bad: s.save_with_events(
        checkpoint("new", 0), [], None, [stamped(5, event(payload={"x": bad}))]
    ),
    "execution-author": lambda s, bad: s.save(
        checkpoint("s", 1), [], execution("s", author={"name": bad})
    ),
    "pending-tools": lambda s, bad: s.save(_pending_tool(bad)),
    "active-execution": lambda s, bad: s.save(
        checkpoint("s", 1, active_execution=active_execution(extra=bad))
    ),
    "last-context-rewrite": lambda s, bad: s.save(
        checkpoint("s", 1, last_context_rewrite={"epoch": 0, "reasons": [bad]})
    ),
    "queued-message": lambda s, bad: s.save(_queued(bad)),
}


@pytest.mark.parametrize("bad", list(BAD_VALUES.values()), ids=list(BAD_VALUES))
@pytest.mark.parametrize("place", list(PLACES))
def test_non_json_values_rejected_nothing_changed(
    root: Path, fast_store: journal.Store, place: str, bad: Any
) -> None:
    baseline(fast_store)
    unchanged = Unchanged(fast_store, root)
    rejects(InvalidInputError, lambda: PLACES[place](fast_store, bad))
    unchanged.check()
    # The store still takes a valid write afterwards.
    fast_store.save(checkpoint("s", 1, [*BASE, "ok"]))


def test_non_json_value_at_a_stored_prefix_position_rejected(
    root: Path, store: journal.Store
) -> None:
    """A bad value where the stored prefix has another item: an error either way."""
    baseline(store)
    unchanged = Unchanged(store, root)
    for bad in (float("nan"), b"x", {1}, object(), (1, 2)):
        exc = rejects(JournalError, lambda bad=bad: store.save(checkpoint("s", 1, [{"v": bad}])))
        assert isinstance(exc, (InvalidInputError, ContractViolationError))
    unchanged.check()


@pytest.mark.parametrize("bad", [float("nan"), math.inf, b"x", {1}, object()], ids=str)
def test_non_json_values_rejected_in_both_durability_modes(
    root: Path, store: journal.Store, bad: Any
) -> None:
    baseline(store)
    unchanged = Unchanged(store, root)
    rejects(InvalidInputError, lambda: store.save(checkpoint("s", 1, [*BASE, {"v": bad}])))
    rejects(InvalidInputError, lambda: store.append_event("s", 2, event(message=bad)))
    rejects(InvalidInputError, lambda: store.save_state("s", "k", bad))
    unchanged.check()


# --- oversized records -------------------------------------------------------------------

LIMIT = 4096


OVERSIZED: dict[str, Callable[[journal.Store], Any]] = {
    "context": lambda s: s.save(checkpoint("s", 1, [*BASE, incompressible(3 * LIMIT)])),
    "context-new-session": lambda s: s.save(checkpoint("new", 0, [incompressible(3 * LIMIT)])),
    "metadata": lambda s: s.save(checkpoint("s", 1, metadata={"x": incompressible(3 * LIMIT)})),
    "transcript": lambda s: s.save(checkpoint("s", 1), [incompressible(3 * LIMIT)]),
    "transcript-new-session": lambda s: s.save(checkpoint("new", 0), [incompressible(3 * LIMIT)]),
    "execution": lambda s: s.save(
        checkpoint("s", 1), [], execution("s", author=incompressible(3 * LIMIT))
    ),
    "event-in-save": lambda s: s.save_with_events(
        checkpoint("s", 1),
        ["small"],
        None,
        [stamped(2, event()), stamped(3, event(message=incompressible(3 * LIMIT)))],
    ),
    "append-event": lambda s: s.append_event("s", 2, event(message=incompressible(3 * LIMIT))),
    "many-small-items": lambda s: s.save(
        checkpoint("s", 1, [*BASE, *[incompressible(64) for _ in range(200)]])
    ),
}


@pytest.mark.parametrize("case", list(OVERSIZED))
def test_oversized_record_rejected_nothing_changed(root: Path, case: str) -> None:
    store = journal.open(root, durability="os", max_record_bytes=LIMIT)
    try:
        baseline(store)
        unchanged = Unchanged(store, root)
        rejects(InvalidInputError, lambda: OVERSIZED[case](store))
        unchanged.check()
        # Not poisoned: a small write afterwards succeeds and is the only change.
        store.save(checkpoint("s", 1, [*BASE, "small"]), ["t"])
        assert store.append_event("s", 3, event()).sequence == 2
        assert store.load("s") == checkpoint("s", 1, [*BASE, "small"])
    finally:
        store.close()


def test_oversized_limit_survives_reopen(root: Path) -> None:
    store = journal.open(root, durability="fsync", max_record_bytes=LIMIT)
    baseline(store)
    rejects(InvalidInputError, lambda: store.append_event("s", 2, event(message="x" * 3 * LIMIT)))
    store.close()
    reopened = journal.open(root, durability="fsync", max_record_bytes=LIMIT)
    page = reopened.event_page("s", EventPageRequest(limit=10))
    assert page.latest_sequence == 1
    assert [e.sequence for e in page.events] == [1]
    assert reopened.append_event("s", 2, event()).sequence == 2
    reopened.close()


# --- timestamps, sequences, limits -------------------------------------------------------

BAD_TIMESTAMPS = {
    "negative": -1,
    "very-negative": -(2**63),
    "too-big": 2**63,
    "float": 1.5,
    "float-integral": 2.0,
    "str": "5",
    "bool": True,
    "none": None,
    "nan": float("nan"),
}


@pytest.mark.parametrize("at", list(BAD_TIMESTAMPS.values()), ids=list(BAD_TIMESTAMPS))
def test_bad_event_timestamps_rejected(root: Path, fast_store: journal.Store, at: Any) -> None:
    baseline(fast_store)
    unchanged = Unchanged(fast_store, root)
    rejects(InvalidInputError, lambda: fast_store.append_event("s", at, event()))
    rejects(
        InvalidInputError,
        lambda: fast_store.save_with_events(
            checkpoint("s", 1), ["t"], None, [stamped(2, event()), stamped(at, event())]
        ),
    )
    rejects(
        InvalidInputError,
        lambda: fast_store.save_with_events(checkpoint("new", 0), [], None, [stamped(at, event())]),
    )
    unchanged.check()


def test_negative_times_in_checkpoint_and_execution_rejected(
    root: Path, store: journal.Store
) -> None:
    baseline(store)
    unchanged = Unchanged(store, root)
    rejects(
        InvalidInputError,
        lambda: store.save(
            checkpoint("s", 1), [], execution(started_at_ms=-5, finished_at_ms=-4, elapsed_ms=1)
        ),
    )
    rejects(
        InvalidInputError,
        lambda: store.save(checkpoint("s", 1, active_execution=active_execution(started_at_ms=-1))),
    )
    rejects(
        JournalError,
        lambda: store.save(
            checkpoint(
                "s",
                1,
                active_execution=active_execution(),
                active_model_step={"model_step_id": "m", "step_index": 0, "started_at_ms": -1},
            )
        ),
    )
    unchanged.check()


def test_non_advancing_sequences_rejected(root: Path, store: journal.Store) -> None:
    store.save(checkpoint("s", 5, ["a"]), ["t"])
    unchanged = Unchanged(store, root, ["s"])
    for seq in (5, 4, 0):
        exc = rejects(
            ContractViolationError,
            lambda seq=seq: store.save_with_events(
                checkpoint("s", seq, ["a", "b"]), ["u"], None, [stamped(1, event())]
            ),
        )
        assert "checkpoint sequence did not advance" in str(exc)
    unchanged.check()


BAD_SEQUENCES = {
    "negative": -1,
    "i64-overflow": 2**63,
    "u64-max": 2**64 - 1,
    "beyond-u64": 2**64,
    "float": 1.0,
    "str": "1",
    "none": None,
    "bool": True,
}


@pytest.mark.parametrize("seq", list(BAD_SEQUENCES.values()), ids=list(BAD_SEQUENCES))
def test_bad_sequence_values_rejected(root: Path, fast_store: journal.Store, seq: Any) -> None:
    baseline(fast_store)
    unchanged = Unchanged(fast_store, root)
    rejects(InvalidInputError, lambda: fast_store.save(checkpoint("s", seq)))
    rejects(InvalidInputError, lambda: fast_store.save(checkpoint("new", seq)))
    rejects(InvalidInputError, lambda: fast_store.save(checkpoint("s", 1, context_epoch=seq)))
    rejects(InvalidInputError, lambda: fast_store.checkpoint_at("s", seq))
    rejects(InvalidInputError, lambda: fast_store.events_after("s", seq, 5))
    unchanged.check()
    if seq is None:
        return  # before_sequence=None is valid: "from the newest"
    rejects(
        InvalidInputError,
        lambda: fast_store.event_page("s", EventPageRequest(before_sequence=seq, limit=5)),
    )
    rejects(
        InvalidInputError,
        lambda: fast_store.transcript_page(
            "s", TranscriptPageRequest(before_sequence=seq, max_batches=5)
        ),
    )
    rejects(
        InvalidInputError,
        lambda: fast_store.execution_page("s", ExecutionPageRequest(before_sequence=seq, limit=5)),
    )
    unchanged.check()


def test_largest_sequence_is_accepted(store: journal.Store) -> None:
    top = 2**63 - 1
    store.save(checkpoint("s", top))
    assert store.load("s") == checkpoint("s", top)
    assert store.checkpoint_at("s", top) == checkpoint("s", top)
    rejects(ContractViolationError, lambda: store.save(checkpoint("s", top)))


BAD_LIMITS = {
    "zero": 0,
    "negative": -1,
    "very-negative": -(2**63),
    "i64-max": 2**63 - 1,
    "huge": 2**64,
    "float": 2.0,
    "str": "2",
    "none": None,
    "bool": True,
}


@pytest.mark.parametrize("limit", list(BAD_LIMITS.values()), ids=list(BAD_LIMITS))
def test_bad_limits_rejected(root: Path, fast_store: journal.Store, limit: Any) -> None:
    baseline(fast_store)
    unchanged = Unchanged(fast_store, root)
    for sid in ("s", "missing"):
        rejects(
            InvalidInputError,
            lambda sid=sid: fast_store.event_page(sid, EventPageRequest(limit=limit)),
        )
        rejects(InvalidInputError, lambda sid=sid: fast_store.events_after(sid, 0, limit))
        rejects(
            InvalidInputError,
            lambda sid=sid: fast_store.transcript_page(
                sid, TranscriptPageRequest(max_batches=limit)
            ),
        )
        rejects(
            InvalidInputError,
            lambda sid=sid: fast_store.execution_page(sid, ExecutionPageRequest(limit=limit)),
        )
    unchanged.check()


# --- wrong types -------------------------------------------------------------------------

VALID_DICT = {
    "version": CHECKPOINT_VERSION,
    "session_id": "d",
    "session_context": {"owner_id": "o", "user_name": "ada"},
    "sequence": 3,
    "context": [{"type": "message", "text": "hi"}],
    "metadata": {"k": [1, 2]},
    "pending_messages": [{"owner": "o", "id": "m1", "boundary": {"type": "turn"}}],
}


def test_valid_dicts_are_converted(store: journal.Store) -> None:
    got = store.save_with_events(
        dict(VALID_DICT),
        [{"type": "message", "text": "hi"}],
        None,
        [{"recorded_at_ms": 5, "event": {"submission_id": "m1", "msg": {"type": "warning"}}}],
    )
    assert [e.sequence for e in got] == [1]
    assert got[0].event == Event(submission_id="m1", msg={"type": "warning"})
    expected = msgspec.convert(VALID_DICT, Checkpoint)
    assert store.load("d") == expected
    assert store.message_accepted("d", "m1") is True
    ev = store.append_event("d", 6, {"msg": {"type": "warning", "message": "x"}})
    assert ev.sequence == 2
    assert ev.event == Event(msg={"type": "warning", "message": "x"})
    record = msgspec.to_builtins(execution("d"))
    store.save({**VALID_DICT, "sequence": 4}, [], record)
    assert store.execution_page("d", {"limit": 5}).executions == [execution("d")]
    page = store.event_page("d", {"limit": 1})
    assert [e.sequence for e in page.events] == [2]
    assert page.next_before_sequence == 2
    batches = store.transcript_page("d", {"max_batches": 1}).batches
    assert [b.sequence for b in batches] == [3]


INVALID_CHECKPOINTS: dict[str, Any] = {
    "none": None,
    "str": "checkpoint",
    "int": 42,
    "list": [VALID_DICT],
    "empty-dict": {},
    "missing-session-context": {k: v for k, v in VALID_DICT.items() if k != "session_context"},
    "missing-version": {k: v for k, v in VALID_DICT.items() if k != "version"},
    "int-session-id": {**VALID_DICT, "session_id": 5},
    "str-sequence": {**VALID_DICT, "sequence": "3"},
    "negative-sequence": {**VALID_DICT, "sequence": -3},
    "context-not-list": {**VALID_DICT, "context": "abc"},
    "metadata-not-dict": {**VALID_DICT, "metadata": [1]},
    "owner-not-str": {**VALID_DICT, "session_context": {"owner_id": 7}},
    "blank-owner": {**VALID_DICT, "session_context": {"owner_id": "  "}},
    "queued-not-object": {**VALID_DICT, "pending_messages": ["m1"]},
    "catalog-visible-str": {**VALID_DICT, "catalog_visible": "yes"},
    "usage-str": {**VALID_DICT, "total_usage": {"input_tokens": "5"}},
    "surrogate-session-id": {**VALID_DICT, "session_id": "d\ud800"},
    "surrogate-owner": {**VALID_DICT, "session_context": {"owner_id": "\udc00"}},
    "surrogate-context": {**VALID_DICT, "context": ["\ud800"]},
    "struct-int-session-id": checkpoint(5),
    "struct-str-sequence": checkpoint("s", "1"),
    "struct-context-str": replace(checkpoint("s", 1), context="abc"),
    "struct-context-none": replace(checkpoint("s", 1), context=None),
    "struct-metadata-list": replace(checkpoint("s", 1), metadata=[]),
    "struct-session-context-dict": replace(checkpoint("s", 1), session_context={"owner_id": "o"}),
    "struct-session-context-none": replace(checkpoint("s", 1), session_context=None),
    "struct-pending-dicts": replace(
        checkpoint("s", 1), pending_messages=[{"owner": "o", "id": "x"}]
    ),
    "struct-usage-none": replace(checkpoint("s", 1), total_usage=None),
    "struct-metadata-int-key": replace(checkpoint("s", 1), metadata={1: "x"}),
    "struct-epoch-negative": replace(checkpoint("s", 1), context_epoch=-1),
    "struct-version-str": replace(checkpoint("s", 1), version="20"),
    "struct-first-message-int": replace(checkpoint("s", 1), first_user_message=5),
    "struct-delivered-once-str": replace(checkpoint("s", 1), delivered_once={"k": "abc"}),
}


@pytest.mark.parametrize("value", list(INVALID_CHECKPOINTS.values()), ids=list(INVALID_CHECKPOINTS))
def test_invalid_checkpoints_rejected(root: Path, fast_store: journal.Store, value: Any) -> None:
    baseline(fast_store)
    unchanged = Unchanged(fast_store, root, [*SESSIONS, "d"])
    exc = rejects(JournalError, lambda: fast_store.save(value))
    assert isinstance(exc, (InvalidInputError, ContractViolationError)), type(exc)
    rejects(JournalError, lambda: fast_store.save_with_events(value, [], None, []))
    unchanged.check()


def test_old_version_dict_is_a_contract_violation(fast_store: journal.Store) -> None:
    exc = rejects(JournalError, lambda: fast_store.save({**VALID_DICT, "version": 18}))
    assert isinstance(exc, ContractViolationError)
    assert fast_store.load("d") is None


WRONG_ARGUMENTS: dict[str, Callable[[journal.Store], Any]] = {
    "transcript-none": lambda s: s.save(checkpoint("s", 1), None),
    "transcript-str": lambda s: s.save(checkpoint("s", 1), "abc"),
    "transcript-bytes": lambda s: s.save(checkpoint("s", 1), b"abc"),
    "transcript-dict": lambda s: s.save(checkpoint("s", 1), {"type": "message"}),
    "transcript-int": lambda s: s.save(checkpoint("s", 1), 5),
    "execution-str": lambda s: s.save(checkpoint("s", 1), [], "turn"),
    "execution-int": lambda s: s.save(checkpoint("s", 1), [], 5),
    "execution-dict-bad": lambda s: s.save(checkpoint("s", 1), [], {"turn_id": "t"}),
    "execution-other-session": lambda s: s.save(checkpoint("s", 1), [], execution("other")),
    "execution-outcome": lambda s: s.save(checkpoint("s", 1), [], execution(outcome="done")),
    "execution-busy": lambda s: s.save(
        checkpoint("s", 1, active_execution=active_execution()), [], execution()
    ),
    "events-none": lambda s: s.save_with_events(checkpoint("s", 1), [], None, None),
    "events-str": lambda s: s.save_with_events(checkpoint("s", 1), [], None, "event"),
    "events-item-none": lambda s: s.save_with_events(checkpoint("s", 1), [], None, [None]),
    "events-item-event": lambda s: s.save_with_events(checkpoint("s", 1), [], None, [event()]),
    "events-item-missing-event": lambda s: s.save_with_events(
        checkpoint("s", 1), [], None, [{"recorded_at_ms": 1}]
    ),
    "events-msg-no-type": lambda s: s.save_with_events(
        checkpoint("s", 1), [], None, [stamped(1, Event(msg={"text": "x"}))]
    ),
    "append-none": lambda s: s.append_event("s", 1, None),
    "append-str": lambda s: s.append_event("s", 1, "warning"),
    "append-msg-str": lambda s: s.append_event("s", 1, {"msg": "warning"}),
    "append-msg-list": lambda s: s.append_event("s", 1, Event(msg=["warning"])),
    "append-type-int": lambda s: s.append_event("s", 1, Event(msg={"type": 5})),
    "append-type-empty": lambda s: s.append_event("s", 1, Event(msg={"type": ""})),
    "append-submission-int": lambda s: s.append_event(
        "s",
        1,
        Event(submission_id=5, msg={"type": "warning"}),
    ),
    "append-timestamped": lambda s: s.append_event("s", 1, stamped(1, event())),
    "append-surrogate-dict": lambda s: s.append_event("s", 1, {"msg": {"type": "w\ud800"}}),
    "append-surrogate-str": lambda s: s.append_event("s", 1, "\ud800"),
    "events-surrogate-dict": lambda s: s.save_with_events(
        checkpoint("s", 1), [], None, [{"recorded_at_ms": 1, "event": {"msg": {"x": "\ud800"}}}]
    ),
    "execution-surrogate-dict": lambda s: s.save(
        checkpoint("s", 1), [], {**msgspec.to_builtins(execution()), "turn_id": "\ud800"}
    ),
    "page-request-surrogate": lambda s: s.event_page("s", "\ud800"),
    "transcript-request-surrogate": lambda s: s.transcript_page("s", {"x": "\ud800"}),
    "page-request-none": lambda s: s.event_page("s", None),
    "page-request-int": lambda s: s.event_page("s", 5),
    "page-request-wrong-type": lambda s: s.event_page("s", TranscriptPageRequest(max_batches=1)),
    "page-request-str-limit": lambda s: s.event_page("s", {"limit": "5"}),
    "transcript-request-none": lambda s: s.transcript_page("s", None),
    "transcript-request-dict": lambda s: s.transcript_page("s", {"limit": 5}),
    "execution-request-none": lambda s: s.execution_page("s", None),
    "message-accepted-int": lambda s: s.message_accepted("s", 5),
    "message-accepted-none": lambda s: s.message_accepted("s", None),
    "state-value-struct": lambda s: s.save_state("s", "k", checkpoint("s")),
}


@pytest.mark.parametrize("case", list(WRONG_ARGUMENTS))
def test_wrong_argument_types_rejected(root: Path, fast_store: journal.Store, case: str) -> None:
    baseline(fast_store)
    unchanged = Unchanged(fast_store, root)
    exc = rejects(JournalError, lambda: WRONG_ARGUMENTS[case](fast_store))
    assert isinstance(exc, (InvalidInputError, ContractViolationError)), type(exc)
    unchanged.check()


# --- no foreign exception escapes --------------------------------------------------------

JUNK: list[Any] = [
    None,
    True,
    -1,
    0,
    2**70,
    1.5,
    float("nan"),
    "",
    "x",
    "a\ud800",
    b"x",
    [],
    [None],
    {},
    {"limit": 1},
    {1: 2},
    set(),
    object(),
    Path("x"),
    Event(msg={"type": "warning"}),
    EventPageRequest(limit=1),
]

VALID_CALLS: dict[str, tuple[str, list[Any]]] = {
    "load": ("load", ["s"]),
    "checkpoint_at": ("checkpoint_at", ["s", 0]),
    "save": ("save", [checkpoint("s", 7), ["t"], None]),
    "save_with_events": (
        "save_with_events",
        [checkpoint("s", 8), ["t"], None, [stamped(1, event())]],
    ),
    "message_accepted": ("message_accepted", ["s", "m0"]),
    "append_event": ("append_event", ["s", 1, event()]),
    "event_page": ("event_page", ["s", EventPageRequest(limit=2)]),
    "events_after": ("events_after", ["s", 0, 2]),
    "transcript_page": ("transcript_page", ["s", TranscriptPageRequest(max_batches=2)]),
    "execution_page": ("execution_page", ["s", ExecutionPageRequest(limit=2)]),
    "load_state": ("load_state", ["s", "k"]),
    "save_state": ("save_state", ["s", "k", {"v": 2}]),
}


@pytest.mark.parametrize("method", list(VALID_CALLS))
def test_no_foreign_exception_escapes(root: Path, fast_store: journal.Store, method: str) -> None:
    """Each argument of each method replaced by junk: success or a JournalError, nothing else."""
    baseline(fast_store)
    name, args = VALID_CALLS[method]
    escaped = []
    for position in range(len(args)):
        for junk in JUNK:
            call_args = list(args)
            call_args[position] = junk
            try:
                getattr(fast_store, name)(*call_args)
            except JournalError:
                pass
            except BaseException as exc:
                escaped.append(f"arg {position} = {junk!r}: {type(exc).__name__}: {exc}")
    assert escaped == []
    # Still healthy afterwards.
    fast_store.save(checkpoint("s", 100, [*BASE, "ok"]), ["ok"])
    assert fast_store.load("s") == checkpoint("s", 100, [*BASE, "ok"])
    assert fast_store.append_event("s", 1, event()).sequence > 1


def test_open_rejects_bad_roots_and_options(tmp_path: Path) -> None:
    a_file = tmp_path / "afile"
    a_file.write_bytes(b"not a store")
    rejects(JournalError, lambda: journal.open(a_file))
    rejects(JournalError, lambda: journal.open(a_file / "sub"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "photo.jpg").write_bytes(b"\xff\xd8")
    rejects(InvalidInputError, lambda: journal.open(busy))
    assert sorted(os.listdir(busy)) == ["photo.jpg"]
    rejects(InvalidInputError, lambda: journal.open(tmp_path / "new", durability="never"))
    assert not (tmp_path / "new").exists()
    rejects(NotFoundError, lambda: journal.open(tmp_path / "absent", create=False))
    assert not (tmp_path / "absent").exists()

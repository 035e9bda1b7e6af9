"""`JournalSessionStore` beyond the SDK's conformance runner: the journal mapping
(sessions, forks, owners), entries kept exactly, uuid idempotency, the summary fold,
strict decoding, and the event loop left free while the disk works."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import SessionKey, fold_session_summary

import journal
from journal import CorruptionError, Event, InvalidInputError
from journal.integrations.claude_agent_sdk import ENTRIES, META_KEY, JournalSessionStore
from journal.integrations.claude_agent_sdk import state as state_module

T = TypeVar("T")
MAIN: SessionKey = {
    "project_key": "-home-me-proj",
    "session_id": "7f6c0e1e-0000-4000-8000-000000000001",
}
SUB: SessionKey = {**MAIN, "subpath": "subagents/agent-a1"}


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn)


@pytest.fixture
def sdk_store(tmp_path: Path) -> Iterator[JournalSessionStore]:
    s = JournalSessionStore(tmp_path / "store", durability="os")
    yield s
    s.close()


def entry(uid: str | None, **fields: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"type": "user", **fields}
    if uid is not None:
        e["uuid"] = uid
    return e


def user(uid: str, text: str, ts: str = "2026-01-01T00:00:00.000Z") -> dict[str, Any]:
    return {
        "type": "user",
        "uuid": uid,
        "timestamp": ts,
        "cwd": "/home/me/proj",
        "message": {"role": "user", "content": text},
    }


# ------------------------------------------------------------------ mapping
def test_keys_are_journal_sessions_and_subkeys_are_forks(sdk_store: JournalSessionStore) -> None:
    async def go() -> None:
        await sdk_store.append(MAIN, [user("u1", "Why is CI red?")])
        await sdk_store.append(SUB, [entry("s1", isSidechain=True)])

    run(go)
    js = sdk_store.store
    main_id = "-home-me-proj/7f6c0e1e-0000-4000-8000-000000000001"
    sub_id = main_id + "/subagents/agent-a1"
    [child] = js.child_sessions(main_id)
    assert child.session_id == sub_id and child.parent_session_id == main_id
    summary = js.session_summary(main_id)
    assert summary is not None
    assert summary.session_context.owner_id == "-home-me-proj"
    assert summary.first_user_message == "Why is CI red?"  # `journal ls` shows it
    assert js.session_metadata(sub_id)[META_KEY] == {"key": dict(SUB)}

    # `journal tree` draws the subkey under its main transcript
    out = subprocess.run(
        [sys.executable, "-m", "journal.cli", "tree", "--root", js.root, "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sub_id in out and main_id in out

    run(lambda: sdk_store.delete(MAIN))
    assert js.load(main_id) is None and js.load(sub_id) is None  # one delete, both gone


def test_ids_escape_separators_so_keys_never_collide(sdk_store: JournalSessionStore) -> None:
    a: SessionKey = {"project_key": "a/b", "session_id": "c"}
    b: SessionKey = {"project_key": "a", "session_id": "b/c"}
    c: SessionKey = {"project_key": "a%2Fb", "session_id": "c"}

    async def go() -> None:
        for i, k in enumerate((a, b, c)):
            await sdk_store.append(k, [entry(None, n=i)])
        assert await sdk_store.load(a) == [entry(None, n=0)]
        assert await sdk_store.load(b) == [entry(None, n=1)]
        assert await sdk_store.load(c) == [entry(None, n=2)]
        assert await sdk_store.list_sessions("a/b") == [
            {"session_id": "c", "mtime": (await sdk_store.list_sessions("a/b"))[0]["mtime"]}
        ]
        assert [s["session_id"] for s in await sdk_store.list_sessions("a")] == ["b/c"]

    run(go)


def test_a_subkey_before_its_main_transcript(sdk_store: JournalSessionStore) -> None:
    """The main session is made empty to parent the fork; it is not listed, and loads as
    never written, until the main transcript gets entries."""

    async def go() -> None:
        await sdk_store.append(SUB, [entry("s1")])
        assert await sdk_store.load(MAIN) is None
        assert await sdk_store.list_sessions(MAIN["project_key"]) == []
        assert await sdk_store.list_session_summaries(MAIN["project_key"]) == []
        assert await sdk_store.list_subkeys(MAIN) == ["subagents/agent-a1"]
        await sdk_store.append(MAIN, [user("u1", "hi")])
        assert [s["session_id"] for s in await sdk_store.list_sessions(MAIN["project_key"])] == [
            MAIN["session_id"]
        ]
        assert await sdk_store.load(SUB) == [entry("s1")]

    run(go)


# ------------------------------------------------------------ exact entries
def test_entries_come_back_exactly_and_are_stored_as_their_json_text(
    sdk_store: JournalSessionStore,
) -> None:
    odd = [
        {"type": "assistant", "uuid": "x1", "z": 1, "a": [1.0, -0.0, 0.1, 1e300], "ünï": "日本語"},
        {"type": "x", "uuid": "x2", "big": 2**80, "neg": -(2**70), "nested": {"b": {}, "a": []}},
        {"type": "x", "uuid": "x3", "nan": math.nan, "inf": -math.inf},
        {"type": "x", "uuid": "x4", "lone": "\ud800 surrogate", "nul": "\x00"},
    ]
    run(lambda: sdk_store.append(MAIN, odd))
    got = run(lambda: sdk_store.load(MAIN))
    assert got is not None
    # deep-equal up to NaN (never equal to itself): compare the JSON texts
    assert [json.dumps(e) for e in got] == [json.dumps(e) for e in odd]
    assert list(got[0]) == list(odd[0])  # key order kept
    assert type(got[0]["a"][0]) is float and got[1]["big"] == 2**80

    [ev] = sdk_store.store.events_after("-home-me-proj/7f6c0e1e-0000-4000-8000-000000000001", 0, 10)
    lines = ev.event.msg["lines"]
    assert ev.event.msg["type"] == ENTRIES
    assert lines[:3] == [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in odd[:3]]
    assert lines[3] == json.dumps(odd[3], separators=(",", ":"))  # \ud800 is not UTF-8
    assert "日本語" in lines[0]  # UTF-8, not \u escapes


def test_entries_that_are_not_json_objects_are_refused_and_nothing_is_stored(
    sdk_store: JournalSessionStore,
) -> None:
    bad: list[Any] = [[entry("a"), "text"], [entry("a"), {"type": "x", "s": {1, 2}}]]
    for batch in bad:
        with pytest.raises(InvalidInputError, match="entry 1"):
            run(lambda batch=batch: sdk_store.append(MAIN, batch))
    assert run(lambda: sdk_store.load(MAIN)) is None
    for key in ({"project_key": "", "session_id": "s"}, {**MAIN, "subpath": ""}, "p/s"):
        with pytest.raises(ValueError):
            run(lambda key=key: sdk_store.append(key, [entry("a")]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="subpath"):
        run(lambda: sdk_store.list_subkeys(SUB))  # type: ignore[arg-type]


def test_a_closed_store_refuses_calls(tmp_path: Path) -> None:
    s = JournalSessionStore(tmp_path / "store")
    s.close()
    s.close()
    with pytest.raises(InvalidInputError, match="closed"):
        run(lambda: s.load(MAIN))


# --------------------------------------------------------------- idempotency
def test_uuids_are_idempotency_keys(sdk_store: JournalSessionStore) -> None:
    async def go() -> list[Any] | None:
        await sdk_store.append(MAIN, [entry("a"), entry(None, n=1), entry("b")])
        # a retried batch, overlapping: stored uuids are skipped, uuid-less entries kept
        await sdk_store.append(MAIN, [entry("b"), entry(None, n=1), entry("c"), entry("c")])
        await sdk_store.append(MAIN, [entry("a")])  # all known: nothing is written
        return await sdk_store.load(MAIN)

    got = run(go)
    assert got == [entry("a"), entry(None, n=1), entry("b"), entry(None, n=1), entry("c")]
    page = sdk_store.store.event_page(
        "-home-me-proj/7f6c0e1e-0000-4000-8000-000000000001", journal.EventPageRequest(limit=9)
    )
    assert page.latest_sequence == 2  # the third append wrote no record


def test_dedupe_off_stores_every_entry(tmp_path: Path) -> None:
    with JournalSessionStore(tmp_path / "s", dedupe=False, durability="os") as s:
        run(lambda: s.append(MAIN, [entry("a"), entry("a")]))
        run(lambda: s.append(MAIN, [entry("a")]))
        assert run(lambda: s.load(MAIN)) == [entry("a")] * 3


def test_another_writer_is_caught_up_by_the_refused_conditional_append(tmp_path: Path) -> None:
    """Two store objects on one directory (as two processes would be): each skips what
    the other stored, though neither reads the log before appending."""
    root = tmp_path / "s"
    with (
        JournalSessionStore(root, durability="os") as a,
        JournalSessionStore(root, durability="os") as b,
    ):
        run(lambda: a.append(MAIN, [entry("u1")]))
        run(lambda: b.append(MAIN, [entry("u1"), entry("u2")]))  # b reads the log: new
        run(lambda: a.append(MAIN, [entry("u2"), entry("u3")]))  # a's view is stale
        assert run(lambda: a.load(MAIN)) == [entry("u1"), entry("u2"), entry("u3")]
        # deleted by b and written again by a: a's old uuids no longer count
        run(lambda: b.delete(MAIN))
        run(lambda: a.append(MAIN, [entry("u1")]))
        assert run(lambda: b.load(MAIN)) == [entry("u1")]


# ----------------------------------------------------------------- summaries
def test_summaries_are_the_sdks_fold_of_every_append(tmp_path: Path) -> None:
    root = tmp_path / "s"
    batches = [
        [user("u1", "Fix the flaky test", "2026-01-01T00:00:00.000Z")],
        [entry("u2", timestamp="2026-01-01T00:00:01.000Z")],  # leaves the summary as it is
        [entry("u3", timestamp="2026-01-01T00:00:02.000Z")],
        [{"type": "custom-title", "customTitle": "flaky", "uuid": "t1"}],
        [{"type": "tag", "tag": "ci", "uuid": "t2"}, entry("u4", gitBranch="main")],
        [entry("u5")],
    ]
    with JournalSessionStore(root, durability="os") as s:
        for b in batches:
            run(lambda b=b: s.append(MAIN, b))
        run(lambda: s.append(SUB, [{"type": "x", "customTitle": "subagent"}]))
        run(lambda: s.append({"project_key": "other", "session_id": "x"}, [entry("o")]))
        msgs = [
            ev.event.msg
            for ev in s.store.events_after(
                "-home-me-proj/7f6c0e1e-0000-4000-8000-000000000001", 0, 10
            )
        ]
        assert "summary_at" in msgs[1] and "summary" not in msgs[1]  # unchanged: named only
    expected = fold_session_summary(None, MAIN, [e for b in batches for e in b])["data"]
    with JournalSessionStore(root) as s:  # a new process's view: read from disk
        [summary] = run(lambda: s.list_session_summaries(MAIN["project_key"]))
        [listed] = run(lambda: s.list_sessions(MAIN["project_key"]))
        assert summary["data"] == expected and summary["session_id"] == MAIN["session_id"]
        assert summary["mtime"] == listed["mtime"] > 1e12
        # appends go on folding from what is stored
        run(lambda: s.append(MAIN, [{"type": "x", "customTitle": "renamed", "uuid": "t3"}]))
        [after] = run(lambda: s.list_session_summaries(MAIN["project_key"]))
        assert after["data"]["custom_title"] == "renamed" and after["mtime"] > summary["mtime"]


# -------------------------------------------------------------------- reads
def test_loads_page_through_long_sessions(
    sdk_store: JournalSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_module, "PAGE", 3)

    async def go() -> None:
        for i in range(10):
            await sdk_store.append(MAIN, [entry(f"u{i}", n=i), entry(None, n=i)])

    run(go)
    with JournalSessionStore(sdk_store.store) as fresh:
        got = run(lambda: fresh.load(MAIN))
        assert got is not None and [e["n"] for e in got] == [i // 2 for i in range(20)]
        run(lambda: fresh.append(MAIN, [entry("u9"), entry("u10")]))  # rebuilt over pages
        got = run(lambda: fresh.load(MAIN))
        assert got is not None and len(got) == 21


@pytest.mark.parametrize(
    "bad",
    [
        {"lines": 5},
        {"lines": ["{", '{"a":1}']},
        {"lines": ['{"a":1},{"b":2}']},  # two objects in one line: not one entry
        {"lines": ["[1]"]},
        {"lines": [7]},
        {"lines": [], "summary_at": 0},
        {"lines": [], "summary": "x"},
    ],
)
def test_a_malformed_record_is_an_error_not_a_gap(
    sdk_store: JournalSessionStore, bad: dict[str, Any]
) -> None:
    run(lambda: sdk_store.append(MAIN, [entry("a")]))
    jid = "-home-me-proj/7f6c0e1e-0000-4000-8000-000000000001"
    sdk_store.store.append_event(jid, 1, Event(msg={"type": ENTRIES, **bad}))
    with pytest.raises(CorruptionError, match="event 2"):
        run(lambda: sdk_store.load(MAIN))
    with JournalSessionStore(sdk_store.store) as fresh, pytest.raises(CorruptionError):
        run(lambda: fresh.append(MAIN, [entry("b")]))


def test_a_damaged_session_is_left_out_of_listings_and_named(
    sdk_store: JournalSessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    other: SessionKey = {**MAIN, "session_id": "7f6c0e1e-0000-4000-8000-000000000002"}
    run(lambda: sdk_store.append(MAIN, [user("u1", "hi")]))
    run(lambda: sdk_store.append(other, [user("u2", "there")]))
    jid = "-home-me-proj/7f6c0e1e-0000-4000-8000-000000000001"
    sdk_store.store.append_event(jid, 1, Event(msg={"type": ENTRIES, "lines": [], "summary_at": 9}))
    with caplog.at_level("WARNING"):
        [listed] = run(lambda: sdk_store.list_session_summaries(MAIN["project_key"]))
    assert listed["session_id"] == other["session_id"]
    assert jid in caplog.text and "journal verify" in caplog.text
    sdk_store.store.append_event(jid, 2, Event(msg={"type": ENTRIES, "lines": 3}))
    caplog.clear()
    with caplog.at_level("WARNING"):
        [only] = run(lambda: sdk_store.list_sessions(MAIN["project_key"]))
    assert only["session_id"] == other["session_id"] and jid in caplog.text
    with pytest.raises(CorruptionError):
        run(lambda: sdk_store.load(MAIN))


def test_floats_and_integers_come_back_equal(sdk_store: JournalSessionStore) -> None:
    """Loads decode all of a batch's lines at once (not with `json.loads`): every value
    must still come back equal, bit for bit."""
    import random

    rng = random.Random(5)
    values: list[Any] = [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(2000)]
    values += [rng.getrandbits(200) - (1 << 199) for _ in range(200)] + [
        5e-324,
        1.7976931348623157e308,
    ]
    batch = [entry(f"f{i}", v=values[i : i + 50]) for i in range(0, len(values), 50)]
    run(lambda: sdk_store.append(MAIN, batch))
    got = run(lambda: sdk_store.load(MAIN))
    assert got == batch
    assert [type(x) for e in got for x in e["v"]] == [type(x) for x in values]


# ------------------------------------------------------------- off the loop
def test_disk_work_runs_off_the_event_loop(
    sdk_store: JournalSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append whose commit is held up leaves the loop running: a coroutine on the
    loop releases it. Run on the loop, the append would wait for the release forever
    (the wait gives up after a minute, and the test then fails)."""
    release = threading.Event()
    held = threading.Event()
    original = sdk_store.store.save_with_events

    def slow(*args: Any, **kwargs: Any) -> Any:
        held.set()
        assert release.wait(60), "the event loop was blocked"
        return original(*args, **kwargs)

    monkeypatch.setattr(sdk_store.store, "save_with_events", slow)

    async def go() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sdk_store.append, MAIN, [entry("a")])
            while not held.is_set():
                await anyio.sleep(0.001)
            release.set()  # runs only because the loop is free

    run(go)
    assert run(lambda: sdk_store.load(MAIN)) == [entry("a")]


def test_a_cancelled_append_still_finishes_its_commit(
    sdk_store: JournalSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    held = threading.Event()
    original = sdk_store.store.save_with_events

    def slow(*args: Any, **kwargs: Any) -> Any:
        held.set()
        release.wait(60)
        return original(*args, **kwargs)

    monkeypatch.setattr(sdk_store.store, "save_with_events", slow)

    async def go() -> None:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sdk_store.append, MAIN, [entry("a")])
                while not held.is_set():
                    await anyio.sleep(0.001)
                scope.cancel()
                release.set()

    run(go)
    assert run(lambda: sdk_store.load(MAIN)) == [entry("a")]

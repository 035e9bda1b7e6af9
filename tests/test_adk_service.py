"""The behaviours ADK's own session service tests check, on ADK's services and on ours.

Ported from google/adk-python tests/unittests/sessions/test_session_service.py
(and from what the 2.13 services implement: stale sessions, duplicate ids,
partial and temp state, user state). Every test runs on `InMemorySessionService`,
`SqliteSessionService` and `JournalSessionService`, so the same expectations
hold for all three; `test_same_trace_as_adk` runs one script of calls on each
and requires identical answers.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("google.adk")

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.platform import time as platform_time
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
)
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from journal.integrations.adk import JournalSessionService

KINDS = ["memory", "sqlite", "journal"]
PERSISTENT = ["sqlite", "journal"]


def make_service(kind: str, tmp: Path) -> BaseSessionService:
    if kind == "memory":
        return InMemorySessionService()
    if kind == "sqlite":
        return SqliteSessionService(str(tmp / "sessions.db"))
    return JournalSessionService(tmp / "journal")


async def close(service: BaseSessionService) -> None:
    if isinstance(service, (SqliteSessionService, JournalSessionService)):
        await service.close()


@pytest_asyncio.fixture(params=KINDS)
async def service(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    svc = make_service(request.param, tmp_path)
    yield svc
    await close(svc)


@pytest_asyncio.fixture(params=PERSISTENT)
async def persistent(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    svc = make_service(request.param, tmp_path)
    yield svc
    await close(svc)


def text_event(text: str, **kw: Any) -> Event:
    return Event(
        invocation_id=kw.pop("invocation_id", "invocation"),
        author=kw.pop("author", "user"),
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        **kw,
    )


@pytest.mark.asyncio
async def test_get_empty_session(service: BaseSessionService) -> None:
    assert not await service.get_session(app_name="my_app", user_id="test_user", session_id="123")


@pytest.mark.asyncio
async def test_create_get_session(service: BaseSessionService) -> None:
    app_name, user_id, state = "my_app", "test_user", {"key": "value"}
    session = await service.create_session(app_name=app_name, user_id=user_id, state=state)
    assert session.app_name == app_name
    assert session.user_id == user_id
    assert session.id
    assert session.state == state
    got = await service.get_session(app_name=app_name, user_id=user_id, session_id=session.id)
    assert got == session
    await service.delete_session(app_name=app_name, user_id=user_id, session_id=session.id)
    assert (
        await service.get_session(app_name=app_name, user_id=user_id, session_id=session.id) is None
    )
    # Deleting what is not there is not an error.
    await service.delete_session(app_name=app_name, user_id=user_id, session_id=session.id)


@pytest.mark.asyncio
async def test_other_user_or_app_sees_nothing(service: BaseSessionService) -> None:
    s = await service.create_session(app_name="a", user_id="u", session_id="s")
    assert await service.get_session(app_name="a", user_id="v", session_id=s.id) is None
    assert await service.get_session(app_name="b", user_id="u", session_id=s.id) is None
    assert (await service.list_sessions(app_name="b")).sessions == []


@pytest.mark.asyncio
async def test_create_and_list_sessions(service: BaseSessionService) -> None:
    app_name, user_id = "my_app", "test_user"
    session_ids = ["session" + str(i) for i in range(5)]
    for session_id in session_ids:
        await service.create_session(app_name=app_name, user_id=user_id, session_id=session_id)
    sessions = (await service.list_sessions(app_name=app_name, user_id=user_id)).sessions
    assert [s.id for s in sessions] == session_ids
    assert all(s.events == [] for s in sessions)


@pytest.mark.asyncio
async def test_list_orders_by_last_update_across_users(service: BaseSessionService) -> None:
    a = await service.create_session(app_name="app", user_id="u1", session_id="a")
    await service.create_session(app_name="app", user_id="u2", session_id="b")
    await service.create_session(app_name="other", user_id="u1", session_id="c")
    await service.append_event(a, text_event("hi"))  # now the most recently active
    listed = (await service.list_sessions(app_name="app")).sessions
    assert [(s.user_id, s.id) for s in listed] == [("u2", "b"), ("u1", "a")]
    mine = (await service.list_sessions(app_name="app", user_id="u1")).sessions
    assert [s.id for s in mine] == ["a"]
    assert mine[0].last_update_time == a.last_update_time


@pytest.mark.asyncio
async def test_session_state(service: BaseSessionService) -> None:
    app_name = "my_app"
    session_11 = await service.create_session(
        app_name=app_name, user_id="user1", state={"key11": "value11"}, session_id="session11"
    )
    await service.create_session(
        app_name=app_name, user_id="user1", state={"key12": "value12"}, session_id="session12"
    )
    await service.create_session(app_name=app_name, user_id="user2", session_id="session2")
    assert session_11.state.get("key11") == "value11"

    event = text_event(
        "text",
        actions=EventActions(
            state_delta={
                "app:key": "value",
                "user:key1": "value1",
                "temp:key": "temp",
                "key11": "value11_new",
            }
        ),
    )
    await service.append_event(session=session_11, event=event)
    # User and app state is stored, temp state is filtered from the event.
    assert session_11.state.get("app:key") == "value"
    assert session_11.state.get("key11") == "value11_new"
    assert session_11.state.get("user:key1") == "value1"
    assert "temp:key" not in (event.actions.state_delta or {})

    session_12 = await service.get_session(
        app_name=app_name, user_id="user1", session_id="session12"
    )
    assert session_12 is not None
    assert session_12.state.get("key12") == "value12"
    assert session_12.state.get("user:key1") == "value1"
    assert not session_12.state.get("temp:key")
    assert "key11" not in session_12.state

    # user1's state is not visible to user2; app state is.
    session_2 = await service.get_session(app_name=app_name, user_id="user2", session_id="session2")
    assert session_2 is not None
    assert session_2.state.get("app:key") == "value"
    assert not session_2.state.get("user:key1")

    # The change to session_11 is persisted; temp state is not.
    again = await service.get_session(app_name=app_name, user_id="user1", session_id="session11")
    assert again is not None
    assert again.state.get("key11") == "value11_new"
    assert again.state.get("user:key1") == "value1"
    assert not again.state.get("temp:key")


@pytest.mark.asyncio
async def test_temp_state_lives_in_memory_only(service: BaseSessionService) -> None:
    s = await service.create_session(app_name="a", user_id="u")
    await service.append_event(s, text_event("x", actions=EventActions(state_delta={"temp:t": 1})))
    assert s.state["temp:t"] == 1  # the running invocation reads it
    got = await service.get_session(app_name="a", user_id="u", session_id=s.id)
    assert got is not None
    assert "temp:t" not in got.state
    assert got.events[0].actions.state_delta == {}


@pytest.mark.asyncio
async def test_create_new_session_will_merge_states(service: BaseSessionService) -> None:
    app_name, user_id = "my_app", "user"
    session_1 = await service.create_session(
        app_name=app_name, user_id=user_id, state={"key1": "value1"}, session_id="session1"
    )
    event = text_event(
        "text",
        actions=EventActions(
            state_delta={"app:key": "value", "user:key1": "value1", "temp:key": "temp"}
        ),
    )
    await service.append_event(session=session_1, event=event)
    assert session_1.state.get("app:key") == "value"
    assert session_1.state.get("key1") == "value1"
    assert session_1.state.get("user:key1") == "value1"

    session_2 = await service.create_session(
        app_name=app_name, user_id=user_id, state={}, session_id="session2"
    )
    assert session_2.state.get("app:key") == "value"
    assert session_2.state.get("user:key1") == "value1"
    assert not session_2.state.get("key1")
    assert not session_2.state.get("temp:key")


@pytest.mark.asyncio
async def test_create_session_with_scoped_state(service: BaseSessionService) -> None:
    s = await service.create_session(
        app_name="a", user_id="u", state={"app:theme": "dark", "user:lang": "fr", "k": 1}
    )
    assert s.state == {"app:theme": "dark", "user:lang": "fr", "k": 1}
    other = await service.create_session(app_name="a", user_id="v")
    assert other.state == {"app:theme": "dark"}
    assert await service.get_user_state(app_name="a", user_id="u") == {"lang": "fr"}
    assert await service.get_user_state(app_name="a", user_id="nobody") == {}


@pytest.mark.asyncio
async def test_state_delta_of_none_keeps_the_key(service: BaseSessionService) -> None:
    s = await service.create_session(app_name="a", user_id="u", state={"k": 1, "j": 2})
    await service.append_event(s, text_event("x", actions=EventActions(state_delta={"k": None})))
    got = await service.get_session(app_name="a", user_id="u", session_id=s.id)
    assert got is not None
    assert got.state == {"k": None, "j": 2}


@pytest.mark.asyncio
async def test_append_event_bytes(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="my_app", user_id="user")
    test_content = types.Content(
        role="user",
        parts=[types.Part.from_bytes(data=b"test_image_data", mime_type="image/png")],
    )
    grounding = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
    )
    event = Event(
        invocation_id="invocation",
        author="user",
        content=test_content,
        grounding_metadata=grounding,
    )
    await service.append_event(session=session, event=event)
    assert session.events[0].content == test_content
    got = await service.get_session(app_name="my_app", user_id="user", session_id=session.id)
    assert got is not None
    assert len(got.events) == 1
    assert got.events[0].content == test_content
    assert got.events[0].grounding_metadata == grounding


@pytest.mark.asyncio
async def test_append_event_complete(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="my_app", user_id="user")
    event = Event(
        invocation_id="invocation",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="test_text")]),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
    )
    await service.append_event(session=session, event=event)
    got = await service.get_session(app_name="my_app", user_id="user", session_id=session.id)
    assert got == session


@pytest.mark.asyncio
async def test_partial_event_is_not_stored(service: BaseSessionService) -> None:
    s = await service.create_session(app_name="a", user_id="u")
    partial = text_event("part", partial=True, actions=EventActions(state_delta={"k": 1}))
    assert await service.append_event(s, partial) is partial
    assert s.events == []
    got = await service.get_session(app_name="a", user_id="u", session_id=s.id)
    assert got is not None
    assert got.events == [] and "k" not in got.state


@pytest.mark.asyncio
async def test_get_session_with_config(service: BaseSessionService) -> None:
    session = await service.create_session(app_name="my_app", user_id="user")
    n = 5
    for i in range(1, n + 1):
        await service.append_event(session, Event(author="user", timestamp=i))

    async def events(config: GetSessionConfig | None) -> list[Event]:
        got = await service.get_session(
            app_name="my_app", user_id="user", session_id=session.id, config=config
        )
        assert got is not None
        return got.events

    assert len(await events(None)) == n
    recent = await events(GetSessionConfig(num_recent_events=3))
    assert [e.timestamp for e in recent] == [3, 4, 5]
    after = await events(GetSessionConfig(after_timestamp=4.0))
    assert [e.timestamp for e in after] == [4, 5]
    assert await events(GetSessionConfig(after_timestamp=n * 10)) == []
    both = await events(GetSessionConfig(after_timestamp=4.0, num_recent_events=3))
    assert [e.timestamp for e in both] == [4, 5]
    assert await events(GetSessionConfig(num_recent_events=0)) == []
    assert len(await events(GetSessionConfig(num_recent_events=50))) == n


@pytest.mark.asyncio
async def test_duplicate_session_id_is_refused(service: BaseSessionService) -> None:
    await service.create_session(app_name="a", user_id="u", session_id="dup", state={"k": 1})
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name="a", user_id="u", session_id="dup")
    # The same id under another user is another session.
    await service.create_session(app_name="a", user_id="v", session_id="dup")


@pytest.mark.asyncio
async def test_session_ids_are_stripped(service: BaseSessionService) -> None:
    s = await service.create_session(app_name="a", user_id="u", session_id="  padded ")
    assert s.id == "padded"
    assert await service.get_session(app_name="a", user_id="u", session_id="padded") is not None


@pytest.mark.asyncio
async def test_append_to_deleted_session(service: BaseSessionService) -> None:
    s = await service.create_session(app_name="a", user_id="u")
    await service.delete_session(app_name="a", user_id="u", session_id=s.id)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(s, text_event("late"))
    assert await service.get_session(app_name="a", user_id="u", session_id=s.id) is None


@pytest.mark.asyncio
async def test_stale_session_is_refused(persistent: BaseSessionService) -> None:
    svc = persistent
    s = await svc.create_session(app_name="a", user_id="u")
    first = await svc.get_session(app_name="a", user_id="u", session_id=s.id)
    second = await svc.get_session(app_name="a", user_id="u", session_id=s.id)
    assert first is not None and second is not None
    await svc.append_event(first, text_event("one", timestamp=s.last_update_time + 1))
    with pytest.raises(StaleSessionError):
        await svc.append_event(second, text_event("two", timestamp=s.last_update_time + 2))
    got = await svc.get_session(app_name="a", user_id="u", session_id=s.id)
    assert got is not None
    assert [e.content.parts[0].text for e in got.events if e.content and e.content.parts] == ["one"]
    # A reloaded session can append again; the writer that won goes on too, and the
    # reloaded copy is stale in turn.
    await svc.append_event(got, text_event("three", timestamp=s.last_update_time + 3))
    assert len(got.events) == 2
    with pytest.raises(StaleSessionError):
        await svc.append_event(first, text_event("four", timestamp=s.last_update_time + 4))


@pytest.fixture
def clock() -> Iterator[None]:
    """ADK's clock made a counter (`restart_clock` starts it again for each service)."""
    restart_clock()
    yield
    platform_time.reset_time_provider()


def restart_clock() -> None:
    ticks = itertools.count(1_700_000_000)
    platform_time.set_time_provider(lambda: float(next(ticks)))


async def trace(svc: BaseSessionService) -> list[Any]:
    """One script of calls; every answer, as JSON."""
    out: list[Any] = []

    def dump(s: Any) -> Any:
        return None if s is None else s.model_dump(mode="json")

    a = await svc.create_session(
        app_name="app", user_id="u1", session_id="a", state={"n": 0, "app:v": 1}
    )
    out.append(dump(a))
    b = await svc.create_session(app_name="app", user_id="u2", session_id="b")
    out.append(dump(b))
    for i in range(4):
        delta = {"n": i, "user:seen": i, "temp:scratch": i}
        if i == 2:
            delta["app:v"] = 2
        ev = text_event(
            f"m{i}", timestamp=1_800_000_000 + i, actions=EventActions(state_delta=delta)
        )
        ev.id = f"e{i}"
        out.append(dump(await svc.append_event(a, ev)))
    out.append(dump(a))
    for config in (
        None,
        GetSessionConfig(num_recent_events=2),
        GetSessionConfig(after_timestamp=1_800_000_001.5),
    ):
        out.append(
            dump(await svc.get_session(app_name="app", user_id="u1", session_id="a", config=config))
        )
    out.append(dump(await svc.get_session(app_name="app", user_id="u2", session_id="b")))
    out.append([dump(s) for s in (await svc.list_sessions(app_name="app")).sessions])
    out.append(await svc.get_user_state(app_name="app", user_id="u1"))
    await svc.delete_session(app_name="app", user_id="u1", session_id="a")
    out.append([dump(s) for s in (await svc.list_sessions(app_name="app", user_id="u1")).sessions])
    return out


@pytest.mark.asyncio
async def test_same_trace_as_adk(tmp_path: Path, clock: None) -> None:
    answers = {}
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        restart_clock()  # every service sees the same times
        svc = make_service(kind, tmp_path / kind)
        answers[kind] = await trace(svc)
        await close(svc)
    assert answers["journal"] == answers["memory"]
    assert answers["journal"] == answers["sqlite"]


@pytest.mark.asyncio
async def test_reopened_service_reads_the_same(tmp_path: Path) -> None:
    svc = JournalSessionService(tmp_path / "j")
    s = await svc.create_session(app_name="a", user_id="u", state={"user:x": 1, "k": "v"})
    for i in range(3):
        await svc.append_event(s, text_event(f"m{i}", actions=EventActions(state_delta={"i": i})))
    before = await svc.get_session(app_name="a", user_id="u", session_id=s.id)
    await svc.close()
    again = JournalSessionService(tmp_path / "j")
    after = await again.get_session(app_name="a", user_id="u", session_id=s.id)
    assert after == before == s
    # The reopened service's session appends where the first left off.
    assert after is not None
    await again.append_event(after, text_event("m3"))
    await again.close()


def test_methods_do_not_block_the_event_loop(tmp_path: Path) -> None:
    """Every store call runs off the loop: a ticker on the loop keeps running
    while a service call waits on a store lock held by another thread."""
    svc = JournalSessionService(tmp_path / "j", lock_timeout=30)

    async def main() -> int:
        s = await svc.create_session(app_name="a", user_id="u")
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        import threading

        from journal.integrations.dirlock import DirLock

        release = threading.Event()
        held = threading.Event()

        def hold() -> None:
            with DirLock(svc.store.session_dir(f"adk/a/u/{s.id}"), 5):
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        task = asyncio.create_task(ticker())
        append = asyncio.create_task(svc.append_event(s, text_event("x")))
        while ticks < 1000:
            await asyncio.sleep(0)
        assert not append.done()  # waiting on the lock, off the loop
        release.set()
        await append
        stop.set()
        await task
        holder.join()
        return ticks

    assert asyncio.run(main()) >= 1000
    asyncio.run(svc.close())

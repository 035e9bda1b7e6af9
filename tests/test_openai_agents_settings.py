"""`JournalSession`'s constructor and closed state match `SQLiteSession`'s (a one-line swap).

Each check runs the SDK's `SQLiteSession` and `JournalSession` side by side and
asserts the same outcome: `session_settings` given as a dict becomes the SDK's
`SessionSettings` (and is honoured by `get_items` and by the Runner); an
unknown key, a bad value or a non-dict raise the same exception type with the
same message; every method of a closed session raises `RuntimeError`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SQLiteSession, set_tracing_disabled
from agents.memory import SessionSettings
from openai_agents_fake_model import ScriptedModel, text_message

from journal import InvalidInputError, JournalError
from journal.integrations.openai_agents import JournalSession, SessionClosedError

os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-used")
set_tracing_disabled(True)

Make = Callable[..., Any]


def makers(tmp_path: Path) -> list[Make]:
    def sqlite(sid: str, **kw: Any) -> Any:
        return SQLiteSession(sid, str(tmp_path / "ref.db"), **kw)

    def ours(sid: str, **kw: Any) -> Any:
        return JournalSession(sid, tmp_path / "j", **kw)

    return [sqlite, ours]


def msgs(*texts: str) -> list[Any]:
    return [{"role": "user", "content": t} for t in texts]


@pytest.mark.asyncio
async def test_dict_settings_become_session_settings(tmp_path: Path) -> None:
    got = []
    for make in makers(tmp_path):
        s = make("c", session_settings={"limit": 2})
        assert isinstance(s.session_settings, SessionSettings)
        assert s.session_settings == SessionSettings(limit=2)
        await s.add_items(msgs("a", "b", "c"))
        got.append(([i["content"] for i in await s.get_items()], await s.get_items(limit=1)))
        s.close()
    assert got[0] == got[1] == (["b", "c"], msgs("c"))


@pytest.mark.asyncio
async def test_default_and_typed_settings(tmp_path: Path) -> None:
    for make in makers(tmp_path):
        s = make("d")
        assert s.session_settings == SessionSettings()
        typed = SessionSettings(limit=1)
        t = make("e", session_settings=typed)
        assert t.session_settings is typed  # a typed instance is kept, as upstream
        s.close()
        t.close()


@pytest.mark.parametrize(
    "bad",
    [{"limt": 2}, {"limit": 2, "extra": True}, {"limit": "many"}, 5, "limit=2"],
    ids=["unknown-key", "extra-key", "bad-value", "int", "str"],
)
def test_bad_settings_refused_as_sqlite_session_refuses(tmp_path: Path, bad: Any) -> None:
    outcomes = []
    for make in makers(tmp_path):
        with pytest.raises(Exception) as info:
            make("c", session_settings=bad)
        outcomes.append((type(info.value), str(info.value)))
    assert outcomes[0] == outcomes[1]
    assert issubclass(outcomes[0][0], (TypeError, ValueError))


def test_unknown_key_message(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limt"):
        JournalSession("c", tmp_path / "j", session_settings={"limt": 2})


@pytest.mark.asyncio
async def test_runner_with_dict_settings_sends_the_same_history(tmp_path: Path) -> None:
    """The Runner reads `session.session_settings` and merges RunConfig's: a dict on
    the session works as on SQLiteSession."""
    inputs = []
    for make in makers(tmp_path):
        s = make("r", session_settings={"limit": 2})
        model = ScriptedModel()
        agent = Agent(name="a", model=model)
        for t in range(3):
            model.script([text_message(f"r{t}")])
            await Runner.run(agent, f"q{t}", session=s)
        model.script([text_message("last")])
        await Runner.run(
            agent, "q3", session=s, run_config=RunConfig(session_settings=SessionSettings(limit=3))
        )
        inputs.append([c["input"] for c in model.calls])
        s.close()
    assert inputs[0] == inputs[1]
    assert len(inputs[1][2]) == 3  # two stored items + the new question
    assert len(inputs[1][3]) == 4  # RunConfig's limit wins


METHODS: list[tuple[str, Callable[[Any], Any]]] = [
    ("get_items", lambda s: s.get_items()),
    ("get_items(limit=0)", lambda s: s.get_items(limit=0)),
    ("add_items", lambda s: s.add_items(msgs("x"))),
    ("add_items([])", lambda s: s.add_items([])),
    ("pop_item", lambda s: s.pop_item()),
    ("clear_session", lambda s: s.clear_session()),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("name", "call"), METHODS, ids=[m[0] for m in METHODS])
async def test_closed_session_raises_runtime_error(
    tmp_path: Path, name: str, call: Callable[[Any], Any]
) -> None:
    kinds = []
    for make in makers(tmp_path):
        s = make("c")
        await s.add_items(msgs("a"))
        s.close()
        with pytest.raises(RuntimeError, match="is closed") as info:
            await call(s)
        kinds.append(info.value)
    assert isinstance(kinds[1], SessionClosedError)
    assert isinstance(kinds[1], JournalError)  # journal's one error base, too
    assert not isinstance(kinds[1], ValueError)


@pytest.mark.asyncio
async def test_closed_with_a_shared_store_and_other_methods(tmp_path: Path) -> None:
    s = JournalSession("c", tmp_path / "j")
    await s.add_items(msgs("a", "b"))
    s.close()
    s.close()  # idempotent, as SQLiteSession's
    for call in (
        lambda: s.get_items_page(1),
        lambda: s.branch("b"),
        lambda: s.delete(),
        lambda: s._get_compaction_snapshot(2),
        lambda: s._atomic_replace_items(msgs("z")),
    ):
        with pytest.raises(SessionClosedError):
            await call()


@pytest.mark.asyncio
async def test_bad_input_elsewhere_stays_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        JournalSession("c", tmp_path / "j", cache_bytes=-1)
    with pytest.raises(InvalidInputError):
        JournalSession("", tmp_path / "j")
    s = JournalSession("c", tmp_path / "j")
    with pytest.raises(InvalidInputError):
        await s.add_items(["not an object"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError):
        await s.get_items_page(0)
    s.close()

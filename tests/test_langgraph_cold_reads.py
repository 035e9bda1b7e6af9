"""What a cold read of a fresh `JournalSaver` costs, in checks, probes and decodes.

- A `list` or `get_tuple` reads each session through one `Store.reader`: the
  session is checked once, not at every read (a cold deep `list` makes ten).
- A pending write made of list items that a newer listed checkpoint holds (a
  step's `[AIMessage]` write, which the next checkpoint's messages include) is
  given copies of the items decoded there, not decoded (validated) again; the
  copies are equal to fresh decodes and share nothing with the other tuples.
- The binary search for an old checkpoint guesses probes from the ids' times;
  one guess that lands just short of the target is followed by another guess,
  not by a halving step.

Answers are compared with LangGraph's `InMemorySaver` fed the same calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_checks import cfg, same

from journal import InvalidInputError
from journal.integrations.langgraph import JournalSaver

# reaches inside: which read path the saver took, and how often a session refreshes
from journal.integrations.langgraph.fastpath import FastPath
from journal.integrations.langgraph.fingerprint import id_time
from journal.session import Session


def agent_loop(savers: list[Any], thread: str, steps: int) -> list[str]:
    """Puts like an agent loop's: each step writes one message (a pending write of
    its checkpoint, `durability="sync"`) that the next checkpoint's list holds."""
    ids: list[str] = []
    messages: list[Any] = [HumanMessage("why is CI red?")]
    parent: str | None = None
    for step in range(steps):
        cid = str(uuid6(clock_seq=step))
        cp = empty_checkpoint()
        cp["id"] = cid
        cp["channel_values"] = {"messages": list(messages), "steps": step}
        cp["channel_versions"] = {"messages": f"{step:032}.0", "steps": f"{step:032}.0"}
        for s in savers:
            s.put(cfg(thread, parent), cp, {"step": step}, dict(cp["channel_versions"]))
        if step % 2 == 0:
            call = {"name": "lookup", "args": {"q": f"q{step}"}, "id": f"c{step}"}
            new: BaseMessage = AIMessage(
                content=f"calling {step}", tool_calls=[{**call, "type": "tool_call"}]
            )
        else:
            new = ToolMessage(content=f"result {step}", tool_call_id=f"c{step - 1}")
        for s in savers:
            s.put_writes(cfg(thread, cid), [("messages", [new]), ("steps", step + 1)], f"t{step}")
        messages.append(new)
        ids.append(cid)
        parent = cid
    return ids


def count_refreshes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    # internal: a session's check (`Session.refresh`) is not visible through the API
    calls: list[int] = []
    original = Session.refresh

    def counted(self: Session) -> None:
        calls.append(1)
        original(self)

    monkeypatch.setattr(Session, "refresh", counted)
    return calls


def test_a_cold_read_checks_the_session_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        ids = agent_loop([saver, ref], "t", 120)
    refreshes = count_refreshes(monkeypatch)
    for anchor in (ids[10], ids[60], ids[-1]):
        with JournalSaver(root) as fresh:
            got = list(fresh.list(cfg("t", ns=""), before=cfg("t", anchor), limit=10))
            assert len(refreshes) == 1, len(refreshes)  # one reader: the root session
            want = list(ref.list(cfg("t", ns=""), before=cfg("t", anchor), limit=10))
            assert [t.config for t in got] == [t.config for t in want]
            for g, w in zip(got, want, strict=True):
                same(g, w)
        refreshes.clear()
        with JournalSaver(root) as fresh:
            same(fresh.get_tuple(cfg("t", anchor)), ref.get_tuple(cfg("t", anchor)))
            assert len(refreshes) == 1, len(refreshes)
        refreshes.clear()


def test_pending_writes_copy_the_messages_of_newer_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        ids = agent_loop([saver, ref], "t", 80)
    with JournalSaver(root) as fresh:
        built: list[BaseMessage] = []
        serde_loads = fresh.serde.loads_typed

        def counting(data: tuple[str, bytes]) -> Any:
            out = serde_loads(data)
            values = out if isinstance(out, list) else [out]
            built.extend(v for v in values if isinstance(v, BaseMessage))
            return out

        fresh.serde.loads_typed = counting  # type: ignore[method-assign]
        try:
            got = list(fresh.list(cfg("t", ns=""), before=cfg("t", ids[50]), limit=10))
        finally:  # (the serde object may be shared with `ref`)
            del fresh.serde.loads_typed
        want = list(ref.list(cfg("t", ns=""), before=cfg("t", ids[50]), limit=10))
        assert [t.config for t in got] == [t.config for t in want]
        for g, w in zip(got, want, strict=True):
            same(g, w)
        # Every message decoded (validated) once: the newest listed checkpoint's list;
        # its own write's message is not in a listed list: decoded too.
        newest = got[0].checkpoint["channel_values"]["messages"]
        assert len(built) == len(newest) + 1, (len(built), len(newest))

        # The copies share nothing: changing one tuple's objects changes no other's,
        # nor the copies the same saver hands out next.
        write_msg = got[1].pending_writes[0][2][0]  # type: ignore[index]
        in_newer = got[0].checkpoint["channel_values"]["messages"][-1]
        assert write_msg == in_newer and write_msg is not in_newer
        write_msg.content = "changed"
        write_msg.tool_calls.append({"name": "x", "args": {}, "id": "x", "type": "tool_call"})
        write_msg.tool_calls[0]["args"]["q"] = "mutated"
        assert in_newer == want[0].checkpoint["channel_values"]["messages"][-1]
        for g, w in zip(
            fresh.list(cfg("t", ns=""), before=cfg("t", ids[50]), limit=10), want, strict=True
        ):
            same(g, w)
    shared = [t.checkpoint["channel_values"]["messages"][0] for t in got]
    shared[0].content = "changed too"
    assert all(m.content == "why is CI red?" for m in shared[1:])
    # Nested containers too: one tuple's copy of a message with tool calls against
    # the other tuples' copies of it (made from the same template).
    calls = [t.checkpoint["channel_values"]["messages"][1] for t in got]
    assert calls[0].tool_calls and all(m == calls[0] for m in calls)
    calls[0].tool_calls.append({"name": "y", "args": {}, "id": "y", "type": "tool_call"})
    calls[0].tool_calls[0]["args"]["q"] = "mutated"
    calls[0].additional_kwargs["k"] = "v"
    original = want[0].checkpoint["channel_values"]["messages"][1]
    assert all(m == original for m in calls[1:])
    with JournalSaver(root) as again:
        for g, w in zip(
            again.list(cfg("t", ns=""), before=cfg("t", ids[50]), limit=10), want, strict=True
        ):
            same(g, w)


def test_a_cold_read_closes_the_readers_it_makes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JournalSaver(root) as saver:
        ids = agent_loop([saver], "t", 40)
    with JournalSaver(root) as fresh:
        made: list[Any] = []
        reader = fresh.store.reader

        def recording(sid: str) -> Any:
            made.append(reader(sid))
            return made[-1]

        fresh.store.reader = recording  # type: ignore[method-assign]
        assert len(list(fresh.list(cfg("t", ns=""), before=cfg("t", ids[20]), limit=5))) == 5
        assert fresh.get_tuple(cfg("t", ids[3])) is not None
        assert made
        for r in made:  # every one closed: a read through it is refused
            with pytest.raises(InvalidInputError):
                r.load()
        sessions = fresh.store.open_sessions.snapshot()  # internal: pins are not in the API
        assert sessions and all(s.users == 0 for s in sessions)  # no pin left


def test_a_thread_deleted_and_created_again_between_reads(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JournalSaver(root) as saver:
        agent_loop([saver], "t", 30)
        first = list(saver.list(cfg("t", ns=""), limit=3))
        assert len(first) == 3
        with JournalSaver(root) as other:  # another process
            other.delete_thread("t")
            ref = InMemorySaver()
            ids = agent_loop([other, ref], "t", 12)
        got = list(saver.list(cfg("t", ns=""), before=cfg("t", ids[8]), limit=5))
        want = list(ref.list(cfg("t", ns=""), before=cfg("t", ids[8]), limit=5))
        assert [t.config for t in got] == [t.config for t in want]
        for g, w in zip(got, want, strict=True):
            same(g, w)
        same(saver.get_tuple(cfg("t")), ref.get_tuple(cfg("t")))


def test_commits_made_during_a_cold_list_are_seen_by_the_next_read(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    with JournalSaver(root) as saver:
        ids = agent_loop([saver, ref], "t", 40)
    with JournalSaver(root) as fresh, JournalSaver(root) as writer:  # writer: another process
        reader = fresh.store.reader

        def reader_then_put(sid: str) -> Any:
            made = reader(sid)
            fresh.store.reader = reader  # type: ignore[method-assign]
            # A put of another process lands right after the list's reader is made.
            cp = empty_checkpoint()
            cp["id"] = str(uuid6(clock_seq=999))
            cp["channel_values"] = {"messages": [HumanMessage("late")], "steps": 99}
            cp["channel_versions"] = {"messages": "9" * 32, "steps": "9" * 32}
            for s in (writer, ref):
                s.put(cfg("t", ids[-1]), cp, {"step": 99}, dict(cp["channel_versions"]))
            return made

        fresh.store.reader = reader_then_put  # type: ignore[method-assign]
        got = list(fresh.list(cfg("t", ns=""), before=cfg("t", ids[20]), limit=4))
        want = list(ref.list(cfg("t", ns=""), before=cfg("t", ids[20]), limit=4))
        assert [t.config for t in got] == [t.config for t in want]
        for g, w in zip(got, want, strict=True):
            same(g, w)
        same(fresh.get_tuple(cfg("t")), ref.get_tuple(cfg("t")))  # the late put


def _uuid6_at(t: int, seq: int) -> str:
    """A uuid6 string whose timestamp is `t` (what `fingerprint.id_time` reads back)."""
    high, mid, low = (t >> 28) & 0xFFFFFFFF, (t >> 12) & 0xFFFF, t & 0x0FFF
    return f"{high:08x}-{mid:04x}-6{low:03x}-{0x8000 | (seq & 0x3FFF):04x}-{seq:012x}"


def test_the_search_follows_a_guess_that_lands_just_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    t = 0x1EF000000000000
    ids: list[str] = []
    with JournalSaver(root, durability="os") as saver:
        parent: str | None = None
        for step in range(300):
            t += 2000 if step < 30 else 1000  # a slower start: guesses land short
            cid = _uuid6_at(t, step)
            assert id_time(cid) == t
            cp = empty_checkpoint()
            cp["id"] = cid
            cp["channel_values"] = {"step": step}
            cp["channel_versions"] = {"step": f"{step:032}.0"}
            saver.put(cfg("t", parent), cp, {"step": step}, dict(cp["channel_versions"]))
            saver.put_writes(cfg("t", cid), [("x", step)], f"task-{step}")
            parent = cid
            ids.append(cid)
    probes: list[int] = []
    original = FastPath.event_at

    def counted(self: FastPath, idx: Any, seq: int) -> Any:
        probes.append(seq)
        return original(self, idx, seq)

    # internal: a probe is one event read, told from the others only inside the fast path
    monkeypatch.setattr(FastPath, "event_at", counted)
    anchor = ids[8]  # 97% of the way back
    with JournalSaver(root) as fresh:
        got = list(fresh.list(cfg("t", ns=""), before=cfg("t", anchor), limit=10))
    assert [g.checkpoint["id"] for g in got] == ids[7::-1]
    assert len(probes) <= 4, probes  # a halving step after the first short guess: 5

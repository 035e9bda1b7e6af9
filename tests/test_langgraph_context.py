"""Where a cold read of an older checkpoint takes its message list from.

Within one context epoch every later checkpoint's list starts with an earlier
one's, so the saver slices an older checkpoint's list from the head instead of
rebuilding it with `checkpoint_at` (one record read per save of the epoch):
through the reader of a `list` or `get_tuple`, only the part of the head's list
it needs (`SessionReader.load_prefix`, one decode per item of that part, however
long the head's list is); in another epoch it must use `checkpoint_at`. Answers
are compared with LangGraph's `InMemorySaver` fed the same calls.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_checks import cfg, count_reads, same

from journal.integrations.langgraph import JournalSaver


def put_all(savers: list[Any], thread: str, lists: list[list[Any]]) -> list[str]:
    ids: list[str] = []
    parent: str | None = None
    for step, messages in enumerate(lists):
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=step))
        cp["channel_values"] = {"messages": messages, "step": step}
        cp["channel_versions"] = {"messages": f"{step:032}.0", "step": f"{step:032}.0"}
        for s in savers:
            s.put(cfg(thread, parent), cp, {"step": step}, dict(cp["channel_versions"]))
        ids.append(cp["id"])
        parent = cp["id"]
    return ids


class Calls:
    """Counts the saver's `load`, `load_prefix` and `checkpoint_at` reads (through
    its store or a `Store.reader`), and the context items the prefixes read held."""

    def __init__(self, saver: JournalSaver) -> None:
        self.load = 0
        self.prefix = 0
        self.checkpoint_at = 0
        self.prefix_items = 0

        def seen(name: str, got: Any) -> None:
            if name == "load_prefix":
                self.prefix += 1
                if got is not None:
                    self.prefix_items += len(got.context)
            elif name == "load":
                self.load += 1
            else:
                self.checkpoint_at += 1

        count_reads(saver, ("load", "load_prefix", "checkpoint_at"), seen)


def compare(root: Path, ref: InMemorySaver, anchor: str, limit: int) -> Calls:
    with JournalSaver(root) as fresh:
        calls = Calls(fresh)
        got = list(fresh.list(cfg("t"), before=cfg("t", anchor), limit=limit))
        want = list(ref.list(cfg("t"), before=cfg("t", anchor), limit=limit))
        assert [t.config for t in got] == [t.config for t in want]
        for g, w in zip(got, want, strict=True):
            same(g, w)
        return calls


def test_older_context_comes_from_the_head_only_within_its_epoch(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    msgs: list[Any] = []
    lists: list[list[Any]] = []
    for i in range(30):  # epoch 0: one message more per put
        msgs = [*msgs, HumanMessage(f"h{i}") if i % 2 == 0 else AIMessage(f"a{i}")]
        lists.append(msgs)
    msgs = [*lists[4], AIMessage("a branch")]  # time travel: not an extension, epoch 1
    for i in range(30):
        msgs = [*msgs, HumanMessage(f"b{i}")]
        lists.append(msgs)
    with JournalSaver(root) as saver:
        ids = put_all([saver, ref], "t", lists)

    # In the head's epoch (puts 30..59): sliced from (a prefix of) the head, no
    # `checkpoint_at`; the prefix is the newest listed put's list (put 49: 5 + 1 +
    # 20 messages), not the head's 36.
    calls = compare(root, ref, ids[50], 5)
    assert (calls.load, calls.prefix, calls.checkpoint_at) == (0, 1, 0)
    assert calls.prefix_items == 26
    # Across the epoch change: the head for epoch 1, `checkpoint_at` for epoch 0.
    calls = compare(root, ref, ids[33], 6)
    assert (calls.load, calls.prefix, calls.checkpoint_at) == (0, 1, 1)
    # Entirely in epoch 0: the head's list is not a continuation of theirs.
    calls = compare(root, ref, ids[20], 4)
    assert (calls.load, calls.prefix, calls.checkpoint_at) == (0, 0, 1)


def test_a_short_old_context_is_sliced_from_a_prefix_of_a_long_head(tmp_path: Path) -> None:
    root = tmp_path / "store"
    ref = InMemorySaver()
    msgs: list[Any] = []
    lists: list[list[Any]] = []
    for i in range(120):
        msgs = [*msgs, HumanMessage(f"h{i}")]
        lists.append(msgs)
    with JournalSaver(root) as saver:
        ids = put_all([saver, ref], "t", lists)
    # Put 3 holds 4 messages, the head 120: only the first 4 of the head's are read
    # (the whole head, 120 decodes, costs more than rebuilding put 3 with
    # `checkpoint_at`).
    calls = compare(root, ref, ids[4], 2)
    assert (calls.load, calls.prefix, calls.checkpoint_at) == (0, 1, 0)
    assert calls.prefix_items == 4
    # Put 60 holds 61: the first 61.
    calls = compare(root, ref, ids[61], 2)
    assert (calls.load, calls.prefix, calls.checkpoint_at) == (0, 1, 0)
    assert calls.prefix_items == 61
    # The head itself (a `list` from the top): the whole head, no prefix.
    with JournalSaver(root) as fresh:
        calls = Calls(fresh)
        got = list(fresh.list(cfg("t"), limit=2))
        want = list(ref.list(cfg("t"), limit=2))
        for g, w in zip(got, want, strict=True):
            same(g, w)
    assert (calls.load, calls.prefix, calls.checkpoint_at) == (1, 0, 0)


def test_messages_read_again_are_new_objects_equal_to_a_fresh_decode(tmp_path: Path) -> None:
    # A stored message is decoded once and later reads get copies of that decode:
    # each read must still get its own objects, equal to what a new saver decodes.
    root = tmp_path / "store"
    ref = InMemorySaver()
    args = {"q": ["a", {"deep": 1}]}
    tool_call = {"name": "lookup", "args": args, "id": "c1", "type": "tool_call"}
    msgs: list[Any] = []
    lists: list[list[Any]] = []
    for i in range(12):
        m: Any = (
            AIMessage(f"a{i}", tool_calls=[tool_call], response_metadata={"k": [i]})
            if i % 2
            else HumanMessage(
                [{"type": "text", "text": f"h{i}"}], additional_kwargs={"x": {"y": i}}
            )
        )
        msgs = [*msgs, m]
        lists.append(msgs)
    with JournalSaver(root) as saver:
        ids = put_all([saver, ref], "t", lists)
        first = list(saver.list(cfg("t"), limit=5))
        # Mutate everything mutable in what the first read returned.
        for tup in first:
            for msg in tup.checkpoint["channel_values"]["messages"]:
                if isinstance(msg.content, list):
                    msg.content[0]["text"] = "changed"
                msg.additional_kwargs["x"] = "changed"
                msg.response_metadata["k"] = "changed"
                for call in getattr(msg, "tool_calls", []):
                    call["args"]["q"][1]["deep"] = "changed"
                msg.id = "changed"
        again = list(saver.list(cfg("t"), limit=5))
        want = list(ref.list(cfg("t"), limit=5))
        for g, w in zip(again, want, strict=True):
            same(g, w)
            for a, b in zip(
                g.checkpoint["channel_values"]["messages"],
                w.checkpoint["channel_values"]["messages"],
                strict=True,
            ):
                assert type(a) is type(b)
                assert a.__dict__ == b.__dict__
                assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
        # The checkpoints of one read share no message objects either.
        seen: set[int] = set()
        for tup in again:
            for msg in tup.checkpoint["channel_values"]["messages"]:
                assert id(msg) not in seen
                seen.add(id(msg))
        got = saver.get_tuple(cfg("t", ids[3]))
        assert got is not None
        same(got, ref.get_tuple(cfg("t", ids[3])))


def test_messages_with_other_values_are_copied_or_decoded_again(tmp_path: Path) -> None:
    # A message whose fields are plain msgpack values is copied from the msgpack of
    # its fields; one with an int-keyed dict from a template copy; one holding a
    # datetime is decoded again each time. Each read gets its own equal objects.
    root = tmp_path / "store"
    ref = InMemorySaver()
    msgs: list[Any] = [
        HumanMessage("plain", additional_kwargs={"x": [1, {"y": 2.5}]}),
        AIMessage("int keys", additional_kwargs={1: "one", "n": {2: [3]}}),
        HumanMessage("datetime", additional_kwargs={"when": datetime(2024, 1, 2, 3, 4)}),
    ]
    lists = [msgs[: i + 1] for i in range(len(msgs))] + [[*msgs, AIMessage("last")]]
    with JournalSaver(root) as saver:
        put_all([saver, ref], "t", lists)
        for _ in range(3):
            got = list(saver.list(cfg("t"), limit=4))
            want = list(ref.list(cfg("t"), limit=4))
            seen: set[int] = set()
            for g, w in zip(got, want, strict=True):
                same(g, w)
                for a, b in zip(
                    g.checkpoint["channel_values"]["messages"],
                    w.checkpoint["channel_values"]["messages"],
                    strict=True,
                ):
                    assert type(a) is type(b)
                    assert a.__dict__ == b.__dict__
                    assert a.__pydantic_fields_set__ == b.__pydantic_fields_set__
                    for part in (a, a.additional_kwargs, *a.additional_kwargs.values()):
                        if not isinstance(part, (str, int, float, datetime)):
                            assert id(part) not in seen  # nothing mutable is shared
                            seen.add(id(part))
            # Mutate what this read returned: the next read must not see it.
            for g in got:
                for m in g.checkpoint["channel_values"]["messages"]:
                    m.additional_kwargs["x"] = "changed"
                    m.content = "changed"

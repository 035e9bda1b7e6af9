"""The saver encodes and decodes with its serde: a copy made by `with_allowlist`
(what a graph compiled with a msgpack allowlist checkpoints through) with its
own, on the same store as the saver it was made from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph_checks import cfg, same

from journal.integrations.langgraph import JournalSaver


class Uses:
    """Counts a serde's `dumps_typed` and `loads_typed` calls."""

    def __init__(self, serde: Any) -> None:
        self.dumps = 0
        self.loads = 0
        dumps, loads = serde.dumps_typed, serde.loads_typed

        def counted_dumps(value: Any) -> Any:
            self.dumps += 1
            return dumps(value)

        def counted_loads(data: Any) -> Any:
            self.loads += 1
            return loads(data)

        serde.dumps_typed = counted_dumps
        serde.loads_typed = counted_loads


def pair(root: Path) -> tuple[JournalSaver, JournalSaver]:
    serde = JsonPlusSerializer(allowed_msgpack_modules=[("some.module", "Thing")])
    saver = JournalSaver(root, serde=serde)
    clone = saver.with_allowlist([("another.module", "Other")])
    assert clone is not saver and clone.serde is not saver.serde
    return saver, clone


def test_a_copy_with_an_allowlist_uses_its_own_serde(tmp_path: Path) -> None:
    root = tmp_path / "store"
    saver, clone = pair(root)
    mine, theirs = Uses(clone.serde), Uses(saver.serde)
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=1))
    cp["channel_values"] = {"messages": [HumanMessage("hi"), AIMessage("ho")], "n": 1}
    cp["channel_versions"] = {"messages": "1", "n": "1"}
    # A metadata value without a JSON form is stored serialised (and decoded by
    # the index the saver builds when it reads the thread).
    md: Any = {"step": 1, "note": HumanMessage("in metadata")}
    clone.put(cfg("t"), cp, md, dict(cp["channel_versions"]))
    clone.put_writes(cfg("t", cp["id"]), [("messages", [AIMessage("w")])], "task")
    assert mine.dumps > 0 and theirs.dumps == 0
    saver.close()

    saver, clone = pair(root)
    mine, theirs = Uses(clone.serde), Uses(saver.serde)
    got = clone.get_tuple(cfg("t"))
    assert got is not None and got.metadata["note"] == HumanMessage("in metadata")
    assert got.checkpoint["channel_values"]["messages"] == [HumanMessage("hi"), AIMessage("ho")]
    assert got.pending_writes == [("task", "messages", [AIMessage("w")])]
    assert mine.loads > 0 and theirs.loads == 0
    loads = mine.loads
    same(saver.get_tuple(cfg("t")), got)  # the same store
    assert theirs.loads > 0 and mine.loads == loads
    saver.close()

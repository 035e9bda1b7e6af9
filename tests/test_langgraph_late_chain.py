"""The LangGraph saver's late chain (writes for an old checkpoint that arrive after
newer ones): a chain too long for the fast path leaves the index as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.memory import InMemorySaver
from langgraph_checks import cfg, same
from test_langgraph_context import put_all

from journal.integrations.langgraph import JournalSaver


def test_a_late_chain_given_up_on_is_not_applied_or_listed_twice(tmp_path: Path) -> None:
    """A chain longer than the fast path allows is given up on (the lookup scans
    instead): what was read of it is not kept, or every later cold lookup would
    list the same late events again."""
    root = tmp_path / "store"
    ref = InMemorySaver()
    lists = [[f"m{i}"] for i in range(700)]
    with JournalSaver(root) as saver:
        ids = put_all([saver, ref], "t", lists)
        # 60 late events: writes for an old checkpoint after newer ones
        for k in range(60):
            for s in (saver, ref):
                s.put_writes(cfg("t", ids[5]), [("ch", k)], task_id=f"task{k}")
    with JournalSaver(root) as saver:
        sizes = []
        for target in (650, 600, 550, 500, 450):
            got = saver.get_tuple(cfg("t", ids[target]))
            same(got, ref.get_tuple(cfg("t", ids[target])))
            # internal: the late chain read is the index's state, not visible through the API
            idx = next(iter(saver._threads.indexes.values()))
            sizes.append((len(idx.late_fps), len({fp.seq for fp in idx.late_fps})))
        assert all(n == distinct for n, distinct in sizes), sizes

"""The official LangGraph checkpointer conformance suite, run against `JournalSaver`.

`langgraph-checkpoint-conformance` detects which capabilities the saver
implements (all eight: put, put_writes, get_tuple, list, delete_thread,
delete_for_runs, copy_thread, prune) and runs its spec tests for each. Every
detected capability must pass every test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from journal.integrations.langgraph import JournalSaver


def test_conformance_suite(tmp_path: Path) -> None:
    durability = "fsync"
    counter = iter(range(1_000))

    @checkpointer_test(name=f"JournalSaver[{durability}]")
    async def journal_saver() -> AsyncGenerator[JournalSaver, None]:
        saver = JournalSaver(tmp_path / f"store-{next(counter)}")
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(journal_saver))
    report.print_report()
    failures = {
        name: r.failures for name, r in report.results.items() if r.detected and not r.passed
    }
    assert not failures, failures
    detected = {name for name, r in report.results.items() if r.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}
    assert report.conformance_level() == "FULL"
    passed = sum(r.tests_passed for r in report.results.values())
    assert passed >= 80, passed

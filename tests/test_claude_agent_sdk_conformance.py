"""The Claude Agent SDK's own `SessionStore` conformance runner, run on `JournalSessionStore`.

`run_session_store_conformance` (claude_agent_sdk/testing) asserts the SDK's
behavioural contracts: order, isolation by project, subkeys, listing, summaries,
cascading deletes. It runs here on a fresh journal store per contract, in both
durability modes and under both async backends the SDK supports. Controls: the
same runner against wrappers that each break one contract must fail, so a pass
above is not a runner that cannot fail.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)
from claude_agent_sdk.testing import run_session_store_conformance

from journal.integrations.claude_agent_sdk import JournalSessionStore


def _factory(tmp_path: Path, **options: Any) -> tuple[Any, list[JournalSessionStore]]:
    counter = itertools.count()
    made: list[JournalSessionStore] = []

    def make() -> JournalSessionStore:
        store = JournalSessionStore(tmp_path / f"store-{next(counter)}", **options)
        made.append(store)
        return store

    return make, made


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("durability", ["fsync", "os"])
def test_conformance_runner_passes(tmp_path: Path, durability: str, backend: str) -> None:
    make, made = _factory(tmp_path, durability=durability)
    try:
        anyio.run(run_session_store_conformance, make, backend=backend)
    finally:
        for store in made:
            store.close()
    assert len(made) > 10  # a fresh store per contract: the optional ones ran too


def test_conformance_runner_passes_on_a_shared_journal_store(tmp_path: Path) -> None:
    """Several session stores over one open `journal.Store`, each on its own directory."""
    import journal

    opened: list[journal.Store] = []

    def make() -> JournalSessionStore:
        js = journal.open(tmp_path / f"shared-{len(opened)}")
        opened.append(js)
        return JournalSessionStore(js)

    try:
        anyio.run(run_session_store_conformance, make)
    finally:
        for js in opened:
            js.close()


class _Broken(SessionStore):
    """A `JournalSessionStore` with one contract broken (named by `flaw`)."""

    def __init__(self, inner: JournalSessionStore, flaw: str) -> None:
        self.inner = inner
        self.flaw = flaw

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        if self.flaw == "append_reversed":
            entries = entries[::-1]
        await self.inner.append(key, entries)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        got = await self.inner.load(key)
        if self.flaw == "load_drops_last" and got:
            return got[:-1]
        if self.flaw == "load_empty_not_none" and got is None:
            return []
        if self.flaw == "subkey_reads_main" and "subpath" in key:
            main: SessionKey = {"project_key": key["project_key"], "session_id": key["session_id"]}
            return await self.inner.load(main)
        return got

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        got = await self.inner.list_sessions(project_key)
        if self.flaw == "mtime_in_seconds":
            return [{"session_id": e["session_id"], "mtime": e["mtime"] // 1000} for e in got]
        return got

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        got = await self.inner.list_session_summaries(project_key)
        if self.flaw == "summary_older_than_listing":
            return [{**s, "mtime": s["mtime"] - 1} for s in got]
        return got

    async def delete(self, key: SessionKey) -> None:
        if self.flaw == "delete_keeps_subkeys" and "subpath" not in key:
            subs = await self.inner.list_subkeys(
                {"project_key": key["project_key"], "session_id": key["session_id"]}
            )
            saved = {sp: await self.inner.load({**key, "subpath": sp}) for sp in subs}
            await self.inner.delete(key)
            for sp, entries in saved.items():
                await self.inner.append({**key, "subpath": sp}, entries or [])
            return
        await self.inner.delete(key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        got = await self.inner.list_subkeys(key)
        if self.flaw == "subkeys_include_main":
            return [*got, ""]
        return got


FLAWS = [
    "append_reversed",
    "load_drops_last",
    "load_empty_not_none",
    "subkey_reads_main",
    "mtime_in_seconds",
    "summary_older_than_listing",
    "delete_keeps_subkeys",
    "subkeys_include_main",
]


@pytest.mark.parametrize("flaw", FLAWS)
def test_conformance_runner_fails_a_broken_store(tmp_path: Path, flaw: str) -> None:
    make_inner, made = _factory(tmp_path, durability="os")

    def make() -> _Broken:
        return _Broken(make_inner(), flaw)

    try:
        with pytest.raises(AssertionError):
            anyio.run(run_session_store_conformance, make)
    finally:
        for store in made:
            store.close()

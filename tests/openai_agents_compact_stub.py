"""An offline stand-in for the Responses API's compact endpoint, and a crash child.

`stand_in_client()` is a REAL `openai.AsyncOpenAI` client whose HTTP transport is
an `httpx.MockTransport`: the SDK's compaction session builds its real
`responses.compact` request and parses the reply into the real
`CompactedResponse` type; only the server is stood in. The stand-in answers as
the endpoint documents its output: the user messages of the input, then one
`compaction` item (whose `encrypted_content` here is readable text naming what
it summarised).

`compact_until_killed` is the child process of the kill -9 test in
tests/test_openai_agents_compaction.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from openai import AsyncOpenAI

USAGE = {
    "input_tokens": 1,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 1,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 2,
}


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [])


class CompactServer:
    """The stand-in endpoint: records each request body, answers like `responses.compact`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/responses/compact":
            return httpx.Response(404, json={"error": {"message": f"no {request.url.path}"}})
        body = json.loads(request.content)
        self.requests.append(body)
        n = len(self.requests)
        inp = body.get("input") or []
        out: list[dict[str, Any]] = [
            {
                "type": "message",
                "role": "user",
                "id": f"cu{n}-{k}",
                "status": "completed",
                "content": [{"type": "input_text", "text": _text(item)}],
            }
            for k, item in enumerate(inp)
            if item.get("role") == "user"
        ]
        summary = f"summary {n} of {len(inp)} items" if inp else f"summary {n} of the chain"
        out.append({"type": "compaction", "id": f"cmp{n}", "encrypted_content": summary})
        return httpx.Response(
            200,
            json={
                "id": f"cr{n}",
                "created_at": 0,
                "object": "response.compaction",
                "output": out,
                "usage": USAGE,
            },
        )


def stand_in_client(server: CompactServer) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="sk-test-not-used",
        base_url="http://compact.invalid/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(server)),
        max_retries=0,
    )


BASE = 3  # items every generation keeps (the suffix replacement leaves them alone)


def generation(g: int) -> list[dict[str, Any]]:
    """The items of generation `g` (1 to 5 of them, some large enough to be compressed)."""
    n = 1 + (g * 7) % 5
    pad = "y" * (3000 if g % 4 == 0 else 20)
    return [{"role": "user", "content": f"g{g}:{k}:{n}", "pad": pad} for k in range(n)]


def base_items() -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"base:{k}"} for k in range(BASE)]


def compact_until_killed(root: str, session_id: str, conn: Any) -> None:
    """Replace the session's generation again and again: even generations through the
    snapshot's `replace_suffix` (the base stays), odd ones through
    `_atomic_replace_items` (base + items). Acknowledges each generation on `conn`
    after the call returned."""
    from journal.integrations.openai_agents import JournalSession

    async def main() -> None:
        session = JournalSession(session_id, root)  # default durability: fsync
        items = await session.get_items()
        g = int(items[-1]["content"].split(":")[0][1:]) if len(items) > BASE else 0
        if not items:
            await session.add_items(base_items() + generation(0))
        while True:
            g += 1
            new = generation(g)
            if g % 2 == 0:
                snap = await session._get_compaction_snapshot(64)
                assert snap is not None and snap.complete
                ok = await snap.replace_suffix(BASE, new)
                assert ok
            else:
                assert await session._atomic_replace_items(base_items() + new)
            conn.send(g)

    asyncio.run(main())

"""Child process of tests/test_openai_agents_crash.py: adds items until killed.

Each batch is acknowledged on the pipe only after `add_items` returned, so every
acknowledged batch must survive the SIGKILL that ends this process.
"""

from __future__ import annotations

import asyncio
from typing import Any


def add_until_killed(root: str, session_id: str, tag: int, conn: Any) -> None:
    from journal.integrations.openai_agents import JournalSession

    async def main() -> None:
        session = JournalSession(session_id, root)  # default durability: fsync
        i = 0
        while True:
            n = 1 + (tag + i) % 4
            pad = "x" * (50 if i % 3 else 3000)  # some batches are compressed
            await session.add_items(
                [{"role": "user", "content": f"{tag}:{i}:{j}", "pad": pad} for j in range(n)]
            )
            conn.send((tag, i, n))
            i += 1

    asyncio.run(main())

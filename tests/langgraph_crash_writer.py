"""Zygote for the JournalSaver crash test: imports LangGraph once, forks one writer per kill.

Protocol on stdin/stdout, one line each: the test writes `ROOT TAG SEED ACKFILE`;
the zygote forks a writer, prints its pid, waits for it (the test kills it with
SIGKILL) and prints `done`. The writer appends to one thread forever: `put`
(a growing message list, sometimes a time-travel branch from an earlier
checkpoint that replaces part of the list), then `put_writes` for that
checkpoint (sometimes twice: the second call must not duplicate anything).
After each call returns it appends one JSON line to ACKFILE: what it stored.
"""

from __future__ import annotations

import json
import os
import random
import sys
from datetime import datetime, timezone
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base.id import uuid6

from journal.integrations.langgraph import JournalSaver

THREAD = "crash-thread"


def writer(root: str, tag: str, seed: int, ackfile: str) -> None:
    rng = random.Random(seed)
    saver = JournalSaver(root, durability="os")
    base = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
    latest = saver.get_tuple(base)
    known: list[tuple[str, list[Any]]] = []
    if latest is not None:
        known.append(
            (
                latest.config["configurable"]["checkpoint_id"],
                list(latest.checkpoint["channel_values"].get("messages", [])),
            )
        )
    with open(ackfile, "a") as ack:
        step = 0
        while True:
            step += 1
            if known and (rng.random() < 0.15 or len(known[-1][1]) > 24):
                parent, msgs = rng.choice(known[-8:])  # time travel: branch off
                msgs = msgs[: rng.randint(0, len(msgs))]
            elif known:
                parent, msgs = known[-1]
            else:
                parent, msgs = None, []
            msgs = [*msgs, HumanMessage(content=f"{tag}-{step}", id=f"{tag}-{step}")]
            cid = str(uuid6(clock_seq=step))
            cp: Any = {
                "v": 1,
                "id": cid,
                "ts": datetime.now(timezone.utc).isoformat(),
                "channel_values": {"messages": msgs, "step": step},
                "channel_versions": {"messages": step, "step": step},
                "versions_seen": {},
                "updated_channels": None,
            }
            cfg: Any = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
            if parent is not None:
                cfg["configurable"]["checkpoint_id"] = parent
            stored = saver.put(cfg, cp, {"source": "loop", "step": step, "writer": tag}, {})
            ack.write(json.dumps({"op": "put", "id": cid, "msgs": [m.content for m in msgs]}))
            ack.write("\n")
            ack.flush()
            known.append((cid, msgs))
            task = f"task-{tag}-{step}"
            writes = [("messages", AIMessage(content=f"w-{tag}-{step}")), ("step", step)]
            for _ in range(2 if rng.random() < 0.3 else 1):
                saver.put_writes(stored, writes, task)
                ack.write(json.dumps({"op": "writes", "id": cid, "task": task}) + "\n")
                ack.flush()


def main() -> None:
    for line in sys.stdin:
        root, tag, seed, ackfile = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                writer(root, tag, int(seed), ackfile)
            finally:
                os._exit(0)
        print(pid, flush=True)
        os.waitpid(pid, 0)
        print("done", flush=True)


if __name__ == "__main__":
    main()

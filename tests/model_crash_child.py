"""Child process of the stateful test's crash rule (tests/test_model_stateful.py).

Runs a plan of writes (appends, saves, forks, a delete) on an existing store and,
after each call returns, writes "<index> <result>" on stdout and flushes, so the
parent knows what was acknowledged (result: the event or checkpoint sequence, the
child's sequence 0 for a fork, 1 or 0 for a delete). After the last one it writes
"hang" and sleeps until it is killed.

Usage: model_crash_child.py ROOT PLAN.json OPTIONS (journal.open's options, as JSON)
"""

from __future__ import annotations

import sys
import time

import msgspec

import journal
from journal import Checkpoint, Event


class Op(msgspec.Struct):
    op: str
    session: str = ""
    at: int = 0
    event: Event | None = None
    checkpoint: Checkpoint | None = None
    delta: list[object] = []
    sequence: int = 0
    child: str = ""


def main() -> None:
    root, plan_path, options = sys.argv[1], sys.argv[2], msgspec.json.decode(sys.argv[3])
    with open(plan_path, "rb") as f:
        plan = msgspec.json.decode(f.read(), type=list[Op])
    store = journal.open(root, **options)
    out = sys.stdout
    for i, op in enumerate(plan):
        if op.op == "append":
            assert op.event is not None
            seq = store.append_event(op.session, op.at, op.event).sequence
        elif op.op == "save":
            assert op.checkpoint is not None
            store.save(op.checkpoint, op.delta)
            seq = op.checkpoint.sequence
        elif op.op == "fork":
            seq = store.fork_at(op.session, op.sequence, op.child).sequence
        else:
            seq = int(store.delete_sessions([op.session]))
        out.write(f"{i} {seq}\n")
        out.flush()
    out.write("hang\n")
    out.flush()
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()

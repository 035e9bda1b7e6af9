"""`JournalSaver.copy_thread` is atomic: the target is absent or complete, never partial.

- kill -9: a child process copies a thread (root and two namespaces, with
  writes) again and again, deleting each finished copy; the test kills it with
  SIGKILL at random moments, then a fresh saver must see the target either
  absent (`get_tuple`, `list` of the thread and `list(None)`) or equal to the
  source, checkpoint for checkpoint and write for write; `journal verify` is
  clean. Some kills must land mid-copy: the target's root session is then on
  disk while the saver says the thread is absent.
- at every commit: the copy is cut short (an exception) after its k-th
  commit, for every k; the same check, then the leftover is removed by the
  next `copy_thread` onto the target, or by a `put` that starts it afresh.

Kills: JOURNAL_LG_COPY_KILLS (default 16); seed: JOURNAL_LG_COPY_SEED.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from helpers import run_cli
from langchain_core.runnables import RunnableConfig

from journal import ContractViolationError, Store
from journal.integrations.langgraph import JournalSaver

REPO = Path(__file__).resolve().parent.parent
SRC, DST = "source", "target"

CHILD = """
import sys
from journal import ContractViolationError
from journal.integrations.langgraph import JournalSaver
saver = JournalSaver(sys.argv[1], durability="os")
print("ready", flush=True)
while True:
    try:
        saver.copy_thread(sys.argv[2], sys.argv[3])
    except ContractViolationError:  # a finished copy a kill left behind
        saver.delete_thread(sys.argv[3])
        continue
    saver.delete_thread(sys.argv[3])
"""


def checkpoint(i: int, messages: list[str], extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": 1,
        "id": f"1ef{i:05d}-0000-6000-8000-000000000000",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"messages": messages, **extra},
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }


def build_source(saver: JournalSaver, root_puts: int, ns_puts: int) -> None:
    """A thread with a root namespace and two subgraph namespaces, each put
    followed by writes (one of them repeated, which stores nothing)."""
    n = 0
    for ns, count in (("", root_puts), ("sub:a", ns_puts), ("sub:b", ns_puts)):
        cfg: RunnableConfig = {"configurable": {"thread_id": SRC, "checkpoint_ns": ns}}
        for i in range(count):
            n += 1
            msgs = [f"{ns}-m{j}" for j in range(i + 1)]
            cp = checkpoint(n, msgs, {"step": i})
            cfg = saver.put(cfg, cp, {"step": i, "ns": ns}, {})  # type: ignore[arg-type]
            saver.put_writes(cfg, [("messages", [f"w{n}"]), ("step", i + 1)], f"task{n}", "~t")
            if i % 3 == 0:
                saver.put_writes(cfg, [("messages", [f"w{n}"])], f"task{n}", "~t")


def snapshot(saver: JournalSaver, thread: str) -> list[tuple[Any, ...]]:
    """Everything a reader sees of a thread, without its id."""
    out: list[tuple[Any, ...]] = []
    for t in saver.list({"configurable": {"thread_id": thread}}):
        conf = t.config["configurable"]
        parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        out.append(
            (
                conf["checkpoint_ns"],
                conf["checkpoint_id"],
                parent,
                dict(t.metadata),
                t.checkpoint["channel_values"],
                t.pending_writes,
            )
        )
    return sorted(out, key=lambda r: (r[0], r[1]))


def outcome(root: Path, want: list[tuple[Any, ...]]) -> str:
    """ "complete", "absent" (nothing on disk) or "hidden" (an unfinished copy on
    disk that readers do not see); fails on anything else."""
    with JournalSaver(root, durability="os") as saver:
        cfg: RunnableConfig = {"configurable": {"thread_id": DST}}
        got = snapshot(saver, DST)
        if got:
            assert got == want, "a partial or different copy is visible"
            assert saver.get_tuple(cfg) is not None
            return "complete"
        assert saver.get_tuple(cfg) is None
        for ns in ("", "sub:a", "sub:b"):
            conf: RunnableConfig = {"configurable": {"thread_id": DST, "checkpoint_ns": ns}}
            assert saver.get_tuple(conf) is None and not list(saver.list(conf))
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert DST not in listed
        saver.delete_for_runs(["nothing"])  # walks every thread's sessions: skips it
        on_disk = saver.store.session_summary(DST) is not None
    return "hidden" if on_disk else "absent"


def test_kill_9_during_copy_thread_leaves_it_absent_or_complete(tmp_path: Path) -> None:
    root = tmp_path / "store"
    kills = int(os.environ.get("JOURNAL_LG_COPY_KILLS", "16"))
    rng = random.Random(int(os.environ.get("JOURNAL_LG_COPY_SEED", str(time.time_ns()))))
    with JournalSaver(root, durability="os") as saver:
        build_source(saver, 40, 15)
        want = [r for r in snapshot(saver, SRC)]
        t0 = time.perf_counter()
        saver.copy_thread(SRC, DST)  # one cycle of the child, to aim the kills
        saver.delete_thread(DST)
        cycle = time.perf_counter() - t0
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    seen: dict[str, int] = {"complete": 0, "absent": 0, "hidden": 0}
    for k in range(kills):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), SRC, DST],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0, cycle * 1.5))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        seen[outcome(root, want)] += 1
        if k % 4 == 3:
            run_cli(root, "verify")
    assert seen["hidden"] >= 1, seen  # kills landed mid-copy, and the copy stayed hidden
    # Whatever the last kill left, the next copy onto the target succeeds.
    with JournalSaver(root, durability="os") as saver:
        if snapshot(saver, DST):
            saver.delete_thread(DST)
        saver.copy_thread(SRC, DST)
    assert outcome(root, want) == "complete"
    run_cli(root, "verify")


class Cut(Exception):
    """The copy cut short after its k-th commit."""


def cut_after(store: Store, k: int) -> None:
    """Make the store raise `Cut` instead of its (k+1)-th commit."""
    done = [0]
    # (`save` is `save_with_events` without events: counted there.)
    for name in ("save_with_events", "append_event", "fork"):
        real = getattr(store, name)

        def wrapped(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if done[0] >= k:
                raise Cut
            done[0] += 1
            return _real(*args, **kwargs)

        setattr(store, name, wrapped)


def test_a_copy_cut_at_any_commit_is_absent_and_cleared(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JournalSaver(root, durability="os") as saver:
        build_source(saver, 5, 3)
        want = snapshot(saver, SRC)
    k = 0
    kinds: set[str] = set()
    while True:
        with JournalSaver(root, durability="os") as saver:
            cut_after(saver.store, k)
            try:
                saver.copy_thread(SRC, DST)
                finished = True
            except Cut:
                finished = False
        result = outcome(root, want)
        kinds.add(result)
        if finished:
            assert result == "complete"
            break
        assert result in ("absent", "hidden"), result
        assert result == "hidden" or k == 0
        with JournalSaver(root, durability="os") as saver:
            if k % 2:  # the next copy onto the target clears the leftover
                saver.copy_thread(SRC, DST)
                assert snapshot(saver, DST) == want
            else:  # a put starts the thread afresh: nothing of the copy is seen
                cfg: RunnableConfig = {"configurable": {"thread_id": DST, "checkpoint_ns": ""}}
                saver.put(cfg, checkpoint(999, ["fresh"], {}), {"fresh": True}, {})  # type: ignore[arg-type]
                tuples = list(saver.list({"configurable": {"thread_id": DST}}))
                assert [t.metadata.get("fresh") for t in tuples] == [True]
                with pytest.raises(ContractViolationError):
                    saver.copy_thread(SRC, DST)  # a real thread now: not replaced
            saver.delete_thread(DST)
        k += 1
    # Every commit of the copy was a cut point: the placeholder, a put and a write
    # per root checkpoint, per namespace its fork and a put and a write per
    # checkpoint, the seal.
    assert k == 1 + 2 * 5 + 2 * (1 + 2 * 3) + 1
    assert kinds == {"absent", "hidden", "complete"}
    run_cli(root, "verify")


def test_a_copy_of_a_pruned_thread_erases_only_what_it_hides(tmp_path: Path) -> None:
    """`prune` declares what it hides erasable, by the source's sequences; the
    copy's declarations name the copy's own records (the source's erased stubs
    are not copied, so the numbers differ), and compacting the copy erases what
    is hidden there and keeps everything it shows."""
    from journal.compact import compact_store_session
    from journal.erase import is_erased

    root = tmp_path / "store"

    def more(saver: JournalSaver, base: int, n: int) -> None:
        cfg: RunnableConfig = {"configurable": {"thread_id": SRC, "checkpoint_ns": ""}}
        latest = saver.get_tuple(cfg)
        assert latest is not None
        for i in range(n):
            cp = checkpoint(base + i, [f"after{base + i}"], {"step": base + i})
            conf = saver.put(latest.config, cp, {"step": base + i, "ns": ""}, {})  # type: ignore[arg-type]
            saver.put_writes(conf, [("messages", [f"x{base + i}"])], f"late{base + i}", "~t")
            latest = saver.get_tuple(conf)
            assert latest is not None

    with JournalSaver(root, durability="os") as saver:
        build_source(saver, 12, 6)
        saver.prune([SRC], free=True)  # hidden and compacted: erased stubs in the source
        more(saver, 100, 4)
        saver.prune([SRC])  # declared erasable, by sequences above the stubs
        more(saver, 200, 2)
        want = snapshot(saver, SRC)
        saver.copy_thread(SRC, DST)
        assert snapshot(saver, DST) == want
        compact_store_session(saver.store, DST)
        stubs = sum(1 for ev in saver.store.events_after(DST, 0, 10_000) if is_erased(ev))
    with JournalSaver(root, durability="os") as fresh:
        assert snapshot(fresh, DST) == want
        assert snapshot(fresh, SRC) == want
    assert stubs >= 4  # what the second prune hid, erased in the copy too
    run_cli(root, "verify")

"""Seeded workloads that drive journal's public API, and what the API shows afterwards.

`steps(kind, seed)` is a deterministic script of calls. Run as a process
(`python workloads.py run KIND SEED ROOT SIDE`, with tests/ on PYTHONPATH for
helpers.py), it performs them against the store at ROOT and records each call
in SIDE, a file outside the store, with an fsync before the call ("begin i"),
after it returned ("ack i") or after it raised ("fail i TYPE MESSAGE").
`observe(root, kind, seed)` (python workloads.py observe ...) prints, as JSON,
everything the API shows of the sessions and state keys the script touches.

Kinds:
- crash: save_with_events (growing and restarted contexts, transcript, execution
  records, events), append_event and fork_at over several sessions, "fsync" mode;
- delete: fork trees and delete_sessions of subtrees, with saves and appends
  between, and ids created again after their delete;
- state: save_state into new and existing scopes, values made durable and then
  overwritten in "os" mode, and back.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from helpers import (
    T0,
    all_batches,
    all_events,
    all_executions,
    checkpoint,
    execution,
    stamped,
    warning_event,
)

import journal
from journal import (
    SessionPageRequest,
)

SEGMENT_BYTES = 16384  # small, so segments roll during a workload


@dataclass
class Step:
    name: str
    call: Callable[[journal.Store], Any]
    durability: str = "fsync"
    state: tuple[str, str, Any] | None = None  # (scope, key, value) of a save_state


@dataclass
class Script:
    steps: list[Step] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    state_keys: list[tuple[str, str]] = field(default_factory=list)


class _Builder:
    def __init__(self, seed: int):
        self.rnd = random.Random(seed)
        self.script = Script()
        self.ctx: dict[str, list[Any]] = {}
        self.epoch: dict[str, int] = {}
        self.seq: dict[str, int] = {}
        self.hist: dict[str, dict[int, list[Any]]] = {}  # session -> sequence -> context
        self.n = 0

    def _add(self, step: Step) -> None:
        self.script.steps.append(step)

    def _session(self, sid: str) -> None:
        if sid not in self.script.sessions:
            self.script.sessions.append(sid)

    def save(self, sid: str) -> None:
        self._session(sid)
        self.n += 1
        seq = self.seq.get(sid, -1) + 1
        self.seq[sid] = seq
        if seq > 2 and self.rnd.random() < 0.12:
            self.epoch[sid] = self.epoch.get(sid, 0) + 1
            self.ctx[sid] = []
        item: dict[str, Any] = {"role": "user", "n": seq, "text": f"{sid} turn {seq}"}
        if self.rnd.random() < 0.2:  # spans sectors and pages, so tears land inside it
            item["blob"] = "".join(self.rnd.choice("abcdefgh") for _ in range(2500))
        self.ctx[sid] = [*self.ctx.get(sid, []), item]
        self.hist.setdefault(sid, {})[seq] = list(self.ctx[sid])
        cp = checkpoint(sid, seq, self.ctx[sid], epoch=self.epoch.get(sid, 0))
        delta = [{"t": f"{sid}/{seq}/{k}"} for k in range(self.rnd.randint(0, 2))]
        exe = execution(sid, seq, turn_id=f"t-{seq}") if self.rnd.random() < 0.5 else None
        evs = [
            stamped(T0 + self.n, warning_event(f"{sid} {seq} {k}"))
            for k in range(self.rnd.randint(0, 3))
        ]

        def call(store: journal.Store) -> None:
            store.save_with_events(cp, delta, exe, evs)

        self._add(Step(f"save {sid} {seq}", call))

    def append(self, sid: str) -> None:
        self.n += 1
        n = self.n

        def call(store: journal.Store) -> None:
            store.append_event(sid, T0 + n, warning_event(f"{sid} append {n}"))

        self._add(Step(f"append {sid} {n}", call))

    def fork(self, parent: str, child: str) -> None:
        self._session(child)
        at = self.rnd.randint(0, self.seq[parent])
        self.seq[child] = 0
        self.epoch[child] = 0
        self.ctx[child] = list(self.hist[parent][at])
        self.hist[child] = {0: list(self.ctx[child])}

        def call(store: journal.Store) -> None:
            store.fork_at(parent, at, child)

        self._add(Step(f"fork {parent}@{at} -> {child}", call))

    def delete(self, sids: list[str], tree: dict[str, list[str]]) -> None:
        gone: list[str] = []
        todo = list(sids)
        while todo:
            s = todo.pop()
            gone.append(s)
            todo.extend(tree.pop(s, []))
        for s in gone:
            self.seq.pop(s, None)
            self.ctx.pop(s, None)
            self.epoch.pop(s, None)
            self.hist.pop(s, None)
            for kids in tree.values():
                if s in kids:
                    kids.remove(s)

        def call(store: journal.Store) -> None:
            if not store.delete_sessions(sids):
                raise AssertionError(f"delete_sessions({sids}) found a session absent")

        self._add(Step(f"delete {sids} ({len(gone)} sessions)", call))

    def state(self, scope: str, key: str, durability: str) -> None:
        if (scope, key) not in self.script.state_keys:
            self.script.state_keys.append((scope, key))
        self.n += 1
        value = {"n": self.n, "pad": "v" * self.rnd.randint(0, 900)}

        def call(store: journal.Store) -> None:
            store.save_state(scope, key, value)

        self._add(
            Step(
                f"state {scope}/{key} {self.n} ({durability})",
                call,
                durability,
                (scope, key, value),
            )
        )


def steps(kind: str, seed: int) -> Script:
    b = _Builder(seed)
    rnd = b.rnd
    if kind == "crash":
        live = ["s0", "s1"]
        for sid in live:
            b.save(sid)
        for i in range(45):
            sid = rnd.choice(live)
            r = rnd.random()
            if r < 0.55:
                b.save(sid)
            elif r < 0.9:
                b.append(sid)
            elif len(live) < 6:
                child = f"f{i}"
                b.fork(sid, child)
                live.append(child)
                b.save(child)
    elif kind == "delete":
        tree: dict[str, list[str]] = {}
        live = []
        made = 0

        def new_root() -> None:
            nonlocal made
            sid = f"r{made % 3}"  # ids come back after their delete
            made += 1
            if sid in live:
                return
            b.save(sid)
            live.append(sid)
            tree[sid] = []

        new_root()
        new_root()
        for i in range(40):
            r = rnd.random()
            if r < 0.3 and live:
                parent = rnd.choice(live)
                child = f"c{i}"
                b.fork(parent, child)
                tree[parent].append(child)
                tree[child] = []
                live.append(child)
            elif r < 0.5 and live:
                b.save(rnd.choice(live))
            elif r < 0.6 and live:
                b.append(rnd.choice(live))
            elif r < 0.85 and live:
                target = rnd.choice(live)
                before = set(tree)
                b.delete([target], tree)
                for s in before - set(tree):
                    live.remove(s)
            else:
                new_root()
    elif kind == "state":
        scopes = ["alpha", "beta", "gamma", "delta", "epsilon"]
        keys = ["cursor", "config", "memo"]
        mode = "fsync"
        for i in range(60):
            if i % 12 == 11:
                mode = "os" if mode == "fsync" else "fsync"
            # New scopes keep coming (a scope directory is created), old ones are overwritten.
            scope = (
                scopes[min(len(scopes) - 1, i // 10)]
                if rnd.random() < 0.4
                else rnd.choice(scopes[: 1 + min(len(scopes) - 1, i // 10)])
            )
            b.state(scope, rnd.choice(keys), mode)
    else:
        raise ValueError(kind)
    return b.script


def open_store(root: str, durability: str = "fsync") -> journal.Store:
    return journal.open(root, durability=durability, segment_bytes=SEGMENT_BYTES)


# ----------------------------------------------------------------- running
def _note(fd: int, text: str) -> None:
    os.write(fd, (text.replace("\n", " ") + "\n").encode())
    os.fsync(fd)


def run(kind: str, seed: int, root: str, side: str, keep_going: bool) -> int:
    script = steps(kind, seed)
    fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    store: journal.Store | None = None
    mode = ""
    failed = 0
    for i, step in enumerate(script.steps):
        try:
            if store is None or step.durability != mode:
                if store is not None:
                    store.close()
                    store = None
                mode = step.durability
                store = open_store(root, mode)
            _note(fd, f"begin {i} {step.name}")
            step.call(store)
        except Exception as exc:
            failed += 1
            _note(fd, f"fail {i} {type(exc).__module__}.{type(exc).__qualname__} {exc}")
            if not keep_going:
                return 1
            continue
        _note(fd, f"ack {i}")
    try:
        if store is not None:
            store.close()
    except Exception as exc:
        _note(fd, f"fail close {type(exc).__module__}.{type(exc).__qualname__} {exc}")
    _note(fd, "done")
    return 0


def parse_side(text: str) -> dict[str, Any]:
    """acked: indexes of calls that returned; begun: the highest begun; fails: (i, type, msg)."""
    acked: list[int] = []
    fails: list[tuple[str, str, str]] = []
    begun = -1
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "begin":
            begun = int(rest.split(" ", 1)[0])
        elif word == "ack":
            acked.append(int(rest))
        elif word == "fail":
            i, _, rest = rest.partition(" ")
            typ, _, msg = rest.partition(" ")
            fails.append((i, typ, msg))
    return {"acked": acked, "begun": begun, "fails": fails}


# ----------------------------------------------------------------- observing
def observe_store(store: journal.Store, script: Script) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sid in script.sessions:
        cp = store.load(sid)
        if cp is None:
            out[sid] = None
            continue
        out[sid] = msgspec.to_builtins(
            {
                "checkpoint": cp,
                "events": all_events(store, sid, 9),
                "batches": all_batches(store, sid, 5),
                "executions": all_executions(store, sid, 5),
                "history": [store.checkpoint_at(sid, s) for s in range(cp.sequence + 1)],
            }
        )
        for batch in out[sid]["batches"]:
            batch.pop("created_at", None)  # the wall clock of the save, not of the script
    listed: list[str] = []
    cursor = None
    while True:
        page = store.list_sessions_page(SessionPageRequest(limit=50, cursor=cursor))
        listed.extend(s.session_id for s in page.sessions)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    out["listed"] = sorted(listed)
    for scope, key in script.state_keys:
        out[f"state:{scope}:{key}"] = store.load_state(scope, key)
    return out


def observe(root: str, kind: str, seed: int) -> dict[str, Any]:
    with open_store(root) as store:
        return observe_store(store, steps(kind, seed))


def write_again(root: str, kind: str, seed: int) -> None:
    """The store takes new writes: a save on each session, an append, a state value."""
    script = steps(kind, seed)
    with open_store(root) as store:
        for sid in script.sessions:
            cp = store.load(sid)
            if cp is None:
                continue
            nxt = msgspec.structs.replace(
                cp, sequence=cp.sequence + 1, context=[*cp.context, {"after": "crash"}]
            )
            store.save(nxt)
            store.append_event(sid, T0, warning_event("after the crash"))
        store.save_state("after", "crash", {"ok": True})
        assert store.load_state("after", "crash") == {"ok": True}


def reference(
    kind: str,
    seed: int,
    root: str,
    skip: frozenset[int] = frozenset(),
    raised: dict[int, str] | None = None,
    every: bool = True,
) -> list[Any]:
    """What the API shows after each prefix of the script, on a plain directory:
    [state before any call, after call 0, after call 1, ...]. Calls in `skip` are
    left out; a call that raises (one that needs a skipped one) is noted in `raised`.
    With `every` False, only the first and the last state."""
    script = steps(kind, seed)
    store = open_store(root)
    out = [json.loads(json.dumps(observe_store(store, script)))]
    mode = "fsync"
    for i, step in enumerate(script.steps):
        if i not in skip:
            if step.durability != mode:
                store.close()
                mode = step.durability
                store = open_store(root, mode)
            try:
                step.call(store)
            except Exception as exc:
                if raised is None:
                    raise
                raised[i] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        if every or i == len(script.steps) - 1:
            out.append(json.loads(json.dumps(observe_store(store, script))))
    store.close()
    return out


def main(argv: list[str]) -> int:
    what = argv[0]
    if what == "run":
        kind, seed, root, side = argv[1], int(argv[2]), argv[3], argv[4]
        return run(kind, seed, root, side, keep_going="--keep-going" in argv)
    if what == "observe":  # then, with --write-again, make the store take new writes
        seen = observe(argv[2], argv[1], int(argv[3]))
        again = ""
        if "--write-again" in argv:
            try:
                write_again(argv[2], argv[1], int(argv[3]))
            except Exception as exc:
                again = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        json.dump({"seen": seen, "write_again": again}, sys.stdout)
        return 0
    if what == "write-again":
        write_again(argv[2], argv[1], int(argv[3]))
        return 0
    if what == "probe":  # probe ROOT SID,SID SCOPE:KEY,SCOPE:KEY: checkpoint sequences, values
        root, sids, keys = argv[1], [s for s in argv[2].split(",") if s], argv[3].split(",")
        with open_store(root) as store:
            found: dict[str, Any] = {}
            for sid in sids:
                cp = store.load(sid)
                found[sid] = None if cp is None else cp.sequence
            for item in [k for k in keys if k]:
                scope, key = item.split(":")
                found[item] = store.load_state(scope, key)
        json.dump(found, sys.stdout)
        return 0
    raise SystemExit(f"unknown command {what!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Replication to S3 (issue 18): what `replica=` costs a commit, how far async lags,
how fast a bucket restores and how long a take-over takes, on real servers.

    python benchmarks/bench_replica.py [--quick] [--runs 3] [--servers seaweedfs,ceph]
        [--sessions 500] [--events 100000] [--json FILE] [--s3-env FILE]

For each server it starts one with scripts/s3-seaweedfs.sh or scripts/s3-ceph.sh into a
temporary directory (stopped at the end; `--s3-env FILE` uses a running one instead) and
measures, in every run:

- **commits**: durable (`fsync`) `append_event` of ~1 KiB events, `save_with_events` of a
  small realistic commit (3 transcript items + 10 events, a ~4 KiB base context) and of the
  50 KiB-state workload (`payloads.SessionSim` defaults: +2 items, 4 events), each with
  replica_mode none / async / sync in the same run, on fresh roots and buckets. It reports
  ops/s, the ratio to none in that run, the requests per commit (every ObjectStore call is
  counted; async includes the flush at the end: chunks, heads, merges) and, for async, the
  `flush()` after the burst.
- **lag** (async, replica_lag=1.0): from a commit's return to the end of the first ship
  that began after it (the shipper reads the log when its ship begins, so that ship holds
  the commit: an upper bound by at most the ship itself), for isolated commits (idle
  longer than the lag before each) and for a steady stream of one commit every 20 ms.
- **restore**: `journal.replica.restore.restore` of one session of N events (built
  untimed in os durability + async, so it is few chunks) and of M small sessions (one
  small save each, built the same way), each into a fresh root.
- **take_over**: two roots sharing one replica (sync); the writer appends one event, the
  other store takes the session over (fence + fetch), and back; p50/p90 of the rounds.

Builds happen once per server; the timed parts run `--runs` times. With the defaults
one server takes about 8-9 minutes on 2 shared CPUs (restore is sequential, about 7
requests a small session: 2k sessions add about 3 minutes a run, 10k about 13). Prints medians and
min-max spreads over the runs; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

import payloads  # noqa: E402

import journal  # noqa: E402
from journal.replica import objects as objects_mod  # noqa: E402
from journal.replica import shipper as shipper_mod  # noqa: E402
from journal.replica.restore import restore  # noqa: E402
from journal.replica.target import parse_replica_url  # noqa: E402

SCRIPTS = {"seaweedfs": "s3-seaweedfs.sh", "ceph": "s3-ceph.sh"}
FOREIGN = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")
MODES = ("none", "async", "sync")

# ------------------------------------------------------------------ request counting

COUNTS: Counter[str] = Counter()
SHIPS: list[tuple[float, float, int]] = []  # (began, ended, puts) of every ship
_COUNT_LOCK = threading.Lock()


def _counted(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _COUNT_LOCK:
            COUNTS[kind] += 1
        return fn(*args, **kwargs)

    return wrapper


def _timed_ship(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Any) -> Any:
        began = time.perf_counter()
        done = fn(self)
        with _COUNT_LOCK:
            SHIPS.append((began, time.perf_counter(), done.puts))
        return done

    return wrapper


def install_counters() -> None:
    """Count every ObjectStore request by kind and time every ship (class-level wraps:
    the replicator's own ObjectStore and shippers are counted as they are)."""
    cls = objects_mod.ObjectStore
    for name, kind in (
        ("put", "PUT"),
        ("put_if_absent", "PUT"),
        ("put_if_match", "PUT"),
        ("get", "GET"),
        ("list", "LIST"),
        ("delete", "DELETE"),
    ):
        setattr(cls, name, _counted(kind, getattr(cls, name)))
    ship_cls = shipper_mod.SessionShipper
    ship_cls.ship = _timed_ship(ship_cls.ship)  # type: ignore[method-assign]


def take_counts() -> Counter[str]:
    with _COUNT_LOCK:
        got = Counter(COUNTS)
        COUNTS.clear()
    return got


# ------------------------------------------------------------------ servers and buckets


@contextlib.contextmanager
def server(kind: str, base: str, env_file: str | None) -> Iterator[dict[str, str]]:
    """A running S3 server's env values (started and stopped here unless env_file)."""
    if env_file:
        yield read_env(env_file)
        return
    where = os.path.join(base, kind)
    os.makedirs(where)
    script = os.path.join(REPO, "scripts", SCRIPTS[kind])
    t0 = time.perf_counter()
    started = subprocess.run(
        ["bash", script, "start", where], capture_output=True, text=True, timeout=600
    )
    try:
        if started.returncode != 0:
            raise RuntimeError(f"{kind} did not start: {started.stderr.strip()[-2000:]}")
        print(f"[{kind}] up in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        yield read_env(os.path.join(where, "s3.env"))
    finally:
        subprocess.run(["bash", script, "stop", where], capture_output=True, timeout=120)


def read_env(path: str) -> dict[str, str]:
    values: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, sep, value = line.strip().partition("=")
            if sep and not name.startswith("#"):
                values[name] = value
    return values


def point_at(values: dict[str, str]) -> None:
    for name in FOREIGN:
        os.environ.pop(name, None)
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        os.environ[name] = values[name]


def new_replica() -> str:
    """A fresh bucket; its s3:// URL with a prefix."""
    bucket = f"jb-{secrets.token_hex(6)}"
    objects_mod.create_bucket(parse_replica_url(f"s3://{bucket}"))
    return f"s3://{bucket}/bench"


def object_store(url: str) -> objects_mod.ObjectStore:
    return objects_mod.open_object_store(parse_replica_url(url))


def drop_bucket(url: str) -> None:
    store = object_store(url)
    with contextlib.suppress(Exception):
        store.delete([info.key for info in store.list("")])
        store.delete_bucket()
    store.close()


def open_store(root: str, mode: str, url: str | None, **options: Any) -> journal.Store:
    if mode == "none":
        return journal.open(root, **options)
    return journal.open(root, replica=url, replica_mode=mode, **options)


# ------------------------------------------------------------------ payloads


class Payloads:
    """Typed payloads, built once (outside every timed region)."""

    def __init__(self, n_ops: int) -> None:
        gen = payloads.PayloadGenerator(seed=18)
        self.events = [
            (at, payloads.convert(ev, journal.Event))
            for at, ev in gen.timestamped_events("s-app", 1000)
        ]
        self.small = self._saves(gen, "s-small", n_ops + 1, items=3, events=10, ctx=4 * 1024)
        self.big = self._saves(gen, "s-big", n_ops + 1, items=2, events=4, ctx=None)

    @staticmethod
    def _saves(
        gen: payloads.PayloadGenerator, sid: str, n: int, *, items: int, events: int, ctx: Any
    ) -> list[tuple[Any, ...]]:
        extra = {} if ctx is None else {"context_bytes": ctx}
        sim = payloads.SessionSim(gen, sid, items=items, events=events, **extra)
        return [
            sim.next_save().convert(
                journal.Checkpoint,
                execution_type=journal.ExecutionRecord,
                timestamped_event_type=journal.TimestampedEvent,
            )
            for _ in range(n)
        ]

    def event(self, i: int) -> tuple[int, Any]:
        at, ev = self.events[i % len(self.events)]
        return at + i, ev


# ------------------------------------------------------------------ workloads


def flush_all(store: journal.Store, patience: float = 900.0) -> None:
    """`store.flush()` until it succeeds: its own bound is 60 s, less than shipping a
    few hundred new sessions one after the other takes."""
    give_up = time.monotonic() + patience
    while True:
        try:
            store.flush()
            return
        except journal.errors.ReplicaUnavailableError:
            if time.monotonic() > give_up:
                raise


def create(store: journal.Store, sid: str) -> None:
    store.save(journal.Checkpoint.empty(sid, owner_id="bench"))


def commit_workload(name: str, mode: str, base: str, p: Payloads, n_ops: int) -> dict[str, float]:
    """One burst of n_ops durable commits (after one untimed warm-up commit)."""
    root = tempfile.mkdtemp(prefix=f"{name}-{mode}-", dir=base)
    url = new_replica() if mode != "none" else None
    store = open_store(root, mode, url)
    try:
        if name == "append":
            sid = "s-app"
            create(store, sid)
            op: Callable[[int], Any] = lambda i: store.append_event(sid, *p.event(i))  # noqa: E731
        else:
            saves = p.small if name == "save_small" else p.big
            store.save_with_events(*saves[0])
            op = lambda i: store.save_with_events(*saves[i])  # noqa: E731
        store.flush()
        take_counts()
        t0 = time.perf_counter()
        for i in range(1, n_ops + 1):
            op(i)
        elapsed = time.perf_counter() - t0
        t1 = time.perf_counter()
        store.flush()
        flushed = time.perf_counter() - t1
        store.close()
        counts = take_counts()
    finally:
        with contextlib.suppress(Exception):
            store.close()
        shutil.rmtree(root, ignore_errors=True)
        if url:
            drop_bucket(url)
    out = {
        "ops_per_s": n_ops / elapsed,
        "puts_per_commit": counts["PUT"] / n_ops,
        "gets_per_commit": (counts["GET"] + counts["LIST"]) / n_ops,
    }
    if mode == "async":
        out["flush_s"] = flushed
    return out


def lag_workload(base: str, p: Payloads, isolated: int, stream_s: float) -> dict[str, list[float]]:
    """Commit-to-shipped times (seconds) in async mode, replica_lag=1.0."""
    root = tempfile.mkdtemp(prefix="lag-", dir=base)
    url = new_replica()
    sid = "s-lag"
    try:
        with journal.open(root, replica=url, replica_mode="async", replica_lag=1.0) as store:
            create(store, sid)
            store.flush()

            def shipped_after(t: float, wait: float = 5.0) -> float:
                deadline = time.perf_counter() + wait
                while time.perf_counter() < deadline:
                    with _COUNT_LOCK:
                        ends = [e for b, e, n in SHIPS if b > t and n > 0]
                    if ends:
                        return min(ends) - t
                    time.sleep(0.002)
                raise RuntimeError(f"nothing shipped within {wait} s of a commit")

            solo: list[float] = []
            for i in range(isolated):
                time.sleep(1.2)  # the worker idles longer than the lag: it waits for work
                store.append_event(sid, *p.event(i + 1))
                solo.append(shipped_after(time.perf_counter()))
            stream: list[float] = []
            commits: list[float] = []
            end = time.perf_counter() + stream_s
            i = 0
            while time.perf_counter() < end:
                store.append_event(sid, *p.event(10_000 + i))
                commits.append(time.perf_counter())
                i += 1
                time.sleep(0.02)
            store.flush()
            for t in commits:
                stream.append(shipped_after(t))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        drop_bucket(url)
    return {"isolated": solo, "stream": stream}


def build_big_session(base: str, p: Payloads, n_events: int) -> tuple[str, str, dict[str, float]]:
    root = tempfile.mkdtemp(prefix="build-big-", dir=base)
    url = new_replica()
    sid = "s-big-session"
    t0 = time.perf_counter()
    with journal.open(root, durability="os", replica=url, replica_mode="async") as store:
        create(store, sid)
        for i in range(n_events):
            store.append_event(sid, *p.event(i))
        flush_all(store)
    built = time.perf_counter() - t0
    chunks = sum(1 for info in object_store(url).list("") if "/chunks/" in info.key)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    shutil.rmtree(root, ignore_errors=True)
    return url, sid, {"build_s": built, "chunks": chunks, "local_bytes": size}


def build_many_sessions(base: str, p: Payloads, n: int) -> tuple[str, dict[str, float]]:
    root = tempfile.mkdtemp(prefix="build-many-", dir=base)
    url = new_replica()
    t0 = time.perf_counter()
    delta, events = p.small[0][1], p.small[0][3]
    with journal.open(root, durability="os", replica=url, replica_mode="async") as store:
        for i in range(n):
            sid = f"s{i:06d}"
            store.save_with_events(
                journal.Checkpoint.empty(sid, owner_id="bench"), delta, None, events[:3]
            )
        flush_all(store)
    built = time.perf_counter() - t0
    shutil.rmtree(root, ignore_errors=True)
    return url, {"build_s": built}


def restore_once(base: str, url: str, session_ids: list[str] | None) -> tuple[float, int, int]:
    root = tempfile.mkdtemp(prefix="restore-", dir=base)
    objects = object_store(url)
    target = parse_replica_url(url)
    try:
        take_counts()
        t0 = time.perf_counter()
        report = restore(objects, target.prefix, root, session_ids=session_ids)
        elapsed = time.perf_counter() - t0
        counts = take_counts()
    finally:
        objects.close()
        shutil.rmtree(root, ignore_errors=True)
    return elapsed, len(report.sessions), sum(counts.values())


def take_over_workload(base: str, p: Payloads, rounds: int) -> tuple[list[float], float]:
    """take_over times (seconds) and requests per take_over."""
    url = new_replica()
    roots = [tempfile.mkdtemp(prefix=f"host{h}-", dir=base) for h in (0, 1)]
    stores = [journal.open(r, replica=url, replica_mode="sync") for r in roots]
    sid = "s-handoff"
    times: list[float] = []
    requests = 0
    try:
        create(stores[0], sid)
        for i in range(20):
            stores[0].append_event(sid, *p.event(i))  # some history to fetch
        for r in range(rounds):
            writer, other = stores[r % 2], stores[(r + 1) % 2]
            writer.append_event(sid, *p.event(100 + r))
            take_counts()
            t0 = time.perf_counter()
            other.take_over(sid)
            times.append(time.perf_counter() - t0)
            requests += sum(take_counts().values())
    finally:
        for s in stores:
            with contextlib.suppress(Exception):
                s.close()
        for r in roots:
            shutil.rmtree(r, ignore_errors=True)
        drop_bucket(url)
    return times, requests / rounds


# ------------------------------------------------------------------ one server


def bench_server(kind: str, args: argparse.Namespace, base: str, p: Payloads) -> dict[str, Any]:
    res: dict[str, Any] = {"commits": {}, "lag": {}, "restore": {}, "take_over": []}
    print(f"[{kind}] building the restore data sets", file=sys.stderr)
    big_url, big_sid, big_info = build_big_session(base, p, args.events)
    many_url, many_info = build_many_sessions(base, p, args.sessions)
    res["builds"] = {"big": big_info, "many": many_info}
    workloads = ("append", "save_small", "save_50k")
    for run in range(args.runs):
        print(f"[{kind}] run {run + 1}/{args.runs}", file=sys.stderr)
        for name in workloads:
            n = args.ops if name != "save_50k" else max(20, args.ops // 2)
            got: dict[str, dict[str, float]] = {}
            order = MODES[run % 3 :] + MODES[: run % 3]  # rotate which mode goes first
            for mode in order:
                got[mode] = commit_workload(name, mode, base, p, n)
            for mode in MODES:
                row = dict(got[mode], ratio=got[mode]["ops_per_s"] / got["none"]["ops_per_s"])
                res["commits"].setdefault(name, {}).setdefault(mode, []).append(row)
        lag = lag_workload(base, p, args.lag_samples, args.stream_s)
        for k, v in lag.items():
            res["lag"].setdefault(k, []).append(v)
        for label, url, ids in (
            ("big", big_url, [big_sid]),
            ("many", many_url, None),
        ):
            t, n_sessions, requests = restore_once(base, url, ids)
            res["restore"].setdefault(label, []).append(
                {"s": t, "sessions": n_sessions, "requests": requests}
            )
        times, per = take_over_workload(base, p, args.rounds)
        res["take_over"].append(times)
        res.setdefault("take_over_requests", []).append(per)
    drop_bucket(big_url)
    drop_bucket(many_url)
    return res


# ------------------------------------------------------------------ report


def med(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))]


def fmt(xs: list[float], spec: str = ".0f", scale: float = 1.0) -> str:
    m, lo, hi = med([x * scale for x in xs])
    return f"{m:{spec}} ({lo:{spec}}-{hi:{spec}})"


def report(kind: str, res: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"### {kind}", ""]
    lines.append(
        "| workload | mode | ops/s | ratio to none | PUTs/commit | GET+LIST/commit |"
        " async flush after burst (ms) |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for name, modes in res["commits"].items():
        for mode, rows in modes.items():
            flush = fmt([r["flush_s"] for r in rows], ".0f", 1e3) if mode == "async" else ""
            lines.append(
                f"| {name} | {mode} | {fmt([r['ops_per_s'] for r in rows])} |"
                f" {fmt([r['ratio'] for r in rows], '.2f')} |"
                f" {fmt([r['puts_per_commit'] for r in rows], '.2f')} |"
                f" {fmt([r['gets_per_commit'] for r in rows], '.2f')} | {flush} |"
            )
    lines.append("")
    lines.append("| async lag, commit to shipped (ms) | p50 | p90 | max |")
    lines.append("|---|---|---|---|")
    for label, runs in res["lag"].items():
        p50s = [pct(r, 0.5) for r in runs]
        p90s = [pct(r, 0.9) for r in runs]
        maxes = [max(r) for r in runs]
        what = "isolated commit (idle > lag)" if label == "isolated" else "stream, 1 commit / 20 ms"
        lines.append(
            f"| {what} | {fmt(p50s, '.0f', 1e3)} | {fmt(p90s, '.0f', 1e3)} |"
            f" {fmt(maxes, '.0f', 1e3)} |"
        )
    lines.append("")
    b = res["builds"]
    lines.append("| restore | seconds | sessions | requests | build (untimed) |")
    lines.append("|---|---|---|---|---|")
    for label, rows in res["restore"].items():
        if label == "big":
            what = f"1 session of {args.events} events"
            built = (
                f"{b['big']['build_s']:.1f} s, {b['big']['chunks']} chunks,"
                f" {b['big']['local_bytes'] / 2**20:.1f} MiB local"
            )
        else:
            what = f"{args.sessions} small sessions"
            built = f"{b['many']['build_s']:.1f} s"
        lines.append(
            f"| {what} | {fmt([r['s'] for r in rows], '.2f')} | {rows[0]['sessions']} |"
            f" {rows[0]['requests']} | {built} |"
        )
    lines.append("")
    to = res["take_over"]
    lines.append(
        f"| take_over ({args.rounds} rounds per run) | p50 (ms) | p90 (ms) | requests each |"
    )
    lines.append("|---|---|---|---|")
    lines.append(
        f"| fence + fetch, sync | {fmt([pct(r, 0.5) for r in to], '.1f', 1e3)} |"
        f" {fmt([pct(r, 0.9) for r in to], '.1f', 1e3)} |"
        f" {fmt(res['take_over_requests'], '.1f')} |"
    )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 run: a smoke")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--servers", default="seaweedfs,ceph")
    ap.add_argument("--ops", type=int, default=None, help="commits per burst")
    ap.add_argument("--sessions", type=int, default=None, help="small sessions to restore")
    ap.add_argument("--events", type=int, default=None, help="events of the big session")
    ap.add_argument("--rounds", type=int, default=20, help="take_over rounds per run")
    ap.add_argument("--s3-env", default=None, help="use the running server this file names")
    ap.add_argument("--json", default=None, help="also write the raw figures here")
    args = ap.parse_args()
    quick = args.quick
    args.runs = args.runs or (1 if quick else 3)
    args.ops = args.ops or (40 if quick else 200)
    args.sessions = args.sessions or (200 if quick else 500)
    args.events = args.events or (5000 if quick else 100_000)
    args.lag_samples = 3 if quick else 8
    args.stream_s = 1.5 if quick else 3.0
    install_counters()
    p = Payloads(args.ops)
    base = tempfile.mkdtemp(prefix="bench-replica-")
    results: dict[str, Any] = {}
    text: list[str] = []
    try:
        for kind in args.servers.split(","):
            t0 = time.perf_counter()
            try:
                with server(kind, base, args.s3_env) as values:
                    point_at(values)
                    results[kind] = bench_server(kind, args, base, p)
            except RuntimeError as exc:
                print(f"[{kind}] not measured: {exc}", file=sys.stderr)
                text.append(f"### {kind}\n\nnot measured: {exc}\n")
                continue
            print(f"[{kind}] done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            text.append(report(kind, results[kind], args))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{args.runs} runs; bursts of {args.ops} commits ({max(20, args.ops // 2)} for save_50k);"
        " medians (min-max over runs)\n"
    )
    print("\n".join(text))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

"""Run a workload on the recording mount, and judge the crash images it left.

Each image is opened in a fresh process (`workloads.py observe`), compared with
what a reference run of the same script on a plain directory shows after the
calls acknowledged when the image was taken (or after the one call then in
flight), checked with `journal verify`, and then made to take new writes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import workloads
from mount import Mount, mounted

HERE = Path(__file__).resolve().parent
WORKLOADS = str(HERE / "workloads.py")
JOURNAL_CLI = [sys.executable, "-m", "journal.cli"]


def seed_for(name: str, default: int | None = None) -> int:
    """JOURNAL_POWERLOSS_SEED replays a run; otherwise a fresh seed, printed by the caller."""
    env = os.environ.get("JOURNAL_POWERLOSS_SEED")
    if env:
        return int(env)
    return default if default is not None else random.SystemRandom().randrange(2**31)


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [
                str(HERE),
                str(HERE.parent),  # tests/, for helpers.py
                *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []),
            ]
        ),
    }
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def run_workload(
    m: Mount, kind: str, seed: int, side: Path, *, keep_going: bool = False, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, WORKLOADS, "run", kind, str(seed), str(m.path / "store"), str(side)]
    return _run([*args, "--keep-going"] if keep_going else args, timeout)


@dataclass
class Verdict:
    image: str
    problems: list[str]


def observe(root: Path, kind: str, seed: int) -> tuple[Any, str, str]:
    """What a fresh process sees of the store at `root`, then whether it takes new writes."""
    r = _run([sys.executable, WORKLOADS, "observe", kind, str(root), str(seed), "--write-again"])
    if r.returncode != 0:
        return None, f"open/observe failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}", ""
    out = json.loads(r.stdout)
    return out["seen"], "", out["write_again"]


def probe(root: Path, sessions: list[str], keys: list[str] = ()) -> tuple[Any, str]:
    """Checkpoint sequence per session and value per "scope:key", seen by a fresh process."""
    r = _run([sys.executable, WORKLOADS, "probe", str(root), ",".join(sessions), ",".join(keys)])
    if r.returncode != 0:
        return None, f"open failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}"
    return json.loads(r.stdout), ""


def verify(root: Path, *, torn_ok: bool = False) -> str:
    """'' when `journal verify` finds nothing wrong, else what it said. With `torn_ok`
    (a crash image before any open), an unfinished final commit is not a fault: a
    crash in the middle of a call leaves one, and the next writer drops it."""
    r = _run([*JOURNAL_CLI, "--json", "verify", "--root", str(root)])
    if r.returncode == 0:
        return ""
    said = f"journal verify exit {r.returncode}: " + (r.stdout + r.stderr).strip()[-1500:]
    if not torn_ok:
        return said
    try:
        doc = json.loads(r.stdout)
        torn_only = not doc["damaged_sessions"] and all(
            f["severity"] == "tail" for f in doc["findings"]
        )
    except (ValueError, KeyError, TypeError):
        return said
    return "" if torn_only else said


def allowed_state(
    script: workloads.Script, upto: int, inflight: int | None
) -> dict[str, list[Any]]:
    """Per state key, the values a power loss may leave: the last value saved in "fsync"
    mode by a returned call (None before one), and every value saved after it in "os"
    mode, or by the call in flight."""
    out: dict[str, list[Any]] = {f"state:{s}:{k}": [None] for s, k in script.state_keys}
    for i, step in enumerate(script.steps[: upto + (inflight is not None)]):
        if step.state is None:
            continue
        scope, key, value = step.state
        name = f"state:{scope}:{key}"
        value = json.loads(json.dumps(value))
        if step.durability == "fsync" and i != inflight:
            out[name] = [value]
        else:
            out[name].append(value)
    return out


def _differences(got: Any, want: Any, where: str = "") -> list[str]:
    """The paths at which two observations differ, with both values (short)."""
    if isinstance(got, dict) and isinstance(want, dict):
        out: list[str] = []
        for k in sorted(set(got) | set(want), key=str):
            out.extend(_differences(got.get(k), want.get(k), f"{where}.{k}" if where else k))
        return out
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in _differences(g, w, f"{where}[{i}]")
        ]
    if got == want:
        return []
    if isinstance(got, list) and isinstance(want, list):
        return [
            f"{where}: {len(got)} items, expected {len(want)}: got {json.dumps(got)[:200]}"
            f", expected {json.dumps(want)[:200]}"
        ]
    return [f"{where}: got {json.dumps(got)[:200]}, expected {json.dumps(want)[:200]}"]


def judge(image: Path, kind: str, seed: int, ref: list[Any], side_text: str) -> list[str]:
    """What is wrong with one crash image (nothing: [])."""
    script = workloads.steps(kind, seed)
    side = workloads.parse_side(side_text)
    acked = side["acked"]
    k = len(acked)
    if acked != list(range(k)):
        return [f"acknowledged calls are not a prefix: {acked}"]
    inflight = side["begun"] if side["begun"] >= k else None
    root = image / "store"
    if not (root / "JOURNAL").exists() and k == 0:
        return []  # the store's creation had not returned
    problems: list[str] = []
    v = verify(root, torn_ok=True)  # read-only, on the image as the power loss left it
    if v:
        problems.append(f"on the crash image: {v}")
    got, err, again = observe(root, kind, seed)
    if err:
        return [*problems, f"{err} (after {k} acknowledged calls)"]
    candidates = [ref[k]] + ([ref[k + 1]] if inflight is not None else [])
    if kind == "state":
        allowed = allowed_state(script, k, inflight)
        for name, values in allowed.items():
            if got.get(name) not in values:
                problems.append(
                    f"{name} is {json.dumps(got.get(name))[:200]}, allowed: "
                    f"{[json.dumps(v)[:80] for v in values]}"
                )
        got = {n: v for n, v in got.items() if not n.startswith("state:")}
        candidates = [
            {n: v for n, v in c.items() if not n.startswith("state:")} for c in candidates
        ]
    if got not in candidates:
        last = script.steps[k - 1].name if k else "nothing"
        nxt = script.steps[inflight].name if inflight is not None else "none"
        closest = min((_differences(got, c) for c in candidates), key=len)[:12]
        problems.append(
            f"after {k} acknowledged calls (last: {last}; in flight: {nxt}) the "
            "store shows neither the state after them nor after the call in flight:"
            + "".join(f"\n    {d}" for d in closest)
        )
    if again:
        problems.append(f"the store did not take new writes: {again}")
    else:
        v = verify(root)
        problems.extend([f"after new writes: {v}"] if v else [])
    return problems


def crash_run(
    base: Path, kind: str, seed: int, *, images: int, prob: float, tear: str = "prefix"
) -> tuple[list[Verdict], dict[str, Any]]:
    """Run `kind` on the mount, taking up to `images` crash images at random operations."""
    side = base / "side.log"
    side.touch()
    imgdir = base / "images"
    with mounted(base / "fs") as m:
        m.control(
            cmd="images",
            dir=str(imgdir),
            prob=prob,
            max=images,
            seed=seed,
            side=str(side),
            tear=tear,
        )
        r = run_workload(m, kind, seed, side)
        m.control(cmd="image", dest=str(imgdir / "img-final"), seed=seed, side=str(side))
        stats = m.control(cmd="stats")
    assert r.returncode == 0, f"the workload failed on the mount: {r.stdout}{r.stderr}"
    ref = workloads.reference(kind, seed, str(base / "reference"))
    verdicts = []
    for meta in sorted(imgdir.glob("img-*.json")):
        image = meta.with_suffix("")
        about = json.loads(meta.read_text())
        work = base / "work" / image.name
        shutil.copytree(image, work)  # opening it recovers it: the image itself stays as taken
        problems = judge(work, kind, seed, ref, about["side_text"])
        verdicts.append(Verdict(f"{image.name} (at {about['op']} {about['path']})", problems))
    return verdicts, stats


def report(verdicts: list[Verdict]) -> str:
    return "\n".join(f"{v.image}:\n  " + "\n  ".join(v.problems) for v in verdicts if v.problems)


# ------------------------------------------------------------------ faults
def fault_run(
    base: Path, kind: str, seed: int, rules: list[dict[str, Any]], *, lose_after: int | None = None
) -> dict[str, Any]:
    """Run `kind` with fault rules (and maybe a lost mount) and the workload going on
    after failures. Returns the parsed side file, the file system's counts, the
    workload's exit, and (mount not lost) what a fresh process sees of the store then."""
    side = base / "side.log"
    side.touch()
    with mounted(base / "fs") as m:
        for rule in rules:
            m.control(cmd="fault", **rule)
        if lose_after is not None:
            m.control(
                cmd="lose", after=lose_after, dest=str(base / "lost"), seed=seed, side=str(side)
            )
        r = run_workload(m, kind, seed, side, keep_going=True)
        m.control(cmd="clear")
        stats = m.control(cmd="stats")
    out: dict[str, Any] = {
        "side": workloads.parse_side(side.read_text()),
        "stats": stats,
        "exit": r.returncode,
        "output": (r.stdout + r.stderr)[-3000:],
    }
    if lose_after is None:
        root = m.backing / "store"
        out["verify"] = verify(root)
        out["seen"], out["error"], out["write_again"] = observe(root, kind, seed)
    return out


def explain_failures(
    base: Path, kind: str, seed: int, seen: Any, failed: list[int], *, most: int = 2
) -> tuple[frozenset[int], dict[int, str]] | None:
    """Which failed calls took effect: a subset of `failed` (at most `most` of them)
    such that the script run without the others ends as `seen`, and what that run
    raised (calls that need a left-out one). None when no such subset explains it
    (a failed call took effect in part, or more of them took effect than `most`)."""
    import itertools

    for n in range(min(most, len(failed)) + 1):
        for took in itertools.combinations(failed, n):
            raised: dict[int, str] = {}
            root = base / f"explain-{'-'.join(map(str, took)) or 'none'}"
            skip = frozenset(failed) - set(took)
            ref = workloads.reference(kind, seed, str(root), skip, raised, every=False)
            shutil.rmtree(root, ignore_errors=True)
            if ref[-1] == seen:
                return frozenset(took), raised
    return None

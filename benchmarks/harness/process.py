"""Workloads that start fresh processes: a cold open, start-up (`import`, `journal ls`) and the
peak RSS of a process that works across many sessions.

Children run `child.py` (or the `journal` CLI) with PYTHONDONTWRITEBYTECODE unset and without
`-B`, so that they import from .pyc files as a user's install does; one untimed run of each
command first makes sure the .pyc files exist.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .core import Catalog, Harness, catalog_id
from .measure import alternate
from .report import Row, Section, growth_row
from .sides import SIDES

CHILD = Path(__file__).resolve().parent / "child.py"
CWD = CHILD.parent.parent
"""Children run in benchmarks/: `python -c` puts the working directory first on sys.path, and
the repository's root would shadow the `journal` that PYTHONPATH or the install names."""
PYTHON = sys.executable
JOURNAL_CLI = str(Path(sys.executable).parent / "journal")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def wall(command: Sequence[str]) -> float:
    """Seconds from starting `command` to its exit (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(
        command,
        env=child_env(),
        cwd=CWD,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def child(action: str, side: str, root: Path, *args: str) -> tuple[float, dict[str, Any]]:
    """Run `child.py`; its wall time and the JSON it printed."""
    start = time.perf_counter()
    done = subprocess.run(
        [PYTHON, str(CHILD), action, side, str(root), *args],
        env=child_env(),
        cwd=CWD,
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return elapsed, result


def sizes(h: Harness) -> tuple[int, ...]:
    return h.cfg.catalog_sizes


def w_cold(h: Harness, section: Section) -> None:
    """A fresh process: open the store, `load` one session, its first `event_page(50)`."""
    inside: dict[int, Row] = {}
    for n in sizes(h):
        catalog = h.catalog(n)
        session_id = catalog_id(n // 2)
        for name in SIDES:  # untimed: .pyc files, and the OS's caches of the store
            child("cold", name, catalog.roots[name], session_id)
        walls: dict[str, list[float]] = {name: [] for name in SIDES}

        def run(
            name: str,
            _: int,
            catalog: Catalog = catalog,
            session_id: str = session_id,
            walls: dict[str, list[float]] = walls,
        ) -> float:
            elapsed, result = child("cold", name, catalog.roots[name], session_id)
            walls[name].append(elapsed)
            seconds: float = result["seconds"]
            return seconds

        samples = alternate(h.cfg.process_reps, SIDES, run)
        label = f"open + load + first event_page, {n:,} sessions"
        inside[n] = section.add(Row(label, "s", samples, better="lower"))
        section.add(
            Row("  process wall (interpreter + import + the above)", "s", walls, better="lower")
        )
    first, last = sizes(h)[0], sizes(h)[-1]
    if last != first:
        label = f"  time growth {first:,} -> {last:,} sessions (open + load + page)"
        section.add(growth_row(label, inside[first], inside[last]))
    section.notes.append(
        f"{h.cfg.process_reps} fresh processes per figure, alternating the stores; the first "
        "row is timed inside the child from after its imports (journal: `import journal`; "
        "SQLite: its store module) to the first page's return; the session loaded is the "
        "middle one of the catalog (1 KiB checkpoint + turn record + 2 events); warm OS page "
        "cache (dropping it is not possible here); os mode / synchronous=NORMAL"
    )


def w_startup(h: Harness, section: Section) -> None:
    """`import journal` against the SQLite stores' imports, and `journal ls` on the largest
    catalog against the same first page from a fresh Python process on SQLite."""
    reps = max(h.cfg.process_reps, 5)
    commands = {
        "pass": [PYTHON, "-c", "pass"],
        "sqlite3": [PYTHON, "-c", "import sqlite3"],
        "journal": [PYTHON, "-c", "import journal"],
        "mobius": [PYTHON, "-c", "import sqlite_mobius"],
        "tuned": [PYTHON, "-c", "import sqlite_tuned"],
    }
    for command in commands.values():
        wall(command)  # untimed: writes the .pyc files
    samples = alternate(reps, commands, lambda name, _: wall(commands[name]))
    base = statistics.median(samples["pass"])
    section.add(Row("python -c 'import <store>' (process wall)", "s", samples, better="lower"))
    # From the medians: a difference of two noisy samples pairs badly (it can go negative).
    minus = {name: [statistics.median(samples[name]) - base] for name in SIDES}
    section.add(Row("  the import alone (minus `python -c pass`)", "s", minus, better="lower"))
    section.add(Row.one("  python -c pass", "s", samples["pass"]))
    section.add(Row.one("  python -c 'import sqlite3' (the issue's bar)", "s", samples["sqlite3"]))
    n = sizes(h)[-1]
    catalog = h.catalog(n)
    ls = {
        "journal": [JOURNAL_CLI, "ls", "--root", str(catalog.roots["journal"])],
        **{
            name: [PYTHON, str(CHILD), "ls", name, str(catalog.roots[name])]
            for name in SIDES
            if name != "journal"
        },
    }
    for command in ls.values():
        wall(command)
    samples = alternate(reps, ls, lambda name, _: wall(ls[name]))
    label = f"`journal ls` (first 50), {n:,} sessions, process wall"
    section.add(Row(label, "s", samples, better="lower"))
    section.notes.append(
        f"{reps} processes per figure, alternating; PYTHONDONTWRITEBYTECODE unset and .pyc "
        "files written by an untimed first run. The SQLite columns of the ls row run "
        "child.py ls: a fresh Python process that imports the store, opens it and prints the "
        "first list_sessions_page(50), one line per session"
    )


def w_rss(h: Harness, section: Section) -> None:
    """Peak RSS of a process that lists every session of the largest catalog, then pages and
    appends to each of them."""
    n = sizes(h)[-1]
    catalog = h.catalog(n)
    reps = min(2, h.cfg.process_reps)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in SIDES}

    def run(name: str, _: int) -> float:
        result = child("rss", name, catalog.roots[name], str(n))[1]
        results[name].append(result)
        rss: float = result["rss"]
        return rss

    samples = alternate(reps, SIDES, run)
    label = f"peak RSS: list {n:,} sessions, then page + append to each"
    section.add(Row(label, "B", samples, better="lower"))
    for key, what in (
        ("rss_after_list", "  peak RSS after listing only"),
        ("rss_after_import", "  RSS after the imports"),
    ):
        values = {name: [float(r[key]) for r in results[name]] for name in SIDES}
        section.add(Row(what, "B", values, better="lower"))
    seconds = {name: [float(r["seconds"]) for r in results[name]] for name in SIDES}
    section.add(Row("  wall of the work (list, page, append)", "s", seconds, better="lower"))
    section.notes.append(
        "one fresh process per figure (peak RSS: VmHWM of /proc/self/status); appends in os "
        "mode / synchronous=NORMAL; this workload writes one event into every catalog "
        "session (it runs after the other catalog workloads)"
    )

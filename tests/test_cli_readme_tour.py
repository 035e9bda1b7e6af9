"""The README's command-line tour works after the README's first command (the demo):
every line of it runs against the demo store, and the README says how to call
`journal` when it is not on PATH."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
# what a line may exit with when it works: diff of two different sessions says so
# with 1; delete off a terminal asks for --yes (2)
EXPECTED = {"diff": 1, "delete": 2}


def _tour() -> list[list[str]]:
    section = README.split("## A quick tour of the command line", 1)[1].split("\n## ", 1)[0]
    lines = re.findall(r"^    (journal .*)$", section, re.M)
    return [shlex.split(ln.split("  #", 1)[0].split("|", 1)[0]) for ln in lines]


def test_readme_says_how_to_call_journal() -> None:
    section = README.split("## A quick tour of the command line", 1)[1].split("\n## ", 1)[0]
    assert ".venv/bin/journal" in section and "activate" in section


def test_every_tour_line_runs_after_the_demo(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "journal.cli"]
    demo = subprocess.run([*cli, "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert demo.returncode == 0, demo.stderr
    tour = _tour()
    assert len(tour) >= 15
    for words in tour:
        if "--follow" in words:
            continue
        args = ["demo-session" if w == "SESSION" else w for w in words[1:]]
        if args[0] == "import":  # the bundle of the export line before it
            assert (tmp_path / "s.jbundle").exists()
        proc = subprocess.run(
            [*cli, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        if "--accept-loss" in args:  # the demo's session is healthy: refused, and says so
            assert proc.returncode == 1 and "not damaged" in proc.stdout, proc.stdout
            continue
        assert proc.returncode == EXPECTED.get(args[0], 0), (args, proc.stdout, proc.stderr)

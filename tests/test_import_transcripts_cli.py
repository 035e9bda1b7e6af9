"""journal import-transcripts, the command: exit codes, the --json report, dry runs,
the default paths, `journal verify` on the result, and an import killed with -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import run_cli
from test_import_transcripts import (
    CC,
    SID,
    assistant,
    claude_lines,
    claude_project,
    codex_home,
    logical,
    sessions,
    user,
    write_jsonl,
)

import journal


def test_a_clean_import_exits_0_with_a_json_report_and_verifies(tmp_path: Path) -> None:
    root = tmp_path / "store"
    paths = [str(claude_project(tmp_path / "claude")), str(codex_home(tmp_path / "codex"))]
    proc = run_cli(root, "--json", "import-transcripts", *paths)
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["dry_run"] is False
    assert doc["sessions_written"] == 4
    assert doc["not_understood"] == 0 and doc["refused"] == 0
    first = doc["files"][0]
    assert first["format"] == "claude-code" and first["lines"] == 16
    assert first["sessions"][0] == {
        "session_id": CC,
        "status": "new",
        "commits": 16,
        "existing": 0,
        "written": 16,
        "parent": None,
        "fork_sequence": None,
    }
    assert run_cli(root, "verify").stdout.startswith("ok: 4 sessions")
    again = json.loads(run_cli(root, "--json", "import-transcripts", *paths).stdout)
    assert again["lines_written"] == 0
    text = run_cli(root, "import-transcripts", *paths).stdout
    assert f"{CC}: unchanged (16 lines)" in text


def test_lines_not_understood_exit_1_unless_allowed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    path = write_jsonl(tmp_path / "p" / f"{SID}.jsonl", claude_lines()[:3], b'{"type": "user"')
    with open(path, "r+b") as f:  # a malformed line in the middle too
        data = f.read()
        f.seek(0)
        f.write(b"not json\n" + data)
    dry = run_cli(root, "import-transcripts", "--dry-run", str(path), check_code=1)
    assert f"{path}:1: malformed: not JSON" in dry.stderr
    assert f"{path}:5: incomplete:" in dry.stderr and not root.exists()
    proc = run_cli(root, "--json", "import-transcripts", str(path), check_code=1)
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["not_understood"] == 2
    assert [(f["line"], f["kind"]) for f in doc["files"][0]["findings"]] == [
        (1, "malformed"),
        (5, "incomplete"),
    ]
    # Imported again: the malformed line was imported (and reported) already; the
    # half-written one is still not whole, so it is reported again.
    proc = run_cli(root, "import-transcripts", "--allow-unknown", str(path))
    assert "1 not understood" in proc.stdout and ":1:" not in proc.stderr
    assert run_cli(root, "verify").returncode == 0


def test_a_refused_file_exits_1_and_a_bad_command_line_2(tmp_path: Path) -> None:
    root = tmp_path / "store"
    lines = claude_lines()
    path = write_jsonl(tmp_path / "p" / f"{SID}.jsonl", lines)
    run_cli(root, "import-transcripts", str(path))
    write_jsonl(path, [user("z", None, 1, "another start"), *lines[1:]])
    proc = run_cli(root, "import-transcripts", str(path), check_code=1)
    assert "refused" in proc.stderr and "changed" in proc.stderr
    bad = run_cli(root, "--json", "import-transcripts", "--format", "nope", str(path), check_code=2)
    assert json.loads(bad.stderr)["exit_code"] == 2
    missing = run_cli(root, "import-transcripts", str(tmp_path / "absent"), check_code=1)
    assert "absent" in missing.stderr


def test_the_default_paths_are_the_claude_and_codex_homes(tmp_path: Path) -> None:
    claude_project(tmp_path / "claude")
    codex_home(tmp_path / "codex")
    env = {
        **os.environ,
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "CODEX_HOME": str(tmp_path / "codex"),
    }
    cmd = [
        sys.executable,
        "-m",
        "journal.cli",
        "--root",
        str(tmp_path / "store"),
        "--json",
        "import-transcripts",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=True)
    assert json.loads(proc.stdout)["sessions_written"] == 4
    env["CLAUDE_CONFIG_DIR"] = env["CODEX_HOME"] = str(tmp_path / "nothing")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "no transcripts to import" in proc.stderr


def test_an_import_killed_with_sigkill_resumes_and_ends_as_one_import(tmp_path: Path) -> None:
    lines = claude_lines()[:2]
    parent = "u1"
    for i in range(8000):  # long enough to be killed in the middle
        uuid = f"m{i}"
        lines.append(
            assistant(
                uuid, parent, 2 + i % 50, f"msg_{i}", {"type": "text", "text": f"step {i} " * 20}
            )
        )
        parent = uuid
    path = write_jsonl(tmp_path / "p" / f"{SID}.jsonl", lines)
    root = tmp_path / "store"
    cmd = [
        sys.executable,
        "-m",
        "journal.cli",
        "--root",
        str(root),
        "import-transcripts",
        "--durability",
        "os",
        str(path),
    ]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with journal.open(root, read_only=True, create=False) as peek:
                    summary = peek.session_summary(CC)
            except (journal.JournalError, OSError):
                summary = None  # the store is still being made
            if summary is not None and summary.sequence >= 100:
                break
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        code = child.wait(timeout=60)
    assert code == -signal.SIGKILL, "the import ended before it was killed: make the file longer"
    with journal.open(root, read_only=True) as peek:
        done = peek.session_summary(CC)
    assert done is not None and 100 <= done.sequence < len(lines) - 1
    run_cli(root, "import-transcripts", "--durability", "os", str(path))
    assert run_cli(root, "verify").returncode == 0
    once = tmp_path / "once"
    run_cli(once, "import-transcripts", "--durability", "os", str(path))
    with journal.open(root) as a, journal.open(once) as b:
        assert sessions(a) == sessions(b)
        assert logical(a, CC) == logical(b, CC)

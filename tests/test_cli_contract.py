"""The command line's output contract, run as subprocesses: one JSON document per
command, JSON errors under --json, exit codes, no tracebacks, Unix conventions."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import live_writer, run_cli, save_items

# reaches inside: the parser's options and a command failing inside the CLI
import journal
from journal import Checkpoint, Event, cli, cli_read
from journal.cli import build_parser

CLI = [sys.executable, "-m", "journal.cli"]


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("contract") / "store"
    store = journal.open(root)
    for seq in range(4):
        save_items(store, "one", seq, seq + 1, events=3)
    save_items(store, "two", 0, 1)
    store.close()
    return root


def test_verify_json_prints_a_document_with_its_findings(store_root: Path) -> None:
    doc = json.loads(run_cli(store_root, "verify", "--json").stdout)
    assert doc["ok"] is True and doc["sessions"] == 2 and doc["findings"] == []
    assert doc["commits"] >= 5 and doc["damaged_sessions"] == []


def test_events_json_is_one_document(store_root: Path) -> None:
    doc = json.loads(run_cli(store_root, "events", "one", "--json", "--limit", "4").stdout)
    assert isinstance(doc, list) and [e["sequence"] for e in doc] == [12, 11, 10, 9]


def test_every_listing_is_one_json_document(store_root: Path) -> None:
    for args in (
        ("ls",),
        ("tree",),
        ("stats",),
        ("executions", "--all"),
        ("replay", "one"),
        ("transcript", "one"),
        ("state", "one"),
    ):
        proc = run_cli(store_root, *args, "--json")
        json.loads(proc.stdout)  # one document: fails on JSON Lines


def test_errors_under_json_are_json_on_stderr_with_the_exit_code(store_root: Path) -> None:
    proc = run_cli(store_root, "events", "nope", "--json", check_code=1)
    assert proc.stdout == ""
    err = json.loads(proc.stderr)
    assert err["type"] == "NotFoundError" and "nope" in err["error"] and err["exit_code"] == 1
    assert {"path", "offset"} <= set(err)
    usage = run_cli(store_root, "ls", "--json", "--limit", "abc", check_code=2)
    err = json.loads(usage.stderr)
    assert err["exit_code"] == 2 and "--limit" in err["error"]


def test_demo_json_is_refused_with_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli(tmp_path / "d", "demo", "--json", check_code=2)
    assert json.loads(proc.stderr)["exit_code"] == 2
    assert not (tmp_path / "d").exists()


def test_limit_abc_names_the_option(store_root: Path) -> None:
    proc = run_cli(store_root, "ls", "--limit", "abc", check_code=2)
    assert "argument --limit" in proc.stderr and "_positive" not in proc.stderr
    assert "not a whole number" in proc.stderr


def test_limit_at_the_maximum_gives_a_true_message(store_root: Path) -> None:
    top = (1 << 63) - 1
    proc = run_cli(store_root, "ls", "--limit", str(top), check_code=2)
    assert "exceeds i64" not in proc.stderr  # 2**63-1 fits in an i64: say the real bound
    assert f"not between 1 and {top - 1}" in proc.stderr
    ok = run_cli(store_root, "events", "one", "--limit", str(top - 1), "--json")
    assert len(json.loads(ok.stdout)) == 12


def test_version() -> None:
    proc = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"journal {journal.__version__}"


def test_every_option_has_help_text_and_its_default() -> None:
    # reaches inside: every option of the parser is checked for help text

    parser = build_parser()
    for name, sp in parser.commands.items():
        for action in sp._actions:  # reaches inside argparse: it lists no options publicly
            if action.help == "==SUPPRESS==" or action.dest == "help":
                continue
            assert action.help, (name, action.dest)
            takes_value = action.nargs != 0 and action.option_strings != []
            if takes_value and action.default not in (None, False, "==SUPPRESS=="):
                assert "default" in action.help, (name, action.dest, action.help)


def test_plurals_are_right(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    cp = Checkpoint.empty("p")
    store.save(cp, [{"role": "user", "content": "hi"}])
    store.close()
    out = run_cli(root, "transcript", "p").stdout
    assert "1 item" in out and "1 items" not in out
    show = run_cli(root, "show", "p").stdout
    assert "0 context items" in show and "1 transcript batch," in show
    verify = run_cli(root, "verify").stdout
    assert "1 session," in verify and "1 commit checked" in verify and "0 findings" in verify
    bundle = tmp_path / "p.jbundle"
    assert "exported 1 session " in run_cli(root, "export", "p", "-o", str(bundle)).stdout


def test_event_times_carry_a_date_when_not_today(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("t"))
    old_ms = 1_600_000_000_000  # 2020-09-13
    store.append_event("t", old_ms, Event(msg={"type": "warning", "message": "old"}))
    now_ms = int(time.time() * 1000)
    store.append_event("t", now_ms, Event(msg={"type": "warning", "message": "new"}))
    store.close()
    lines = run_cli(root, "events", "t").stdout.splitlines()
    old = next(ln for ln in lines if "old" in ln)
    new = next(ln for ln in lines if "new" in ln)
    assert "2020-09-13" in old
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    assert today not in new


def test_export_to_a_missing_directory_is_one_line_no_traceback(store_root: Path) -> None:
    proc = run_cli(store_root, "export", "one", "-o", "/nonexistent/dir/x.jb", check_code=1)
    assert proc.stderr.count("\n") == 1 and "/nonexistent/dir" in proc.stderr


def test_demo_on_a_path_that_is_a_file_is_a_clean_error(tmp_path: Path) -> None:
    target = tmp_path / "afile"
    target.write_text("keep me")
    proc = run_cli(tmp_path / "unused", "demo", str(target), check_code=2)
    assert "is a file" in proc.stderr and proc.stderr.count("\n") == 1
    assert target.read_text() == "keep me"


def test_an_unexpected_exception_is_one_line_exit_70(
    store_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    def boom(args: object, out: object) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(cli_read, "cmd_ls", boom)
    assert cli.main(["--root", str(store_root), "ls"]) == 70
    err = capsys.readouterr().err
    assert err == "journal: internal error (RuntimeError): boom\n"


def test_ctrl_c_during_follow_exits_130_without_traceback(tmp_path: Path) -> None:
    root = tmp_path / "live"
    with live_writer(root, pause=0.005):
        follow = subprocess.Popen(
            [*CLI, "--root", str(root), "events", "live", "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert follow.stdout is not None
        follow.stdout.readline()  # it is following: at least one event printed
        follow.send_signal(signal.SIGINT)
        _, err = follow.communicate(timeout=30)
        assert follow.returncode == 130 and "Traceback" not in err


def test_demo_hints_call_the_program_that_ran(tmp_path: Path) -> None:
    venv_journal = Path(sys.executable).parent / "journal"
    if not venv_journal.exists():
        pytest.skip("no journal console script beside the interpreter")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # journal is not on PATH
    rel = os.path.relpath(venv_journal, tmp_path)
    proc = subprocess.run(
        [rel, "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    tail = proc.stdout.split("Explore it:\n", 1)[1]
    hints = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    assert hints, proc.stdout
    for hint in hints:
        first = hint.split()[0]
        assert os.path.samefile(tmp_path / first, venv_journal), hint
    ls = subprocess.run(
        hints[0].split(), cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env
    )
    assert ls.returncode == 0 and "demo-session" in ls.stdout


def test_follow_json_is_json_lines(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = journal.open(root)
    store.save(Checkpoint.empty("f"))
    for i in range(3):
        store.append_event("f", i, Event(msg={"type": "warning", "message": f"m{i}"}))
    store.close()
    follow = subprocess.Popen(
        [*CLI, "--root", str(root), "events", "f", "--follow", "--json", "--after", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    lines = [follow.stdout.readline() for _ in range(3)]
    follow.send_signal(signal.SIGINT)
    follow.communicate(timeout=30)
    assert [json.loads(x)["sequence"] for x in lines] == [1, 2, 3]

"""Start-up: `import journal` and a `journal` command import only what they use.

Each check runs a fresh interpreter and reads its `sys.modules`: what a module
imports eagerly is paid by every process and every command line call (asyncio,
portalocker and the tools' entry points cost more than the rest of the library).
The async facade and the tools still work when first asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import journal
from journal import Checkpoint

# Heavy modules a synchronous `import journal` has no use for (asyncio: the async
# facade; portalocker: locks are flock(2) called directly on POSIX; shutil: only
# removing a tree needs it; dataclasses: generating a class's code at import).
NOT_AT_IMPORT = ["asyncio", "concurrent.futures", "portalocker", "shutil", "dataclasses"]
# The tools' entry points (and what they import) that `journal ls` never calls.
NOT_FOR_LS = [
    *(m for m in NOT_AT_IMPORT if m != "shutil"),  # (argparse's help formatter imports it)
    "journal.aio",
    "journal.bundle",
    "journal.compact",
    "journal.demo",
    "journal.loss",
    "journal.repair",
    "journal.salvage",
    "journal.verify",
    "json",  # text output needs none
    "tarfile",
    "tempfile",
]


def _modules_after(code: str) -> set[str]:
    """The names in `sys.modules` once `code` ran in a fresh interpreter."""
    # (json is imported after the modules are listed: it is one of those looked for)
    probe = f"{code}\nimport sys\nloaded = sorted(sys.modules)\nimport json\n"
    probe += "print(json.dumps(loaded))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_journal_leaves_asyncio_and_portalocker_unimported() -> None:
    loaded = _modules_after("import journal")
    assert "journal.store" in loaded  # the probe sees what the import did
    assert sorted(m for m in NOT_AT_IMPORT if m in loaded) == []


def test_the_async_names_import_asyncio_on_first_use() -> None:
    loaded = _modules_after("import journal\njournal.AsyncStore")
    assert {"asyncio", "journal.aio"} <= loaded


def test_the_async_facade_works_when_first_asked_for(tmp_path: Path) -> None:
    # In a fresh process, so that nothing imported journal.aio before.
    code = f"""
import asyncio, sys
import pytest

import journal
assert "journal.aio" not in sys.modules
from journal import AsyncStore, open_async

async def main() -> None:
    store = await open_async({str(tmp_path / "s")!r})
    assert isinstance(store, AsyncStore) and journal.AsyncStore is AsyncStore
    cp = journal.Checkpoint.empty("a", owner_id="o")
    await store.save(cp)
    loaded = await store.load("a")
    assert loaded is not None and loaded.session_id == "a"
    await store.close()

asyncio.run(main())
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_lazy_names_are_the_modules_own() -> None:
    import journal.aio

    assert journal.AsyncStore is journal.aio.AsyncStore
    assert journal.open_async is journal.aio.open_async
    assert {"AsyncStore", "open_async"} <= set(dir(journal))
    for name in journal.__all__:
        getattr(journal, name)
    for missing in ("asyncstore", "aio_store"):
        try:
            getattr(journal, missing)
        except AttributeError as exc:
            assert missing in str(exc)
        else:
            raise AssertionError(f"journal.{missing} exists")


def test_the_tools_entry_points_load_on_first_use() -> None:
    import journal.inspect as tools
    import journal.verify

    assert tools.verify_store is journal.verify.verify_store
    assert set(tools.__all__) <= set(dir(tools))
    for name in tools.__all__:
        getattr(tools, name)
    try:
        getattr(tools, "no_such_tool")  # noqa: B009
    except AttributeError as exc:
        assert "no_such_tool" in str(exc)
    else:
        raise AssertionError("journal.inspect.no_such_tool exists")


def _store_with_a_session(root: Path) -> None:
    with journal.open(root, durability="os") as store:
        store.save(Checkpoint.empty("s1", owner_id="o"))


def _cli_modules(root: Path, *argv: str) -> set[str]:
    call = ["--root", str(root), *argv]
    code = f"""
import contextlib, io
import journal.cli
with contextlib.redirect_stdout(io.StringIO()):
    code = journal.cli.main({call!r})
assert code == 0, code
"""
    return _modules_after(code)


def test_journal_ls_imports_none_of_the_tools(tmp_path: Path) -> None:
    _store_with_a_session(tmp_path / "s")
    loaded = _cli_modules(tmp_path / "s", "ls")
    assert "journal.cli_read" in loaded
    assert sorted(m for m in NOT_FOR_LS if m in loaded) == []


def test_journal_verify_loads_the_verifier_it_uses(tmp_path: Path) -> None:
    _store_with_a_session(tmp_path / "s")
    loaded = _cli_modules(tmp_path / "s", "verify")
    assert "journal.verify" in loaded
    assert sorted(m for m in ("asyncio", "portalocker", "journal.bundle") if m in loaded) == []


def test_a_subcommand_built_alone_is_the_one_the_whole_parser_has() -> None:
    from journal.cli import build_parser

    whole = build_parser()
    assert len(whole.commands) > 10
    for name, sub in whole.commands.items():
        alone = build_parser(name)
        assert list(alone.commands) == [name]
        assert alone.commands[name].format_help() == sub.format_help()
        assert alone.format_usage() == whole.format_usage()
    for argv in (
        ["ls", "--limit", "3", "--all"],
        ["--json", "--root", "r", "events", "s", "--type", "a", "--type", "b", "--after", "2"],
        ["--root=r", "verify", "r2", "s1", "s2"],
        ["export", "a", "b", "-o", "out.bundle", "--with-ancestors"],
        ["diff", "a", "--seq", "1", "2"],
    ):
        alone = build_parser(_first_command(argv))
        assert vars(alone.parse_args(argv)) == vars(whole.parse_args(argv))


def _first_command(argv: list[str]) -> str:
    return next(a for a in argv if a in {"ls", "events", "verify", "export", "diff"})


def test_every_spelling_of_root_reaches_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from journal.cli import main

    root = str(tmp_path / "s")
    _store_with_a_session(tmp_path / "s")
    outputs = []
    for argv in (
        ["--root", root, "ls"],
        [f"--root={root}", "ls"],
        ["--ro", root, "ls"],  # an abbreviation: every subcommand is built, as argparse needs
        ["--json", "--root", root, "ls"],
        ["ls", "--root", root],
    ):
        assert main(argv) == 0, argv
        outputs.append(capsys.readouterr().out)
    assert "s1" in outputs[0]
    assert outputs[1:3] == [outputs[0]] * 2 and outputs[4] == outputs[0]
    assert json.loads(outputs[3])["sessions"][0]["session_id"] == "s1"

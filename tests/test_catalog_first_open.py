"""Several threads and processes opening a brand-new store at once: every open
succeeds, one catalog log is created whole, and each opener's session is listed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import helpers

import journal
from journal.layout import CATALOG_DIR, CATALOG_LOG_TMP_PREFIX, LOG_DIR


def _open_and_save(root: Path, sid: str, errors: list[str]) -> None:
    try:
        with journal.open(root, durability="os") as store:
            store.list_sessions_page(journal.SessionPageRequest(limit=1))
            store.save(helpers.checkpoint(sid, 0))
    except Exception as exc:  # collected: a thread's exception would be lost
        errors.append(f"{sid}: {exc!r}")


def _check(root: Path, expected: set[str]) -> None:
    catalog = root / CATALOG_DIR
    assert [p.name for p in (catalog / LOG_DIR).iterdir()], "the catalog log has no segment"
    assert not [p for p in catalog.iterdir() if p.name.startswith(CATALOG_LOG_TMP_PREFIX)]
    with journal.open(root, read_only=True) as store:
        assert helpers.listed_ids(store) == expected


def test_threads_open_a_new_store_at_once(tmp_path: Path) -> None:
    for trial in range(10):
        root = tmp_path / f"store{trial}"
        errors: list[str] = []
        threads = [
            threading.Thread(target=_open_and_save, args=(root, f"t{i}", errors)) for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"trial {trial}: {errors}"
        _check(root, {f"t{i}" for i in range(4)})


_OPENER = textwrap.dedent(
    """
    import sys, journal
    sys.path.insert(0, sys.argv[3])
    import helpers
    sys.stdin.readline()  # all start together
    with journal.open(sys.argv[1], durability="os") as store:
        store.list_sessions_page(journal.SessionPageRequest(limit=1))
        store.save(helpers.checkpoint(sys.argv[2], 0))
    """
)


def test_processes_open_a_new_store_at_once(tmp_path: Path) -> None:
    tests_dir = str(Path(__file__).parent)
    for trial in range(4):
        root = tmp_path / f"store{trial}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _OPENER, str(root), f"p{i}", tests_dir],
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, f"trial {trial}: {err}"
        _check(root, {f"p{i}" for i in range(4)})

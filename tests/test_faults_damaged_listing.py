"""One damaged session never hides the others (the library side).

With one session's files damaged for real on disk (its log segment removed, its
SESSION identity file flipped, truncated or deleted), the store-wide calls
(`list_sessions_page`, `recent_executions`, `child_sessions`) and
`session_summary` of every other session keep answering, in the store that
wrote them and in fresh processes. The damaged session stays listed where the
catalog knows it (SessionSummary has no field to mark it damaged: reads of it
raise CorruptionError, and `journal verify` reports it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from faults import flip_byte, truncate_file
from helpers import checkpoint, execution

import journal

DAMAGES = ["segment removed", "identity flipped", "identity truncated", "identity deleted"]


def _build(store: journal.Store) -> None:
    """a (two turns), b (the one damaged: two turns), c forked from a, d from b.

    b's second turn is saved while the catalog refuses appends, so its entry is
    re-derived from b's log: the catalog then knows that turn's key but holds no
    copy of its record, which `recent_executions` reads from b's log."""
    for sid in ("a", "b"):
        store.save(checkpoint(sid, 0, [{"n": 0}]))
        store.save(checkpoint(sid, 1, [{"n": 0}, {"n": 1}]), [{"t": 1}], execution(sid, 1))
    store.save(checkpoint("a", 2, [{"n": 0}, {"n": 1}, {"n": 2}]), [], execution("a", 2))

    def failing(records: object) -> None:
        raise journal.StorageError("injected: catalog append failed")

    store.catalog.append = failing  # type: ignore[method-assign]
    try:
        store.save(checkpoint("b", 2, [{"n": 0}, {"n": 1}, {"n": 2}]), [], execution("b", 2))
    finally:
        del store.catalog.append
    store.list_sessions_page(journal.SessionPageRequest(limit=1))  # re-derives b
    store.fork("a", 2, checkpoint("c", 0, [{"n": 0}]))
    store.fork("b", 1, checkpoint("d", 0, [{"n": 0}]))


def _damage(root: Path, store: journal.Store, how: str) -> None:
    sess = Path(store.session_dir("b"))
    if how == "segment removed":
        for seg in (sess / "log").iterdir():
            seg.unlink()
    elif how == "identity flipped":
        flip_byte(str(sess / "SESSION"), 24)
    elif how == "identity truncated":
        truncate_file(str(sess / "SESSION"), 10)
    else:
        (sess / "SESSION").unlink()


def _answers(store: journal.Store) -> dict[str, object]:
    """What the store-wide calls say (JSON-able, to compare across processes)."""
    page = store.list_sessions_page(journal.SessionPageRequest(limit=100))
    summary = store.session_summary("a")
    return {
        "listed": sorted(s.session_id for s in page.sessions),
        "recent": [(r.session_id, r.turn_id) for r in store.recent_executions(10)],
        "summary_a": None if summary is None else summary.sequence,
        "summary_c": getattr(store.session_summary("c"), "parent_session_id", None),
        "children_a": [s.session_id for s in store.child_sessions("a")],
        "children_b": [s.session_id for s in store.child_sessions("b")],
    }


def _check(answers: dict[str, object]) -> None:
    listed = answers["listed"]
    assert isinstance(listed, list)
    assert {"a", "c", "d"} <= set(listed), answers  # every readable session
    assert set(listed) <= {"a", "b", "c", "d"}
    recent = [tuple(r) for r in answers["recent"]]  # type: ignore[attr-defined]
    assert ("a", "turn-2") in recent and ("a", "turn-1") in recent, answers
    assert answers["summary_a"] == 2
    assert answers["summary_c"] == "a"
    assert answers["children_a"] == ["c"]
    assert answers["children_b"] == ["d"]


_FRESH = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[2])
    import journal
    from test_faults_damaged_listing import _answers
    with journal.open(sys.argv[1]) as store:
        print(json.dumps(_answers(store)))
    """
)


@pytest.mark.parametrize("how", DAMAGES)
def test_one_damaged_session_hides_no_other(tmp_path: Path, how: str) -> None:
    root = tmp_path / "store"
    with journal.open(root) as store:
        _build(store)
        _damage(root, store, how)
        _check(_answers(store))  # the store that wrote them, warm
    with journal.open(root) as store:  # a new store object in this process
        _check(_answers(store))
        with pytest.raises(journal.CorruptionError):
            store.load("b")
    tests = os.path.dirname(os.path.abspath(__file__))
    for _ in range(2):  # fresh processes; the second after the first's open
        out = subprocess.run(
            [sys.executable, "-c", _FRESH, str(root), tests],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        _check(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("how", DAMAGES)
def test_one_damaged_session_hides_no_other_after_a_catalog_rebuild(
    tmp_path: Path, how: str
) -> None:
    """The catalog lost (removed), so the first open rebuilds it from the sessions:
    the readable ones are all listed; the damaged one may be left out."""
    root = tmp_path / "store"
    with journal.open(root) as store:
        _build(store)
        _damage(root, store, how)
    for name in os.listdir(root / "catalog"):
        path = root / "catalog" / name
        if path.is_dir():
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
        else:
            path.unlink()
    (root / "catalog").rmdir()
    with journal.open(root) as store:
        answers = _answers(store)
    listed = answers["listed"]
    assert isinstance(listed, list) and {"a", "c", "d"} <= set(listed), answers
    assert answers["children_a"] == ["c"]
    assert answers["summary_a"] == 2

"""What a fresh process does in the process workloads (`process.py` starts it).

    python benchmarks/harness/child.py cold SIDE ROOT SESSION_ID
    python benchmarks/harness/child.py ls SIDE ROOT
    python benchmarks/harness/child.py rss SIDE ROOT SESSIONS

SIDE is journal, mobius or tuned; ROOT the store's directory. Each imports only its own store
(so that the process's wall time is that store's), does the work and prints one JSON object.
`cold`: open the store, `load` one session, its first `event_page(50)`. `ls`: the first
`list_sessions_page(50)`, printed one line per session (what `journal ls` does). `rss`: list
every session page by page, then for each session its newest event page and one appended event
(os mode / synchronous=NORMAL); the process's peak RSS (VmHWM).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RSS_EVENT = {
    "submission_id": "sub-rss",
    "msg": {
        "type": "tool_call_begin",
        "turn_id": "turn-rss",
        "call_id": "call-rss",
        "name": "shell",
        "arguments": "ls -la",
    },
}


def peak_rss() -> int:
    """This process's peak resident set (VmHWM), in bytes. Not `ru_maxrss`: on Linux that
    includes the parent's image from before the exec."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def open_store(side: str, root: Path) -> Any:
    if side == "journal":
        import journal

        return journal.open(root, durability="os")
    if side == "mobius":
        from sqlite_mobius import SqliteMobiusStore

        return SqliteMobiusStore(root / "mobius.sqlite", "NORMAL")
    from sqlite_tuned import SqliteTunedStore

    return SqliteTunedStore(root / "tuned.sqlite", "NORMAL")


def import_store(side: str) -> None:
    if side == "journal":
        import journal  # noqa: F401
    elif side == "mobius":
        import sqlite_mobius  # noqa: F401
    else:
        import sqlite_tuned  # noqa: F401


def list_page(side: str, store: Any, cursor: Any, limit: int) -> tuple[list[Any], Any]:
    if side == "journal":
        import journal

        page = store.list_sessions_page(journal.SessionPageRequest(limit=limit, cursor=cursor))
        return list(page.sessions), page.next_cursor
    page = store.list_sessions_page(None, cursor, limit)
    return list(page.sessions), page.next_cursor


def event_page(side: str, store: Any, session_id: str) -> int:
    if side == "journal":
        import journal

        page = store.event_page(session_id, journal.EventPageRequest(limit=50))
        return len(page.events)
    return len(store.event_page(session_id, None, 50).events)


def session_id_of(side: str, summary: Any) -> str:
    return str(summary.session_id if side == "journal" else summary["session_id"])


def main(argv: list[str]) -> int:
    action, side, root = argv[0], argv[1], Path(argv[2])
    import_store(side)
    imported = time.perf_counter()
    out: dict[str, Any] = {"import": imported - STARTED}
    if action == "cold":
        store = open_store(side, root)
        checkpoint = store.load(argv[3])
        assert checkpoint is not None
        out["events"] = event_page(side, store, argv[3])
        out["seconds"] = time.perf_counter() - imported
        store.close()
    elif action == "ls":
        store = open_store(side, root)
        sessions, _ = list_page(side, store, None, 50)
        for summary in sessions:
            print(session_id_of(side, summary), file=sys.stderr)
        out["seconds"] = time.perf_counter() - imported
        out["sessions"] = len(sessions)
        store.close()
    elif action == "rss":
        out["rss_after_import"] = peak_rss()
        store = open_store(side, root)
        ids: list[str] = []
        cursor = None
        while True:
            sessions, cursor = list_page(side, store, cursor, 50)
            ids += [session_id_of(side, s) for s in sessions]
            if cursor is None:
                break
        out["listed"] = len(ids)
        out["rss_after_list"] = peak_rss()
        if side == "journal":
            import journal

            event: Any = journal.Event(**RSS_EVENT)
        else:
            event = RSS_EVENT
        at = 1_800_000_000_000
        for session_id in ids[: int(argv[3])]:
            event_page(side, store, session_id)
            store.append_event(session_id, at, event)
        out["seconds"] = time.perf_counter() - imported
        out["rss"] = peak_rss()
        store.close()
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

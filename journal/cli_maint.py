"""Subcommands that check, change or move stores: verify, repair, export, import,
compact, delete, demo."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from . import CorruptionError, NotFoundError, Store
from . import inspect as tools  # tools.x: entry points imported on first use
from .cli_common import (
    EXIT_FINDINGS,
    EXIT_OK,
    Output,
    UsageError,
    end_progress,
    existing_session,
    limit_arg,
    open_store,
    plural,
    program,
    progress,
    require_store,
    session_damage,
    size,
)
from .cli_read import Add
from .inspect import (
    SessionBusyError,
    children_of,
    dir_name,
    is_store,
    listed_sessions,
    live_holder,
    refresh_catalog,
    session_path,
)


# --------------------------------------------------------------------- verify
def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    root = args.root
    targets: list[str] = []
    for target in args.targets:
        if is_store(target):
            root = target
        else:
            targets.append(target)
    require_store(root)
    for target in targets:
        if not os.path.isdir(session_path(root, target)):
            raise NotFoundError(f"no session directory {dir_name(target)} in {root}")
    selected = [dir_name(t) for t in targets] or None
    findings: list[dict[str, Any]] = []
    damaged: list[str] = []
    checked: list[dict[str, Any]] = []
    sessions = commits = 0
    for report, found in tools.verify_store(root, selected):
        if report is not None:
            checked.append({"session": report.session_id, "commits": report.commits})
            sessions += 1
            commits += report.commits
            progress(f"verified {plural(sessions, 'session')}")
        for f in found:
            findings.append(
                {
                    "severity": f.severity,
                    "session": f.session,
                    "path": f.path,
                    "offset": f.offset,
                    "message": f.message,
                    "advice": f.advice,
                }
            )
            if f.severity == tools.SEVERITY_DATA and f.session and f.session not in damaged:
                damaged.append(f.session)
            if not out.json:
                print(str(f))
                print(f"  to address it: {f.advice}")
    end_progress()
    # A torn tail (a crash's unfinished commit) and an accepted loss are reported
    # but are not failures; damage and caches that disagree with the log are.
    ok = not any(f["severity"] in (tools.SEVERITY_DATA, tools.SEVERITY_CACHE) for f in findings)
    if out.json:
        out.doc(
            {
                "ok": ok,
                "sessions": sessions,
                "commits": commits,
                "damaged_sessions": damaged,
                "findings": findings,
                "checked": [{**c, "damaged": c["session"] in damaged} for c in checked],
            }
        )
    else:
        summary = (
            f"{'ok' if ok else 'FAILED'}: {plural(sessions, 'session')},"
            f" {plural(commits, 'commit')} checked, {plural(len(findings), 'finding')}"
        )
        if damaged:
            summary += "; damaged: " + ", ".join(repr(s) for s in damaged)
        print(summary, file=sys.stdout if ok else sys.stderr)
    return EXIT_OK if ok else EXIT_FINDINGS


# --------------------------------------------------------------------- repair
def cmd_repair(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as store:
        directory = store.session_dir(args.session)
    if not os.path.isdir(directory):
        raise NotFoundError(f"session {args.session!r} does not exist")
    holder = live_holder(args.root, directory)
    if holder is not None:
        raise SessionBusyError(
            f"session {args.session!r} is in use by {holder}: repair needs to be its only"
            " writer; stop that process first",
            holder=holder,
        )
    if args.accept_loss:
        from .cli_damage import cmd_accept_loss

        return cmd_accept_loss(args, out, directory)
    report = tools.repair_session(directory, args.session)
    if report.dropped and not report.refused:
        # The catalog may list what was cut (summary, execution copies): re-derive it.
        with Store(args.root) as store:
            refresh_catalog(store, [args.session])
    if out.json:
        out.doc(report.__dict__)
    else:
        if report.refused:
            print(f"refused: {report.refused}")
        for path, start, end, why in report.dropped:
            print(f"dropped bytes {start}..{end} of {path} ({plural(end - start, 'byte')}: {why})")
        for saved in report.saved_to:
            print(f"saved the dropped bytes to {saved}")
        if not report.refused:
            if not report.dropped:
                print("nothing to cut: the log ends with a complete commit")
            print(f"rebuilt caches: {', '.join(report.caches_rebuilt) or 'none present'}")
            print(
                f"last good checkpoint sequence {report.last_checkpoint},"
                f" last event sequence {report.last_event}"
            )
    return EXIT_FINDINGS if report.refused else EXIT_OK


# ------------------------------------------------------------- export, import
def cmd_export(args: argparse.Namespace, out: Output) -> int:
    require_store(args.root)
    if bool(args.sessions) == bool(args.all):
        raise UsageError("give SESSION ids or --all (not both)")
    ids = list(args.sessions)
    if args.all:
        with open_store(args) as store:
            ids = sorted(listed_sessions(store))
        if not ids:
            raise NotFoundError(f"no sessions in {args.root}")
    try:
        report = tools.export_sessions(
            args.root,
            ids,
            args.output,
            with_ancestors=args.with_ancestors,
            overwrite=args.force,
            salvage=args.salvage,
            progress=progress,
        )
    except tools.DamagedSessionsError as exc:
        end_progress()
        for sid, damage in exc.damaged:
            out.mark_damaged(sid, damage)
        raise
    end_progress()
    if out.json:
        out.doc(report.__dict__)
    else:
        names = ", ".join(e["session_id"] for e in report.sessions)
        print(
            f"exported {plural(len(report.sessions), 'session')} ({names};"
            f" {size(report.bytes_in)} of logs) to {report.path} ({size(report.bytes_out)})"
        )
        for e in report.sessions:
            if e.get("salvaged"):
                print_salvaged(e["session_id"], e["salvaged"])
    return EXIT_OK


def print_salvaged(sid: str, note: dict[str, Any]) -> None:
    """What a bundle's `salvaged` note says of a session: what was damaged, copied, left."""
    print(
        f"{sid!r} was damaged ({note['damage']}); salvaged"
        f" {plural(note['checkpoints_copied'], 'checkpoint')} and"
        f" {plural(note['events_copied'], 'event')} (the copy numbers its events itself)"
    )
    for part in note["skipped"]:
        print(f"  missing: {part}")


def cmd_import(args: argparse.Namespace, out: Output) -> int:
    if not os.path.exists(args.bundle):
        raise NotFoundError(f"no bundle at {args.bundle}")
    report = tools.import_bundle(args.root, args.bundle, rename=args.rename, progress=progress)
    end_progress()
    if out.json:
        out.doc(report.__dict__)
    else:
        for old, new in report.installed:
            print(f"imported {old}" + (f" as {new}" if new != old else ""))
        for sid, note in report.salvaged:
            print_salvaged(sid, note)
    return EXIT_OK


# -------------------------------------------------------------------- compact
def cmd_compact(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as store:
        directory = existing_session(store, args.session).directory
    damage = session_damage(directory)
    if damage is not None:
        refused = CorruptionError(
            f"session {args.session!r} is damaged, and compact rewrites only whole logs: {damage}"
        )
        refused.path, refused.offset = damage.path, damage.offset
        raise refused
    report = tools.compact_session(
        directory,
        args.session,
        keep=args.keep,
        erase=args.erase,
        dry_run=args.dry_run,
        progress=progress,
    )
    end_progress()
    if out.json:
        out.doc({**report.__dict__, "freed": report.freed, "why_nothing": report.why_nothing()})
        return EXIT_OK
    r = report
    print(
        f"kept the newest {plural(len(r.retained), 'checkpoint')}"
        f" ({r.retained[0] if r.retained else '-'}..{r.retained[-1] if r.retained else '-'})"
    )
    if r.erased_events:
        print(
            f"{'would erase' if args.dry_run else 'erased'}"
            f" {plural(len(r.erased_events), 'event')} that erase declarations name"
            " (each keeps its sequence, as a stub)"
        )
    if not r.compacted and not r.erased_events:
        print(f"nothing {'would be ' if args.dry_run else ''}dropped: {r.why_nothing()}")
    elif r.compacted:
        verb = "would drop" if args.dry_run else "dropped"
        print(
            f"{verb} the headers of {plural(len(r.compacted), 'older checkpoint')}"
            f" ({r.compacted[0]}..{r.compacted[-1]}): {size(r.bytes_zeroed)} of records"
            f" {'would be ' if args.dry_run else ''}zeroed"
        )
    if r.compacted or r.erased_events:
        print(
            f"log: {size(r.bytes_before)} ->"
            f" {'about ' if args.dry_run else ''}{size(r.bytes_after)} on disk (du),"
            f" {size(r.freed)} {'would be ' if args.dry_run else ''}freed"
            + ("" if args.dry_run else f" ({plural(r.segments_rewritten, 'segment')} rewritten)")
            + (", the newest sealed first" if r.rolled else "")
        )
        if r.freed < r.bytes_zeroed:
            print(
                "  (records referred to by position stay where they are, so zeroed bytes"
                " free disk space only where they cover whole file-system blocks)"
            )
    print(
        "transcript batches and executions are untouched; every event keeps its sequence"
        if r.erased_events
        else "events, transcript batches and executions are untouched"
    )
    return EXIT_OK


# --------------------------------------------------------------------- delete
def cmd_delete(args: argparse.Namespace, out: Output) -> int:
    require_store(args.root)
    ids = list(dict.fromkeys(args.sessions))
    with Store(args.root) as store:
        missing = [s for s in ids if not os.path.isdir(store.session_dir(s))]
        if missing:
            raise NotFoundError(
                f"no session {', '.join(repr(s) for s in missing)} in {args.root}; nothing deleted"
            )
        children = children_of(store)
        subtree: list[str] = []
        queue = list(ids)
        while queue:
            sid = queue.pop(0)
            if sid not in subtree:
                subtree.append(sid)
                queue += sorted(children.get(sid, []))
        forks = [s for s in subtree if s not in ids]
        what = f"{plural(len(ids), 'session')} ({', '.join(repr(s) for s in ids)})"
        if forks:
            what += (
                f" and {plural(len(forks), 'fork')} of them ({', '.join(repr(s) for s in forks)})"
            )
        if not args.yes:
            if not sys.stdin.isatty():
                raise UsageError(f"delete {what}: not asked on a terminal, so give --yes")
            print(f"delete {what}, with their state? [y/N] ", end="", file=sys.stderr, flush=True)
            answer = sys.stdin.readline().strip().lower()
            if answer not in ("y", "yes"):
                print("nothing deleted", file=sys.stderr)
                return EXIT_FINDINGS
        if not store.delete_sessions(ids):
            raise NotFoundError(f"{what} no longer all exist; nothing deleted")
    if out.json:
        out.doc({"deleted": subtree})
    else:
        print(f"deleted {plural(len(subtree), 'session')}: {', '.join(subtree)}")
    return EXIT_OK


# ----------------------------------------------------------------------- demo
def cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from .demo import main as demo_main

    if out.json:
        raise UsageError("demo tells a story for people and has no --json output")
    return demo_main(args.dir or args.root, command=program())


# --------------------------------------------------------------------- parser
def add_parsers(add: Add) -> None:
    if p := add(
        "verify", cmd_verify, "check every checksum, commit, index and snapshot (read-only)"
    ):
        p.add_argument(
            "targets",
            nargs="*",
            metavar="ROOT|SESSION",
            help="a store directory and/or session ids (default: every session of --root)",
        )
    if p := add(
        "repair",
        cmd_repair,
        "cut an unfinished tail and rebuild caches (saves what it cuts); refuses damage"
        " unless --accept-loss",
    ):
        p.add_argument("session", help="session id (no other process may be using it)")
        p.add_argument(
            "--accept-loss",
            action="store_true",
            help="make a damaged session writable again: cut at its last verifiable commit,"
            " keep the cut bytes in its repair/ directory, record what was lost and go on"
            " numbering after it (docs/damaged.md)",
        )
    if p := add("export", cmd_export, "write sessions to one verified bundle file"):
        p.add_argument("sessions", nargs="*", metavar="SESSION", help="session ids (or --all)")
        p.add_argument("--all", action="store_true", help="every session of the store")
        p.add_argument("-o", "--output", required=True, help="bundle file to write")
        p.add_argument(
            "--force", action="store_true", help="overwrite the output file if it exists"
        )
        p.add_argument("--with-ancestors", action="store_true", help="include the fork parents")
        p.add_argument(
            "--salvage",
            action="store_true",
            help="bundle what still verifies of a damaged session (as `journal salvage`) instead"
            " of refusing it; the bundle records what is missing and import shows it",
        )
    if p := add("import", cmd_import, "verify a bundle and install its sessions"):
        p.add_argument("bundle", metavar="FILE", help="a bundle written by export")
        p.add_argument("--rename", action="store_true", help="import colliding ids under new ids")
    if p := add(
        "compact",
        cmd_compact,
        "free superseded checkpoint data and the records erase declarations name",
    ):
        p.add_argument("session", help="session id")
        p.add_argument(
            "--keep",
            type=limit_arg,
            default=10,
            help="newest checkpoints to keep restorable (default: 10)",
        )
        p.add_argument(
            "--no-erase",
            dest="erase",
            action="store_false",
            help="leave the records erase declarations name (default: free them)",
        )
        p.add_argument("--dry-run", action="store_true", help="report what would be dropped")
    if p := add("delete", cmd_delete, "delete sessions with their forks and state (asks first)"):
        p.add_argument("sessions", nargs="+", metavar="SESSION", help="session ids")
        p.add_argument(
            "--yes", "-y", action="store_true", help="do not ask (required when not on a terminal)"
        )


def add_demo(add: Add) -> None:
    if p := add("demo", cmd_demo, "write a scripted agent session, crash a writer, fork, verify"):
        p.add_argument("dir", nargs="?", help="store directory for the demo (default: --root)")

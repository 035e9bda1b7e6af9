"""`journal gc`: delete whole sessions by last update (`Store.prune`), and
`journal retention`: show or record the store's retention policy."""

from __future__ import annotations

import argparse
import re
import sys

from . import PruneReport, RetentionPolicy, Store
from .cli_common import EXIT_FINDINGS, EXIT_OK, Output, UsageError, plural, require_store, size
from .cli_read import Add

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def duration_arg(text: str) -> float:
    """A duration such as 90s, 45m, 12h, 30d or 2w, in seconds."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a number and a unit s, m, h, d or w (e.g. 30d)"
        )
    return float(found.group(1)) * _UNITS[found.group(2)]


def count_arg(text: str) -> int:
    """A count: a whole number, zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _text_duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


# ------------------------------------------------------------------------- gc
def cmd_gc(args: argparse.Namespace, out: Output) -> int:
    if args.older_than is None and args.keep_last is None:
        raise UsageError("gc needs --older-than or --keep-last (or both)")
    if args.dry_run and args.yes:
        raise UsageError("--dry-run and --yes contradict each other")
    require_store(args.root)
    dry_run = args.dry_run or not args.yes
    ask = dry_run and not args.dry_run and sys.stdin.isatty() and not out.json
    with Store(args.root) as store:
        plan = store.prune(
            older_than=args.older_than, keep_last=args.keep_last, owner_id=args.owner
        )
        if ask and plan.deleted:
            _print(plan, out, would=True)
            what = plural(len(plan.deleted), "session")
            print(f"delete {what}? [y/N] ", end="", file=sys.stderr, flush=True)
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                print("nothing deleted", file=sys.stderr)
                return EXIT_FINDINGS
            dry_run = False
        report = plan
        if not dry_run:
            report = store.prune(
                older_than=args.older_than,
                keep_last=args.keep_last,
                owner_id=args.owner,
                dry_run=False,
            )
    if out.json:
        out.doc(
            {
                "dry_run": report.dry_run,
                "scanned": report.scanned,
                "deleted": report.deleted,
                "trees": report.trees,
                "bytes_freed": report.bytes_freed,
                "kept_for_descendants": report.kept_for_descendants,
                "changed": report.changed,
            }
        )
        return EXIT_OK
    if not ask or not plan.deleted:
        _print(report, out, would=report.dry_run)
    elif not report.dry_run:
        print(f"deleted {plural(len(report.deleted), 'session')}, {size(report.bytes_freed)} freed")
    if report.dry_run and not args.dry_run and not ask:
        out.note("dry run (not on a terminal): give --yes to delete")
    return EXIT_OK


def _print(report: PruneReport, out: Output, *, would: bool) -> None:
    verb = "would delete" if would else "deleted"
    print(
        f"{verb} {plural(len(report.deleted), 'session')} in"
        f" {plural(report.trees, 'tree')} ({size(report.bytes_freed)}"
        f" {'would be ' if would else ''}freed) of {plural(report.scanned, 'session')} scanned"
    )
    for sid in report.deleted:
        print(f"  {sid}")
    if report.kept_for_descendants:
        out.note(
            f"kept {plural(len(report.kept_for_descendants), 'session')} that a kept fork"
            f" descends from: {', '.join(report.kept_for_descendants[:10])}"
            + (" ..." if len(report.kept_for_descendants) > 10 else "")
        )
    if report.changed:
        out.note(
            f"left {plural(len(report.changed), 'tree')} updated or forked from meanwhile:"
            f" {', '.join(report.changed[:10])}"
        )


# ------------------------------------------------------------------ retention
def cmd_retention(args: argparse.Namespace, out: Output) -> int:
    require_store(args.root)
    changing = args.older_than is not None or args.keep_last is not None or args.off
    if args.off and (args.older_than is not None or args.keep_last is not None):
        raise UsageError("--off contradicts --older-than and --keep-last")
    if args.owner is not None and not changing:
        raise UsageError("--owner goes with --older-than or --keep-last")
    policy = None
    if changing:
        policy = RetentionPolicy(
            older_than=args.older_than,
            keep_last=args.keep_last,
            owner_id=args.owner,
            interval=args.interval,
        )
    if policy is None:
        with Store(args.root, read_only=True) as store:
            current = store.retention
    else:
        with Store(args.root, retention=policy) as store:
            current = store.retention
    if out.json:
        out.doc(
            None
            if current is None
            else {
                "older_than": current.older_than,
                "keep_last": current.keep_last,
                "owner_id": current.owner_id,
                "interval": current.interval,
            }
        )
        return EXIT_OK
    if current is None:
        print("no retention policy: sessions are kept until deleted")
        return EXIT_OK
    parts = []
    if current.older_than is not None:
        parts.append(f"older than {_text_duration(current.older_than)}")
    if current.keep_last is not None:
        parts.append(f"beyond the newest {current.keep_last}")
    owner = f" of owner {current.owner_id!r}" if current.owner_id is not None else ""
    print(
        f"delete sessions{owner} {' and '.join(parts)},"
        f" every {_text_duration(current.interval)} while a writer has the store open"
    )
    return EXIT_OK


# --------------------------------------------------------------------- parser
def _criteria(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--older-than",
        type=duration_arg,
        metavar="DURATION",
        help="sessions last updated longer ago than this (30d, 12h, 90m, 2w)",
    )
    p.add_argument(
        "--keep-last",
        type=count_arg,
        metavar="N",
        help="never the N most recently updated sessions",
    )
    p.add_argument("--owner", metavar="OWNER", help="only sessions of this owner id")


def add_parsers(add: Add) -> None:
    if p := add(
        "gc",
        cmd_gc,
        "delete whole sessions by last update, fork-aware, one atomic delete per tree"
        " (a dry run unless --yes, or asked on a terminal)",
    ):
        _criteria(p)
        p.add_argument("--dry-run", action="store_true", help="only report what would go")
        p.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    if p := add(
        "retention",
        cmd_retention,
        "show the store's retention policy, or record one that writers apply in the background",
    ):
        _criteria(p)
        p.add_argument(
            "--interval",
            type=duration_arg,
            default=3600.0,
            metavar="DURATION",
            help="how often a writer applies the policy (default: 1h)",
        )
        p.add_argument("--off", action="store_true", help="remove the policy")

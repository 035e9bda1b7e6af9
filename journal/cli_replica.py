"""Replication commands of `journal` (the `journal[s3]` extra, docs/replication.md):
`replicate` (the sidecar), `replica status`, `replica prune`, `restore`, and
`ls --replica` (the bucket's sessions)."""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
from typing import TYPE_CHECKING, Any

from . import Store
from .cli_common import (
    EXIT_FINDINGS,
    EXIT_OK,
    Output,
    UsageError,
    plural,
    progress,
    require_store,
    sequence_arg,
    size,
    when_ms,
)
from .cli_gc import duration_arg
from .cli_read import Add

if TYPE_CHECKING:
    from .replica import ObjectStore, ReplicaTarget


def _bucket(url: str) -> tuple[ReplicaTarget, ObjectStore]:
    from .replica import open_object_store, parse_replica_url

    target = parse_replica_url(url)
    objects = open_object_store(target)
    objects.check_bucket()
    return target, objects


def time_arg(text: str) -> int:
    """A point in time: ISO 8601 (2026-12-01T10:00:00Z; no zone: UTC) or Unix ms."""
    if text.isdigit():
        return int(text)
    try:
        at = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: ISO 8601 (2026-12-01T10:00:00Z) or Unix milliseconds"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.timezone.utc)
    return int(at.timestamp() * 1000)


# ------------------------------------------------------------------ replicate
def cmd_replicate(args: argparse.Namespace, out: Output) -> int:
    from .replica import Follower

    require_store(args.root)
    _bucket(args.to)  # a missing bucket or endpoint fails here, before following
    reader = Store(args.root, read_only=True)
    follower = Follower(
        args.root, args.to, interval=args.interval, summary_of=reader.session_summary
    )
    if not out.json:
        print(f"journal: replicating {args.root} to {args.to}", file=sys.stderr)
    # SIGTERM (a service manager stopping it) ends the loop; what is shipped is
    # flushed on the way out, as after Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: follower.stop.set())
    try:
        follower.run(once=args.once)
    finally:
        try:
            follower.close()
        finally:
            reader.close()
    if out.json:
        out.doc({"root": args.root, "to": args.to, "once": args.once})
    return EXIT_OK


# -------------------------------------------------------------------- replica
def cmd_replica(args: argparse.Namespace, out: Output) -> int:
    if args.action == "status":
        return _status(args, out)
    if args.keep is None:
        raise UsageError("replica prune needs --keep DURATION (e.g. 7d)")
    from .replica import prune

    target, objects = _bucket(args.to)
    report = prune(
        objects,
        target.prefix,
        keep=args.keep,
        dry_run=args.dry_run,
        progress=None if out.json else progress,
    )
    if out.json:
        out.doc(
            {
                "dry_run": report.dry_run,
                "sessions": report.sessions,
                "merged": report.merged,
                "removed": report.removed,
                "removed_bytes": report.removed_bytes,
                "floors": report.floors,
            }
        )
    else:
        verb = "would remove" if report.dry_run else "removed"
        print(
            f"{plural(report.sessions, 'session')}: {verb} {plural(report.removed, 'object')}"
            f" ({size(report.removed_bytes)}), merged {report.merged}"
        )
    return EXIT_OK


def _status(args: argparse.Namespace, out: Output) -> int:
    import dataclasses

    from .replica import replica_status

    require_store(args.root)
    target, objects = _bucket(args.to)
    rows = replica_status(args.root, objects, target.prefix)
    code = EXIT_FINDINGS if any(r.state != "ok" for r in rows) else EXIT_OK
    if out.json:
        out.doc({"to": args.to, "sessions": [dataclasses.asdict(r) for r in rows]})
        return code
    out.table(
        ["SESSION", "LOCAL", "SHIPPED", "UNSHIPPED", "LAG", "LAST SHIPPED", "WRITER", "STATE"],
        [
            [
                r.session_id,
                r.local_end if r.state == "ok" else "-",
                r.shipped_end if r.state == "ok" else "-",
                size(r.unshipped_bytes) if r.state == "ok" else "-",
                f"{r.lag_seconds:.1f}s" if r.lag_seconds else "-",
                when_ms(r.last_shipped_ms) if r.last_shipped_ms else "-",
                ("this root" if r.writer_is_this_root else r.writer_host) or "-",
                r.state,
            ]
            for r in rows
        ],
    )
    for r in rows:
        if r.state != "ok":
            print(f"journal: session {r.session_id!r}: {r.error}", file=sys.stderr)
    return code


# -------------------------------------------------------------------- restore
def cmd_restore(args: argparse.Namespace, out: Output) -> int:
    from .replica import restore

    if args.at_time is not None and args.at_sequence is not None:
        raise UsageError("--at-time and --at-sequence contradict each other")
    if args.at_sequence is not None and len(args.session or []) != 1:
        raise UsageError("--at-sequence restores one session: name it with --session")
    target, objects = _bucket(args.url)
    report = restore(
        objects,
        target.prefix,
        args.root,
        session_ids=args.session,
        at_time_ms=args.at_time,
        at_sequence=args.at_sequence,
        progress=None if out.json else progress,
    )
    if out.json:
        out.doc(
            {
                "root": args.root,
                "sessions": report.sessions,
                "absent": report.absent,
                "state_keys": report.state_keys,
                "bytes": report.bytes,
            }
        )
    else:
        print(
            f"restored {plural(len(report.sessions), 'session')} ({size(report.bytes)} of log,"
            f" {plural(report.state_keys, 'state key')}) into {args.root}"
        )
        for sid in report.absent:
            print(f"journal: session {sid!r}: none in the bucket at that point", file=sys.stderr)
    return EXIT_FINDINGS if report.absent and args.session else EXIT_OK


# ---------------------------------------------------------------- ls --replica
def cmd_ls_replica(args: argparse.Namespace, out: Output) -> int:
    from .replica import list_bucket_sessions

    target, objects = _bucket(args.replica)
    cursor = args.before
    heads = []
    while True:
        page = list_bucket_sessions(objects, target.prefix, limit=args.limit, before=cursor)
        heads += page.heads
        cursor = page.next_cursor
        if not args.all or cursor is None:
            break
    if args.owner is not None:
        heads = [
            h for h in heads if (h.summary or {}).get("owner_id", _owner(h.summary)) == args.owner
        ]
    if out.json:
        out.doc(
            {
                "sessions": [
                    {
                        "session_id": h.session_id,
                        "updated_at_ms": h.updated_at_ms,
                        "end": h.end,
                        "epoch": h.epoch,
                        "summary": h.summary,
                    }
                    for h in heads
                ],
                "next_cursor": cursor,
            }
        )
        return EXIT_OK
    out.table(
        ["SESSION", "SHIPPED", "LOG", "SEQ", "OWNER", "FIRST MESSAGE"],
        [
            [
                h.session_id,
                when_ms(h.updated_at_ms),
                size(h.end),
                (h.summary or {}).get("sequence", "-"),
                _owner(h.summary) or "-",
                ((h.summary or {}).get("first_user_message") or "")[:40],
            ]
            for h in heads
        ],
    )
    if cursor is not None and not args.all:
        print(f"journal: more sessions: --before {cursor}", file=sys.stderr)
    return EXIT_OK


def _owner(summary: dict[str, Any] | None) -> str | None:
    context = (summary or {}).get("session_context") or {}
    owner = context.get("owner_id") if isinstance(context, dict) else None
    return owner if isinstance(owner, str) else None


def add_parsers(add: Add) -> None:
    if p := add(
        "replicate",
        cmd_replicate,
        "ship a store that other processes write to an S3 bucket, following new commits",
    ):
        p.add_argument("--to", required=True, metavar="URL", help="s3://bucket/prefix")
        p.add_argument(
            "--interval",
            type=duration_arg,
            default=1.0,
            metavar="DURATION",
            help="how often to look for new commits (default: 1s)",
        )
        p.add_argument("--once", action="store_true", help="ship what is there, then exit")
    if p := add(
        "replica",
        cmd_replica,
        "what a bucket holds of this store (status), or prune the bucket (prune)",
    ):
        p.add_argument(
            "action",
            choices=["status", "prune"],
            help="status: per session, the local log's end, the bucket's, the lag and the"
            " writer; prune: merge chunks and remove what no restore in --keep needs",
        )
        p.add_argument("--to", required=True, metavar="URL", help="s3://bucket/prefix")
        p.add_argument(
            "--keep",
            type=duration_arg,
            metavar="DURATION",
            help="prune: keep every restore point of this window (e.g. 7d)",
        )
        p.add_argument("--dry-run", action="store_true", help="prune: only report what would go")
    if p := add(
        "restore",
        cmd_restore,
        "rebuild sessions (with forks and state) from an S3 bucket into --root",
    ):
        p.add_argument("url", metavar="URL", help="s3://bucket/prefix")
        p.add_argument(
            "--session",
            action="append",
            metavar="ID",
            help="restore this session (repeatable; default: every session in the bucket)",
        )
        p.add_argument(
            "--at-time",
            type=time_arg,
            metavar="TIME",
            help="as the bucket held it then (ISO 8601 or Unix ms)",
        )
        p.add_argument(
            "--at-sequence",
            type=sequence_arg,
            metavar="N",
            help="up to the commit holding event sequence N (one --session)",
        )

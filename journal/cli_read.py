"""Reading subcommands of `journal`: ls, show, events, transcript, executions, state,
checkpoint, tree, diff. None of them takes a writer lock."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import msgspec

from . import (
    EventPageRequest,
    ExecutionPageRequest,
    ExecutionRecord,
    InvalidInputError,
    JournalError,
    JournalEvent,
    NotFoundError,
    SessionCursor,
    SessionPageRequest,
    SessionSummary,
    Store,
    TranscriptPageRequest,
)
from . import inspect as tools
from .cli_common import (
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Output,
    UsageError,
    catch,
    cell,
    existing_session,
    limit_arg,
    loss_lines,
    open_store,
    plural,
    program,
    sequence_arg,
    session_damage,
    size,
    sizes,
    when,
    when_ms,
)
from .inspect import children_of, listed_sessions, session_view, state_items

# `add(name, cmd, help)`: a subcommand's parser, to add its arguments to, or None when
# the command line names another subcommand (`cli.build_parser`: only the one that runs
# is built in full).
Add = Callable[
    [str, Callable[[argparse.Namespace, Output], int], str], argparse.ArgumentParser | None
]


# ------------------------------------------------------------------------- ls
def parse_cursor(text: str) -> SessionCursor:
    try:
        return tools.parse_cursor(text)
    except InvalidInputError:
        raise UsageError(
            f"--before {text!r} is not a cursor printed by `journal ls`"
            " (UPDATED_AT:SEQUENCE:SESSION_ID)"
        ) from None


def cmd_ls(args: argparse.Namespace, out: Output) -> int:
    if args.replica is not None:
        from .cli_replica import cmd_ls_replica

        return cmd_ls_replica(args, out)
    with open_store(args) as store:
        cursor = parse_cursor(args.before) if args.before else None
        listed: list[SessionSummary] = []
        while True:
            page = store.list_sessions_page(
                SessionPageRequest(owner_id=args.owner, cursor=cursor, limit=args.limit)
            )
            listed += page.sessions
            cursor = page.next_cursor
            if not args.all or cursor is None:
                break
        rows = []
        for s in listed:
            view = catch(
                out, s.session_id, partial(session_view, store, s.session_id), (JournalError,)
            )
            rows.append((s, view, store.session_dir(s.session_id)))
    more = tools.cursor_text(cursor) if cursor is not None else None
    if out.json:
        docs = []
        for s, view, directory in rows:
            # The files' sizes (a walk of each directory) are in the JSON document
            # only: the table's LOG column is the log's bytes, which the view has.
            sz = sizes(directory, view.log_bytes if view else 0)
            docs.append(
                {
                    **msgspec.to_builtins(s),
                    "events": view.events if view else None,
                    "log_bytes": sz.log_bytes,
                    "file_bytes": sz.file_bytes,
                    "disk_bytes": sz.disk_bytes,
                    "damaged": view is None,
                }
            )
        out.doc({"sessions": docs, "next_before": more})
    else:
        out.table(
            ["updated", "session", "parent", "seq", "events", "log", "first user message"],
            [
                [
                    when(s.updated_at),
                    s.session_id,
                    f"{s.parent_session_id}@{s.parent_sequence}" if s.parent_session_id else None,
                    s.sequence,
                    "DAMAGED" if view is None else view.events,
                    "DAMAGED" if view is None else size(view.log_bytes),
                    s.first_user_message,
                ]
                for s, view, _ in rows
            ],
        )
        if more is not None:
            out.note(
                f"({plural(len(rows), 'session')} shown; more exist: {program()} ls"
                f" --before {more!r}, or --all for every one)"
            )
    return out.finish()


# ----------------------------------------------------------------------- show
def _summary_or_fail(store: Store, session_id: str) -> SessionSummary:
    summary = store.session_summary(session_id)
    if summary is None:
        raise NotFoundError(f"session {session_id!r} does not exist")
    return summary


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as store:
        summary = _summary_or_fail(store, args.session)
        view = existing_session(store, args.session)
        damage = session_damage(view.directory)
        cp = store.load(args.session)
        if cp is None:
            raise NotFoundError(f"session {args.session!r} does not exist")
        lineage = []
        parent = summary.parent_session_id
        while parent is not None:
            lineage.append(parent)
            ps = store.session_summary(parent)
            parent = ps.parent_session_id if ps else None
        children = sorted(k.session_id for k in store.child_sessions(args.session))
        sz = sizes(view.directory, view.log_bytes)
        losses = loss_lines(view.directory)
        info = {
            "summary": summary,
            "events": view.events,
            "transcript_batches": view.transcript_batches,
            "executions": view.executions,
            "context_items": len(cp.context),
            "context_epoch": cp.context_epoch,
            "log_bytes": sz.log_bytes,
            "file_bytes": sz.file_bytes,
            "disk_bytes": sz.disk_bytes,
            "directory": view.directory,
            "ancestors": lineage,
            "children": children,
            "damaged": None if damage is None else str(damage),
            "losses": losses,
            "checkpoint_header": {
                k: v for k, v in msgspec.to_builtins(cp).items() if k != "context"
            },
        }
    if damage is not None:
        out.mark_damaged(args.session, damage)
    if out.json:
        out.doc(info)
        return out.finish()
    stats = summary.execution_stats
    lines = [
        f"session      {summary.session_id}",
        f"directory    {view.directory}",
        f"owner        {summary.session_context.owner_id}",
        f"created      {when(summary.created_at)}   updated {when(summary.updated_at)}",
        f"checkpoint   sequence {summary.sequence}, epoch {cp.context_epoch},"
        f" {plural(len(cp.context), 'context item')}",
        f"journals     {plural(view.events, 'event')},"
        f" {plural(view.transcript_batches, 'transcript batch', 'transcript batches')},"
        f" {plural(view.executions, 'execution')}",
        f"size         {sz.text()}",
        f"first msg    {summary.first_user_message or '-'}",
        f"lineage      {' <- '.join([summary.session_id, *lineage])}"
        + (f" (forked at {summary.parent_sequence})" if summary.parent_session_id else ""),
        f"children     {', '.join(children) or '-'}",
        f"runs         {stats.run_count} ({stats.failed_run_count} failed,"
        f" {stats.aborted_run_count} aborted), {plural(stats.usage.total_tokens, 'token')}",
    ]
    lines.extend(f"LOSS         {line}" for line in losses)
    if damage is not None:
        lines.append(f"DAMAGED      {damage}")
    print("\n".join(lines))
    return out.finish()


# --------------------------------------------------------------------- events
def event_row(e: JournalEvent) -> list[Any]:
    import json

    msg = dict(e.event.msg)
    kind = msg.pop("type", "?")
    msg.pop("session_id", None)
    detail = (
        msg.get("text")
        or msg.get("delta")
        or msg.get("message")
        or json.dumps(msg, ensure_ascii=False)
    )
    return [e.sequence, when_ms(e.recorded_at_ms), kind, detail]


def _events(store: Store, args: argparse.Namespace) -> Iterator[JournalEvent]:
    """Newest first; with --after, oldest first. --before and --after bound both ends
    (after < sequence < before); --type filters; at most --limit."""
    wanted = set(args.type or [])
    count = 0
    step = min(max(args.limit, 100), 1000)
    if args.after is not None:
        after = args.after
        while count < args.limit:
            batch = store.events_after(args.session, after, step)
            if not batch:
                return
            for e in batch:
                after = e.sequence
                if args.before is not None and e.sequence >= args.before:
                    return
                if not wanted or e.event.msg.get("type") in wanted:
                    yield e
                    count += 1
                    if count == args.limit:
                        return
        return
    before = args.before
    while count < args.limit:
        page = store.event_page(args.session, EventPageRequest(before_sequence=before, limit=step))
        for e in page.events:
            if not wanted or e.event.msg.get("type") in wanted:
                yield e
                count += 1
                if count == args.limit:
                    return
        if page.next_before_sequence is None:
            return
        before = page.next_before_sequence


def cmd_events(args: argparse.Namespace, out: Output) -> int:
    if args.after is not None and args.before is not None and args.before <= args.after + 1:
        raise UsageError(
            f"--after {args.after} --before {args.before} leaves no sequence between them"
        )
    with open_store(args) as store:
        damage = session_damage(existing_session(store, args.session).directory)
        if damage is not None:
            out.mark_damaged(args.session, damage)
        events = list(_events(store, args))
        if args.follow:
            events.sort(key=lambda e: e.sequence)
        if out.json and not args.follow:
            out.doc(events)
        elif out.json:
            for e in events:
                out.line(e)
        elif events:
            out.table(["seq", "time", "type", "detail"], [event_row(e) for e in events])
        if not args.follow:
            return out.finish()
        last = max([e.sequence for e in events], default=args.after or 0)
        if not events and args.after is None:
            last = store.event_page(args.session, EventPageRequest(limit=1)).latest_sequence
        wanted = set(args.type or [])
        try:
            while True:
                batch = store.events_after(args.session, last, 500)
                for e in batch:
                    last = e.sequence
                    if wanted and e.event.msg.get("type") not in wanted:
                        continue
                    if out.json:
                        out.line(e)
                    else:
                        print("  ".join(cell(c) for c in event_row(e)), flush=True)
                if not batch:
                    time.sleep(args.interval)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED


# ----------------------------------------------------------------- transcript
def cmd_transcript(args: argparse.Namespace, out: Output) -> int:
    import json

    with open_store(args) as store:
        page = store.transcript_page(
            args.session, TranscriptPageRequest(before_sequence=args.before, max_batches=args.limit)
        )
        if not page.batches and store.load(args.session) is None:
            raise NotFoundError(f"session {args.session!r} does not exist")
    if out.json:
        out.doc(page)
        return EXIT_OK
    for batch in page.batches:
        print(
            f"== batch {batch.sequence} ({when(batch.created_at)}),"
            f" {plural(len(batch.items), 'item')}"
        )
        for item in batch.items:
            if isinstance(item, dict) and "role" in item:
                print(f"  {item['role']}: {cell(item.get('content'))}")
            else:
                print(f"  {cell(json.dumps(item, ensure_ascii=False))}")
    if page.next_before_sequence is not None:
        out.note(f"(older batches: --before {page.next_before_sequence})")
    return EXIT_OK


# ----------------------------------------------------------------- executions
def _all_executions(store: Store, limit: int, out: Output) -> list[ExecutionRecord]:
    """The newest `limit` execution records of every session; when the store's own
    merge fails on one session, each session is read on its own and the damaged
    ones are marked."""
    try:
        records = store.recent_executions(limit)
    except JournalError:
        pass
    else:
        for sid in sorted(listed_sessions(store)):
            catch(out, sid, partial(session_view, store, sid), (JournalError,))
        return records
    records = []
    for sid in sorted(listed_sessions(store)):
        page = catch(
            out,
            sid,
            partial(store.execution_page, sid, ExecutionPageRequest(limit=limit)),
            (JournalError,),
        )
        if page is not None:
            records += page.executions
    records.sort(key=lambda r: (r.started_at_ms, r.session_id), reverse=True)
    return records[:limit]


def cmd_executions(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as store:
        if args.all:
            if args.session or args.before is not None:
                raise UsageError("--all takes no SESSION and no --before")
            records = _all_executions(store, args.limit, out)
        else:
            if not args.session:
                raise UsageError("give a SESSION or --all")
            existing_session(store, args.session)  # not found: say so
            records = store.execution_page(
                args.session, ExecutionPageRequest(before_sequence=args.before, limit=args.limit)
            ).executions
    if out.json:
        out.doc(records)
    else:
        out.table(
            ["started", "session", "turn", "outcome", "elapsed ms", "tools", "tokens"],
            [
                [
                    when(r.started_at_ms // 1000),
                    r.session_id,
                    r.turn_id,
                    r.outcome,
                    r.elapsed_ms,
                    r.tool_calls,
                    r.usage.total_tokens,
                ]
                for r in records
            ],
        )
    return out.finish()


# ---------------------------------------------------------- state, checkpoint
def cmd_state(args: argparse.Namespace, out: Output) -> int:
    import json

    with open_store(args) as store:
        if args.key is not None:
            value = store.load_state(args.scope, args.key)
            if value is None:
                raise NotFoundError(f"no state under ({args.scope!r}, {args.key!r})")
            out.doc(value)
            return EXIT_OK
        items = state_items(store, args.scope)
    if out.json:
        out.doc(dict(items))
    else:
        out.table(["key", "value"], [[k, json.dumps(v, ensure_ascii=False)] for k, v in items])
    return EXIT_OK


def cmd_checkpoint(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as store:
        cp = (
            store.load(args.session)
            if args.at is None
            else store.checkpoint_at(args.session, args.at)
        )
        if cp is None:
            where = f" at sequence {args.at}" if args.at is not None else ""
            raise NotFoundError(f"session {args.session!r} has no checkpoint{where}")
    out.doc(cp)
    return EXIT_OK


# ----------------------------------------------------------------------- tree
def cmd_tree(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as store:
        summaries = listed_sessions(store)
        children = children_of(store)
        if args.session:
            if args.session not in summaries:
                raise NotFoundError(f"session {args.session!r} does not exist")
            root = args.session
            while summaries[root].parent_session_id in summaries:
                root = summaries[root].parent_session_id
            roots = [root]
        else:
            roots = sorted(
                s
                for s, v in summaries.items()
                if v.parent_session_id is None or v.parent_session_id not in summaries
            )
        damaged: set[str] = set()

        def node(sid: str) -> dict[str, Any]:
            s = summaries[sid]
            if catch(out, sid, lambda: session_view(store, sid) or True, (JournalError,)) is None:
                damaged.add(sid)
            return {
                "session_id": sid,
                "sequence": s.sequence,
                "forked_at": s.parent_sequence,
                "damaged": sid in damaged,
                "children": [node(c) for c in sorted(children.get(sid, []))],
            }

        forest = [node(r) for r in roots]
    if out.json:
        out.doc(forest)
        return out.finish()

    def show(n: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        at = f" (forked at {n['forked_at']})" if n["forked_at"] is not None else ""
        bad = "  DAMAGED" if n["damaged"] else ""
        branch = "" if top else ("└── " if last else "├── ")
        print(f"{prefix}{branch}{n['session_id']} @{n['sequence']}{at}{bad}")
        kids = n["children"]
        for i, c in enumerate(kids):
            show(
                c, prefix + ("" if top else ("    " if last else "│   ")), i == len(kids) - 1, False
            )

    for n in forest:
        show(n, "", True, True)
    return out.finish()


# ----------------------------------------------------------------------- diff
def cmd_diff(args: argparse.Namespace, out: Output) -> int:
    import json

    with open_store(args) as store:
        if args.seq:
            a = store.checkpoint_at(args.a, args.seq[0])
            b = store.checkpoint_at(args.a, args.seq[1])
            labels = (f"{args.a}@{args.seq[0]}", f"{args.a}@{args.seq[1]}")
        else:
            if not args.b:
                raise InvalidInputError("give two sessions, or one session and --seq X Y")
            a, b = store.load(args.a), store.load(args.b)
            labels = (args.a, args.b)
        if a is None or b is None:
            raise NotFoundError(f"no checkpoint for {labels[0] if a is None else labels[1]!r}")
    da, db = msgspec.to_builtins(a), msgspec.to_builtins(b)
    fields = sorted(k for k in da if k not in ("context",) and da.get(k) != db.get(k))
    common = 0
    for x, y in zip(a.context, b.context, strict=False):
        if x != y:
            break
        common += 1
    result: dict[str, Any] = {
        "a": labels[0],
        "b": labels[1],
        "fields": {k: {"a": da.get(k), "b": db.get(k)} for k in fields},
        "common_context_items": common,
        "only_a": a.context[common:],
        "only_b": b.context[common:],
    }
    if out.json:
        out.doc(result)
    else:
        print(f"--- {labels[0]}\n+++ {labels[1]}")
        for k in fields:
            print(f"field {k}: {cell(json.dumps(da.get(k)))} -> {cell(json.dumps(db.get(k)))}")
        print(f"context: {plural(common, 'item')} in common")
        for item in result["only_a"]:
            print(f"- {cell(json.dumps(item, ensure_ascii=False))}")
        for item in result["only_b"]:
            print(f"+ {cell(json.dumps(item, ensure_ascii=False))}")
    same = not fields and not result["only_a"] and not result["only_b"]
    return EXIT_OK if same else EXIT_FINDINGS


# --------------------------------------------------------------------- parser
def add_parsers(add: Add) -> None:
    if p := add("ls", cmd_ls, "sessions, most recently updated first, a page at a time"):
        p.add_argument("--owner", help="only sessions of this owner id (default: every owner)")
        p.add_argument(
            "--limit", type=limit_arg, default=50, help="sessions per page (default: 50)"
        )
        p.add_argument(
            "--before",
            metavar="CURSOR",
            help="the page after this cursor, as printed when more exist (default: the newest)",
        )
        p.add_argument("--all", action="store_true", help="every page, not only the first")
        p.add_argument(
            "--replica",
            metavar="URL",
            help="list the sessions an S3 bucket holds (s3://bucket/prefix) instead of --root's",
        )
    if p := add(
        "show", cmd_show, "summary, latest checkpoint header, sizes and lineage of a session"
    ):
        p.add_argument("session", help="session id")
    if p := add("events", cmd_events, "a session's events, newest first (or follow new ones)"):
        p.add_argument("session", help="session id")
        p.add_argument(
            "--limit", type=limit_arg, default=20, help="at most this many (default: 20)"
        )
        p.add_argument(
            "--before", type=sequence_arg, help="only events with a lower sequence (default: none)"
        )
        p.add_argument(
            "--after",
            type=sequence_arg,
            help="only events with a higher sequence, oldest first (default: none, newest first)",
        )
        p.add_argument(
            "--type", action="append", help="only events of this type (repeatable; default: all)"
        )
        p.add_argument(
            "--follow",
            "-f",
            action="store_true",
            help="keep printing new events until Ctrl-C (exit 130); --json prints JSON Lines",
        )
        p.add_argument("--interval", type=float, default=0.2, help=argparse.SUPPRESS)
    if p := add("transcript", cmd_transcript, "a session's transcript batches, newest first"):
        p.add_argument("session", help="session id")
        p.add_argument(
            "--limit", type=limit_arg, default=10, help="at most this many (default: 10)"
        )
        p.add_argument(
            "--before", type=sequence_arg, help="only batches with a lower sequence (default: none)"
        )
    if p := add("executions", cmd_executions, "finished turns of a session, or of all with --all"):
        p.add_argument("session", nargs="?", help="session id (or --all)")
        p.add_argument("--all", action="store_true", help="the newest turns of every session")
        p.add_argument(
            "--limit", type=limit_arg, default=20, help="at most this many (default: 20)"
        )
        p.add_argument(
            "--before", type=sequence_arg, help="only turns with a lower sequence (default: none)"
        )
    if p := add("state", cmd_state, "middleware state of a scope, or one key's value"):
        p.add_argument("scope", help="state scope (a session id for session state)")
        p.add_argument("key", nargs="?", help="one key (default: list every key)")
    if p := add("checkpoint", cmd_checkpoint, "a session's checkpoint as JSON (latest, or --at)"):
        p.add_argument("session", help="session id")
        p.add_argument(
            "--at",
            type=sequence_arg,
            help="the checkpoint exactly as saved at this sequence (default: the latest)",
        )
    if p := add("tree", cmd_tree, "fork lineage as a tree"):
        p.add_argument(
            "session", nargs="?", help="only the tree holding this session (default: all)"
        )
    if p := add("diff", cmd_diff, "where two sessions' (or two sequences') checkpoints differ"):
        p.add_argument("a", metavar="SESSION_A", help="session id")
        p.add_argument("b", metavar="SESSION_B", nargs="?", help="session id (or --seq)")
        p.add_argument(
            "--seq",
            type=sequence_arg,
            nargs=2,
            metavar=("X", "Y"),
            help="compare two sequences of SESSION_A (default: the latest of each session)",
        )

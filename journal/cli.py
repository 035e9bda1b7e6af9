"""The `journal` command line: inspect, replay, check, repair and move session stores.

Every command is a thin layer over public library functions. Output is a human
table by default and JSON with `--json` (one document, or one JSON object per
line for streams). Exit codes: 0 ok, 1 findings or not found, 2 usage. Errors
are one sentence on stderr, never a traceback. Reading commands never take a
writer lock.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from .errors import InvalidInputError, JournalError, NotFoundError
from .store import Store
from .types import (
    EventPageRequest,
    ExecutionPageRequest,
    JournalEvent,
    SessionPageRequest,
    TranscriptPageRequest,
)

DEFAULT_ROOT = "journal-demo"
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


class Output:
    def __init__(self, as_json: bool):
        self.json = as_json

    def doc(self, value: Any) -> None:
        print(json.dumps(msgspec.to_builtins(value), indent=2, ensure_ascii=False))

    def line(self, value: Any) -> None:
        print(json.dumps(msgspec.to_builtins(value), ensure_ascii=False), flush=True)

    def table(self, headers: list[str], rows: list[list[Any]]) -> None:
        cells = [[_cell(v) for v in row] for row in rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
        print("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
        for r in cells:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    text = str(v).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _when(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S"
    )


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _du(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def _progress(text: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)


def _open(args: argparse.Namespace) -> Store:
    if not os.path.exists(os.path.join(args.root, "JOURNAL")):
        raise NotFoundError(f"no journal store at {args.root} (use --root or JOURNAL_ROOT)")
    return Store(args.root, read_only=True)


def _event_row(e: JournalEvent) -> list[Any]:
    msg = dict(e.event.msg)
    kind = msg.pop("type", "?")
    for noisy in ("session_id",):
        msg.pop(noisy, None)
    detail = (
        msg.get("text")
        or msg.get("delta")
        or msg.get("message")
        or json.dumps(msg, ensure_ascii=False)
    )
    when = datetime.datetime.fromtimestamp(e.recorded_at_ms / 1000, datetime.timezone.utc)
    return [e.sequence, when.strftime("%H:%M:%S.%f")[:-3], kind, detail]


# ---------------------------------------------------------------------- commands
def cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from .demo import main as demo_main

    return demo_main(args.dir or args.root)


def cmd_ls(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
        page = store.list_sessions_page(SessionPageRequest(owner_id=args.owner, limit=args.limit))
        rows = []
        for s in page.sessions:
            sess = store._session(s.session_id)
            events = sess.head.event_counter if sess else 0
            size = _du(sess.dir) if sess else 0
            rows.append((s, events, size))
        if out.json:
            out.doc([{**msgspec.to_builtins(s), "events": ev, "bytes": sz} for s, ev, sz in rows])
        else:
            out.table(
                ["updated", "session", "parent", "seq", "events", "size", "first user message"],
                [
                    [
                        _when(s.updated_at),
                        s.session_id,
                        f"{s.parent_session_id}@{s.parent_sequence}"
                        if s.parent_session_id
                        else None,
                        s.sequence,
                        ev,
                        _size(sz),
                        s.first_user_message,
                    ]
                    for s, ev, sz in rows
                ],
            )
    return EXIT_OK


def _summary_or_fail(store: Store, session_id: str) -> Any:
    summary = store.session_summary(session_id)
    if summary is None:
        raise NotFoundError(f"session {session_id!r} does not exist")
    return summary


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
        summary = _summary_or_fail(store, args.session)
        sess = store._session(args.session)
        assert sess is not None
        cp = store.load(args.session)
        assert cp is not None
        lineage = []
        parent = summary.parent_session_id
        while parent is not None:
            lineage.append(parent)
            ps = store.session_summary(parent)
            parent = ps.parent_session_id if ps else None
        children = sorted(k.session_id for k in store.child_sessions(args.session))
        info = {
            "summary": summary,
            "events": sess.head.event_counter,
            "transcript_batches": sess.head.transcripts,
            "executions": sess.head.executions,
            "context_items": len(cp.context),
            "context_epoch": cp.context_epoch,
            "bytes_on_disk": _du(sess.dir),
            "directory": sess.dir,
            "ancestors": lineage,
            "children": children,
            "checkpoint_header": {
                k: v for k, v in msgspec.to_builtins(cp).items() if k != "context"
            },
        }
        if out.json:
            out.doc(info)
            return EXIT_OK
        print(f"session      {summary.session_id}")
        print(f"directory    {sess.dir}")
        print(f"owner        {summary.session_context.owner_id}")
        print(f"created      {_when(summary.created_at)}   updated {_when(summary.updated_at)}")
        print(
            f"checkpoint   sequence {summary.sequence}, epoch {cp.context_epoch},"
            f" {len(cp.context)} context items"
        )
        print(
            f"journals     {info['events']} events, {info['transcript_batches']} transcript"
            f" batches, {info['executions']} executions"
        )
        print(f"size         {_size(info['bytes_on_disk'])}")
        print(f"first msg    {summary.first_user_message or '-'}")
        lineage_text = " <- ".join([summary.session_id, *lineage])
        print(
            f"lineage      {lineage_text}"
            + (f" (forked at {summary.parent_sequence})" if summary.parent_session_id else "")
        )
        print(f"children     {', '.join(children) or '-'}")
        stats = summary.execution_stats
        print(
            f"runs         {stats.run_count} ({stats.failed_run_count} failed,"
            f" {stats.aborted_run_count} aborted), {stats.usage.total_tokens} tokens"
        )
    return EXIT_OK


def _events(store: Store, args: argparse.Namespace) -> Iterator[JournalEvent]:
    """Newest first (or oldest first with --after), filtered by --type, up to --limit."""
    wanted = set(args.type or [])
    count = 0
    if args.after is not None:
        after = args.after
        while count < args.limit:
            batch = store.events_after(args.session, after, max(args.limit, 100))
            if not batch:
                return
            for e in batch:
                after = e.sequence
                if not wanted or e.event.msg.get("type") in wanted:
                    yield e
                    count += 1
                    if count == args.limit:
                        return
        return
    before = args.before
    while count < args.limit:
        page = store.event_page(
            args.session, EventPageRequest(before_sequence=before, limit=max(args.limit, 100))
        )
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
    with _open(args) as store:
        if store.load(args.session) is None:
            raise NotFoundError(f"session {args.session!r} does not exist")
        events = list(_events(store, args))
        if args.follow:
            events.sort(key=lambda e: e.sequence)
        for_display = events
        if out.json:
            for e in for_display:
                out.line(e)
        elif for_display:
            out.table(["seq", "time", "type", "detail"], [_event_row(e) for e in for_display])
        if not args.follow:
            return EXIT_OK
        last = max([e.sequence for e in events], default=args.after or 0)
        if not events:
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
                        print("  ".join(_cell(c) for c in _event_row(e)), flush=True)
                if not batch:
                    time.sleep(args.interval)
        except KeyboardInterrupt:
            return EXIT_OK


def cmd_transcript(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
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
                f"== batch {batch.sequence} ({_when(batch.created_at)}), {len(batch.items)} items"
            )
            for item in batch.items:
                if isinstance(item, dict) and "role" in item:
                    print(f"  {item['role']}: {_cell(item.get('content'))}")
                else:
                    print(f"  {_cell(json.dumps(item, ensure_ascii=False))}")
        if page.next_before_sequence is not None:
            print(f"(older: --before {page.next_before_sequence})")
    return EXIT_OK


def cmd_executions(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
        if args.all:
            records = store.recent_executions(args.limit)
        else:
            if not args.session:
                raise InvalidInputError("give a SESSION or --all")
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
                        _when(r.started_at_ms // 1000),
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
    return EXIT_OK


def cmd_state(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
        if args.key is not None:
            value = store.load_state(args.scope, args.key)
            if value is None:
                raise NotFoundError(f"no state under ({args.scope!r}, {args.key!r})")
            out.doc(value) if out.json else print(json.dumps(value, indent=2, ensure_ascii=False))
            return EXIT_OK
        items = store.state.keys(args.scope)
        if out.json:
            out.doc(dict(items))
        else:
            out.table(["key", "value"], [[k, json.dumps(v, ensure_ascii=False)] for k, v in items])
    return EXIT_OK


def cmd_checkpoint(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
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


def cmd_tree(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
        store.catalog.refresh()
        summaries = dict(store.catalog.summaries)
        children = store.catalog.children_of()
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

        def node(sid: str) -> dict[str, Any]:
            s = summaries[sid]
            return {
                "session_id": sid,
                "sequence": s.sequence,
                "forked_at": s.parent_sequence,
                "children": [node(c) for c in sorted(children.get(sid, []))],
            }

        forest = [node(r) for r in roots]
        if out.json:
            out.doc(forest)
            return EXIT_OK

        def show(n: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
            at = f" (forked at {n['forked_at']})" if n["forked_at"] is not None else ""
            branch = "" if top else ("└── " if last else "├── ")
            print(f"{prefix}{branch}{n['session_id']} @{n['sequence']}{at}")
            kids = n["children"]
            for i, c in enumerate(kids):
                show(
                    c,
                    prefix + ("" if top else ("    " if last else "│   ")),
                    i == len(kids) - 1,
                    False,
                )

        for n in forest:
            show(n, "", True, True)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace, out: Output) -> int:
    from .inspect import describe, replay

    with _open(args) as store:
        if store._session(args.session) is None:
            raise NotFoundError(f"session {args.session!r} does not exist")
        directory = store.session_dir(args.session)
        state = store.state.keys(args.session)
    for commit in replay(directory):
        described = [describe(r) for r in commit]
        seqs = [d["checkpoint_sequence"] for d in described if d["type"] == "commit"]
        seqs += [d["sequence"] for d in described if d["type"] == "checkpoint"]
        seq = seqs[0] if seqs else None
        if seq is not None and (
            (args.from_seq is not None and seq < args.from_seq)
            or (args.to is not None and seq > args.to)
        ):
            continue
        for d in described:
            if out.json:
                out.line(d)
            else:
                print(_replay_line(d))
    for key, value in state:
        entry = {"type": "state", "scope": args.session, "key": key, "value": value}
        out.line(entry) if out.json else print(
            f"{'-':>10}  state       {key} = {_cell(json.dumps(value))}"
        )
    return EXIT_OK


def _replay_line(d: dict[str, Any]) -> str:
    kind = d["type"]
    if kind == "checkpoint":
        text = f"seq {d['sequence']} epoch {d['epoch']} +{len(d['context_added'])} context items"
    elif kind == "transcript":
        text = f"seq {d['sequence']} {len(d['items'])} items"
    elif kind == "execution":
        r = d["record"]
        text = f"seq {d['sequence']} {r['turn_id']} {r['outcome']} {r['elapsed_ms']} ms"
    elif kind == "pad":
        text = "(space freed by compact)"
    elif kind == "event":
        msg = d["event"]["msg"]
        extra = " transient" if d["transient"] else ""
        extra += f" removes {d['removes']}" if d["removes"] else ""
        text = f"#{d['sequence']} {msg.get('type')}{extra}"
    else:
        text = (
            f"commit checkpoint {d.get('checkpoint_sequence')}"
            f" events {d.get('first_event')}..{d.get('last_event')}"
        )
    return f"{d['position']:>10}  {kind:<11} {text}"


def cmd_diff(args: argparse.Namespace, out: Output) -> int:
    with _open(args) as store:
        if args.seq:
            a_id = b_id = args.a
            a = store.checkpoint_at(args.a, args.seq[0])
            b = store.checkpoint_at(args.a, args.seq[1])
            labels = (f"{args.a}@{args.seq[0]}", f"{args.a}@{args.seq[1]}")
        else:
            if not args.b:
                raise InvalidInputError("give two sessions, or one session and --seq A B")
            a_id, b_id = args.a, args.b
            a, b = store.load(a_id), store.load(b_id)
            labels = (a_id, b_id)
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
            print(f"field {k}: {_cell(json.dumps(da.get(k)))} -> {_cell(json.dumps(db.get(k)))}")
        print(f"context: {common} items in common")
        for item in result["only_a"]:
            print(f"- {_cell(json.dumps(item, ensure_ascii=False))}")
        for item in result["only_b"]:
            print(f"+ {_cell(json.dumps(item, ensure_ascii=False))}")
    same = not fields and not result["only_a"] and not result["only_b"]
    return EXIT_OK if same else EXIT_FINDINGS


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    from .naming import dir_name
    from .verify import verify_store

    root = args.root
    selected: list[str] | None = None
    for target in args.targets:
        if os.path.exists(os.path.join(target, "JOURNAL")):
            root = target
        else:
            selected = (selected or []) + [dir_name(target)]
    if not os.path.exists(os.path.join(root, "JOURNAL")):
        raise NotFoundError(f"no journal store at {root}")
    if selected:
        for name in selected:
            if not os.path.isdir(os.path.join(root, "sessions", name)):
                raise NotFoundError(f"no session directory {name} in {root}")
    findings = 0
    sessions = commits = 0
    for report, found in verify_store(root, selected):
        if report is not None:
            sessions += 1
            commits += report.commits
            _progress(f"verified {sessions} sessions")
        for f in found:
            findings += 1
            if out.json:
                out.line(
                    {
                        "severity": f.severity,
                        "session": f.session,
                        "path": f.path,
                        "offset": f.offset,
                        "message": f.message,
                    }
                )
            else:
                print(str(f))
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if not out.json:
        print(
            f"{'ok' if not findings else 'FAILED'}: {sessions} sessions, {commits} commits"
            f" checked, {findings} findings",
            file=sys.stderr if findings else sys.stdout,
        )
    return EXIT_OK if not findings else EXIT_FINDINGS


def cmd_repair(args: argparse.Namespace, out: Output) -> int:
    from .repair import repair_session

    with _open(args) as store:
        directory = store.session_dir(args.session)
    if not os.path.isdir(directory):
        raise NotFoundError(f"session {args.session!r} does not exist")
    report = repair_session(directory, args.session, cut_at_damage=args.cut_at_damage)
    if report.dropped and not report.refused:
        # The catalog may list what was cut (summary, execution copies): re-derive it.
        with Store(args.root) as store:
            store._reconcile([os.path.basename(directory)])
    if out.json:
        out.doc(report.__dict__)
    else:
        if report.refused:
            print(f"refused: {report.refused}")
        for path, start, end, why in report.dropped:
            print(f"dropped bytes {start}..{end} of {path} ({end - start} bytes: {why})")
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


def cmd_export(args: argparse.Namespace, out: Output) -> int:
    from .bundle import export_sessions

    if not os.path.exists(os.path.join(args.root, "JOURNAL")):
        raise NotFoundError(f"no journal store at {args.root}")
    report = export_sessions(
        args.root,
        args.sessions,
        args.output,
        with_ancestors=args.with_ancestors,
        progress=_progress,
    )
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if out.json:
        out.doc(report.__dict__)
    else:
        print(
            f"exported {len(report.sessions)} sessions ({_size(report.bytes_in)} of logs)"
            f" to {report.path} ({_size(report.bytes_out)})"
        )
    return EXIT_OK


def cmd_import(args: argparse.Namespace, out: Output) -> int:
    from .bundle import import_bundle

    report = import_bundle(args.root, args.bundle, rename=args.rename, progress=_progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if out.json:
        out.doc(report.__dict__)
    else:
        for old, new in report.installed:
            print(f"imported {old}" + (f" as {new}" if new != old else ""))
    return EXIT_OK


def cmd_compact(args: argparse.Namespace, out: Output) -> int:
    from .compact import compact_session

    with _open(args) as store:
        if store._session(args.session) is None:
            raise NotFoundError(f"session {args.session!r} does not exist")
        directory = store.session_dir(args.session)
    report = compact_session(
        directory, args.session, keep=args.keep, dry_run=args.dry_run, progress=_progress
    )
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if out.json:
        out.doc(report.__dict__)
        return EXIT_OK
    verb = "would drop" if args.dry_run else "dropped"
    print(
        f"kept the newest {len(report.retained)} checkpoints"
        f" ({report.retained[0] if report.retained else '-'}"
        f"..{report.retained[-1] if report.retained else '-'})"
    )
    print(
        f"{verb} the headers of {len(report.compacted)} older checkpoints"
        + (f" ({report.compacted[0]}..{report.compacted[-1]})" if report.compacted else "")
    )
    if not args.dry_run:
        print(
            f"sealed segments: {_size(report.bytes_before)} -> {_size(report.bytes_after)}"
            f" on disk ({report.segments_rewritten} rewritten)"
        )
    print("events, transcript batches and executions are untouched")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, out: Output) -> int:
    from .inspect import session_stats

    with _open(args) as store:
        if not args.session:
            store.catalog.refresh()
            rows = []
            for sid in sorted(store.catalog.summaries):
                st = session_stats(store.session_dir(sid))
                rows.append([sid, st.commits, _size(st.log_bytes), _size(st.disk_bytes)])
                _progress(f"{len(rows)} sessions")
            if sys.stderr.isatty():
                print(file=sys.stderr)
            if out.json:
                out.doc(
                    [dict(zip(["session", "commits", "log", "disk"], r, strict=True)) for r in rows]
                )
            else:
                out.table(["session", "commits", "log", "on disk"], rows)
            return EXIT_OK
        if store._session(args.session) is None:
            raise NotFoundError(f"session {args.session!r} does not exist")
        st = session_stats(store.session_dir(args.session))
    if out.json:
        out.doc(st.__dict__)
        return EXIT_OK
    print(f"{st.commits} commits, log {_size(st.log_bytes)}, on disk {_size(st.disk_bytes)}")
    out.table(
        ["record type", "records", "stored", "uncompressed", "ratio", "compressed"],
        [
            [
                k,
                t.records,
                _size(t.stored_bytes),
                _size(t.payload_bytes),
                f"{t.payload_bytes / max(t.stored_bytes, 1):.2f}x",
                t.compressed_records,
            ]
            for k, t in sorted(st.by_type.items())
        ],
    )
    print("largest records:")
    for size, pos, kind in st.largest:
        print(f"  {_size(size):>10}  {kind} at position {pos}")
    print("growth by day (UTC):")
    for day, commits, size in st.growth:
        print(f"  {day}  {commits} commits  {_size(size)}")
    return EXIT_OK


# ------------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root",
        default=argparse.SUPPRESS,
        help=f"store directory (default: $JOURNAL_ROOT or ./{DEFAULT_ROOT})",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    parser = argparse.ArgumentParser(
        prog="journal",
        description="Inspect, replay, check, repair and move journal session stores.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str,
        fn: Callable[[argparse.Namespace, Output], int],
        text: str,
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text, parents=[common])
        p.set_defaults(func=fn)
        return p

    p = add("demo", cmd_demo, "write a scripted agent session, crash a writer, fork, verify")
    p.add_argument("dir", nargs="?", help="store directory for the demo")
    p = add("ls", cmd_ls, "sessions, most recently updated first")
    p.add_argument("--owner", help="only sessions of this owner id")
    p.add_argument("--limit", type=_positive, default=50)
    p = add("show", cmd_show, "summary, latest checkpoint header, sizes and lineage of a session")
    p.add_argument("session")
    p = add("events", cmd_events, "a session's events, newest first (or follow new ones)")
    p.add_argument("session")
    p.add_argument("--limit", type=_positive, default=20)
    p.add_argument("--before", type=_nonneg, help="only events with a lower sequence")
    p.add_argument("--after", type=_nonneg, help="events after this sequence, oldest first")
    p.add_argument("--type", action="append", help="only events of this type (repeatable)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    p.add_argument("--interval", type=float, default=0.2, help=argparse.SUPPRESS)
    p = add("transcript", cmd_transcript, "a session's transcript batches, newest first")
    p.add_argument("session")
    p.add_argument("--limit", type=_positive, default=10)
    p.add_argument("--before", type=_nonneg)
    p = add("executions", cmd_executions, "finished turns of a session, or of all with --all")
    p.add_argument("session", nargs="?")
    p.add_argument("--all", action="store_true")
    p.add_argument("--limit", type=_positive, default=20)
    p.add_argument("--before", type=_nonneg)
    p = add("state", cmd_state, "middleware state of a scope, or one key's value")
    p.add_argument("scope")
    p.add_argument("key", nargs="?")
    p = add("checkpoint", cmd_checkpoint, "a session's checkpoint (latest, or --at a sequence)")
    p.add_argument("session")
    p.add_argument("--at", type=_nonneg, help="the checkpoint exactly as saved at this sequence")
    p = add("tree", cmd_tree, "fork lineage as a tree")
    p.add_argument("session", nargs="?")
    p = add("replay", cmd_replay, "every committed record of a session in log order")
    p.add_argument("session")
    p.add_argument("--from", dest="from_seq", type=_nonneg, help="from this checkpoint sequence")
    p.add_argument("--to", type=_nonneg, help="up to this checkpoint sequence")
    p = add("diff", cmd_diff, "where two sessions' (or two sequences') checkpoints differ")
    p.add_argument("a", metavar="SESSION_A")
    p.add_argument("b", metavar="SESSION_B", nargs="?")
    p.add_argument(
        "--seq",
        type=_nonneg,
        nargs=2,
        metavar=("X", "Y"),
        help="compare two sequences of SESSION_A",
    )
    p = add("verify", cmd_verify, "check every checksum, commit, index and snapshot (read-only)")
    p.add_argument("targets", nargs="*", metavar="ROOT|SESSION")
    p = add("repair", cmd_repair, "cut an unfinished tail and rebuild caches (saves what it cuts)")
    p.add_argument("session")
    p.add_argument(
        "--cut-at-damage",
        action="store_true",
        help="also cut a damaged record in the newest segment and all after it",
    )
    p = add("export", cmd_export, "write sessions to one verified bundle file")
    p.add_argument("sessions", nargs="+", metavar="SESSION")
    p.add_argument("-o", "--output", required=True, help="bundle file to write")
    p.add_argument("--with-ancestors", action="store_true", help="include the fork parents")
    p = add("import", cmd_import, "verify a bundle and install its sessions")
    p.add_argument("bundle", metavar="FILE")
    p.add_argument("--rename", action="store_true", help="import colliding ids under new ids")
    p = add(
        "compact",
        cmd_compact,
        "drop superseded checkpoint data from sealed segments (journals untouched)",
    )
    p.add_argument("session")
    p.add_argument(
        "--keep",
        type=_positive,
        default=10,
        help="newest checkpoints to keep restorable (default 10)",
    )
    p.add_argument("--dry-run", action="store_true", help="report what would be dropped")
    p = add("stats", cmd_stats, "bytes per record type, compression, largest records, growth")
    p.add_argument("session", nargs="?")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def _nonneg(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be zero or more")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.root = getattr(args, "root", None) or os.environ.get("JOURNAL_ROOT") or DEFAULT_ROOT
    out = Output(getattr(args, "json", False))
    try:
        code: int = args.func(args, out)
        return code
    except NotFoundError as exc:
        print(f"journal: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    except InvalidInputError as exc:
        print(f"journal: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except JournalError as exc:
        print(f"journal: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


def render_docs() -> str:
    """docs/cli.md, generated from the parser's help (tests fail when it is stale)."""
    parser = build_parser()
    parts = [
        "# The `journal` command line\n",
        "Generated from the parser by `python -m journal.cli --write-docs docs/cli.md`;"
        " do not edit by hand.\n",
        "```text\n" + parser.format_help() + "```\n",
    ]
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sp in action.choices.items():
            parts.append(f"## journal {name}\n\n```text\n{sp.format_help()}```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-docs":
        with open(sys.argv[2], "w") as f:
            f.write(render_docs())
        sys.exit(0)
    sys.exit(main())

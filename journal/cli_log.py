"""Subcommands that read a session's log itself: replay and stats.

Both read every committed record up to the first damage; a session found damaged
is reported with its file and offset and the exit code is 1 (what was read is
still printed)."""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

import msgspec

from . import JournalError
from .cli_common import (
    Output,
    Sizes,
    UsageError,
    catch,
    cell,
    end_progress,
    existing_session,
    loss_lines,
    open_store,
    plural,
    progress,
    sequence_arg,
    session_damage,
    size,
)
from .cli_read import Add
from .inspect import describe, listed_sessions, replay, session_stats, state_items


def cmd_replay(args: argparse.Namespace, out: Output) -> int:
    import json

    if args.from_seq is not None and args.to is not None and args.from_seq > args.to:
        raise UsageError(f"--from {args.from_seq} is after --to {args.to}")
    with open_store(args) as store:
        directory = existing_session(store, args.session).directory
        state = state_items(store, args.session)
    ranged = args.from_seq is not None or args.to is not None
    records: list[dict[str, Any]] = []
    current = -1  # the checkpoint sequence in effect: a commit without one belongs to it
    for commit in replay(directory):
        described = [describe(r) for r in commit]
        for d in described:
            if d["type"] == "checkpoint":
                current = d["sequence"]
        if ranged and (
            (args.from_seq is not None and current < args.from_seq)
            or (args.to is not None and current > args.to)
        ):
            continue
        for d in described:
            d["at_checkpoint"] = current
            if out.json:
                records.append(d)
            else:
                print(replay_line(d))
    if not ranged:  # state is not versioned: only its current values, and only unranged
        for key, value in state:
            entry = {"type": "state", "scope": args.session, "key": key, "value": value}
            if out.json:
                records.append(entry)
            else:
                print(f"{'-':>10}  state       {key} = {cell(json.dumps(value))}")
    damage = session_damage(directory)
    if damage is not None:
        out.mark_damaged(args.session, damage)
    if out.json:
        out.doc(records)
    return out.finish()


def replay_line(d: dict[str, Any]) -> str:
    kind = d["type"]
    if kind == "checkpoint":
        text = (
            f"seq {d['sequence']} epoch {d['epoch']}"
            f" +{plural(len(d['context_added']), 'context item')}"
        )
    elif kind == "transcript":
        text = f"seq {d['sequence']} {plural(len(d['items']), 'item')}"
    elif kind == "execution":
        r = d["record"]
        text = f"seq {d['sequence']} {r['turn_id']} {r['outcome']} {r['elapsed_ms']} ms"
    elif kind == "pad":
        text = "(space freed by compact)"
    elif kind == "dict":
        text = f"dictionary {d['dict_id']} ({size(d['dictionary_bytes'])})"
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


def cmd_stats(args: argparse.Namespace, out: Output) -> int:
    with open_store(args) as store:
        if not args.session:
            rows: list[dict[str, Any]] = []
            for sid in sorted(listed_sessions(store)):
                directory = store.session_dir(sid)
                st = catch(out, sid, partial(session_stats, directory), (JournalError,))
                damage = session_damage(directory) if st is not None else None
                if damage is not None:
                    out.mark_damaged(sid, damage)
                rows.append(
                    {
                        "session": sid,
                        "commits": st.commits if st else None,
                        "log_bytes": st.log_bytes if st else None,
                        "file_bytes": st.file_bytes if st else None,
                        "disk_bytes": st.disk_bytes if st else None,
                        "damaged": st is None or damage is not None,
                    }
                )
                progress(f"{plural(len(rows), 'session')}")
            end_progress()
            if out.json:
                out.doc(rows)
            else:
                out.table(
                    ["session", "commits", "log", "files", "on disk (du)", ""],
                    [
                        [
                            r["session"],
                            r["commits"],
                            None if r["log_bytes"] is None else size(r["log_bytes"]),
                            None if r["file_bytes"] is None else size(r["file_bytes"]),
                            None if r["disk_bytes"] is None else size(r["disk_bytes"]),
                            "DAMAGED" if r["damaged"] else "",
                        ]
                        for r in rows
                    ],
                )
            return out.finish()
        directory = existing_session(store, args.session).directory
    st = session_stats(directory)
    damage = session_damage(directory)
    if damage is not None:
        out.mark_damaged(args.session, damage)
    losses = loss_lines(directory)
    if out.json:
        damaged = None if damage is None else str(damage)
        out.doc({**msgspec.structs.asdict(st), "damaged": damaged, "losses": losses})
        return out.finish()
    sizes = Sizes(st.log_bytes, st.file_bytes, st.disk_bytes)
    print(f"{plural(st.commits, 'commit')}; {sizes.text()}")
    for line in losses:
        print(f"LOSS: {line}")
    if damage is not None:
        print(f"DAMAGED: read up to the damage only: {damage}")
    out.table(
        ["record type", "records", "stored", "uncompressed", "ratio", "compressed"],
        [
            [
                k,
                t.records,
                size(t.stored_bytes),
                size(t.payload_bytes),
                f"{t.payload_bytes / max(t.stored_bytes, 1):.2f}x",
                t.compressed_records,
            ]
            for k, t in sorted(st.by_type.items())
        ],
    )
    print("largest records:")
    for n, pos, kind in st.largest:
        print(f"  {size(n):>10}  {kind} at position {pos}")
    print("growth by day (UTC):")
    for day, commits, n in st.growth:
        print(f"  {day}  {plural(commits, 'commit')}  {size(n)}")
    return out.finish()


def add_parsers(add: Add) -> None:
    if p := add("replay", cmd_replay, "every committed record of a session in log order"):
        p.add_argument("session", help="session id")
        p.add_argument(
            "--from",
            dest="from_seq",
            type=sequence_arg,
            help="only records committed while this checkpoint sequence or a later one was"
            " the latest (default: from the first)",
        )
        p.add_argument(
            "--to",
            type=sequence_arg,
            help="only records committed while this checkpoint sequence or an earlier one was"
            " the latest (default: to the last); state is listed only without --from/--to",
        )
    if p := add("stats", cmd_stats, "bytes per record type, compression, largest records, growth"):
        p.add_argument("session", nargs="?", help="session id (default: a line per session)")

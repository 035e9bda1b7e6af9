"""Subcommands for damaged sessions: `salvage`, and `repair --accept-loss`.

docs/damaged.md walks a user through them: `verify` says what is wrong, `salvage`
copies what is readable into a new session, `repair --accept-loss` cuts the damage
and makes the session writable again, saying what it cost.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import msgspec

from . import NotFoundError, Store
from . import inspect as tools  # tools.x: entry points imported on first use
from .cli_common import EXIT_FINDINGS, EXIT_OK, Output, plural, require_store
from .cli_read import Add
from .inspect import refresh_catalog


def cmd_accept_loss(args: argparse.Namespace, out: Output, directory: str) -> int:
    """`journal repair SESSION --accept-loss` (the caller checked that nobody writes)."""
    report = tools.accept_loss(directory, args.session)
    if not report.refused:
        # The catalog lists what the session was before the cut: derive it again.
        with Store(args.root) as store:
            refresh_catalog(store, [args.session])
    if out.json:
        out.doc(
            {
                "session": args.session,
                "refused": report.refused or None,
                "loss": _as_map(report.payload) if report.payload else None,
                "kept": report.kept,
                "rewritten": report.rewritten,
            }
        )
        return EXIT_FINDINGS if report.refused else EXIT_OK
    if report.refused:
        print(f"refused: {report.refused}")
        return EXIT_FINDINGS
    p = report.payload
    assert p is not None
    print(f"cut session {args.session!r} at log position {p.cut_at}: {p.reason}")
    if p.events_through > p.events_kept:
        print(f"lost events {p.events_kept + 1}..{p.events_through}")
    if p.checkpoints_through > p.checkpoint_kept:
        print(f"lost checkpoints after {p.checkpoint_kept}, up to {p.checkpoints_through}")
    for r in p.ranges:
        print(f"kept bytes {r.start}..{r.end} of {r.segment} in {r.kept_as}")
    for name in report.rewritten:
        print(f"rewrote or removed {name}")
    print(
        f"the next event is {p.events_through + 1}; the next checkpoint must come after"
        f" {max(p.checkpoints_through, p.checkpoint_kept)}"
    )
    return EXIT_OK


def _as_map(struct: msgspec.Struct) -> dict[str, Any]:
    """An array-like payload struct as a JSON object with its field names."""
    out: dict[str, Any] = {}
    for name in struct.__struct_fields__:
        value = getattr(struct, name)
        if isinstance(value, list):
            value = [_as_map(v) if isinstance(v, msgspec.Struct) else v for v in value]
        out[name] = value
    return out


def cmd_salvage(args: argparse.Namespace, out: Output) -> int:
    require_store(args.root)
    with Store(args.root) as store:
        if not os.path.isdir(store.session_dir(args.session)):
            raise NotFoundError(f"session {args.session!r} does not exist")
        report = tools.salvage_session(store, args.session, args.to)
    if out.json:
        out.doc(report.__dict__)
        return EXIT_OK
    print(
        f"copied {plural(report.saves, 'checkpoint')} and {plural(report.events, 'event')}"
        f" of {args.session!r} into {args.to!r}"
    )
    for a, b, c in report.renumbered:
        if a == c:
            print(f"  events {a}..{b} keep their numbers")
        else:
            print(f"  events {a}..{b} are now {c}..{c + b - a}")
    if report.losses_before:
        earlier = plural(report.losses_before, "loss", "losses")
        print(f"  the source had {earlier} accepted before; the copy numbers its own")
    for part in report.skipped:
        print(f"skipped {part}")
    if report.skipped:
        print(f"{plural(len(report.skipped), 'part')} could not be copied (listed above)")
    return EXIT_OK


def add_parsers(add: Add) -> None:
    if p := add(
        "salvage",
        cmd_salvage,
        "copy every verifiable commit of a (damaged) session into a new session",
    ):
        p.add_argument("session", help="the session to read (left as it is)")
        p.add_argument("--to", required=True, metavar="NEW_ID", help="id of the new session")

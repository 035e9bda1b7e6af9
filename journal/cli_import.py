"""`journal import-transcripts`: Claude Code session logs and Codex rollouts as sessions.

The work is `journal.transcripts`, imported when the command runs (the parser alone
costs a `journal ls` nothing). Exit status: 0 when every line was understood (or
--allow-unknown), 1 when a line was not (malformed, of an unknown type, a half-written
last line) or a file was refused (it changed since it was imported), 2 usage.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import NotFoundError, Store
from . import inspect as tools
from .cli_common import EXIT_FINDINGS, EXIT_OK, Output, end_progress, plural, progress
from .cli_read import Add

FORMATS = ("claude-code", "codex")


def cmd_import_transcripts(args: argparse.Namespace, out: Output) -> int:
    from .transcripts import default_paths, import_transcripts

    paths = list(args.paths) or default_paths()
    if not paths:
        raise NotFoundError(
            "no transcripts to import: neither ~/.claude/projects nor ~/.codex/sessions"
            " exists (give the files or directories to import)"
        )
    if args.dry_run:
        store = Store(args.root, read_only=True) if tools.is_store(args.root) else None
    else:
        store = Store(args.root, durability=args.durability)
    try:
        report = import_transcripts(
            store,
            paths,
            fmt=args.format,
            dry_run=args.dry_run,
            owner=args.owner,
            progress=progress,
        )
    finally:
        end_progress()
        if store is not None:
            store.close()
    failed = bool(report.refused) or (bool(report.not_understood) and not args.allow_unknown)
    if out.json:
        out.doc({"ok": not failed, **report.to_json()})
        return EXIT_FINDINGS if failed else EXIT_OK
    verb = "would write" if report.dry_run else "wrote"
    for f in report.files:
        name = _shown(f.path)
        if f.refused:
            print(f"{name}: refused: {f.refused}", file=sys.stderr)
            continue
        for s in f.sessions:
            fork = (
                f" (fork of {s.parent} at {s.fork_sequence})" if s.fork_sequence is not None else ""
            )
            if s.written:
                what = f"{verb} {plural(s.written, 'line')}"
                if s.existing:
                    what += f" after {s.existing} already there"
            else:
                what = f"unchanged ({plural(s.commits, 'line')})"
            print(f"{name}: {s.session_id}{fork}: {what}")
    for finding in report.findings:
        print(f"journal: {finding}", file=sys.stderr)
    for path, why in report.skipped:
        out.note(f"journal: skipped {_shown(path)}: {why}")
    written = sum(f.written for f in report.files)
    summary = (
        f"{'dry run: ' if report.dry_run else ''}{plural(len(report.files), 'file')},"
        f" {verb} {plural(written, 'line')}; {len(report.not_understood)} not understood,"
        f" {len(report.findings) - len(report.not_understood)} warnings,"
        f" {len(report.refused)} refused"
    )
    print(summary, file=sys.stderr if failed else sys.stdout)
    return EXIT_FINDINGS if failed else EXIT_OK


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def add_parsers(add: Add) -> None:
    if p := add(
        "import-transcripts",
        cmd_import_transcripts,
        "import Claude Code session logs and Codex rollouts as sessions (again: only what is new)",
    ):
        p.add_argument(
            "paths",
            nargs="*",
            metavar="PATH",
            help="transcript files or directories (default: ~/.claude/projects and"
            " ~/.codex/sessions, those that exist)",
        )
        p.add_argument(
            "--format",
            choices=FORMATS,
            default=None,
            help="the format of every file (default: told by each file's name or first line)",
        )
        p.add_argument(
            "--dry-run", action="store_true", help="write nothing; report what would be written"
        )
        p.add_argument(
            "--allow-unknown",
            action="store_true",
            help="exit 0 even when lines were not understood (they are still reported,"
            " and kept whole in events)",
        )
        p.add_argument(
            "--owner", default="local", help="owner id of the sessions made (default: local)"
        )
        p.add_argument(
            "--durability",
            choices=("fsync", "os"),
            default="fsync",
            help="fsync: each commit is on stable storage when written (default); os: faster,"
            " survives a crash of this process but not a power loss (an import run again"
            " after one finishes the work)",
        )

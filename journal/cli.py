"""The `journal` command line: inspect, replay, check, repair and move session stores.

Every command is a thin layer over public library functions, in one of three
modules: `cli_read` (listing and reading), `cli_log` (the log itself: replay,
stats) and `cli_maint` (verify, repair, export, import, compact, delete, demo).
A new subcommand is a `cmd_x(args, out) -> int` function and a few lines in its
module's `add_parsers`. The output contract, exit codes and error rules are in
`EPILOG` below (and so in `journal --help` and docs/cli.md). Reading commands
never take a writer lock.

A call imports what it uses when it uses it (start-up is most of a call like
`journal ls`): `main` builds only the parser of the subcommand it runs, the tools'
entry points come through `journal.inspect` on first use, and `json` is imported
by the functions that write JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import (
    InvalidInputError,
    JournalError,
    __version__,
    cli_damage,
    cli_gc,
    cli_import,
    cli_log,
    cli_maint,
    cli_read,
    cli_replica,
)
from .cli_common import (
    DEFAULT_ROOT,
    EXIT_FINDINGS,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Command,
    Output,
    error_doc,
)
from .viewer import command as viewer_command

EPILOG = f"""\
output:
  Without --json: tables and text for people on stdout; notes, progress and
  errors on stderr. With --json: exactly one JSON document on stdout (an object
  or an array), except `events --follow --json`, which prints JSON Lines (one
  event object per line, as they are committed).
  Errors print one line on stderr: `journal: <message>`; under --json one JSON
  object {{"error", "type", "path", "offset", "exit_code"}}.
  A command over many sessions (ls, stats, tree, executions --all, verify,
  export --all) goes on past a damaged session: it lists every readable one,
  marks the damaged ones (stderr: `journal: session 'x' is damaged: ...`, under
  --json a JSON line {{"damaged", "error", "type", "path", "offset"}}) and exits
  1 at the end. A command that reads a damaged session (show, events, replay,
  stats) prints what it can read, says where the damage is, and exits 1.

exit codes:
  {EXIT_OK}    ok
  {EXIT_FINDINGS}    findings, damage, not found, refused, or an OS error (disk full, ...)
  {EXIT_USAGE}    usage: a bad or contradictory command line
  {EXIT_INTERNAL}   internal error: a bug in journal (please report the one-line message)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)

The store is --root, else $JOURNAL_ROOT, else ./{DEFAULT_ROOT}. If `journal` is
not on your PATH, call it as .venv/bin/journal or `python -m journal.cli`.
"""


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors as JSON on stderr when --json was asked for."""

    json_errors = False
    # The subcommands' parsers by name (`build_parser`; render_docs prints each).
    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        import json

        if Parser.json_errors:
            exc = InvalidInputError(f"{self.prog}: {message}")
            print(json.dumps(error_doc(exc, EXIT_USAGE)), file=sys.stderr)
            sys.exit(EXIT_USAGE)
        super().error(message)


def build_parser(command: str | None = None) -> Parser:
    """The parser of the whole command line, or (`command` given) one whose only
    subcommand is `command`: what `main` parses with, as building every
    subcommand's parser costs a call more than parsing it."""
    common = Parser(add_help=False)
    common.add_argument(
        "--root",
        default=argparse.SUPPRESS,
        help=f"store directory (default: $JOURNAL_ROOT or ./{DEFAULT_ROOT})",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="machine-readable output: one JSON document (default: text for people)",
    )
    parser = Parser(
        prog="journal",
        description="Inspect, replay, check, repair and move journal session stores.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"journal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = {}

    def add(name: str, fn: Command, text: str) -> argparse.ArgumentParser | None:
        if command is not None and name != command:
            return None
        p = sub.add_parser(name, help=text, description=text, parents=[common])
        p.set_defaults(func=fn)
        parser.commands[name] = p
        return p

    cli_maint.add_demo(add)
    cli_read.add_parsers(add)
    cli_log.add_parsers(add)
    cli_maint.add_parsers(add)
    cli_import.add_parsers(add)
    cli_damage.add_parsers(add)
    cli_gc.add_parsers(add)
    cli_replica.add_parsers(add)
    viewer_command.add_parsers(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    Parser.json_errors = "--json" in argv
    parser = build_parser(_named_command(argv))
    if not parser.commands:  # no such subcommand: argparse's error lists them all
        parser = build_parser()
    args = parser.parse_args(argv)
    args.root = getattr(args, "root", None) or os.environ.get("JOURNAL_ROOT") or DEFAULT_ROOT
    out = Output(getattr(args, "json", False))
    try:
        code: int = args.func(args, out)
        return code
    except InvalidInputError as exc:
        out.error(exc, EXIT_USAGE)
        return EXIT_USAGE
    except JournalError as exc:
        out.error(exc, EXIT_FINDINGS)
        return EXIT_FINDINGS
    except BrokenPipeError:
        # the reader went away (`journal replay ... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        out.error(OSError(f"{exc.strerror or exc}{where}"), EXIT_FINDINGS)
        return EXIT_FINDINGS
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line, never a traceback
        out.error(exc, EXIT_INTERNAL, prefix=f"internal error ({type(exc).__name__}): ")
        return EXIT_INTERNAL


def _named_command(argv: list[str]) -> str | None:
    """The subcommand argparse will run for `argv`: its first argument that is neither
    --json nor --root and its value. None where that is not plain (an option such
    as --help or an abbreviation first): `main` then builds every subcommand."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--root":
            i += 2
        elif arg == "--json" or arg.startswith("--root="):
            i += 1
        elif arg.startswith("-"):
            return None
        else:
            return arg
    return None


def render_docs() -> str:
    """docs/cli.md, generated from the parser's help (tests fail when it is stale)."""
    parser = build_parser()
    parts = [
        "# The `journal` command line\n",
        "Generated from the parser by `python -m journal.cli --write-docs docs/cli.md`;"
        " do not edit by hand.\n",
        "```text\n" + parser.format_help() + "```\n",
    ]
    for name, sp in parser.commands.items():
        parts.append(f"## journal {name}\n\n```text\n{sp.format_help()}```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-docs":
        with open(sys.argv[2], "w") as f:
            f.write(render_docs())
        sys.exit(0)
    sys.exit(main())

"""What every `journal` subcommand shares: output, exit codes, errors, formatting, damage notes.

The output contract (docs/cli.md repeats it):
- without `--json`: human text on stdout, notes and errors on stderr;
- with `--json`: exactly one JSON document on stdout (an object or an array),
  except where a command documents JSON Lines (`events --follow`: one event
  object per line, as they arrive);
- an error prints one line on stderr: `journal: <message>`, or under `--json`
  one JSON object `{"error", "type", "path", "offset", "exit_code"}`;
- a session found damaged while a command goes on with the others is noted on
  stderr (`journal: session 'x' is damaged: ...`, or under `--json` a JSON line
  `{"damaged", "error", "type", "path", "offset"}`) and makes the exit code 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from . import CorruptionError, InvalidInputError, JournalError, NotFoundError, Store
from . import inspect as tools

DEFAULT_ROOT = "journal-demo"
EXIT_OK = 0
EXIT_FINDINGS = 1  # findings, damage, not found, a refused or failed operation
EXIT_USAGE = 2  # a bad command line (argparse's own code)
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in journal (an exception nobody expected)
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
MAX_LIMIT = (1 << 63) - 2  # page limits: `limit + 1` must fit in an i64

Command = Callable[[argparse.Namespace, "Output"], int]


class UsageError(InvalidInputError):
    """The command line asks for something contradictory (exit 2)."""


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 item`, `2 items` (or the given plural form)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def error_doc(exc: BaseException, code: int) -> dict[str, Any]:
    return {
        "error": str(exc),
        "type": type(exc).__name__,
        "path": getattr(exc, "path", None) or getattr(exc, "filename", None),
        "offset": getattr(exc, "offset", None),
        "exit_code": code,
    }


class Output:
    def __init__(self, as_json: bool):
        self.json = as_json
        self.damaged: list[dict[str, Any]] = []

    def doc(self, value: Any) -> None:
        import json

        print(json.dumps(msgspec.to_builtins(value), indent=2, ensure_ascii=False))

    def line(self, value: Any) -> None:
        import json

        print(json.dumps(msgspec.to_builtins(value), ensure_ascii=False), flush=True)

    def table(self, headers: list[str], rows: list[list[Any]]) -> None:
        cells = [[cell(v) for v in row] for row in rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
        print("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
        for r in cells:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())

    def note(self, text: str) -> None:
        """A remark for people (stderr), never part of the JSON document."""
        if not self.json:
            print(text, file=sys.stderr)

    def error(self, exc: BaseException, code: int, prefix: str = "") -> None:
        import json

        if self.json:
            doc = error_doc(exc, code)
            doc["error"] = prefix + doc["error"]
            print(json.dumps(doc, ensure_ascii=False), file=sys.stderr)
        else:
            print(f"journal: {prefix}{exc}", file=sys.stderr)

    def mark_damaged(self, session_id: str, exc: BaseException) -> dict[str, Any]:
        """Note a damaged session (stderr) and remember it for the exit code."""
        import json

        entry = {
            "damaged": session_id,
            "error": str(exc),
            "type": type(exc).__name__,
            "path": getattr(exc, "path", None),
            "offset": getattr(exc, "offset", None),
        }
        self.damaged.append(entry)
        if self.json:
            print(json.dumps(entry, ensure_ascii=False), file=sys.stderr)
        else:
            print(
                f"journal: session {session_id!r} is damaged: {exc}"
                f" (see: journal verify {session_id})",
                file=sys.stderr,
            )
        return entry

    def finish(self, code: int = EXIT_OK) -> int:
        """The exit code: 1 when any session was found damaged, with a last word."""
        if not self.damaged:
            return code
        if not self.json:
            names = ", ".join(repr(d["damaged"]) for d in self.damaged)
            print(
                f"journal: {plural(len(self.damaged), 'session')} damaged: {names}",
                file=sys.stderr,
            )
        return max(code, EXIT_FINDINGS)


def cell(v: Any) -> str:
    if v is None:
        return "-"
    text = str(v).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def when(seconds: float) -> str:
    """A UTC time with its date."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S"
    )


def when_ms(ms: int, today: datetime.date | None = None) -> str:
    """A UTC time to the millisecond; the date too unless it is today (UTC)."""
    at = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    today = today or datetime.datetime.now(datetime.timezone.utc).date()
    text = at.strftime("%H:%M:%S.%f")[:-3]
    return text if at.date() == today else f"{at.strftime('%Y-%m-%d')} {text}"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Sizes(msgspec.Struct):  # a Struct: cheaper to define than a dataclass
    """Three figures, each always under the same name:
    `log`: bytes of committed records in the log (what a bundle carries);
    `files`: the apparent size of every file of the session (`ls -l`, summed);
    `on disk`: the blocks allocated to them (`du`)."""

    log_bytes: int
    file_bytes: int
    disk_bytes: int

    def text(self) -> str:
        return (
            f"log {size(self.log_bytes)}, files {size(self.file_bytes)},"
            f" on disk (du) {size(self.disk_bytes)}"
        )


def sizes(directory: str, log_bytes: int) -> Sizes:
    files, disk = tools.dir_sizes(directory)
    return Sizes(log_bytes, files, disk)


def progress(text: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)


def end_progress() -> None:
    if sys.stderr.isatty():
        print(file=sys.stderr)


def require_store(root: str) -> None:
    if os.path.isfile(root):
        raise NotFoundError(f"{root} is a file, not a journal store")
    if not tools.is_store(root):
        raise NotFoundError(f"no journal store at {root} (use --root or JOURNAL_ROOT)")


def open_store(args: argparse.Namespace) -> Store:
    """The store at --root, opened read-only (reading commands take no writer lock)."""
    require_store(args.root)
    return Store(args.root, read_only=True)


def existing_session(store: Store, session_id: str) -> tools.SessionView:
    """A session's directory and counts, or `NotFoundError` (damage: its error)."""
    found = tools.session_view(store, session_id)
    if found is None:
        raise NotFoundError(f"session {session_id!r} does not exist")
    return found


def session_damage(directory: str) -> CorruptionError | None:
    """The first damage `verify` finds in a session directory (None: none)."""
    return tools.first_damage(directory)


def loss_lines(directory: str) -> list[str]:
    """One line per loss accepted in a session (`verify`, `show` and `stats` show them)."""
    return [tools.describe_loss(n) for n in tools.loss_notes(directory)]


def program() -> str:
    """How the user can call this program again: `journal` when that is on PATH and is
    this one, else the path that ran it, else `python -m journal.cli`."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) == "journal":
        found = shutil.which("journal")
        if found and os.path.realpath(found) == os.path.realpath(argv0):
            return "journal"
        rel = os.path.relpath(argv0)
        shown = rel if not rel.startswith("..") else os.path.abspath(argv0)
        return shown if os.sep in shown else f".{os.sep}{shown}"
    exe = os.path.relpath(sys.executable)
    exe = exe if not exe.startswith("..") else sys.executable
    return f"{exe} -m journal.cli"


def limit_arg(text: str) -> int:
    """A page size: a whole number from 1 to MAX_LIMIT."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text} is not between 1 and {MAX_LIMIT}")
    return value


def sequence_arg(text: str) -> int:
    """A sequence number: a whole number, zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative (sequences start at 0)")
    if value > MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text} is beyond the largest sequence")
    return value


def catch(
    out: Output, session_id: str, fn: Callable[[], Any], errors: tuple[type[BaseException], ...]
) -> Any:
    """`fn()`, or None after marking `session_id` damaged when it raises one of `errors`."""
    try:
        return fn()
    except errors as exc:
        out.mark_damaged(session_id, exc)
        return None


__all__ = [
    "EXIT_FINDINGS",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "JournalError",
    "Output",
    "UsageError",
]

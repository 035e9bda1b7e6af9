"""Import Claude Code session logs and Codex rollouts as journal sessions.

`import_transcripts(root, paths)` reads each transcript file and writes what the
store does not have yet: one commit per line, messages as transcript items (and
the context), events with the line's time, tool calls paired with their results,
subagents and sidechains as forks. It reports what it did not understand; nothing
is dropped silently (such a line is kept whole in an event). The formats and the
mapping: docs/import-transcripts.md. The command: `journal import-transcripts`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from journal import Store

from .discover import FORMATS, default_paths, walk
from .importer import Importer
from .model import Finding
from .report import FileReport, Report, SessionReport


def import_transcripts(
    store: Store | None,
    paths: Sequence[str | os.PathLike[str]] = (),
    *,
    fmt: str | None = None,
    dry_run: bool = False,
    owner: str = "local",
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Import the transcript files under `paths` (default: `default_paths()`) into
    `store`. With `dry_run` (or no store) nothing is written; the report says what
    would be. `fmt` ("claude-code" or "codex") overrides the format of every file."""
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    names = [os.fspath(p) for p in paths] or default_paths()
    sources, skipped = walk(names, fmt)
    importer = Importer(store, dry_run=dry_run or store is None, owner=owner, progress=progress)
    report = Report(dry_run=importer.dry_run, skipped=skipped)
    for source in sources:
        report.files.append(importer.run_file(source))
    return report


__all__ = [
    "FORMATS",
    "FileReport",
    "Finding",
    "Report",
    "SessionReport",
    "default_paths",
    "import_transcripts",
]

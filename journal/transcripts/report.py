"""What an import did, per file and per session, and what it did not understand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import Finding


@dataclass
class SessionReport:
    """One journal session a file makes: how many of the file's lines (and fork
    points) make it, how many of those the store already had, and how many this
    import wrote (or, in a dry run, would write). Lines are written up to
    `BATCH_LINES` to a commit."""

    session_id: str
    commits: int = 0
    existing: int = 0
    written: int = 0
    parent: str | None = None
    fork_sequence: int | None = None

    @property
    def status(self) -> str:
        if self.written == 0:
            return "unchanged"
        return "appended" if self.existing else "new"

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "status": self.status,
            "commits": self.commits,
            "existing": self.existing,
            "written": self.written,
            "parent": self.parent,
            "fork_sequence": self.fork_sequence,
        }


@dataclass
class FileReport:
    path: str
    format: str
    bytes: int
    lines: int = 0
    consumed: int = 0  # bytes read as whole lines
    sessions: list[SessionReport] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    refused: str | None = None

    def refuse(self, why: str) -> None:
        if self.refused is None:
            self.refused = why

    @property
    def written(self) -> int:
        return 0 if self.refused else sum(s.written for s in self.sessions)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "bytes": self.bytes,
            "lines": self.lines,
            "refused": self.refused,
            "sessions": [s.to_json() for s in self.sessions],
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass
class Report:
    """A whole import: its files, the files passed over, and whether it was a dry run."""

    dry_run: bool
    files: list[FileReport] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files for f in r.findings]

    @property
    def not_understood(self) -> list[Finding]:
        return [f for f in self.findings if f.not_understood]

    @property
    def refused(self) -> list[FileReport]:
        return [r for r in self.files if r.refused]

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "files": [r.to_json() for r in self.files],
            "skipped": [{"path": p, "reason": why} for p, why in self.skipped],
            "lines_written": sum(r.written for r in self.files),
            "sessions_written": sum(
                1 for r in self.files if not r.refused for s in r.sessions if s.written
            ),
            "not_understood": len(self.not_understood),
            "warnings": len(self.findings) - len(self.not_understood),
            "refused": len(self.refused),
        }

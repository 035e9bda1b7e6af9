"""Which files to import, in which format, in which order (parents before forks).

Defaults: `$CLAUDE_CONFIG_DIR/projects` (else `~/.claude/projects`) and
`$CODEX_HOME/sessions` (else `~/.codex/sessions`), those that exist. A directory is
walked for session files: `rollout-*.jsonl` (Codex), `agent-*.jsonl` and
`<uuid>.jsonl` (Claude Code); other files are listed as skipped. A file given by
name is imported whatever its name, its format told by its name or first line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from . import claude_code, codex

FORMATS = ("claude-code", "codex")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


@dataclass
class Source:
    path: str
    format: str


def default_paths() -> list[str]:
    claude = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.expanduser("~/.claude")
    codex_home = os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
    found = [os.path.join(claude, "projects"), os.path.join(codex_home, "sessions")]
    return [p for p in found if os.path.isdir(p)]


def sniff(path: str) -> str:
    """A file's format: by its name, else by its first line."""
    name = os.path.basename(path)
    if name.startswith("rollout-"):
        return "codex"
    if name.startswith("agent-") or _UUID.match(name.removesuffix(".jsonl")):
        return "claude-code"
    try:
        with open(path, "rb") as f:
            first = json.loads(f.readline(1 << 20) or b"null")
    except (OSError, ValueError):
        return "claude-code"
    if (
        isinstance(first, dict)
        and "payload" in first
        and first.get("type")
        in (
            "session_meta",
            "response_item",
            "event_msg",
            "turn_context",
            "compacted",
        )
    ):
        return "codex"
    return "claude-code"


def walk(paths: Sequence[str], fmt: str | None) -> tuple[list[Source], list[tuple[str, str]]]:
    """The session files under `paths` (files and directories), in import order, and
    the (path, reason) of files passed over."""
    sources: list[Source] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path in paths:
        if os.path.isdir(path):
            for top, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(top, name)
                    kind = _kind(full)
                    if kind is None:
                        if name.endswith(".jsonl"):
                            skipped.append((full, "not named like a session file"))
                        continue
                    _add(sources, seen, full, fmt or kind)
        elif os.path.isfile(path):
            _add(sources, seen, path, fmt or sniff(path))
        else:
            raise FileNotFoundError(2, "no such file or directory", path)
    return order(sources), skipped


def _kind(path: str) -> str | None:
    name = os.path.basename(path)
    if not name.endswith(".jsonl"):
        return None
    if name.startswith("rollout-"):
        return "codex"
    if name.startswith("agent-") or _UUID.match(name.removesuffix(".jsonl")):
        return "claude-code"
    return None


def _add(sources: list[Source], seen: set[str], path: str, fmt: str) -> None:
    real = os.path.realpath(path)
    if real not in seen:
        seen.add(real)
        sources.append(Source(os.path.abspath(path), fmt))


def order(sources: list[Source]) -> list[Source]:
    """Parents before the forks made of them: Claude Code sessions before their
    subagents (nested subagents last), Codex rollouts after the rollout they fork."""

    def claude_key(s: Source) -> tuple[int, str]:
        if not claude_code.is_subagent_file(s.path):
            return 0, s.path
        nested = isinstance(claude_code.sidecar(s.path).get("parentAgentId"), str)
        return 1 + nested + s.path.count(os.sep), s.path

    claude = sorted((s for s in sources if s.format == "claude-code"), key=claude_key)
    rollouts = [s for s in sources if s.format == "codex"]
    ids: dict[str, tuple[Source, str | None]] = {}
    same: list[Source] = []  # a second rollout of an id (refused when imported)
    for s in rollouts:
        sid, parent = _rollout_head(s.path)
        if sid in ids:
            same.append(s)
        else:
            ids[sid] = (s, parent)
    done: set[str] = set()
    ordered: list[Source] = []

    def visit(sid: str, path: tuple[str, ...]) -> None:
        if sid in done or sid in path:
            return
        source, parent = ids[sid]
        if parent is not None and parent in ids:
            visit(parent, (*path, sid))
        done.add(sid)
        ordered.append(source)

    for sid in sorted(ids, key=lambda k: ids[k][0].path):
        visit(sid, ())
    return claude + ordered + same


def _rollout_head(path: str) -> tuple[str, str | None]:
    sid = codex.file_session_id(path)
    try:
        with open(path, "rb") as f:
            first = json.loads(f.readline(1 << 24) or b"null")
    except (OSError, ValueError):
        return sid, None
    payload = first.get("payload") if isinstance(first, dict) else None
    if not isinstance(payload, dict) or first.get("type") != "session_meta":
        return sid, None
    if isinstance(payload.get("id"), str) and payload["id"]:
        sid = payload["id"]
    return sid, codex.parent_of(payload)

"""The core imports and works with neither agent framework installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Missing(importlib.abc.MetaPathFinder):
        # as if langgraph, langchain and the OpenAI Agents SDK were not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"langgraph", "langchain_core", "agents", "openai"}:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Missing())
    """
)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_core_and_cli_work_without_the_frameworks(tmp_path: Path) -> None:
    done = _run(
        """
        import sys
        import journal
        from journal import Checkpoint, Event
        # reaches inside: the console script's entry point (pyproject's project.scripts)
        from journal.cli import main
        store = journal.open("store")
        store.save(Checkpoint.empty("s"))
        store.append_event("s", 1, Event(msg={"type": "warning", "message": "hi"}))
        store.close()
        assert not any(m.split(".")[0] in {"langgraph", "agents"} for m in sys.modules)
        sys.exit(main(["--root", "store", "verify"]))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr


def test_integrations_say_which_extra_is_missing(tmp_path: Path) -> None:
    for module, extra in (
        ("journal.integrations.langgraph", "langgraph"),
        ("journal.integrations.openai_agents", "openai-agents"),
    ):
        done = _run(
            f"""
            try:
                import {module}
            except ImportError as exc:
                print("ImportError:", exc)
            else:
                print("imported")
            """,
            tmp_path,
        )
        assert done.returncode == 0, done.stderr
        out = done.stdout.strip()
        assert out == "imported" or f"journal[{extra}]" in out, out

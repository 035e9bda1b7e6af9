"""The core imports and works with no agent framework installed, and each integration
says which extra it needs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys

    # as if no agent framework were installed
    FRAMEWORKS = {"langgraph", "langchain_core", "agents", "openai", "pydantic_ai",
                  "google", "claude_agent_sdk"}

    class Missing(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in FRAMEWORKS:
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
        assert not any(m.split(".")[0] in FRAMEWORKS for m in sys.modules)
        sys.exit(main(["--root", "store", "verify"]))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr


def test_integrations_say_which_extra_is_missing(tmp_path: Path) -> None:
    # The Agents SDK package imports without the SDK (it is needed only to run
    # agents); every other integration refuses to import and names its extra.
    for module, extra in (
        ("journal.integrations.langgraph", "langgraph"),
        ("journal.integrations.langgraph.server", "langgraph"),
        ("journal.integrations.openai_agents", None),
        ("journal.integrations.pydantic_ai", "pydantic-ai"),
        ("journal.integrations.adk", "adk"),
        ("journal.integrations.claude_agent_sdk", "claude-agent-sdk"),
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
        if extra is None:
            assert out == "imported", (module, out)
        else:
            assert out.startswith("ImportError:") and f"journal[{extra}]" in out, (module, out)


def test_a_replica_without_boto3_names_the_s3_extra(tmp_path: Path) -> None:
    done = _run(
        """
        FRAMEWORKS.update({"boto3", "botocore"})
        import journal
        store = journal.open("plain")  # the core never needs boto3
        store.close()
        try:
            journal.open("replicated", replica="s3://bucket/prefix")
        except journal.ReplicaError as exc:
            print("refused:", exc)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "journal[s3]" in done.stdout, done.stdout

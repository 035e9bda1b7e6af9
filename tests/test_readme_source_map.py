"""README's "Reading the source" stays true: its module table names every module of
the package and nothing else, and every `Class.method` its five paths name exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "journal"
ARCHITECTURE = ROOT / "docs" / "architecture.md"  # the five main paths, call by call


def _section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Reading the source", 1)[1].split("\n## ", 1)[0]


def _table_names() -> set[str]:
    names: set[str] = set()
    for line in _section().splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        names.update(re.findall(r"`([\w/]+(?:\.py|/))`", first_cell))
    return names


def _modules() -> set[str]:
    top = {p.name for p in PACKAGE.glob("*.py")}
    packages = {
        f"integrations/{p.name}/"
        for p in (PACKAGE / "integrations").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    }
    # modules the integrations share (journal/integrations/dirlock.py)
    packages |= {f"integrations/{p.name}" for p in (PACKAGE / "integrations").glob("*.py")} - {
        "integrations/__init__.py"
    }
    # the other subpackages (journal/viewer/) are one row each, like the integrations
    packages |= {f"{p.parent.name}/" for p in PACKAGE.glob("*/__init__.py")} - {"integrations/"}
    return top | packages


def test_the_module_table_names_every_module_and_only_those() -> None:
    table = _table_names()
    # `cli_*.py` stands for the subcommand modules
    table |= {p.name for p in PACKAGE.glob("cli_*.py")} if "cli_*.py" in _section() else set()
    assert sorted(_modules() - table) == [], "modules the README's table does not name"
    assert sorted(table - _modules()) == [], "names in the README's table that are no module"


def _definitions() -> dict[str, set[str]]:
    """Class name -> the names of its methods, over the whole package."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = {
                    n.name
                    for n in node.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
                found.setdefault(node.name, set()).update(methods)
    return found


def test_every_method_the_paths_name_exists() -> None:
    paths = ARCHITECTURE.read_text().split("## The five main paths", 1)[1]
    named = set(re.findall(r"`([A-Z]\w+)\.(\w+)`", paths))
    assert len(named) >= 10, "the paths name the methods they go through"
    definitions = _definitions()
    missing = [
        f"{cls}.{meth}"
        for cls, meth in sorted(named)
        if meth not in definitions.get(cls, set())
        and not any(meth in definitions.get(base, set()) for base in _bases(cls))
    ]
    assert missing == []


def _bases(cls: str) -> list[str]:
    """The package's base classes of `cls`, transitively (a Session's layers)."""
    bases: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
    out: list[str] = []
    todo = list(bases.get(cls, []))
    while todo:
        base = todo.pop()
        if base not in out:
            out.append(base)
            todo.extend(bases.get(base, []))
    return out

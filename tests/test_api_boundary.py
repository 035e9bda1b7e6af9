"""The public boundary: `journal.open` and `journal.open_async` take exactly `Store`'s
options, and the command line reaches the library only through `journal` (the public
API) and `journal.inspect` (the interface for offline tools)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import journal
import journal.inspect as tools
from journal import Store, open_async

PACKAGE = Path(journal.__file__).parent
CLI_MODULES = sorted(PACKAGE.glob("cli*.py"))
TOOL_FRONTS = [*CLI_MODULES, PACKAGE / "demo.py", PACKAGE / "bundle.py", PACKAGE / "inspect.py"]


def _parameters(fn: object) -> list[tuple[str, object, object, object]]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
        if p.name != "self"
    ]


def test_open_has_the_stores_signature() -> None:
    assert _parameters(journal.open) == _parameters(Store.__init__)
    keyword_only = [p for p in _parameters(journal.open) if p[1] is inspect.Parameter.KEYWORD_ONLY]
    assert len(keyword_only) == len(_parameters(Store.__init__)) - 1  # all but `root`


def test_open_async_has_the_stores_signature() -> None:
    assert journal.open_async is open_async
    assert _parameters(journal.open_async) == _parameters(Store.__init__)


def _imports(path: Path) -> list[str]:
    """Every module `path` imports from inside the package, as `journal.x` names
    (`journal` for `from . import name`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and node.module.startswith("journal"):
                found.append(node.module)
            elif node.level == 1:
                if node.module is None:
                    found += [f"journal.{a.name}" for a in node.names if a.name in _MODULES]
                    if any(a.name not in _MODULES for a in node.names):
                        found.append("journal")
                else:
                    found.append(f"journal.{node.module}")
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("journal")]
    return found


_MODULES = {p.stem for p in PACKAGE.glob("*.py")}


def test_the_cli_imports_only_the_public_api_and_the_tools_interface() -> None:
    # (journal.demo: the story `journal demo` tells, itself held to the same rule;
    # journal.viewer: `journal serve`, whose package the viewer tests hold to it;
    # journal.transcripts: `journal import-transcripts`, built on the public API only)
    allowed = {"journal", "journal.inspect", "journal.demo", "journal.viewer"}
    allowed.add("journal.transcripts")
    allowed.add("journal.replica")  # the replica package's interface (its __init__)
    allowed |= {f"journal.{p.stem}" for p in CLI_MODULES}
    for path in [*CLI_MODULES, PACKAGE / "demo.py"]:
        strays = sorted(set(_imports(path)) - allowed)
        assert not strays, f"{path.name} imports {strays}"


def test_what_the_cli_takes_from_journal_is_public() -> None:
    public = set(journal.__all__) | {"__version__"}
    for path in CLI_MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                names = {a.name for a in node.names} - _MODULES
                assert names <= public, f"{path.name}: {sorted(names - public)}"


_PRIVATE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\.(_[a-z][A-Za-z0-9_]*)\b")


def test_no_private_name_of_another_module_is_used() -> None:
    for path in TOOL_FRONTS:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            for m in _PRIVATE.finditer(code):
                assert m.group(1) in ("self", "cls", "os", "sys"), f"{path.name}:{n}: {m.group(0)}"


def test_the_tools_interface_offers_what_it_documents() -> None:
    doc = tools.__doc__ or ""
    for name in tools.__all__:
        assert hasattr(tools, name), name
    for name in re.findall(r"`([a-z_]+)`", doc):
        if name not in ("journal",):
            assert name in tools.__all__, f"journal.inspect documents {name} but lacks it"

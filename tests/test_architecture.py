"""The layer contracts are exhaustive: every module of `orchestrator` and `dashboards` lives in a
room that pyproject.toml's layers contract names (a module no layer names would be unconstrained
by `lint-imports`), and the architecture page's generated tree and layers follow the code."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import grimp  # import-linter's own graph builder (a dev dependency)
import pytest
import tomllib  # Python >= 3.11, as the dev tools need (import-linter 2.17 does)

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("orchestrator", "dashboards")
CONTAINERS = {"orchestrator"}
"""Packages that are only a container of rooms: their own `__init__` is no room (it imports nothing
of gatesweep but `orchestrator.runtime`, checked below)."""

_spec = importlib.util.spec_from_file_location("docs_architecture_gen", ROOT / "docs" / "architecture_gen.py")
assert _spec is not None and _spec.loader is not None
arch = importlib.util.module_from_spec(_spec)
sys.modules["docs_architecture_gen"] = arch
_spec.loader.exec_module(arch)


def layer_names(pyproject: Path) -> set[str]:
    """The module names the layers contract (the one without containers) names."""
    with open(pyproject, "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and not c.get("containers")]
    return {part.strip() for layer in layers["layers"] for part in layer.replace(":", "|").split("|")}


def modules(root: Path) -> list[str]:
    """Every module of the checked packages as a dotted name (a package as its own name)."""
    out = []
    for package in CHECKED:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def uncovered(root: Path) -> list[str]:
    """The modules no layer names (neither the module nor a package above it)."""
    named = layer_names(root / "pyproject.toml")

    def covered(module: str) -> bool:
        parts = module.split(".")
        return module in CONTAINERS or any(".".join(parts[:i]) in named for i in range(1, len(parts) + 1))

    return [m for m in modules(root) if not covered(m)]


def test_every_module_is_in_a_room_a_layer_names():
    assert len(modules(ROOT)) > 150  # the walk found the code
    missing = uncovered(ROOT)
    assert missing == [], f"modules no layer of pyproject.toml names (put them in a room): {missing}"


def _copy(tmp_path: Path) -> Path:
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for package in ("gatedmodels", *CHECKED):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_a_loose_module_or_an_unnamed_room_is_named(tmp_path):
    root = _copy(tmp_path)
    assert uncovered(root) == []
    (root / "orchestrator" / "loose.py").write_text('"""A module in no room."""\n')
    (root / "orchestrator" / "attic").mkdir()
    (root / "orchestrator" / "attic" / "__init__.py").write_text('"""A room no layer names."""\n')
    (root / "orchestrator" / "attic" / "box.py").write_text("")
    (root / "orchestrator" / "core" / "words.py").write_text("")  # inside a named room: covered
    assert uncovered(root) == ["orchestrator.attic", "orchestrator.attic.box", "orchestrator.loose"]


def test_the_root_package_imports_nothing_but_the_runtime():
    """`orchestrator/__init__.py` is no room; it may set the process's policy, nothing more."""
    import ast

    tree = ast.parse((ROOT / "orchestrator" / "__init__.py").read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert all(m.lstrip(".").startswith("runtime") or m.startswith("orchestrator.runtime") for m in imported), imported


def test_the_architecture_page_shows_a_new_room_and_layer(tmp_path):
    root = _copy(tmp_path)
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert arch.rewrite(page, root) == page  # the committed page is current
    (root / "orchestrator" / "attic").mkdir()
    (root / "orchestrator" / "attic" / "__init__.py").write_text('"""Old things kept. Nothing else."""\n')
    (root / "orchestrator" / "attic" / "box.py").write_text("")
    text = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(text.replace('"orchestrator.data",\n', '"orchestrator.data",\n    "orchestrator.attic",\n', 1))
    new = arch.rewrite(page, root)
    assert new != page
    assert "  attic/                Old things kept.\n" + " " * arch.INDENT + "· box\n" in new
    assert "orchestrator.data\norchestrator.attic\n" in new


def test_a_room_without_a_docstring_or_a_page_without_markers_is_refused(tmp_path):
    root = _copy(tmp_path)
    (root / "orchestrator" / "core" / "__init__.py").write_text("")
    with pytest.raises(arch.ArchitectureError, match=r"orchestrator/core/__init__.py: no docstring"):
        arch.rewrite((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), root)
    with pytest.raises(arch.ArchitectureError, match="markers of the generated tree"):
        arch.rewrite("# Architecture\n", ROOT)


def import_circles(*packages: str) -> list[list[str]]:
    """Every circle of run-time imports between the modules of `packages` (function-local imports
    included, `if TYPE_CHECKING:` ones not), as the modules of each strongly connected component."""
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return out


def test_no_module_imports_itself_round_a_circle():
    """A circle hidden behind a function-local import (issue 34 found outcome <-> runs, trainer <->
    callbacks.base, location <-> remote) makes the import order matter and the rooms one room."""
    circles = import_circles("orchestrator", "dashboards", "gatedmodels")
    assert not circles, "import circles (move the shared piece where both can import it):\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_finds_a_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circ import b, c\n")
    (pkg / "b.py").write_text("def f():\n    from circ import a  # a function-local import closes it\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circ import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles("circ") == [["circ.a", "circ.b"]]  # not c: its import of a is for type checking only

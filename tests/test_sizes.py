"""The size limits of the project's code (docs/contributing.md): in `orchestrator/` and
`dashboards/` no module over 400 lines, no class over 150, no function over 80 (a function's or
class's size: from its `def`/`class` line to its last line, docstring included).

Code over a limit today is listed in ALLOWED with its present size: it may shrink, not grow, and
a new offender fails. Remove an entry when its code is split (a stale entry fails too)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "dashboards")
MAX_MODULE, MAX_CLASS, MAX_FUNCTION = 400, 150, 80

ALLOWED: dict[str, int] = {
    # Over a limit when the limits were set (issue 34): each may shrink, not grow. The module,
    # and "module:Class" or "module:function" (a method: "module:Class.method"), with its size.
}


def _sizes(path: Path, rel: str) -> dict[str, tuple[int, int]]:
    """name -> (size, limit) of the module and of every class and function in it."""
    text = path.read_text(encoding="utf-8")
    out = {rel: (len(text.splitlines()), MAX_MODULE)}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                size = (child.end_lineno or child.lineno) - child.lineno + 1
                limit = MAX_CLASS if isinstance(child, ast.ClassDef) else MAX_FUNCTION
                out.setdefault(f"{rel}:{name}", (size, limit))
                walk(child, name)
            else:
                walk(child, prefix)

    walk(ast.parse(text, filename=str(path)), "")
    return out


def measure(root: Path = ROOT) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found.update(_sizes(path, path.relative_to(root).as_posix()))
    return found


def offenders(found: dict[str, tuple[int, int]], allowed: dict[str, int]) -> list[str]:
    """Every name over its limit and not allowed, or allowed and grown past its listed size."""
    out = []
    for name, (size, limit) in sorted(found.items()):
        if size > limit and size > allowed.get(name, limit):
            grown = f" (allowed {allowed[name]})" if name in allowed else ""
            out.append(f"{name}: {size} lines, limit {limit}{grown}")
    return out


def test_no_code_over_the_size_limits():
    bad = offenders(measure(), ALLOWED)
    assert not bad, "over the size limits (split it; see docs/contributing.md):\n" + "\n".join(bad)


def test_the_allow_list_is_not_stale():
    """An allowed entry that is gone or back under its limit must be removed (so it cannot grow back)."""
    found = measure()
    stale = [name for name in ALLOWED if name not in found or found[name][0] <= found[name][1]]
    assert not stale, "remove from ALLOWED (gone or within the limit now): " + ", ".join(stale)


def test_the_check_finds_offenders(tmp_path):
    """The measurement on a made-up package: a long function, a long method, a long module."""
    pkg = tmp_path / "orchestrator"
    pkg.mkdir()
    (tmp_path / "dashboards").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (pkg / "long.py").write_text(f"def f():\n{body}\n\n\nclass C:\n    def g(self):\n{body.replace('    ', '        ')}\n")
    (pkg / "big.py").write_text("x = 1\n" * 401)
    (pkg / "ok.py").write_text("def h():\n    return 1\n")
    found = measure(tmp_path)
    assert offenders(found, {}) == [
        "orchestrator/big.py: 401 lines, limit 400",
        "orchestrator/long.py:C.g: 86 lines, limit 80",
        "orchestrator/long.py:f: 86 lines, limit 80",
    ]
    assert offenders(found, {"orchestrator/long.py:f": 86, "orchestrator/long.py:C.g": 85, "orchestrator/big.py": 401}) == [
        "orchestrator/long.py:C.g: 86 lines, limit 80 (allowed 85)"
    ]

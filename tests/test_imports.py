"""Imports in sight (issue 34; docs/contributing.md): the project's own imports sit at module top,
and the CLI starts without the heavy packages.

1. The start-up guard: `gatesweep --help`, every command's parser and `gatesweep validate` on the shipped files, in a
   fresh interpreter, import none of the heavy third-party packages (and `--help` not even
   numpy). Deterministic: what is in `sys.modules`, never a timing.
2. Every function-local import of the project's own packages (orchestrator, dashboards,
   gatedmodels, relative imports) says why it is lazy: a `# lazy: <reason>` comment on its line
   or on the line above (e.g. `# lazy: imports torch`). `orchestrator/cli/` has no unmarked one;
   elsewhere the modules that had some when the check came are listed in ALLOWED with their count,
   which may shrink, not grow (an entry whose module has none left is stale and fails).
"""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OWN = ("orchestrator", "dashboards", "gatedmodels")
HEAVY = ("torch", "ray", "mlflow", "deepspeed", "transformers", "datasets", "lm_eval", "optuna", "scipy", "matplotlib")
"""Packages whose import costs seconds: no CLI start-up path may load them."""
HELP_HEAVY = (*HEAVY, "numpy")
"""`gatesweep --help` reads the command table and imports no command's module: not even numpy
(the tokenizers', which `validate` and the data commands load)."""
STRICT = ("orchestrator/cli",)
"""Folders where every function-local import of the project must be marked."""

ALLOWED: dict[str, int] = {
    # Unmarked function-local imports of the project's own modules when the check came (issue 34),
    # outside orchestrator/cli: each count may shrink, not grow. Move the import to the module's
    # top, or mark it `# lazy: <reason>` when it would load a heavy package, and lower the count.
}

_PROBE = r"""
import contextlib, io, json, sys
import orchestrator.cli.main  # noqa: F401
main = sys.modules["orchestrator.cli.main"]
heavy_help, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
seen = {}
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main.main(["--help"])
    except SystemExit as stop:
        assert stop.code == 0, stop.code
assert "validate" in out.getvalue(), out.getvalue()
seen["help"] = sorted(m for m in heavy_help if m in sys.modules)
seen["help_cli"] = sorted(m for m in sys.modules if m.startswith("orchestrator.cli."))
main.build_parser().format_help()  # every command's parser: every CLI module imported
seen["parsers"] = sorted(m for m in heavy if m in sys.modules)
said = io.StringIO()
with contextlib.redirect_stdout(said):
    seen["code"] = main.main(["validate", *sys.argv[3:]])
seen["validate"] = sorted(m for m in heavy if m in sys.modules)
seen["out"] = said.getvalue()
print(json.dumps(seen))
"""


def shipped_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in [*(ROOT / "sweeps").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml")])


def startup_imports(files: list[str], heavy_help=HELP_HEAVY, heavy=HEAVY) -> dict:
    """In a fresh interpreter, in-process: `gatesweep --help`, then every command's parser, then
    `gatesweep validate FILES`; the packages of `heavy_help` loaded after the help and after the
    parsers, of `heavy` after the validation, and the CLI's modules the help loaded."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(heavy_help)), json.dumps(list(heavy)), *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_help_and_validate_load_no_heavy_package():
    files = shipped_files()
    assert len(files) >= 10 and "sweeps/hello.yaml" in files
    seen = startup_imports(files)
    assert seen["code"] == 0, seen["out"]  # every shipped file is valid: the whole path ran
    assert seen["out"].count(": valid ") == len(files), seen["out"]
    assert seen["help"] == [], f"`gatesweep --help` imported {seen['help']}: import it lazily (`# lazy: imports ...`)"
    assert seen["help_cli"] == ["orchestrator.cli.commands", "orchestrator.cli.main"], seen["help_cli"]  # no command's module
    assert seen["parsers"] == [], f"importing the CLI's modules imported {seen['parsers']}: import it lazily (`# lazy: imports ...`)"
    assert seen["validate"] == [], f"`gatesweep validate` imported {seen['validate']}: import it lazily (`# lazy: imports ...`)"


def test_the_startup_guard_sees_a_loaded_package():
    """The probe itself: `--help` does load argparse, the CLI's modules yaml and the tokenizers'
    numpy, so listing them as heavy must report them; a guard that cannot fail would pass the test
    above anyway."""
    seen = startup_imports(["sweeps/hello.yaml"], heavy_help=("argparse",), heavy=("yaml", "numpy"))
    assert seen["help"] == ["argparse"] and seen["parsers"] == ["numpy", "yaml"] and seen["validate"] == ["numpy", "yaml"], seen


# ---- function-local imports of the project's own modules -------------------------------------


def _comments(text: str) -> dict[int, str]:
    """Line number -> the comment on that line (tokenize: a `#` inside a string is no comment)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _is_own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in OWN
    return any(alias.name.split(".")[0] in OWN for alias in node.names)


def _marked(node: ast.stmt, comments: dict[int, str], lines: list[str]) -> bool:
    """A `# lazy: <reason>` on a line of the statement, or alone on the line above it."""

    def says(comment: str | None) -> bool:
        return bool(comment) and comment.lstrip("#").strip().startswith("lazy:") and len(comment.split("lazy:", 1)[1].strip()) > 0

    end = node.end_lineno or node.lineno
    if any(says(comments.get(n)) for n in range(node.lineno, end + 1)):
        return True
    above = node.lineno - 1
    return above >= 1 and lines[above - 1].strip().startswith("#") and says(comments.get(above))


def unmarked_local_imports(text: str, filename: str = "<text>") -> list[int]:
    """Line numbers of the function-local imports of the project's own modules without a `# lazy:` reason."""
    tree = ast.parse(text, filename=filename)
    comments, lines = _comments(text), text.splitlines()
    found = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)) and _is_own(child) and not _marked(child, comments, lines):
                found.append(child.lineno)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return sorted(found)


def measure(root: Path = ROOT) -> dict[str, list[int]]:
    """Module path -> the lines of its unmarked function-local imports of the project (modules with some)."""
    out = {}
    for package in OWN:
        for path in sorted((root / package).rglob("*.py")):
            lines = unmarked_local_imports(path.read_text(encoding="utf-8"), str(path))
            if lines:
                out[path.relative_to(root).as_posix()] = lines
    return out


def offenders(found: dict[str, list[int]], allowed: dict[str, int]) -> list[str]:
    """Modules with more unmarked local imports than allowed (none allowed under STRICT)."""
    out = []
    for module, lines in sorted(found.items()):
        limit = 0 if module.startswith(tuple(f"{s}/" for s in STRICT)) else allowed.get(module, 0)
        if len(lines) > limit:
            grown = f" (allowed {limit})" if limit else ""
            out.append(f"{module}: {len(lines)} unmarked{grown}, lines {', '.join(map(str, lines))}")
    return out


@cache
def _found() -> dict[str, list[int]]:
    return measure()


def test_function_local_imports_of_the_project_say_why():
    bad = offenders(_found(), ALLOWED)
    assert not bad, (
        "function-local imports of the project's own modules: move them to the module's top, or mark one that "
        "would load a heavy package with `# lazy: <reason>` (e.g. `# lazy: imports torch`):\n" + "\n".join(bad)
    )


def test_the_allow_list_is_not_stale():
    """An entry whose module has no unmarked local import left (or is gone) must be removed, so it cannot grow back;
    orchestrator/cli is never listed."""
    found = _found()
    stale = [m for m in ALLOWED if m not in found or m.startswith(tuple(f"{s}/" for s in STRICT))]
    assert not stale, "remove from ALLOWED (no unmarked local imports left, or under orchestrator/cli): " + ", ".join(stale)


@pytest.mark.parametrize(
    "source, lines",
    [
        ("def f():\n    from orchestrator.x import y\n", [2]),
        ("def f():\n    from . import y\n", [2]),
        ("def f():\n    import gatedmodels.model\n", [2]),
        ("class C:\n    def m(self):\n        if True:\n            from dashboards.x import y\n", [4]),
        ("def f():\n    def g():\n        from ..x import (\n            y,\n        )\n", [3]),
        ("async def f():\n    from orchestrator import x\n", [2]),
        ("def f():\n    from orchestrator.x import y  # lazy: imports torch\n", []),
        ("def f():\n    # lazy: imports torch\n    from orchestrator.x import y\n", []),
        ("def f():\n    from orchestrator.x import (  # lazy: imports torch\n        y,\n    )\n", []),
        ("def f():\n    from orchestrator.x import y  # lazy:\n", [2]),  # a reason is required
        ("def f():\n    from orchestrator.x import y  # not lazy: whatever\n", [2]),
        ("def f():\n    x = '# lazy: imports torch'\n    from orchestrator.x import y\n", [3]),  # a string is no comment
        ("def f():\n    import torch\n    from numpy import x\n    import orchestrator_extra\n", []),  # not the project's
        ("from orchestrator.x import y\nif y:\n    from . import z\n", []),  # module level
    ],
)
def test_the_check_finds_unmarked_local_imports(source, lines):
    assert unmarked_local_imports(source) == lines


def test_the_counts_and_the_strict_folder(tmp_path):
    """On a made-up tree: a strict module fails with one, another module only above its allowance."""
    for package in OWN:
        (tmp_path / package).mkdir()
    (tmp_path / "orchestrator" / "cli").mkdir()
    (tmp_path / "orchestrator" / "cli" / "x.py").write_text("def f():\n    from ..y import z\n")
    (tmp_path / "orchestrator" / "y.py").write_text("def f():\n    from . import a\n    from . import b  # lazy: imports torch\n")
    (tmp_path / "dashboards" / "z.py").write_text("def f():\n    from . import a\n\n\ndef g():\n    from . import b\n")
    found = measure(tmp_path)
    assert found == {"dashboards/z.py": [2, 6], "orchestrator/cli/x.py": [2], "orchestrator/y.py": [2]}
    assert offenders(found, {"orchestrator/cli/x.py": 5, "orchestrator/y.py": 1, "dashboards/z.py": 1}) == [
        "dashboards/z.py: 2 unmarked (allowed 1), lines 2, 6",
        "orchestrator/cli/x.py: 1 unmarked, lines 2",
    ]

"""Shared CLI helpers: safe YAML loading with clear errors, user errors, small tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from gatedmodels.configbase import ConfigError, Issue


class UserError(Exception):
    """A mistake of the user's (bad file, bad flag): printed as one message, exit status 2."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader (no Python object tags) that also rejects duplicate keys."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml(path: str | Path) -> dict:
    """A YAML mapping from a file; UserError naming the file (and line) for anything wrong."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{path}: no such file")
    if p.is_dir():
        raise UserError(f"{path}: is a folder, expected a YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot be read ({err})") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        if "could not determine a constructor" in str(err):
            problem = f"{problem} (YAML tags that construct objects are not allowed)"
        raise UserError(f"{path}:{where} invalid YAML: {problem}") from None
    if data is None:
        raise UserError(f"{path}: the file is empty")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def writable_dir(path: str | Path, flag: str) -> Path:
    """`path` as an absolute folder that exists and takes files, or UserError naming the flag."""
    import os
    import tempfile

    p = Path(path).expanduser().resolve()
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-test-"):
            pass
    except OSError as err:
        raise UserError(f"{flag}: {p} is not a writable folder ({err.strerror or err})") from None
    return p


def config_error(err: ConfigError, source: str | Path) -> UserError:
    return UserError(err.with_source(str(source)).render())


def print_table(rows: list[dict], columns: list[str] | None = None, file=None) -> None:
    file = file or sys.stdout
    if not rows:
        return
    columns = columns or list(rows[0])
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)), file=file)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


__all__ = ["ConfigError", "Issue", "UserError", "config_error", "load_yaml", "print_table"]

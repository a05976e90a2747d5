"""Reading the user's files: YAML loaded safely (no object-constructing tags, no duplicate keys),
and `UserError`, the one exception type for a user's mistake (the CLI prints it, exit status 2)."""

from __future__ import annotations

from pathlib import Path

import yaml


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

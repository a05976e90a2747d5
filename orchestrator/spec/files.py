"""Reading the user's files: YAML loaded safely and within bounds (a file that cannot be read or
loaded raises `UserError`, `orchestrator.core.errors`).

The loader is PyYAML's SafeLoader (no object-constructing tags) with these limits, so that no
file, however hostile, ends in a traceback, a MemoryError or a hang:

- a regular file of at most `MAX_BYTES` (not a folder, a device or a pipe), UTF-8 text without
  NUL bytes (a binary file is refused as such);
- no duplicate keys, and only hashable (scalar) keys;
- at most `MAX_DEPTH` levels of nested mappings and lists, and at most `MAX_NODES` values once
  aliases are expanded: an alias bomb ("billion laughs") is refused before it is built, a
  recursive alias too;
- one document per file.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from orchestrator.core.errors import UserError

MAX_BYTES = 1024 * 1024
"""Largest YAML file read (sweep files are a few kilobytes)."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and lists (a sweep file needs about 6)."""
MAX_NODES = 1_000_000
"""Most values in a file, counted with every alias expanded."""


class _Refused(yaml.YAMLError):
    """A limit of the loader was exceeded (reported like any invalid YAML, with its line)."""

    def __init__(self, problem: str, mark: yaml.Mark | None = None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader (no Python object tags) that rejects duplicate keys and bounds nesting depth."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # the composer recurses once per nesting level: bound it before Python's stack is
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`, merged by construct_mapping
            continue
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value, not a list or a mapping", key_node.start_mark)
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_graph(root: yaml.Node) -> None:
    """Raise _Refused if the node graph, aliases expanded, is deeper than MAX_DEPTH, holds more
    than MAX_NODES values, or refers to itself. Each distinct node is visited once (its expanded
    size is memoised), so an alias bomb is measured without being built."""
    size: dict[int, int] = {}
    on_path: set[int] = set()

    def visit(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in size:
            return size[key]
        if key in on_path:
            raise _Refused("an alias refers to a value that contains it (a recursive structure)", node.start_mark)
        if depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels (aliases expanded)", node.start_mark)
        on_path.add(key)
        total = 1
        for child in _children(node):
            total += visit(child, depth + 1)
            if total > MAX_NODES:
                raise _Refused(f"more than {MAX_NODES:,} values once its aliases are expanded (an alias bomb?)", node.start_mark)
        on_path.discard(key)
        size[key] = total
        return total

    visit(root, 1)


def read_text(path: str | Path, *, what: str = "YAML file", max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`; UserError naming the file otherwise."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: cannot be read ({getattr(err, 'strerror', None) or err})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path}: is a folder, expected a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{path}: is not a regular file (a device, pipe or socket), expected a {what}")
    if st.st_size > max_bytes:
        raise UserError(f"{path}: {st.st_size:,} bytes; allowed: at most {max_bytes:,} bytes for a {what}")
    try:
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as err:
        raise UserError(f"{path}: cannot be read ({err.strerror or err})") from None
    if len(raw) > max_bytes:
        raise UserError(f"{path}: more than {max_bytes:,} bytes; allowed: at most {max_bytes:,} bytes for a {what}")
    if b"\x00" in raw:
        raise UserError(f"{path}: contains NUL bytes (a binary file?), expected a {what} (UTF-8 text)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}), expected a {what}") from None


def parse_yaml(text: str) -> Any:
    """The value of one YAML document (None when empty); yaml.YAMLError for anything wrong."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        check_graph(root)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> dict:
    """A YAML mapping from a file; UserError naming the file (and line) for anything wrong."""
    text = read_text(path)
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        if context and context.startswith("expected"):  # e.g. "expected a single document in the stream"
            problem = f"{context}, {problem}"
        if "could not determine a constructor" in str(err):
            problem = f"{problem} (YAML tags that construct objects are not allowed)"
        raise UserError(f"{path}:{where} invalid YAML: {problem}") from None
    except (ValueError, OverflowError) as err:  # e.g. an integer of more than 4,300 digits
        raise UserError(f"{path}: invalid YAML: {str(err).splitlines()[0]}") from None
    except RecursionError:  # not reachable within MAX_DEPTH; kept so no file ends in a traceback
        raise UserError(f"{path}: invalid YAML: nested too deeply") from None
    if data is None:
        raise UserError(f"{path}: the file is empty")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data

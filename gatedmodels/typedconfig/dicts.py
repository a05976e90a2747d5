"""Plain nested-dict helpers shared by the configs and the sweep spec: dotted keys (`flatten_dict`,
`set_dotted`, `get_dotted`), `deep_merge` of mappings, and the deep copy behind `Config.to_dict`."""

from __future__ import annotations

from typing import Any

from .errors import ConfigError, Issue, show


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def flatten_dict(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = _join(prefix, str(key))
        if isinstance(value, dict) and value:
            out.update(flatten_dict(value, name))
        else:
            out[name] = value
    return out


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, creating intermediate mappings."""
    *parents, last = dotted.split(".")
    node = data
    for i, key in enumerate(parents):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        elif not isinstance(child, dict):
            raise ConfigError([Issue(".".join(parents[: i + 1]), f"is {show(child)}, not a mapping, so {dotted!r} cannot be set")])
        node = child
    node[last] = value


def get_dotted(data: dict, dotted: str, default: Any = None) -> Any:
    node: Any = data
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def deep_merge(base: dict, over: dict) -> dict:
    """Recursively merge `over` into a copy of `base` (mappings merge, everything else replaces)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out

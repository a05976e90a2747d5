"""Typed dataclass configs that round-trip through plain dicts, with strict loading.

Every config in the project (model, gate, trial, sweep) derives from `Config`. One mechanism
gives all of them:

- `from_dict(data)`: strict loading. Unknown keys, wrong types and invalid values are all
  collected and raised together as one `ConfigError`, each issue naming the dotted path, what
  was given and what is allowed.
- construction (`GateConfig(position="G9")`) checks the same things, so a config object that
  exists is valid; cross-field rules live in `problems()`.
- `to_dict()` / `flatten()` for YAML files and MLflow params (dotted keys).
- `field_docs()`: the docstring written under each field, used for JSON Schema and help text.

Torch-free on purpose: the orchestrator validates sweep files without importing torch.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin


@dataclass(frozen=True)
class Issue:
    """One problem found in a config: where it is and what is wrong."""

    path: str
    message: str

    def prefixed(self, prefix: str) -> "Issue":
        if not prefix:
            return self
        return Issue(f"{prefix}.{self.path}" if self.path else prefix, self.message)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """Raised for invalid user configuration. Holds every issue found, not only the first."""

    def __init__(self, issues: list[Issue], source: str | None = None):
        self.issues = list(issues)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.source}: " if self.source else ""
        if len(self.issues) == 1:
            return f"{head}{self.issues[0]}"
        lines = [f"{head}{len(self.issues)} problems"]
        lines += [f"  - {issue}" for issue in self.issues]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def with_prefix(self, prefix: str) -> "ConfigError":
        return ConfigError([i.prefixed(prefix) for i in self.issues], self.source)

    def with_source(self, source: str) -> "ConfigError":
        return ConfigError(self.issues, source)


def show(value: Any) -> str:
    """A short, YAML-like rendering of a user value for error messages."""
    if isinstance(value, str):
        return repr(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = get_args(tp)
        return f"a list of {_type_name(args[0])}" if args else "a list"
    if origin is dict:
        return "a mapping"
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, Config):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


_MISSING = object()


def coerce(tp: Any, value: Any, path: str, issues: list[Issue]) -> Any:
    """Check `value` against the annotation `tp`; return the (lightly coerced) value.

    Coercions are the ones YAML makes necessary: an int where a float is expected, a string
    such as "1e-3" (YAML 1.1 reads exponents without a dot as strings) where a float is
    expected, and a list where a tuple is expected. Anything else that does not match is an
    issue, appended to `issues`; the return value is then meaningless.
    """
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = get_args(tp)
        if value in allowed and type(value) is type(allowed[allowed.index(value)]):
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        issues.append(Issue(path, f"got {show(value)}; allowed: {', '.join(map(str, allowed))}{hint}"))
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        real = [a for a in args if a is not type(None)]
        if len(real) == 1:  # Optional[X]: X's own, precise message
            return coerce(real[0], value, path, issues)
        for arg in args:
            if arg is type(None):
                continue
            trial: list[Issue] = []
            out = coerce(arg, value, path, trial)
            if not trial:
                return out
        issues.append(Issue(path, f"got {show(value)}; expected {_type_name(tp)}"))
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            issues.append(Issue(path, f"got {show(value)}; expected {_type_name(tp)}"))
            return value
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [coerce(item_tp, v, f"{path}[{i}]", issues) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            issues.append(Issue(path, f"got {show(value)}; expected a mapping"))
            return value
        key_tp, val_tp = get_args(tp) or (Any, Any)
        return {k: coerce(val_tp, v, f"{path}.{k}", issues) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Config):
        if isinstance(value, tp):
            return value
        try:
            return tp.from_dict(value, path=path)
        except ConfigError as err:
            issues.extend(err.issues)
            return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(value, tp):
        return value
    issues.append(Issue(path, f"got {show(value)}; expected {_type_name(tp)}"))
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@dataclass(kw_only=True, frozen=True)
class Config:
    """Base of every typed config. Subclasses are `@dataclass(kw_only=True)`."""

    def __post_init__(self) -> None:
        issues: list[Issue] = []
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out = coerce(hints[f.name], value, f.name, issues)
            if out is not value:
                object.__setattr__(self, f.name, out)
        if not issues:
            issues = self.problems()
        if issues:
            raise ConfigError(issues)

    def problems(self) -> list[Issue]:
        """Cross-field rules. Override; return issues with paths relative to this config."""
        return []

    # ---- dicts -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, *, path: str = "") -> "Config":
        """Strictly build from a plain dict; raise ConfigError listing every problem."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ConfigError([Issue(path, f"got {show(data)}; expected a mapping")])
        data = cls.prepare(dict(data), path)
        names = [f.name for f in dataclasses.fields(cls)]
        issues: list[Issue] = []
        for key in data:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                allowed = ", ".join(names)
                issues.append(Issue(_join(path, str(key)), f"unknown key{hint}; allowed: {allowed}"))
        for f in dataclasses.fields(cls):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in data:
                issues.append(Issue(_join(path, f.name), "is required"))
        hints = _hints(cls)
        kwargs, failed = {}, set()
        for name in names:
            if name in data:
                before = len(issues)
                kwargs[name] = coerce(hints[name], data[name], _join(path, name), issues)
                if len(issues) > before:
                    failed.add(name)
        if issues:
            # report the cross-field problems of the valid part too: all problems at once
            try:
                cls(**{k: v for k, v in kwargs.items() if k not in failed})
            except ConfigError as err:
                issues += [i.prefixed(path) for i in err.issues if i.path.split(".")[0].split("[")[0] not in failed]
            except TypeError:  # a required field is among the failed ones
                pass
            raise ConfigError(issues)
        try:
            return cls(**kwargs)
        except ConfigError as err:
            raise err.with_prefix(path) from None

    @classmethod
    def prepare(cls, data: dict, path: str) -> dict:
        """Hook to rewrite raw input before strict loading (e.g. expand a preset name)."""
        return data

    def to_dict(self) -> dict:
        """Plain nested dict of builtins (lists, not tuples), loadable by `from_dict`.
        Configs are frozen, so the conversion is computed once; callers get their own copy."""
        return _copy(self.plain_view())

    def plain_view(self) -> dict:
        """`to_dict()` without the copy: shared, read-only (for hashing, flattening, dumping)."""
        cached = self.__dict__.get("_plain_cache")
        if cached is None:
            cached = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
            object.__setattr__(self, "_plain_cache", cached)
        return cached

    def flatten(self, prefix: str = "") -> dict[str, Any]:
        """Dotted keys to scalar values, for MLflow params and sweep axes."""
        if prefix:
            return flatten_dict(self.plain_view(), prefix)
        cached = self.__dict__.get("_flat_cache")
        if cached is None:
            cached = flatten_dict(self.plain_view())
            object.__setattr__(self, "_flat_cache", cached)
        return dict(cached)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_docs(cls) -> dict[str, str]:
        return _field_docs(cls)


def field_type(cls: type, name: str) -> Any:
    """The type of field `name` of a config class: a Config subclass, `dict`, or a leaf type."""
    tp = _hints(cls)[name]
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else tp
        origin = get_origin(tp)
    if origin is dict or tp is dict:
        return dict
    return tp


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Config):
        return value.plain_view()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
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


@functools.cache
def _field_docs(cls: type) -> dict[str, str]:
    """Docstrings written directly under dataclass fields (the litgpt / OLMo-core style)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is Config:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(getattr(nxt, "value", None), ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs

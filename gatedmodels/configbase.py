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
- bounds: every number must be finite, every integer field is bounded (by default to a signed
  64-bit integer; `LIMITS` narrows it, or bounds a float), every string is free of NUL characters
  and at most `MAX_STR` characters long, and every mapping key of a `dict[str, ...]` field is a
  string. One mechanism for all configs, so a value that would overflow, or fail much later in a
  library, is refused while loading, naming its field.

Torch-free on purpose: the orchestrator validates sweep files without importing torch.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import math
import re
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast, get_args, get_origin

INT64 = (-(2**63), 2**63 - 1)
"""Default bounds of an integer field (what numpy, torch and the stores hold)."""
MAX_STR = 8000
"""Longest string value (MLflow's limit for a tag value)."""
MAX_ISSUES = 100
"""Issues rendered by one ConfigError; the rest are counted."""
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
Limits = MappingProxyType[str, tuple[float | None, float | None]]
"""`Config.LIMITS`, read-only: field (or dotted path) -> inclusive (low, high), None for no bound."""
_C = TypeVar("_C", bound="Config")
_K = TypeVar("_K", bound=type)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Issue:
    """One problem found in a config: where it is and what is wrong."""

    path: str
    message: str

    def prefixed(self, prefix: str) -> Issue:
        if not prefix:
            return self
        return Issue(f"{prefix}.{self.path}" if self.path else prefix, self.message)

    def __str__(self) -> str:
        path = self.path if len(self.path) <= 200 else self.path[:197] + "..."
        message = self.message if len(self.message) <= 4000 else self.message[:3997] + "..."
        return f"{path}: {message}" if path else message


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
        lines += [f"  - {issue}" for issue in self.issues[:MAX_ISSUES]]
        if len(self.issues) > MAX_ISSUES:
            lines.append(f"  ... and {len(self.issues) - MAX_ISSUES} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def with_prefix(self, prefix: str) -> ConfigError:
        return ConfigError([i.prefixed(prefix) for i in self.issues], self.source)

    def with_source(self, source: str) -> ConfigError:
        return ConfigError(self.issues, source)


def show(value: Any) -> str:
    """A short, YAML-like rendering of a user value for error messages."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 200 else f"{value[:100]!r}... ({len(value):,} characters)"
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 20:  # repr of a huge value is slow
        return f"a {type(value).__name__} of {len(value):,} items"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _close_match(value: Any, names: list[str]) -> str:
    """` (did you mean 'x'?)` for a short string close to one of `names`, else ''."""
    if not isinstance(value, str) or len(value) > 100:
        return ""
    close = difflib.get_close_matches(value, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_range(low: float | None, high: float | None) -> str:
    """`2..1,048,576`, `>= 0` or `<= 64`, for messages."""

    def fmt(x: float) -> str:
        if isinstance(x, int) and x >= 2**31 and (x + 1) & x == 0:
            return f"2**{(x + 1).bit_length() - 1}-1"
        if isinstance(x, int) and x <= -(2**31) and (-x) & (-x - 1) == 0:
            return f"-2**{(-x).bit_length() - 1}"
        if isinstance(x, int):
            return f"{x:,}" if abs(x) >= 10_000 else str(x)
        return f"{x:g}"

    if low is not None and high is not None:
        return f"{fmt(low)}..{fmt(high)}"
    if low is not None:
        return f">= {fmt(low)}"
    assert high is not None, "a range has at least one bound"
    return f"<= {fmt(high)}"


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
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, getattr(tp, "__name__", str(tp)))


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
        _check_finite(value, path, issues)
        return value
    if origin is Literal:
        allowed = get_args(tp)
        if value in allowed and type(value) is type(allowed[allowed.index(value)]):
            return value
        hint = _close_match(value, [str(a) for a in allowed])
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
        for k in value:
            if key_tp is str and not isinstance(k, str):
                issues.append(Issue(path, f"has the key {show(k)} ({type(k).__name__}); keys must be strings (quote it)"))
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
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            issues.append(Issue(path, f"got {show(value)}; expected an integer (a float this large is not exact: write the digits)"))
            return value
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            issues.append(Issue(path, f"got {show(value)}; expected an integer (YAML reads {value.strip()} as a string: write the digits)"))
            return value
    elif tp is float:
        number = _number(value)
        if number is not None:
            if math.isfinite(number):
                return number
            issues.append(Issue(path, f"got {show(value)}; expected a finite number"))
            return value
    elif tp is str:
        if isinstance(value, str):
            if "\x00" in value:
                issues.append(Issue(path, f"got {show(value)}; a string may not contain NUL characters"))
            elif len(value) > MAX_STR:
                issues.append(Issue(path, f"got a string of {len(value):,} characters; allowed: at most {MAX_STR:,}"))
            return value
    elif isinstance(value, tp):
        return value
    issues.append(Issue(path, f"got {show(value)}; expected {_type_name(tp)}"))
    return value


def _number(value: Any) -> float | None:
    """`value` as a float: an int, a float, or a numeric string such as "1e-3" (YAML 1.1 reads
    exponents without a dot as strings); None for anything else (booleans included)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int beyond the float range
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    return None


def _check_finite(value: Any, path: str, issues: list[Issue]) -> None:
    """Refuse nan and +-inf anywhere inside a free-form value (lists and mappings included)."""
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            issues.append(Issue(where, f"got {show(node)}; expected a finite number"))
        elif isinstance(node, dict):
            stack += [(v, f"{where}.{k}") for k, v in node.items()]
        elif isinstance(node, (list, tuple)):
            stack += [(v, f"{where}[{i}]") for i, v in enumerate(node)]


def _per_class(fn: Callable[[_K], _T]) -> Callable[[_K], _T]:
    """`functools.cache` for a function of a class, typed by hand: mypy does not see that a
    `type[X]` is hashable (python/mypy#11470), so it refuses one as an argument of a cached function."""
    return functools.cache(fn)


@_per_class
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_int_type(tp: Any) -> bool:
    """int, int | None, or a list/tuple of int: the fields bounded by default."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_int_type(a) for a in get_args(tp) if a is not type(None))
    if origin in (list, tuple):
        return bool(get_args(tp)) and _is_int_type(get_args(tp)[0])
    return tp is int


@_per_class
def _limits(cls: type[Config]) -> dict[str, tuple[Any, Any]]:
    """Every bounded path of `cls`: its integer fields (INT64 by default) and its `LIMITS`."""
    out: dict[str, tuple[Any, Any]] = {}
    for f in dataclasses.fields(cls):
        if _is_int_type(_hints(cls)[f.name]):
            out[f.name] = INT64
    out.update(cls.LIMITS)
    return out


def _get_path(config: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        config = getattr(config, part, None)
    return config


@dataclass(kw_only=True, frozen=True)
class Config:
    """Base of every typed config. Subclasses are `@dataclass(kw_only=True)`."""

    # Inclusive numeric ranges: field (or dotted path into a sub-config) -> (low, high), None for
    # no bound; a list field bounds each item. Integer fields not listed are bounded to INT64.
    # Unannotated on purpose: a class attribute, not a dataclass field; read-only, shared by instances.
    LIMITS = Limits({})

    def __post_init__(self) -> None:
        issues: list[Issue] = []
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out = coerce(hints[f.name], value, f.name, issues)
            if out is not value:
                object.__setattr__(self, f.name, out)
        if not issues:
            issues = self.limit_problems()
            bounded = {i.path.split("[")[0] for i in issues}
            issues += [i for i in self.problems() if i.path.split("[")[0] not in bounded]
        if issues:
            raise ConfigError(issues)

    def limit_problems(self) -> list[Issue]:
        """Values outside their field's range (`LIMITS`, INT64 for other integer fields)."""
        out = []
        for path, (low, high) in _limits(type(self)).items():
            value = _get_path(self, path)
            items = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
            for i, v in items:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                if (low is not None and v < low) or (high is not None and v > high):
                    where = path if i is None else f"{path}[{i}]"
                    out.append(Issue(where, f"got {show(v)}; allowed: {describe_range(low, high)}"))
        return out

    def problems(self) -> list[Issue]:
        """Cross-field rules. Override; return issues with paths relative to this config."""
        return []

    # ---- dicts -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls: type[_C], data: Any, *, path: str = "") -> _C:
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
                hint = _close_match(key, names)
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

    def replace(self: _C, **changes: Any) -> _C:
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


@_per_class
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
        body = cast(ast.ClassDef, ast.parse(source).body[0]).body  # the source of a class is its class statement
        for node, nxt in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs

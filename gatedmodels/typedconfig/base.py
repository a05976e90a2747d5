"""The `Config` base: typed dataclass configs that round-trip through plain dicts, with strict loading.

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

The value checks live in `coercion`, the issues and their messages in `errors`, the dict
helpers in `dicts`, the reading of field docstrings in `fielddocs`.
Torch-free on purpose: the orchestrator validates sweep files without importing torch.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar, get_args, get_origin

from .coercion import coerce
from .dicts import _copy, _join, flatten_dict
from .errors import ConfigError, Issue, describe_range, did_you_mean, show
from .fielddocs import docs_under_fields

INT64 = (-(2**63), 2**63 - 1)
"""Default bounds of an integer field (what numpy, torch and the stores hold)."""
Limits = MappingProxyType[str, tuple[float | None, float | None]]
"""`Config.LIMITS`, read-only: field (or dotted path) -> inclusive (low, high), None for no bound."""
_C = TypeVar("_C", bound="Config")
_K = TypeVar("_K", bound=type)
_T = TypeVar("_T")


def _per_class(fn: Callable[[_K], _T]) -> Callable[[_K], _T]:
    """`functools.cache` for a function of a class, typed by hand: mypy does not see that a
    `type[X]` is hashable (python/mypy#11470), so it refuses one as an argument of a cached function."""
    return functools.cache(fn)


@_per_class
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a config class (cached per class)."""
    return _hints(cls)


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
                hint = did_you_mean(key, names)
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


def _plain(value: Any) -> Any:
    if isinstance(value, Config):
        return value.plain_view()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@_per_class
def _field_docs(cls: type) -> dict[str, str]:
    """Docstrings written directly under dataclass fields (the litgpt / OLMo-core style), bases first."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and klass is not Config:
            docs.update(docs_under_fields(klass))
    return docs

"""Value coercion: `coerce` checks one user value against a field's annotation (Literal, unions,
lists and tuples, `dict[str, ...]`, nested `Config`s, bool/int/float/str) and applies the few
coercions YAML makes necessary, appending an `Issue` for anything that does not match. Numbers
must be finite and strings free of NUL characters and at most `MAX_STR` characters long; the
ranges of numeric fields are checked afterwards, by `Config.limit_problems`."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Any, Literal, get_args, get_origin

from .errors import ConfigError, Issue, did_you_mean, show

MAX_STR = 8000
"""Longest string value (MLflow's limit for a tag value)."""
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _is_config(tp: Any) -> bool:
    """A nested config: a dataclass with a `from_dict` classmethod (`base.Config` and its
    subclasses). Checked by shape, so this module does not import `base`, which imports it."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and callable(getattr(tp, "from_dict", None))


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
    if _is_config(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, getattr(tp, "__name__", str(tp)))


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
        hint = did_you_mean(value, [str(a) for a in allowed])
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
    if _is_config(tp):
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

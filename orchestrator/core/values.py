"""One value in two spellings: `same_value`, the one rule by which a value as a user writes it (a
sweep file's YAML, a `--baseline AXIS=VALUE` flag, a notebook) is compared with the value a run
recorded (a resolved config value, or its text in an MLflow tag or param).

Callers: `orchestrator.spec.axes` (a sweep file's keys select trials), `orchestrator.ladder.runs`
(the ladder's baseline arm) and `dashboards` (the file's order of levels, `--baseline`)."""

from __future__ import annotations

import math
from typing import Any

NULLS = frozenset({"None", "none", "null"})
"""The texts of no value: Python's `str(None)`, the gate's and a flag's `none`, YAML's `null`."""
BOOLS = {"true": "True", "false": "False"}
"""The texts of a boolean in any case, as Python writes them."""


def same_value(recorded: Any, wanted: Any) -> bool:
    """Whether `recorded` (a config value or its text in a tag or param) is `wanted` (a value from a
    file, a flag or a notebook). Symmetric; the rule, case by case:

    - **no value**: None and the texts `None`, `none`, `null` are one value (a config's None is
      logged as `None`, written `null` in YAML and `none` on a command line); it equals nothing else
      (`None` is not `0`, not `""`, not `False`).
    - **booleans**: True and the texts `true`, `True`, `TRUE` (any case) are one value, as are False
      and `false`; a boolean is not a number (`True` is not `1`).
    - **numbers** by value: `0.01` is `1.0e-2` and `"1e-2"`, `3` is `"3.0"` (finite numbers within a
      relative 1e-12, the round trip of a float through text); `inf` is `"Infinity"`, `-inf` only
      `-inf` (a number beyond a float's range is inf); NaN is NaN (a recorded `nan` is the file's `.nan`), though it equals no number.
    - **anything else as text**, surrounding whitespace ignored, case kept: `G1` is not `g1`.
    """
    a, b = _canonical(recorded), _canonical(wanted)
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or (math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=1e-12))
    return type(a) is type(b) and a == b


def _canonical(x: Any) -> float | bool | str | None:
    """None, a boolean, a float, or the stripped text of `x`."""
    if x is None or isinstance(x, bool):
        return x
    if isinstance(x, float):
        return x
    text = str(x).strip()
    if text in NULLS:
        return None
    if text.lower() in BOOLS:
        return text.lower() == "true"
    try:
        return float(text)  # an int's text too: one beyond a float's range is inf, not an OverflowError
    except ValueError:
        return text

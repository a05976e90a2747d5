"""The order of each axis' levels, for the rows, the main effects, the interactions and the plots:
the sweep's own order, not the alphabet.

- A **model size** (`model.size`) goes by its parameter count (the trials' `model.num_params`
  param): `tiny` before `small`, whatever the file says.
- An axis the sweep file lists (`grid`, a `zip` group, an Optuna `choice`) takes the file's order
  of values. The file is the one the launch logged on its parent run (`SweepRuns.sweep_file`).
- The gate axis (`model.gate`, a label made of several fields) takes the order of the fields the
  file varies: `none, G1, G2` x `elementwise, headwise` gives none, G1-elementwise, G1-headwise,
  G2-elementwise.
- Anything else (no file logged, a value the file does not have): the baseline's value first
  (gate `none`, attention `softmax`), numbers by value, then text in alphabetical order
  (`stats.sort_value`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from orchestrator.core.values import same_value

from .records import BASELINE_AXES, GATE_AXIS, RunRecord, SweepRuns

SIZE_AXIS = "model.size"
SIZE_PARAM = "model.num_params"
BASELINE_VALUES = frozenset(BASELINE_AXES.values())


def sort_value(v: str) -> tuple:
    """The fallback order of axis values: the baseline's (gate `none`, attention `softmax`)
    first, numbers numerically, then text."""
    if v in BASELINE_VALUES:
        return (0, 0.0, "")
    try:
        return (1, float(v), "")
    except ValueError:
        return (2, 0.0, v)


def file_values(doc: Any) -> dict[str, list[Any]]:
    """Dotted path -> the values a sweep file lists for it, in its order: `grid`, then the `zip`
    groups, then the `choice` dimensions of `search.space` (a malformed part is skipped)."""
    out: dict[str, list[Any]] = {}
    if not isinstance(doc, dict):
        return out
    groups = [doc.get("grid")] + (doc.get("zip") if isinstance(doc.get("zip"), list) else [])
    for group in groups:
        if isinstance(group, dict):
            for path, values in group.items():
                if isinstance(path, str) and isinstance(values, list):
                    out.setdefault(path, values)
    search = doc.get("search")
    space = search.get("space") if isinstance(search, dict) else None
    for path, dist in (space or {}).items() if isinstance(space, dict) else ():
        if isinstance(path, str) and isinstance(dist, dict) and isinstance(dist.get("choice"), list):
            out.setdefault(path, dist["choice"])
    return out


def _number(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _index(text: str | None, values: list[Any]) -> int | None:
    return next((i for i, raw in enumerate(values) if same_value(text, raw)), None)


def level_order(sweep: SweepRuns, axes: Iterable[str], runs: Iterable[RunRecord] | None = None) -> dict[str, list[str]]:
    """Axis -> its levels among `runs` (default: the sweep's), in the order described above."""
    runs = list(sweep.runs if runs is None else runs)
    listed = file_values(sweep.sweep_file)
    out: dict[str, list[str]] = {}
    for axis in axes:
        levels = list(dict.fromkeys(r.axes.get(axis, "?") for r in runs))
        out[axis] = sorted(levels, key=_key(axis, levels, runs, listed))
    return out


def _key(axis: str, levels: list[str], runs: list[RunRecord], listed: dict[str, list[Any]]) -> Callable[[str], tuple]:
    """The sort key of one axis' levels: (rank, position, fallback)."""
    at: dict[str, list[RunRecord]] = {}
    for r in runs:
        at.setdefault(r.axes.get(axis, "?"), []).append(r)
    position: dict[str, tuple] = {}
    if axis == SIZE_AXIS:
        for level in levels:
            counts = [_number(r.params.get(SIZE_PARAM)) for r in at[level]]
            known = [c for c in counts if c is not None]
            if known:
                position[level] = (sum(known) / len(known),)
    if not position and axis in listed:
        for level in levels:
            i = _index(level, listed[axis])
            if i is not None:
                position[level] = (i,)
    if not position and axis == GATE_AXIS:
        fields = [p for p in listed if p.startswith(GATE_AXIS + ".")]
        if fields:
            for level in levels:
                cells = [tuple(_gate_index(r, p, listed[p]) for p in fields) for r in at[level]]
                position[level] = min(cells)

    def key(level: str) -> tuple:
        return (0, position[level], sort_value(level)) if level in position else (1, (), sort_value(level))

    return key


def _gate_index(run: RunRecord, path: str, values: list[Any]) -> int:
    """A gate field's place in the file's list for this run (-1: the run's gate has no such field,
    as a `none` gate has no granularity)."""
    i = _index(run.params.get(path), values)
    return -1 if i is None else i

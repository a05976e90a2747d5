"""Interactions: each arm's Δ against the baseline at every level of each other axis, e.g. G1's
effect on first-token attention at each model size, which a main effect (averaged over the other
axes) hides.

An **arm** is a value of the architecture axes (the gate, the attention kind, their settings and
the axes `--baseline` adds: what a row departs from the baseline on). For each other axis that
varies (a zip group counts once) and each metric, a cell per (arm, level): the mean of the Δ of
the arm's rows at that level, each row's Δ against its own baseline (the baseline row with the
other axes equal). When one row makes the cell (no further axis varies), the cell is that row's
Δ with its paired test, Holm-adjusted over the Δ table as everywhere in the report; when several
do, their Δ are averaged over the remaining axes and carry no test of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .comparison import Row
from .metrics import MetricSpec
from .seedstats import Delta, Stat


@dataclass
class Cell:
    """One arm at one level of an axis, on one metric."""

    diff: float | None
    """Mean Δ over the arm's rows at this level (each row weighs the same); None: no row has one."""
    rows: int
    """Rows averaged."""
    delta: Delta | None = None
    """The row's Δ, with its test, when one row makes the cell."""
    base: Stat | None = None
    """That row's baseline statistic (for the Δ's decimals)."""

    @property
    def significant(self) -> bool:
        return self.delta is not None and self.delta.significant


@dataclass
class Interaction:
    """The arms' Δ at each level of one axis."""

    axis: str
    levels: list[str]
    arms: list[str]
    """Arm labels, in row order."""
    cells: dict[str, dict[str, list[Cell]]] = field(default_factory=dict)
    """Metric -> arm -> one cell per level (metrics where some arm has a Δ)."""


def interactions(
    rows: list[Row], axes: list[str], arch: list[str], levels: dict[str, list[str]], specs: list[MetricSpec], folded: set[str]
) -> list[Interaction]:
    """One `Interaction` per non-architecture axis with two levels or more (`folded`: axes
    varied together with an earlier one, which it stands for)."""
    compared = [r for r in rows if r.baseline is not None]
    if not compared or not arch:
        return []
    arm_of = {id(r): r.label(arch) for r in compared}
    arms = list(dict.fromkeys(arm_of[id(r)] for r in compared))
    out = []
    for axis in (p for p in axes if p not in arch and p not in folded):
        if len(levels[axis]) < 2:
            continue
        inter = Interaction(axis, list(levels[axis]), arms)
        for m in specs:
            table = {arm: [_cell(compared, arm_of, arm, axis, level, m.key) for level in inter.levels] for arm in arms}
            if any(c.diff is not None and c.diff != 0 for cells in table.values() for c in cells):
                inter.cells[m.key] = table  # a metric every arm leaves unchanged (0 spikes everywhere) adds nothing
        if inter.cells:
            out.append(inter)
    return out


def _cell(compared: list[Row], arm_of: dict[int, str], arm: str, axis: str, level: str, metric: str) -> Cell:
    at = [r for r in compared if arm_of[id(r)] == arm and r.axes[axis] == level and metric in r.deltas]
    if not at:
        return Cell(None, 0)
    if len(at) == 1:
        row = at[0]
        assert row.baseline is not None
        return Cell(row.deltas[metric].diff, 1, row.deltas[metric], row.baseline.stats.get(metric))
    return Cell(math.fsum(r.deltas[metric].diff for r in at) / len(at), len(at))

"""A ladder's runs as cells and their bootstrap.

A **cell** is one arm at one rung at one point of its runs (the end, or a WSD-S decay's bottom):
the log losses of its seeds, and the mean compute, tokens and parameters there. Fits read the
cells' means (the geometric mean of the seeds' losses), weighted by the noise of each cell.

**Noise per rung.** Seeds scatter far more at a small rung than at a large one (≈2.8% against
≈0.45% on the shipped CPU ladder), so the fits weight each cell by n / s̃², s̃ its relative noise
from a trend fitted over every cell with two seeds or more (log s against log compute: three
seeds give a poor variance each, the trend borrows strength across rungs).

**The bootstrap is paired and per rung.** Seeds share their data order and validation set across
arms, so arms must be perturbed together. Each replicate draws one standard normal g_s per seed,
shared by every arm, rung and point, and moves every cell's mean by
Σ_s g_s (ℓ_s − ℓ̄) / sqrt(n (n − 1)) — the Gaussian multiplier bootstrap, which keeps every
correlation the seeds carry — times sqrt(ν / χ²_ν) drawn per rung (ν = n − 1 seeds there). For
a difference of two arms' means this is exactly the paired t distribution (a normal scaled by an
independent sqrt(ν/χ²_ν)): with 3 seeds the intervals use t with 2 degrees of freedom, not the
too-narrow percentiles of 3 resampled values. A cell with one seed is not moved, and nothing
measured from it gets an interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .runs import Run


@dataclass
class Cell:
    arm: str
    rung: str
    index: int
    """The point's place in its runs (0 first; the end is the last)."""
    final: bool
    seeds: dict[str, float] = field(default_factory=dict)
    """seed -> log loss."""
    compute: float = math.nan
    tokens: float = math.nan
    params: float = math.nan

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def mean_log(self) -> float:
        return float(np.mean(list(self.seeds.values())))

    @property
    def loss(self) -> float:
        return math.exp(self.mean_log)

    def rel_sd(self) -> float:
        """The seeds' standard deviation of log loss (NaN below two seeds)."""
        return float(np.std(list(self.seeds.values()), ddof=1)) if self.n > 1 else math.nan


def build_cells(runs: Iterable[Run]) -> list[Cell]:
    """Cells of finite runs: one per (arm, rung, point); a run's points are matched by their place."""
    acc: dict[tuple[str, str, int], dict] = {}
    for run in runs:
        pts = run.all_points()
        for i, p in enumerate(pts):
            if not (math.isfinite(p.loss) and p.loss > 0 and math.isfinite(p.compute) and p.compute > 0):
                continue
            slot = acc.setdefault((run.arm, run.rung, i), {"final": i == len(pts) - 1, "seeds": {}, "c": [], "t": [], "n": []})
            slot["seeds"][run.seed] = math.log(p.loss)
            slot["c"].append(p.compute)
            slot["t"].append(p.tokens)
            slot["n"].append(run.params)
    out = []
    for (arm, rung, i), s in acc.items():
        out.append(Cell(arm, rung, i, s["final"], s["seeds"], _mean(s["c"]), _mean(s["t"]), _mean(s["n"])))
    return out


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if math.isfinite(v)]
    return math.fsum(vals) / len(vals) if vals else math.nan


@dataclass(frozen=True)
class Noise:
    """Relative noise of one seed's loss as a function of compute: exp(a + b·log C)."""

    a: float
    b: float
    cells: int
    """Cells with two seeds or more it was fitted on (0: no noise is known)."""

    def sd(self, compute: float) -> float:
        return math.exp(self.a + self.b * math.log(compute)) if self.cells else math.nan

    def weight(self, cell: Cell) -> float:
        """n / s̃² (every cell alike when no noise is known)."""
        if not self.cells:
            return float(cell.n)
        return cell.n / max(self.sd(cell.compute), 1e-6) ** 2


def noise_trend(cells: Sequence[Cell]) -> Noise:
    """Log s against log compute over the cells with two seeds or more, weighted by their degrees
    of freedom (a constant when the cells span one compute value)."""
    pts = [(math.log(c.compute), math.log(max(c.rel_sd(), 1e-9)), c.n - 1) for c in cells if c.n > 1]
    if not pts:
        return Noise(0.0, 0.0, 0)
    x, y, w = (np.array(v, float) for v in zip(*pts))
    if np.ptp(x) < 1e-9 or len(pts) < 3:
        return Noise(float(np.average(y, weights=w)), 0.0, len(pts))
    b, a = np.polyfit(x, y, 1, w=np.sqrt(w))
    return Noise(float(a), float(b), len(pts))


@dataclass
class Draws:
    """Bootstrap replicates of every cell's mean log loss: `moved[j]` (B,) for cell j."""

    cells: list[Cell]
    moved: np.ndarray
    """(B, cells): each replicate's mean log loss of each cell."""
    movable: np.ndarray
    """(cells,) bool: the cell has two seeds or more (its mean has an interval)."""

    @property
    def replicates(self) -> int:
        return self.moved.shape[0]


def draw(cells: Sequence[Cell], replicates: int, rng: np.random.Generator, misfit: tuple[float, int] = (0.0, 0)) -> Draws:
    """The paired multiplier bootstrap of the module docstring; with `misfit` = (τ², dof), every
    cell of a rung also moves by one draw of τ·t_dof shared by the arms and points there (the
    laws' lack of fit, which the seeds' noise does not show)."""
    seeds = sorted({s for c in cells for s in c.seeds})
    col = {s: i for i, s in enumerate(seeds)}
    g = rng.standard_normal((replicates, max(1, len(seeds))))
    rungs = sorted({c.rung for c in cells})
    dof = {r: min((c.n - 1 for c in cells if c.rung == r and c.n > 1), default=0) for r in rungs}
    scale = {r: np.sqrt(d / rng.chisquare(d, replicates)) if d > 0 else np.zeros(replicates) for r, d in dof.items()}
    moved = np.empty((replicates, len(cells)))
    movable = np.zeros(len(cells), bool)
    for j, c in enumerate(cells):
        mean = c.mean_log
        moved[:, j] = mean
        if c.n < 2:
            continue
        idx = [col[s] for s in c.seeds]
        dev = np.array(list(c.seeds.values())) - mean
        moved[:, j] += (g[:, idx] @ dev) / math.sqrt(c.n * (c.n - 1)) * scale[c.rung]
        movable[j] = True
    tau2, dof = misfit
    if tau2 > 0 and dof > 0:
        effect = {r: math.sqrt(tau2) * rng.standard_normal(replicates) * np.sqrt(dof / rng.chisquare(dof, replicates)) for r in rungs}
        for j, c in enumerate(cells):
            if movable[j]:
                moved[:, j] += effect[c.rung]
    return Draws(list(cells), moved, movable)


# ---- intervals, p-values, Holm ----------------------------------------------------------------------
LEVEL = 0.95


@dataclass
class Estimate:
    """A number with its 95% interval from the bootstrap (or the reason it has none)."""

    value: float
    low: float = math.nan
    high: float = math.nan
    p: float | None = None
    """Two-sided bootstrap p-value of value = `null` (None when no test applies)."""
    replicates: int = 0
    """Replicates behind the interval."""
    note: str = ""
    """Why there is no interval, or what to know about it."""
    samples: np.ndarray | None = field(default=None, repr=False)

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) or math.isfinite(self.high) or (self.low == math.inf) or (self.high == math.inf)

    def to_dict(self) -> dict:
        out = {"value": num(self.value), "low": num(self.low), "high": num(self.high), "replicates": self.replicates}
        if self.p is not None:
            out["p"] = num(self.p)
        if self.note:
            out["note"] = self.note
        return out


def num(x: float | None) -> float | str | None:
    """JSON has no inf or NaN: infinity as the string "inf", NaN as null."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def estimate(value: float, samples: np.ndarray | None, *, null: float | None = None, note: str = "", min_share: float = 0.9) -> Estimate:
    """The percentile interval of `samples` (NaN samples are failed replicates; ±inf kept as
    values) and, with `null`, the two-sided p-value of value = null: twice the smaller share of
    replicates on either side, (count + 1) / (B + 1) so it is never 0."""
    if samples is None:
        return Estimate(value, note=note)
    s = np.asarray(samples, float)
    ok = s[~np.isnan(s)]
    if len(ok) < min_share * len(s) or len(ok) < 20:
        failed = len(s) - len(ok)
        return Estimate(
            value, replicates=len(ok), note=note or f"no interval: {failed} of {len(s)} bootstrap replicates could not be fitted"
        )
    lo, hi = np.quantile(ok, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2], method="inverted_cdf")
    if lo == hi and math.isfinite(lo):
        return Estimate(value, replicates=len(ok), note="no interval: every replicate gives the same value (the seeds do not differ)")
    p = None
    if null is not None:
        below, above = np.sum(ok <= null), np.sum(ok >= null)
        p = float(min(1.0, 2.0 * (min(below, above) + 1) / (len(ok) + 1)))
    extra = f"{len(s) - len(ok)} of {len(s)} replicates could not be fitted" if len(ok) < len(s) else ""
    return Estimate(value, float(lo), float(hi), p, len(ok), note or extra, ok)


def holm(pvalues: Sequence[float | None], level: float = 1 - LEVEL) -> list[bool]:
    """Holm's step-down rejections at family-wise `level` (None: not a test, never rejected)."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    reject = [False] * len(pvalues)
    m = len(order)
    for rank, (p, i) in enumerate(order):
        if p > level / (m - rank):
            break
        reject[i] = True
    return reject

"""What a ladder answers for one metric (`orchestrator.ladder.estimate.analyse`): per arm its law,
its multipliers against the baseline (at each rung, joint, at the target) with their intervals,
the rollout check and the verdicts; and the verdict rule itself."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .cells import Cell, Estimate, Noise
from .laws import Law

REPLICATES = 2000
WIDE = 10.0
"""An interval whose high end is more than this many times its low end is too wide to decide."""
EXTRAPOLATION = 10.0
"""A target beyond this many times the largest rung's compute (or below the smallest) is an extrapolation."""
ONE_SEED = "no interval: 1 seed"


@dataclass
class Rollout:
    """The largest rung predicted by the law of the others."""

    rung: str
    predicted: Estimate
    measured: Estimate
    gap: Estimate | None = None
    """log(predicted / measured) with its interval."""
    holds: bool | None = None
    """False: the measured loss lies outside the prediction; None: no check (the note says why)."""
    note: str = ""


@dataclass
class ArmResult:
    arm: str
    law: Law | None = None
    no_fit: str = ""
    params: dict[str, Estimate] = field(default_factory=dict)
    rungs: dict[str, Estimate] = field(default_factory=dict)
    """rung -> the anchored multiplier there (not for the baseline)."""
    joint: Estimate | None = None
    """One multiplier for every rung at once (`checks.joint`)."""
    trend: Estimate | None = None
    """The slope of log m against log compute over the rungs (0: the same multiplier at every scale)."""
    trend_data: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    """(log compute, weights, log m, log m per replicate) of the rungs the trend is fitted on."""
    rung_samples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """rung -> the anchored multiplier's log in every replicate, aligned (NaN: the replicate failed)."""
    target: Estimate | None = None
    target_from: str = ""
    """"joint fit" (the exponents agree: the joint multiplier holds at any scale) or "each arm's own law"."""
    optimal_n: Estimate | None = None
    """L(N, D): the compute-optimal size at the target compute."""
    exponent_gap: Estimate | None = None
    """The arm's exponent (α for L(C), γ = αβ/(α+β) for L(N, D)) minus the baseline's."""
    rollout: Rollout | None = None
    verdicts: dict[str, str] = field(default_factory=dict)
    """rung / "joint" / "target" -> verdict."""
    equivalent: dict[str, bool] = field(default_factory=dict)
    samples: np.ndarray | None = field(default=None, repr=False)
    """The law's parameters in every replicate (B, P)."""


@dataclass
class Analysis:
    metric: str
    form: str
    """"L(C)" or "L(N, D)"."""
    baseline: str
    rungs: list[str]
    arms: dict[str, ArmResult]
    target: float
    margin: float | None
    replicates: int
    seeds: int
    """The fewest seeds of any cell (1: no intervals)."""
    noise: Noise
    compute: dict[str, dict[str, float]]
    loss: dict[str, dict[str, tuple[float, int]]]
    """arm -> rung -> (geometric mean loss at the end, seeds)."""
    misfit: tuple[float, int] = (0.0, 0)
    """The laws' lack of fit beyond the noise: (variance of a rung effect in log loss, its degrees of freedom)."""
    headline: dict[str, str] = field(default_factory=dict)
    """arm -> "joint" (its exponent is the baseline's within the noise) or "per rung"."""
    notes: list[str] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list, repr=False)

    @property
    def extrapolation(self) -> float:
        """How many times the target lies beyond the largest rung's compute (< 1: below the smallest)."""
        values = [c for per in self.compute.values() for c in per.values()]
        if not values:
            return math.nan
        hi, lo = max(values), min(values)
        return self.target / hi if self.target >= lo else self.target / lo

    @property
    def extrapolated(self) -> bool:
        x = self.extrapolation
        return math.isfinite(x) and (x > EXTRAPOLATION or x < 1.0)


def verdict(est: Estimate, rejected: bool, equivalent: bool = False, margin: float | None = None) -> str:
    """`helps`/`hurts` when the family's test rejected m = 1; `no practical difference` when the
    equivalence test rejected |log m| >= log(1 + margin); `too wide to decide` when the interval
    spans more than WIDE x (or reaches 0 or infinity); `undecided` otherwise; `no interval: ...`
    when there is none (one seed, no fit)."""
    if est.p is None:
        return est.note if est.note.startswith("no interval") else ("no interval: " + est.note if est.note else "no interval")
    if rejected:
        return "helps" if est.value > 1 else "hurts"
    if equivalent and margin:
        return f"no practical difference (within {margin:.0%})"
    lo, hi = est.low, est.high
    if math.isinf(hi) or lo <= 0 or hi / lo > WIDE:
        return "too wide to decide"
    return "undecided"

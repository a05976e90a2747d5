"""Synthetic ladders with a known answer, and the calibration of the ladder's intervals on them.

A synthetic ladder draws runs the way the shipped CPU ladder's runs scatter, so what the ladder
says can be checked against the truth:

- the baseline's loss follows L(C) = E + A·C^(−α) (`LAW`: fitted to `sweeps/ladder_cpu.yaml`'s
  measured baseline); the arm costs `flop_ratio` more FLOPs per token (a G1 gate: +5%) and trains
  the same tokens, and reaches at its compute C the loss the baseline reaches at m·C: its
  multiplier is m at every rung and at any target;
- noise per rung as measured (the relative standard deviation of a seed's loss falls
  log-linearly from 2.8% at the smallest rung to 0.45% at the largest), a share `shared` of its
  variance a seed effect common to both arms (data order and validation set), the rest the arm's
  own;
- a lack-of-fit bump at one rung, shared by the arms: that rung trains as if it had (1 ± κ) its
  compute, chosen so the baseline's loss there moves by ±`bump` (2%); the law misses it, the
  anchored multiplier is still m there;
- optionally several points per run (a WSD-S schedule's decays), from an L(N, D) truth.

`calibrate` runs the ladder's analysis on many such ladders and counts how often the 95% intervals
cover the true multiplier (per rung, joint, target), how often a ladder whose variant is worth
exactly 1x says "helps" or "hurts" anywhere (family-wise), and how often a real gain is detected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from .answers import REPLICATES, Analysis
from .estimate import analyse
from .runs import Point, Run

LAW = (1.04, 2770.0, 0.296)
"""(E, A, α) of L(C) for the synthetic baseline: near the shipped CPU ladder's baseline
(2.48 at 1.3e11 FLOPs, 1.57 at 3.7e12)."""
ND_LAW = (1.0, 25.0, 0.32, 40.0, 0.30)
"""(E, A, α, B, β) of L(N, D) for ladders with several points per run."""


@dataclass(frozen=True)
class Setting:
    rungs: int = 4
    seeds: int = 3
    multiplier: float = 1.0
    noise: tuple[float, float] = (0.028, 0.0045)
    """Relative standard deviation of a seed's loss at the smallest and the largest rung."""
    shared: float = 0.5
    """Share of the noise variance common to the arms (a seed effect)."""
    bump: float = 0.02
    """The lack-of-fit bump, in loss, at one rung chosen at random (0: none)."""
    span: float = 30.0
    """Compute of the largest rung over the smallest (4 rungs); more rungs extend the span at the same spacing."""
    smallest: float = 1.26e11
    flop_ratio: float = 1.05
    target_beyond: float = 10.0
    """The target compute, as a multiple of the largest rung's."""
    fractions: tuple[float, ...] = ()
    """Several points per run: the shares of the budget where a WSD-S decay ends (empty: one point)."""

    def label(self) -> str:
        pts = f", points {list(self.fractions)}" if self.fractions else ""
        return f"{self.rungs} rungs x {self.seeds} seeds, m={self.multiplier:g}{pts}"


def rung_compute(s: Setting) -> np.ndarray:
    step = s.span ** (1 / 3)  # the 4-rung spacing
    return s.smallest * step ** np.arange(s.rungs)


def ladder(s: Setting, rng: np.random.Generator) -> list[Run]:
    """One synthetic ladder's runs: arms `base` and `arm`, rungs `r0`.., seeds `0`..."""
    cs = rung_compute(s)
    sd = np.exp(np.interp(np.log(cs), np.log(cs[[0, -1]]), np.log(s.noise)))
    bump_at = int(rng.integers(len(cs))) if s.bump else -1
    sign = 1.0 if rng.random() < 0.5 else -1.0
    runs = []
    for r, (c, sigma) in enumerate(zip(cs, sd)):
        shift = _bump_shift(s, c, sign) if r == bump_at else 1.0
        for seed in range(s.seeds):
            common = rng.normal(0.0, sigma * math.sqrt(s.shared))
            for arm, m, ratio in (("base", 1.0, 1.0), ("arm", s.multiplier, s.flop_ratio)):
                own = rng.normal(0.0, sigma * math.sqrt(1 - s.shared))
                noise = math.exp(common + own)
                runs.append(_run(s, arm, f"r{r}", str(seed), c, ratio, m, shift, noise, rng))
    return runs


def _bump_shift(s: Setting, c: float, sign: float) -> float:
    """The factor on compute (on tokens, for L(N, D)) at which the baseline's loss there moves by
    sign x bump."""
    if s.fractions:
        E, A, al, B, be = ND_LAW
        n = math.sqrt(c / 120.0)
        floor, x, scale, expo = E + A * n ** (-al), 20 * n, B, be
    else:
        floor, (x, scale, expo) = LAW[0], (c, LAW[1], LAW[2])
    loss = floor + scale * x ** (-expo)
    goal = loss * (1 + sign * s.bump)
    return ((goal - floor) / scale) ** (-1 / expo) / x if goal > floor else 10.0


def _run(s: Setting, arm: str, rung: str, seed: str, c: float, ratio: float, m: float, shift: float, noise: float, rng) -> Run:
    compute = c * ratio
    if not s.fractions:
        return Run(arm, rung, seed, compute, (LAW[0] + LAW[1] * (m * compute * shift) ** (-LAW[2])) * noise)
    E, A, al, B, be = ND_LAW
    n = math.sqrt(c / 120.0)  # token-matched: D = 20 N, C = 6 N D
    d_end = 20 * n
    pts = []
    for f in sorted(s.fractions):
        d = f * d_end  # the arm's tokens count m x its extra FLOPs per token: its compute multiplier is m
        loss = (E + A * n ** (-al) + B * (m * ratio * shift * d) ** (-be)) * noise * math.exp(rng.normal(0.0, 0.002))
        pts.append(Point(d, 6 * n * d * ratio, loss))
    end = pts.pop()
    return Run(arm, rung, seed, end.compute, end.loss, params=n, tokens=end.tokens, points=tuple(pts))


@dataclass
class Calibration:
    setting: Setting
    ladders: int
    coverage: dict[str, float] = field(default_factory=dict)
    """Share of the 95% intervals holding the true multiplier: per rung (r0..), joint, target."""
    false_verdicts: float = math.nan
    """With m = 1: share of ladders with "helps" or "hurts" anywhere (family-wise)."""
    detected: dict[str, float] = field(default_factory=dict)
    """With m != 1: share of ladders whose verdict is right (helps for m > 1), per rung, joint, target."""
    rollout_flags: float = math.nan
    """Share of ladders whose rollout check said the law does not extrapolate."""
    failures: int = 0
    """Ladders whose analysis raised (must be 0)."""


def calibrate(
    s: Setting, ladders: int, *, replicates: int = REPLICATES, seed: int = 0, each: Callable[[Analysis], None] | None = None
) -> Calibration:
    rng = np.random.default_rng(seed)
    cover: dict[str, list[bool]] = {}
    right: dict[str, list[bool]] = {}
    false, flags, failures = [], [], 0
    target = float(rung_compute(s)[-1] * s.target_beyond)
    for i in range(ladders):
        runs = ladder(s, rng)
        try:
            an = analyse(runs, "base", target=target, replicates=replicates, seed=i)
        except Exception:  # counted: the analysis must never raise
            failures += 1
            continue
        if each is not None:
            each(an)
        res = an.arms["arm"]
        tests = {**res.rungs, "joint": res.joint, "target": res.target}
        for key, est in tests.items():
            if est is None or est.p is None:
                continue
            cover.setdefault(key, []).append(est.low <= s.multiplier <= est.high)
            want = "helps" if s.multiplier > 1 else "hurts"
            right.setdefault(key, []).append(res.verdicts.get(key) == want)
        said = [v for v in res.verdicts.values() if v in ("helps", "hurts")]
        false.append(bool(said))
        if res.rollout is not None and res.rollout.holds is not None:
            flags.append(not res.rollout.holds)
    out = Calibration(s, ladders, failures=failures)
    out.coverage = {k: float(np.mean(v)) for k, v in cover.items()}
    if s.multiplier == 1.0:
        out.false_verdicts = float(np.mean(false)) if false else math.nan
    else:
        out.detected = {k: float(np.mean(v)) for k, v in right.items()}
    out.rollout_flags = float(np.mean(flags)) if flags else math.nan
    return out


def settings(quick: bool = False) -> list[Setting]:
    """The calibration grid of docs/ladder.md: 4 and 6 rungs, 3 and 5 seeds, m = 1, 1.2, 1.5."""
    grid = [Setting(rungs=r, seeds=n, multiplier=m) for r in (4, 6) for n in (3, 5) for m in (1.0, 1.2, 1.5)]
    return grid[:3] if quick else grid


__all__ = ["LAW", "Calibration", "Setting", "calibrate", "ladder", "replace", "settings"]

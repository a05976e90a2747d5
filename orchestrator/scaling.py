"""Scaling laws of a ladder: L(C) = E + A·C^(−α) fitted per arm, bootstrap intervals over seeds, and
each arm's effective-compute multiplier against a baseline (numpy and scipy only: the report and
the launcher's promotion both use it).

- **Fit.** As Hoffmann et al. 2022 (Chinchilla, their Approach 3) and OLMo-core's ladder analysis:
  minimise the Huber loss (δ = 1e-3) between log L and log(E + A·C^−α), written
  logsumexp(a − α·log C, e) with A = e^a, E = e^e, by L-BFGS-B from a grid of starting points,
  keeping the best. α is kept in (0, 3], E below every observed loss. `fit_law` fits one arm;
  `fit_laws(..., shared_e=True)` fits every arm with one E (their common irreducible loss).
- **Multiplier.** At compute C an arm reaches the loss L_a(C); the baseline reaches that loss at
  C_b = L_b⁻¹(L_a(C)) = ((L_a(C) − E_b) / A_b)^(−1/α_b). The arm's effective-compute multiplier
  is C_b / C, C being the arm's own training FLOPs (its variant's FLOPs per token included): 2
  means the arm matches a baseline trained with twice its compute. Both losses come from the
  fits, so the baseline's multiplier against itself is exactly 1; a loss at or below the
  baseline's E is one the baseline never reaches (the multiplier is infinite).
- **Intervals.** A bootstrap over seeds: each replicate draws, at every rung, seeds with
  replacement from those that finished there, the same draws for every arm (a seed fixes the
  data order and initialisation of each arm alike), refits every arm and recomputes α and each
  multiplier; the interval is the 2.5th to 97.5th percentile of the replicates (`BOOTSTRAP`
  replicates, a fixed generator: the same data give the same interval).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

HUBER_DELTA = 1e-3
ALPHA_MAX = 3.0
BOOTSTRAP = 400
"""Bootstrap replicates of the intervals."""
MIN_RUNGS = 3
"""A fit of three parameters needs losses at three compute levels at least."""


@dataclass(frozen=True)
class Law:
    """L(C) = E + A·C^(−α)."""

    E: float
    A: float
    alpha: float
    rmse: float = 0.0
    """Root mean square of the log-loss residuals of the fit."""

    def loss(self, compute: float) -> float:
        return self.E + self.A * compute ** (-self.alpha)

    def compute_for(self, loss: float) -> float:
        """The compute at which this law reaches `loss` (inf at or below E)."""
        if not loss > self.E:
            return math.inf
        return ((loss - self.E) / self.A) ** (-1.0 / self.alpha)

    def to_dict(self) -> dict:
        return {"E": self.E, "A": self.A, "alpha": self.alpha, "rmse_log": self.rmse}


class NoFit(ValueError):
    """Why a law could not be fitted (said as the reason, never replaced by a number)."""


@dataclass(frozen=True)
class Points:
    """One arm's runs: training compute, loss and the rung and seed of each."""

    compute: np.ndarray
    loss: np.ndarray
    rung: np.ndarray
    seed: np.ndarray

    @staticmethod
    def of(rows: Sequence[tuple[float, float, str, object]]) -> Points:
        c, loss, r, s = zip(*rows) if rows else ((), (), (), ())
        return Points(np.asarray(c, float), np.asarray(loss, float), np.asarray(r, object), np.asarray(s, object))

    def finite(self) -> Points:
        keep = np.isfinite(self.compute) & np.isfinite(self.loss) & (self.compute > 0) & (self.loss > 0)
        return Points(self.compute[keep], self.loss[keep], self.rung[keep], self.seed[keep])


def _huber(r: np.ndarray, delta: float = HUBER_DELTA) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss of residuals and its derivative."""
    small = np.abs(r) <= delta
    value = np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))
    grad = np.where(small, r, delta * np.sign(r))
    return value, grad


def _objective(theta: np.ndarray, groups: list[tuple[np.ndarray, np.ndarray]], shared_e: bool) -> tuple[float, np.ndarray]:
    """Sum over arms of the Huber loss of log-loss residuals; theta = [a_k, alpha_k ...] + e (or e_k)."""
    total, grad = 0.0, np.zeros_like(theta)
    n = len(groups)
    for k, (logc, logl) in enumerate(groups):
        a, alpha = theta[2 * k], theta[2 * k + 1]
        ei = 2 * n if shared_e else 2 * n + k
        e = theta[ei]
        x1, x2 = a - alpha * logc, np.full_like(logc, e)
        m = np.maximum(x1, x2)
        w1, w2 = np.exp(x1 - m), np.exp(x2 - m)
        pred = m + np.log(w1 + w2)
        value, dr = _huber(pred - logl)
        total += float(value.sum())
        p1 = w1 / (w1 + w2)
        grad[2 * k] += float((dr * p1).sum())
        grad[2 * k + 1] += float((dr * p1 * -logc).sum())
        grad[ei] += float((dr * (1 - p1)).sum())
    return total, grad


def _starts(groups: list[tuple[np.ndarray, np.ndarray]], shared_e: bool) -> list[np.ndarray]:
    """A grid of starting points: α and the share of the smallest loss that is irreducible."""
    out = []
    floor = min(float(np.min(logl)) for _, logl in groups)
    for alpha in (0.05, 0.15, 0.3, 0.6, 1.0):
        for share in (0.2, 0.6, 0.9):
            e = floor + math.log(share)
            theta = []
            for logc, logl in groups:
                # a such that the law passes through the arm's mean point
                mean_c, mean_l = float(np.mean(logc)), float(np.mean(logl))
                rest = max(math.exp(mean_l) - math.exp(e), 1e-9)
                theta += [math.log(rest) + alpha * mean_c, alpha]
            theta += [e] if shared_e else [e] * len(groups)
            out.append(np.asarray(theta, float))
    return out


def fit_laws(arms: Mapping[str, Points], *, shared_e: bool = False, starts: list[np.ndarray] | None = None) -> dict[str, Law]:
    """One law per arm (every arm with the same E when `shared_e`); NoFit when it cannot be fitted."""
    from scipy.optimize import minimize

    names = list(arms)
    groups = []
    for name in names:
        p = arms[name].finite()
        if len(set(p.rung.tolist())) < MIN_RUNGS:
            raise NoFit(f"{name}: finished runs at {len(set(p.rung.tolist()))} rung(s); a fit needs {MIN_RUNGS}")
        groups.append((np.log(p.compute), np.log(p.loss)))
    n = len(groups)
    floor = min(float(np.min(logl)) for _, logl in groups)
    bounds = [(None, None), (1e-4, ALPHA_MAX)] * n + [(floor - 20.0, floor - 1e-6)] * (1 if shared_e else n)
    if shared_e is False:  # each arm's E below its own losses
        bounds = [(None, None), (1e-4, ALPHA_MAX)] * n + [(float(np.min(logl)) - 20.0, float(np.min(logl)) - 1e-6) for _, logl in groups]
    best = None
    for theta0 in starts or _starts(groups, shared_e):
        theta0 = np.clip(
            theta0, [b[0] if b[0] is not None else -np.inf for b in bounds], [b[1] if b[1] is not None else np.inf for b in bounds]
        )
        res = minimize(_objective, theta0, args=(groups, shared_e), jac=True, method="L-BFGS-B", bounds=bounds)
        if np.all(np.isfinite(res.x)) and np.isfinite(res.fun) and (best is None or res.fun < best.fun):
            best = res
    if best is None:
        raise NoFit("the optimiser found no finite fit")
    out = {}
    for k, name in enumerate(names):
        a, alpha = best.x[2 * k], best.x[2 * k + 1]
        e = best.x[2 * n] if shared_e else best.x[2 * n + k]
        logc, logl = groups[k]
        pred = np.logaddexp(a - alpha * logc, e)
        rmse = float(np.sqrt(np.mean((pred - logl) ** 2)))
        if not all(math.isfinite(v) for v in (a, alpha, e, rmse)):
            raise NoFit(f"{name}: the fit is not finite")
        out[name] = Law(E=math.exp(e), A=math.exp(a), alpha=float(alpha), rmse=rmse)
    return out


def fit_law(points: Points) -> Law:
    return fit_laws({"arm": points})["arm"]


def multiplier(baseline: Law, arm: Law, compute: float) -> float:
    """The arm's effective-compute multiplier at its compute `compute` (see the module docstring)."""
    return baseline.compute_for(arm.loss(compute)) / compute


@dataclass
class Interval:
    value: float
    low: float
    high: float
    replicates: int = 0
    """Bootstrap replicates behind the interval (fewer than asked when some refits failed)."""

    def to_dict(self) -> dict:
        return {"value": _num(self.value), "low": _num(self.low), "high": _num(self.high), "replicates": self.replicates}


def _num(x: float) -> float | str | None:
    """JSON has no inf or NaN: infinity as the string "inf", NaN as null."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


@dataclass
class LadderFit:
    """Every arm's law and, against the baseline arm, the multipliers with their intervals."""

    laws: dict[str, Law]
    alpha: dict[str, Interval]
    E: dict[str, Interval]
    multipliers: dict[str, dict[str, Interval]]
    """arm -> rung -> the multiplier at the arm's compute on that rung."""
    target: dict[str, Interval]
    """arm -> the multiplier at the target compute."""
    compute: dict[str, dict[str, float]]
    """arm -> rung -> its training FLOPs there (mean over its runs)."""
    failed_replicates: int = 0
    notes: list[str] = field(default_factory=list)


def _percentiles(values: list[float], point: float) -> Interval:
    if not values:
        return Interval(point, math.nan, math.nan, 0)
    arr = np.asarray(values, float)
    lo, hi = np.percentile(arr, [2.5, 97.5], method="linear") if np.all(np.isfinite(arr)) else _inf_percentiles(arr)
    return Interval(point, float(lo), float(hi), len(values))


def _inf_percentiles(arr: np.ndarray) -> tuple[float, float]:
    """Percentiles with infinite replicates ordered last (an infinite multiplier is the largest)."""
    s = np.sort(np.where(np.isnan(arr), np.inf, arr))
    pick = lambda q: s[min(len(s) - 1, max(0, int(math.floor(q * (len(s) - 1) + 0.5))))]
    return float(pick(0.025)), float(pick(0.975))


def fit_ladder(
    arms: Mapping[str, Points],
    baseline: str,
    *,
    target: float,
    shared_e: bool = False,
    replicates: int = BOOTSTRAP,
    seed: int = 0,
) -> LadderFit:
    """Fit every arm, the multipliers against `baseline` at each rung and at `target` compute,
    and their bootstrap intervals over seeds. NoFit when the point estimate cannot be fitted."""
    arms = {k: v.finite() for k, v in arms.items()}
    if baseline not in arms:
        raise NoFit(f"no baseline arm {baseline!r} among {', '.join(arms)}")
    laws = fit_laws(arms, shared_e=shared_e)
    compute = {name: _rung_compute(p) for name, p in arms.items()}

    def measures(ls: dict[str, Law]) -> dict[tuple, float]:
        out: dict[tuple, float] = {}
        for name, law in ls.items():
            out[("alpha", name)] = law.alpha
            out[("E", name)] = law.E
            if name == baseline:
                continue
            for rung, c in compute[name].items():
                out[("rung", name, rung)] = multiplier(ls[baseline], law, c)
            out[("target", name)] = multiplier(ls[baseline], law, target)
        return out

    point = measures(laws)
    draws: dict[tuple, list[float]] = {k: [] for k in point}
    rng = np.random.default_rng(seed)
    rungs = sorted({r for p in arms.values() for r in p.rung.tolist()}, key=str)
    seeds = {r: sorted({s for p in arms.values() for s, rr in zip(p.seed.tolist(), p.rung.tolist()) if rr == r}, key=str) for r in rungs}
    warm = _warm_start(laws, list(arms), shared_e)
    failed = 0
    for _ in range(replicates):
        picks = {r: [seeds[r][i] for i in rng.integers(0, len(seeds[r]), len(seeds[r]))] for r in rungs}
        sample = {name: _resample(p, picks) for name, p in arms.items()}
        try:
            ls = fit_laws(sample, shared_e=shared_e, starts=warm)
        except NoFit:
            failed += 1
            continue
        for k, v in measures(ls).items():
            draws[k].append(v)
    notes = []
    if failed:
        notes.append(f"{failed} of {replicates} bootstrap replicates could not be fitted and are left out")
    return LadderFit(
        laws=laws,
        alpha={n: _percentiles(draws[("alpha", n)], point[("alpha", n)]) for n in arms},
        E={n: _percentiles(draws[("E", n)], point[("E", n)]) for n in arms},
        multipliers={n: {r: _percentiles(draws[("rung", n, r)], point[("rung", n, r)]) for r in compute[n]} for n in arms if n != baseline},
        target={n: _percentiles(draws[("target", n)], point[("target", n)]) for n in arms if n != baseline},
        compute=compute,
        failed_replicates=failed,
        notes=notes,
    )


def _rung_compute(p: Points) -> dict[str, float]:
    out: dict[str, list[float]] = {}
    for c, r in zip(p.compute.tolist(), p.rung.tolist()):
        out.setdefault(r, []).append(c)
    return {r: float(np.mean(v)) for r, v in out.items()}


def _resample(p: Points, picks: dict[object, list[object]]) -> Points:
    idx = []
    for r, chosen in picks.items():
        for s in chosen:
            idx += [i for i in range(len(p.seed)) if p.rung[i] == r and p.seed[i] == s]
    return Points(p.compute[idx], p.loss[idx], p.rung[idx], p.seed[idx])


def _warm_start(laws: dict[str, Law], names: list[str], shared_e: bool) -> list[np.ndarray]:
    """Bootstrap refits start from the point estimate (and two nudges of α), not the whole grid."""
    out = []
    for nudge in (1.0, 0.7, 1.4):
        theta = []
        for name in names:
            law = laws[name]
            theta += [math.log(law.A), min(ALPHA_MAX, law.alpha * nudge)]
        theta += [math.log(laws[names[0]].E)] if shared_e else [math.log(laws[n].E) for n in names]
        out.append(np.asarray(theta, float))
    return out

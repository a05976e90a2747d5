"""Scaling laws of a ladder: L(C) = E + A·C^(−α) fitted per arm, bootstrap intervals over seeds, and
each arm's effective-compute multiplier against a baseline (numpy and scipy only: the report and
the launcher's promotion both use it).

- **Fit.** As Hoffmann et al. 2022 (Chinchilla, their Approach 3) and OLMo-core's ladder analysis:
  minimise the Huber loss (δ = 1e-3) between log L and log(E + A·C^−α), written
  logsumexp(a − α·log C, e) with A = e^a, E = e^e (Levenberg–Marquardt, iteratively reweighted
  for the Huber loss), from a grid of starting points, keeping the best. α is kept in (0, 3], E below every observed loss. `fit_law` fits one arm;
  `fit_laws(..., shared_e=True)` fits every arm with one E (their common irreducible loss).
- **Multiplier.** An arm reaches the loss L at its compute C; the baseline reaches that loss at
  C_b = L_b⁻¹(L) = ((L − E_b) / A_b)^(−1/α_b). The arm's effective-compute multiplier is C_b / C,
  C being the arm's own training FLOPs (its variant's FLOPs per token included): 2 means the arm
  matches a baseline trained with twice its compute. At a rung, L is the arm's measured loss
  (its mean over seeds there), so only the baseline's law is read, where it was fitted; at the
  target compute, L is the arm's own law extrapolated, L_a(C_target). A loss at or below the
  baseline's E is one the baseline never reaches (the multiplier is infinite).
- **Intervals.** A bootstrap of the fits (`BOOTSTRAP` replicates, a fixed generator: the same
  data give the same interval): each replicate redraws the runs' noise, refits every arm and
  recomputes α, E and each multiplier; the interval is the replicates' expanded percentile
  interval (`expanded_tail`). Two ways to redraw, measured on synthetic ladders with a known
  multiplier (4 rungs x 3 seeds, 0.4% noise; tests/dashboards/test_ladder.py):
  `residuals` (the default) gives every run a residual of its arm's fit drawn with replacement
  (modified residuals, Davison and Hinkley 1997): 90% of the intervals covered a true gain, and
  2.5% of the verdicts on a variant with no effect said helps or hurts; `seeds` draws, at every
  rung, seeds with replacement from those that finished there (the same draws for every arm):
  87.5% and 22.5%, because the means of 3 resampled seeds never leave the range of the 3 values,
  so no percentile of them can reach a 95% interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

HUBER_DELTA = 1e-3
ALPHA_MAX = 3.0
BOOTSTRAP = 200
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
        log_ratio = math.log((loss - self.E) / self.A)
        if self.alpha <= 0.0:  # a flat law (alpha underflowed to 0): it is at E + A at every compute
            return math.inf if log_ratio < 0 else (0.0 if log_ratio > 0 else 1.0)
        exponent = -log_ratio / self.alpha
        return math.inf if exponent > 709.0 else math.exp(exponent)  # beyond 709: past float range

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
        return Points(np.asarray(c, float), np.asarray(loss, float), _objects(r), _objects(s))

    def finite(self) -> Points:
        keep = np.isfinite(self.compute) & np.isfinite(self.loss) & (self.compute > 0) & (self.loss > 0)
        return Points(self.compute[keep], self.loss[keep], self.rung[keep], self.seed[keep])


def _objects(values: Sequence[object]) -> np.ndarray:
    """A 1-D object array (np.asarray would turn a sequence of tuples into a 2-D one)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _residuals(theta: np.ndarray, groups: list[tuple[np.ndarray, np.ndarray]], shared_e: bool) -> np.ndarray:
    """log(E + A·C^-α) − log L of every point of every arm; theta = [a_k, alpha_k ...] + e (or e_k)."""
    n = len(groups)
    out = []
    for k, (logc, logl) in enumerate(groups):
        e = theta[2 * n] if shared_e else theta[2 * n + k]
        out.append(np.logaddexp(theta[2 * k] - theta[2 * k + 1] * logc, e) - logl)
    return np.concatenate(out)


def _jacobian(theta: np.ndarray, groups: list[tuple[np.ndarray, np.ndarray]], shared_e: bool) -> np.ndarray:
    n = len(groups)
    rows = sum(len(logc) for logc, _ in groups)
    jac = np.zeros((rows, len(theta)))
    i = 0
    for k, (logc, _) in enumerate(groups):
        e = theta[2 * n] if shared_e else theta[2 * n + k]
        x1 = theta[2 * k] - theta[2 * k + 1] * logc
        p1 = _sigmoid(x1 - e)  # the A·C^-α share of the prediction
        sl = slice(i, i + len(logc))
        jac[sl, 2 * k] = p1
        jac[sl, 2 * k + 1] = -p1 * logc
        jac[sl, 2 * n if shared_e else 2 * n + k] = 1.0 - p1
        i += len(logc)
    return jac


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


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow at any x


def _huber_cost(r: np.ndarray, delta: float = HUBER_DELTA) -> float:
    small = np.abs(r) <= delta
    return float(np.sum(np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))))


class _Problem:
    """The fit in unconstrained coordinates: α = ALPHA_MAX·sigmoid(u) keeps 0 < α < ALPHA_MAX, and
    e = e_max − softplus(v) keeps E below the losses it is the floor of."""

    def __init__(self, groups: list[tuple[np.ndarray, np.ndarray]], shared_e: bool):
        self.groups, self.shared_e, self.n = groups, shared_e, len(groups)
        floors = [float(np.min(logl)) for _, logl in groups]
        self.e_max = np.array([min(floors)] if shared_e else floors) - 1e-9

    def natural(self, z: np.ndarray) -> np.ndarray:
        """theta = [a_k, alpha_k ...] + e (or e_k) from z = [a_k, u_k ...] + v (or v_k)."""
        theta = z.copy()
        theta[1 : 2 * self.n : 2] = ALPHA_MAX * _sigmoid(z[1 : 2 * self.n : 2])
        theta[2 * self.n :] = self.e_max - np.logaddexp(0.0, z[2 * self.n :])
        return theta

    def unconstrained(self, theta: np.ndarray) -> np.ndarray:
        z = np.asarray(theta, float).copy()
        alpha = np.clip(theta[1 : 2 * self.n : 2], 1e-6, ALPHA_MAX * (1 - 1e-9))
        z[1 : 2 * self.n : 2] = np.log(alpha / (ALPHA_MAX - alpha))
        gap = np.maximum(self.e_max - theta[2 * self.n :], 1e-12)
        z[2 * self.n :] = np.log(np.expm1(np.minimum(gap, 50.0))) + np.maximum(gap - 50.0, 0.0)
        return z

    def residuals(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Residuals and their Jacobian with respect to z."""
        theta = self.natural(z)
        jac = _jacobian(theta, self.groups, self.shared_e)
        s = _sigmoid(z[1 : 2 * self.n : 2])
        jac[:, 1 : 2 * self.n : 2] *= ALPHA_MAX * s * (1.0 - s)
        jac[:, 2 * self.n :] *= -_sigmoid(z[2 * self.n :])
        return _residuals(theta, self.groups, self.shared_e), jac

    def solve(self, z: np.ndarray, iterations: int = 300) -> tuple[np.ndarray, float]:
        """Levenberg–Marquardt on the Huber loss by iteratively reweighted least squares."""
        r, jac = self.residuals(z)
        cost, lam = _huber_cost(r), 1e-3
        for _ in range(iterations):
            w = np.where(np.abs(r) <= HUBER_DELTA, 1.0, HUBER_DELTA / np.maximum(np.abs(r), 1e-300))
            jw = jac * w[:, None]
            h, g = jw.T @ jac, jw.T @ r
            try:
                step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
            except np.linalg.LinAlgError:
                lam *= 10.0
                continue
            z_new = z + step
            r_new, jac_new = self.residuals(z_new)
            cost_new = _huber_cost(r_new)
            if np.isfinite(cost_new) and cost_new < cost:
                done = cost - cost_new <= 1e-12 * max(cost, 1e-30) and np.max(np.abs(step)) < 1e-9
                z, r, jac, cost, lam = z_new, r_new, jac_new, cost_new, max(lam / 3.0, 1e-12)
                if done:
                    break
            else:
                lam *= 4.0
                if lam > 1e12:
                    break
        return z, cost


def fit_laws(arms: Mapping[str, Points], *, shared_e: bool = False, starts: list[np.ndarray] | None = None) -> dict[str, Law]:
    """One law per arm (every arm with the same E when `shared_e`); NoFit when it cannot be fitted.
    Levenberg–Marquardt on the Huber loss of the log-loss residuals (iteratively reweighted), from
    each start, keeping the best: a few milliseconds a fit, which the bootstrap's hundreds of
    refits need (scipy's bounded `least_squares` with the same loss reaches the same optimum, a
    test checks it, at ~65 ms a fit here)."""
    names = list(arms)
    groups = []
    for name in names:
        p = arms[name].finite()
        if len(set(p.rung.tolist())) < MIN_RUNGS:
            raise NoFit(f"{name}: finished runs at {len(set(p.rung.tolist()))} rung(s); a fit needs {MIN_RUNGS}")
        groups.append((np.log(p.compute), np.log(p.loss)))
    problem = _Problem(groups, shared_e)
    n = len(groups)
    best: tuple[float, np.ndarray] | None = None
    for theta0 in starts or _starts(groups, shared_e):
        theta0 = np.asarray(theta0, float).copy()
        theta0[2 * n :] = np.minimum(theta0[2 * n :], problem.e_max - 1e-6)
        z, cost = problem.solve(problem.unconstrained(theta0))
        if np.all(np.isfinite(z)) and math.isfinite(cost) and (best is None or cost < best[0]):
            best = (cost, z)
    if best is None:
        raise NoFit("the optimiser found no finite fit")
    theta = problem.natural(best[1])
    out = {}
    for k, name in enumerate(names):
        a, alpha = theta[2 * k], theta[2 * k + 1]
        e = theta[2 * n] if shared_e else theta[2 * n + k]
        logc, logl = groups[k]
        rmse = float(np.sqrt(np.mean((np.logaddexp(a - alpha * logc, e) - logl) ** 2)))
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
    seeds: int = 0
    """The fewest seeds any rung has: what the intervals' expansion is for."""
    tail: float = 0.025
    """The tail probability each end of an interval is read at (`expanded_tail`)."""


def expanded_tail(seeds: int, level: float = 0.95) -> float:
    """The tail probability of Hesterberg's expanded percentile interval (2015, "What teachers
    should know about the bootstrap"): a percentile bootstrap over n samples is too narrow by
    about sqrt((n - 1) / n) and by using z where t belongs, so its tails move out to
    Φ(−sqrt(n / (n − 1))·t(1 − (1 − level)/2, n − 1)): 0.025 becomes 0.001 for 5 seeds and
    7e-8 for 3, i.e. the replicates' range (the same spirit as the report's intervals of a mean,
    which are the values' range for 2 or 3 seeds)."""
    from scipy.stats import norm, t

    if seeds < 2:
        return (1 - level) / 2
    return float(norm.cdf(-math.sqrt(seeds / (seeds - 1)) * t.ppf(1 - (1 - level) / 2, seeds - 1)))


def _percentiles(values: list[float], point: float, tail: float = 0.025) -> Interval:
    if not values:
        return Interval(point, math.nan, math.nan, 0)
    s = np.sort(np.where(np.isnan(values), np.inf, np.asarray(values, float)))  # an infinite multiplier is the largest
    pick = lambda q: float(s[min(len(s) - 1, max(0, int(math.floor(q * (len(s) - 1) + 0.5))))])
    return Interval(point, pick(tail), pick(1 - tail), len(values))


def fit_ladder(
    arms: Mapping[str, Points],
    baseline: str,
    *,
    target: float,
    shared_e: bool = False,
    replicates: int = BOOTSTRAP,
    seed: int = 0,
    method: str = "residuals",
) -> LadderFit:
    """Fit every arm, the multipliers against `baseline` at each rung and at `target` compute,
    and their bootstrap intervals (`method`: over `residuals` or over `seeds`, see the module
    docstring). NoFit when the point estimate cannot be fitted."""
    arms = {k: v.finite() for k, v in arms.items()}
    if baseline not in arms:
        raise NoFit(f"no baseline arm {baseline!r} among {', '.join(arms)}")
    with _one_blas_thread():
        laws = fit_laws(arms, shared_e=shared_e)
    compute = {name: _rung_compute(p) for name, p in arms.items()}

    def measures(ls: dict[str, Law], sample: Mapping[str, Points]) -> dict[tuple, float]:
        out: dict[tuple, float] = {}
        for name, law in ls.items():
            out[("alpha", name)] = law.alpha
            out[("E", name)] = law.E
            if name == baseline:
                continue
            for rung, loss in _rung_loss(sample[name]).items():
                out[("rung", name, rung)] = ls[baseline].compute_for(loss) / compute[name][rung]
            out[("target", name)] = multiplier(ls[baseline], law, target)
        return out

    point = measures(laws, arms)
    draws: dict[tuple, list[float]] = {k: [] for k in point}
    rng = np.random.default_rng(seed)
    rungs = sorted({r for p in arms.values() for r in p.rung.tolist()}, key=str)
    seeds = {r: sorted({s for p in arms.values() for s, rr in zip(p.seed.tolist(), p.rung.tolist()) if rr == r}, key=str) for r in rungs}
    warm = _warm_start(laws, list(arms), shared_e)
    failed = 0
    with _one_blas_thread():  # tiny problems: BLAS threads only contend, 3-4x slower on a busy machine
        for _ in range(replicates):
            if method == "seeds":
                picks = {r: [seeds[r][i] for i in rng.integers(0, len(seeds[r]), len(seeds[r]))] for r in rungs}
                sample = {name: _resample(p, picks) for name, p in arms.items()}
            else:
                sample = {name: _with_residuals(p, laws[name], rng) for name, p in arms.items()}
            try:
                ls = fit_laws(sample, shared_e=shared_e, starts=warm[:1])
            except NoFit:
                try:  # the point estimate is a poor start for this replicate: the nudged ones
                    ls = fit_laws(sample, shared_e=shared_e, starts=warm[1:])
                except NoFit:
                    failed += 1
                    continue
            for k, v in measures(ls, sample).items():
                draws[k].append(v)
    few = min(len(v) for v in seeds.values())
    tail = expanded_tail(few if method == "seeds" else min(len(p.loss) for p in arms.values()))
    notes = []
    if failed:
        notes.append(f"{failed} of {replicates} bootstrap replicates could not be fitted and are left out")
    return LadderFit(
        laws=laws,
        alpha={n: _percentiles(draws[("alpha", n)], point[("alpha", n)], tail) for n in arms},
        E={n: _percentiles(draws[("E", n)], point[("E", n)], tail) for n in arms},
        multipliers={
            n: {r: _percentiles(draws[("rung", n, r)], point[("rung", n, r)], tail) for r in compute[n]} for n in arms if n != baseline
        },
        target={n: _percentiles(draws[("target", n)], point[("target", n)], tail) for n in arms if n != baseline},
        seeds=few,
        tail=tail,
        compute=compute,
        failed_replicates=failed,
        notes=notes,
    )


def _one_blas_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without it, BLAS keeps its threads: slower, the same numbers
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1)


def _with_residuals(p: Points, law: Law, rng: np.random.Generator) -> Points:
    """The arm's runs with its fit's log-loss residuals redrawn with replacement, scaled by
    sqrt(n / (n - 3)): a fit of three parameters leaves residuals smaller than the noise
    (Davison and Hinkley 1997, §6.2's modified residuals), centred."""
    fitted = np.log(law.E + law.A * p.compute ** (-law.alpha))
    n = len(p.loss)
    resid = (np.log(p.loss) - fitted) * math.sqrt(n / max(n - 3, 1))
    resid = resid - resid.mean()
    return Points(p.compute, np.exp(fitted + resid[rng.integers(0, len(resid), len(resid))]), p.rung, p.seed)


def _rung_loss(p: Points) -> dict[str, float]:
    """Mean loss per rung (over the seeds of `p`)."""
    out: dict[str, list[float]] = {}
    for v, r in zip(p.loss.tolist(), p.rung.tolist()):
        out.setdefault(r, []).append(v)
    return {r: float(np.mean(v)) for r, v in out.items()}


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

"""Statistics over the seeds of one configuration, built to hold with 2-5 seeds.

- `describe` -> `Stat`: mean, sample std, the 95% interval of the mean by Student's t
  (`ci95`, `lo`, `hi`: symmetric, so it can run below 0 for a non-negative metric) and the 95%
  **percentile bootstrap** interval of the mean (`boot_lo`, `boot_hi`: always inside the range
  of the values, so never below 0 for a non-negative metric).
- `paired` -> `Delta`: the difference to a baseline, the paired t-test over the seeds both
  finished (as scipy.stats.ttest_rel), the bootstrap interval of the mean paired difference,
  the power of that test to detect the observed Δ at α = 0.05 with the seeds there are, and the
  seeds it would take to reach 80% power (`seeds_needed`).
- `holm`: Holm's step-down adjustment of a family of p values (the Δ table is one family:
  `stats.compare` sets every `Delta.p_holm`, and the power and seeds needed at α/m, the level
  the correction holds the smallest p to: `power_holm`, `seeds_needed_holm`).

The bootstrap resamples the seeds with replacement: for n <= 6 every one of the n^n equally
likely resamples (exact, no random numbers; the interval's ends are quantiles of that discrete
distribution, which is what scipy.stats.bootstrap's percentile method tends to as its resamples
grow), else 20,000 drawn with a fixed seed (numpy's linear percentiles, as scipy). With 2 or 3
seeds the 95% interval is the range of the values, with 4-5 a little inside it: it does not
widen for small n as Student's t does, so read it together with the power line. Power is that of
the two-sided paired t-test, from the noncentral t distribution: with d = mean(diff) / sd(diff),
power(n) = P(|T| > t(1 - α/2, n - 1)) for T ~ noncentral t(n - 1, d·√n). The t and noncentral
t distributions come from scipy.special, which imports much faster than scipy.stats.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .records import finite

LEVEL = 0.95
"""Coverage of every interval."""
ALPHA = 0.05
"""Significance level of the tests, of Holm's correction and of the power."""
TARGET_POWER = 0.8
"""`seeds_needed` is the smallest number of paired seeds with at least this power."""
MAX_SEEDS = 1000
"""`seeds_needed` searches up to this many seeds (None above: the Δ is too small to chase)."""
EXACT_BOOTSTRAP_MAX_N = 6
"""Up to this many values every resample is enumerated (6^6 = 46,656); above, a random sample."""
BOOTSTRAP_RESAMPLES = 20_000
BOOTSTRAP_SEED = 0


@dataclass
class Stat:
    """One metric of one row over its finished seeds."""

    values: dict[tuple, float]
    """Seed cell -> value."""
    n: int
    mean: float | None
    std: float | None
    """Sample standard deviation (ddof 1); None for n < 2."""
    ci95: float | None
    """Half-width of the 95% confidence interval of the mean (Student's t); None for n < 2."""
    boot_lo: float | None = None
    """Lower end of the 95% percentile bootstrap interval of the mean; None for n < 2."""
    boot_hi: float | None = None

    @property
    def lo(self) -> float | None:
        return None if self.mean is None or self.ci95 is None else self.mean - self.ci95

    @property
    def hi(self) -> float | None:
        return None if self.mean is None or self.ci95 is None else self.mean + self.ci95


@dataclass
class Delta:
    """A row against its baseline on one metric."""

    diff: float
    rel: float | None
    """diff / |baseline mean|, in %; None when the baseline mean is 0."""
    n_pairs: int
    """Seeds finished by both rows."""
    t: float | None
    p: float | None
    """Two-sided p of the paired t-test; None with fewer than 2 pairs or no variation."""
    boot_lo: float | None = None
    """95% percentile bootstrap interval of the mean paired difference; None with < 2 pairs."""
    boot_hi: float | None = None
    effect: float | None = None
    """Standardised effect d = mean / sd of the paired differences (None where p is None)."""
    power: float | None = None
    """Power of the paired t-test at ALPHA to detect an effect of size `effect` with n_pairs seeds."""
    seeds_needed: int | None = None
    """Smallest number of paired seeds with power >= TARGET_POWER at ALPHA (None: not estimable,
    or more than MAX_SEEDS)."""
    p_holm: float | None = None
    """`p` adjusted by Holm's method over every test of the Δ table (set by `stats.compare`)."""
    power_holm: float | None = None
    """Power at ALPHA / m, the level Holm's method holds the smallest of m p values to (a bound
    for every step): what surviving the correction asks of this test (set by `stats.compare`)."""
    seeds_needed_holm: int | None = None
    """Seeds for TARGET_POWER at ALPHA / m (set by `stats.compare`)."""

    @property
    def significant(self) -> bool:
        """Significant at ALPHA after Holm's correction."""
        return self.p_holm is not None and self.p_holm < ALPHA


@functools.cache
def _special():
    """scipy.special, imported on first use (scipy.stats alone takes ~1 s to import)."""
    import scipy.special

    return scipy.special


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t."""
    return float(_special().stdtrit(df, p))


def t_two_sided_p(t: float, df: int) -> float:
    """Two-sided p value of a t statistic with `df` degrees of freedom."""
    return float(2.0 * _special().stdtr(df, -abs(t)))


# ---- bootstrap ------------------------------------------------------------------------------
def bootstrap_means(xs: list[float] | np.ndarray) -> np.ndarray:
    """The mean of every bootstrap resample of `xs`: all n^n for n <= EXACT_BOOTSTRAP_MAX_N,
    else BOOTSTRAP_RESAMPLES drawn with a fixed seed (the same numbers every time)."""
    x = np.asarray(xs, dtype=float)
    n = len(x)
    if n == 0:
        return np.empty(0)
    return x[_resamples(n)].mean(axis=1)


@functools.cache
def _resamples(n: int) -> np.ndarray:
    """Index arrays of the resamples of n values (the same for every call)."""
    if n <= EXACT_BOOTSTRAP_MAX_N:
        return np.indices((n,) * n).reshape(n, -1).T  # every ordered resample, once
    return np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))


def bootstrap_ci(xs: list[float] | np.ndarray, level: float = LEVEL) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean (as scipy.stats.bootstrap(method="percentile")):
    quantiles of the exact resample distribution for few values, numpy's linear percentiles of
    the drawn resample means otherwise; None for fewer than 2 values."""
    if len(xs) < 2:
        return None
    means = bootstrap_means(xs)
    tail = 100.0 * (1.0 - level) / 2.0
    if len(xs) <= EXACT_BOOTSTRAP_MAX_N:  # numpy's "inverted_cdf", without its overhead
        means.sort()
        n = len(means)
        lo = means[max(0, math.ceil(n * tail / 100.0 - 1e-9) - 1)]
        hi = means[min(n - 1, math.ceil(n * (100.0 - tail) / 100.0 - 1e-9) - 1)]
    else:
        lo, hi = np.percentile(means, [tail, 100.0 - tail], method="linear")
    lo_x, hi_x = float(np.min(xs)), float(np.max(xs))
    return max(float(lo), lo_x), min(float(hi), hi_x)  # rounding in the means never leaves the data's range


# ---- power ----------------------------------------------------------------------------------
def paired_power(effect: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired (one-sample) t-test at `alpha` with `n` pairs when the true
    standardised effect is `effect` (mean / sd of the differences)."""
    if n < 2:
        return float("nan")
    df = n - 1
    crit = t_quantile(1.0 - alpha / 2.0, df)
    nc = abs(effect) * math.sqrt(n)
    return 1.0 - _nct_cdf(df, nc, crit) + _nct_cdf(df, nc, -crit)


def _nct_cdf(df: int, nc: float, t: float) -> float:
    """P(T <= t) for T ~ noncentral t(df, nc): scipy.special.nctdtr, which returns NaN far in
    the tails of large effects; there the normal approximation (Abramowitz & Stegun 26.7.10),
    which is as good as 0 or 1 at those distances, stands in."""
    sp = _special()
    value = float(sp.nctdtr(df, nc, t))
    if math.isfinite(value):
        return value
    return float(sp.ndtr((t * (1.0 - 1.0 / (4.0 * df)) - nc) / math.sqrt(1.0 + t * t / (2.0 * df))))


def seeds_needed(effect: float, alpha: float = ALPHA, power: float = TARGET_POWER, max_n: int = MAX_SEEDS) -> int | None:
    """The smallest n >= 2 whose paired t-test reaches `power` for `effect`; None above `max_n`
    (or for no effect at all). Starts at the normal approximation n = ((z(1-α/2) + z(power)) / d)^2
    and steps from there (power grows with n): a few evaluations instead of a search."""
    if not math.isfinite(effect) or effect == 0:
        return None
    ndtri = _special().ndtri
    guess = ((float(ndtri(1.0 - alpha / 2.0)) + float(ndtri(power))) / abs(effect)) ** 2
    if guess > 4 * max_n:
        return None
    n = min(max_n, max(2, math.ceil(guess)))
    if paired_power(effect, n, alpha) >= power:
        while n > 2 and paired_power(effect, n - 1, alpha) >= power:
            n -= 1
        return n
    step = 1
    while n < max_n:  # the t-test needs a little more than the normal approximation: grow, then bisect
        nxt = min(max_n, n + step)
        if paired_power(effect, nxt, alpha) >= power:
            lo, hi = n, nxt
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if paired_power(effect, mid, alpha) >= power:
                    hi = mid
                else:
                    lo = mid
            return hi
        n, step = nxt, step * 2
    return None


# ---- multiple comparisons -------------------------------------------------------------------
def apply_holm(deltas: list[Delta], alpha: float = ALPHA) -> None:
    """Set `p_holm`, `power_holm` and `seeds_needed_holm` of every tested Δ: one family."""
    tests = [d for d in deltas if d.p is not None]
    for d, adjusted in zip(tests, holm([d.p for d in tests if d.p is not None])):
        d.p_holm = adjusted
        if d.effect is not None and d.n_pairs >= 2:
            level = alpha / len(tests)
            d.power_holm = paired_power(d.effect, d.n_pairs, level)
            d.seeds_needed_holm = seeds_needed(d.effect, level)


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the order given: the i-th smallest of m is
    multiplied by (m - i + 1), made non-decreasing, capped at 1."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


# ---- one row, one pair of rows --------------------------------------------------------------
def describe(values: dict[tuple, float]) -> Stat:
    """Mean, sample std, 95% CI half-width (Student's t) and bootstrap interval of the finite values."""
    xs = [v for v in values.values() if finite(v)]
    n = len(xs)
    if n == 0:
        return Stat(values, 0, None, None, None)
    mean = math.fsum(xs) / n
    if n < 2:
        return Stat(values, n, mean, None, None)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    boot = bootstrap_ci(xs)
    assert boot is not None
    return Stat(values, n, mean, std, t_quantile(0.975, n - 1) * std / math.sqrt(n), boot[0], boot[1])


def paired(row: Stat, base: Stat) -> Delta | None:
    """Δ of the means, the paired t-test, the bootstrap interval of the mean difference and the
    power over the seed cells both have."""
    if row.mean is None or base.mean is None:
        return None
    diff = row.mean - base.mean
    rel = 100.0 * diff / abs(base.mean) if base.mean else None
    keys = [k for k in row.values if k in base.values and finite(row.values[k]) and finite(base.values[k])]
    out = Delta(diff, rel, len(keys), None, None)
    if len(keys) < 2:
        return out
    d = [row.values[k] - base.values[k] for k in keys]
    boot = bootstrap_ci(d)
    assert boot is not None
    out.boot_lo, out.boot_hi = boot
    if max(d) - min(d) > 1e-12 * max(1.0, max(abs(x) for x in d)):
        # the paired t-test (what scipy.stats.ttest_rel computes): t = mean(d) / (sd(d) / sqrt(n))
        n = len(d)
        mean_d = math.fsum(d) / n
        sd = math.sqrt(math.fsum((x - mean_d) ** 2 for x in d) / (n - 1))
        out.t = mean_d / (sd / math.sqrt(n))
        out.p = t_two_sided_p(out.t, n - 1)
        out.effect = mean_d / sd
        out.power = paired_power(out.effect, n)
        out.seeds_needed = seeds_needed(out.effect)
    return out

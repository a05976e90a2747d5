"""Statistics over the seeds of one configuration: `Stat` (mean, sample std, 95% confidence
interval of the mean by Student's t) from `describe`, and `Delta` (the difference to a baseline
and the paired t-test over the seeds both finished, as scipy.stats.ttest_rel) from `paired`; the
t distribution comes from scipy.special, which imports much faster than scipy.stats."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .records import finite


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


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t (scipy.special: scipy.stats alone takes ~1 s to import)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


def t_two_sided_p(t: float, df: int) -> float:
    """Two-sided p value of a t statistic with `df` degrees of freedom."""
    from scipy.special import stdtr

    return float(2.0 * stdtr(df, -abs(t)))


def describe(values: dict[tuple, float]) -> Stat:
    """Mean, sample std and 95% CI half-width (Student's t) of the finite values."""
    xs = [v for v in values.values() if finite(v)]
    n = len(xs)
    if n == 0:
        return Stat(values, 0, None, None, None)
    mean = math.fsum(xs) / n
    if n < 2:
        return Stat(values, n, mean, None, None)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    return Stat(values, n, mean, std, t_quantile(0.975, n - 1) * std / math.sqrt(n))


def paired(row: Stat, base: Stat) -> Delta | None:
    """Δ of the means and the paired t-test over the seed cells both have."""
    if row.mean is None or base.mean is None:
        return None
    diff = row.mean - base.mean
    rel = 100.0 * diff / abs(base.mean) if base.mean else None
    keys = [k for k in row.values if k in base.values and finite(row.values[k]) and finite(base.values[k])]
    t = p = None
    if len(keys) >= 2:
        a = [row.values[k] for k in keys]
        b = [base.values[k] for k in keys]
        d = [x - y for x, y in zip(a, b)]
        if max(d) - min(d) > 1e-12 * max(1.0, max(abs(x) for x in d)):
            # the paired t-test (what scipy.stats.ttest_rel computes): t = mean(d) / (sd(d) / sqrt(n))
            n = len(d)
            mean_d = math.fsum(d) / n
            sd = math.sqrt(math.fsum((x - mean_d) ** 2 for x in d) / (n - 1))
            t = mean_d / (sd / math.sqrt(n))
            p = t_two_sided_p(t, n - 1)
    return Delta(diff, rel, len(keys), t, p)

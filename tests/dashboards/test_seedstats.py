"""The report's statistics against scipy on known samples: the percentile bootstrap of the mean
(exact for few seeds, drawn for more), the paired t-test and the bootstrap of the paired
difference, the power of the paired t-test (noncentral t) and the seeds it takes, Holm's
adjustment; then the Δ table of `compare` as one Holm family, and the hostile cases (1 seed,
NaN values, identical differences, a metric missing from a run)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from dashboards import html, tables
from dashboards.cells import seeds_cell, seeds_line
from dashboards.seedstats import (
    ALPHA,
    MAX_SEEDS,
    TARGET_POWER,
    bootstrap_ci,
    bootstrap_means,
    describe,
    holm,
    paired,
    paired_power,
    seeds_needed,
)
from dashboards.stats import compare
from tests.support.records import run, sweep_of


def scipy_percentile(x, n_resamples=400_000, seed=7):
    res = sps.bootstrap((np.asarray(x, float),), np.mean, method="percentile", n_resamples=n_resamples, rng=np.random.default_rng(seed))
    return res.confidence_interval.low, res.confidence_interval.high


SAMPLES = [
    [0.759, 0.743],
    [0.0, 0.0625, 0.0625],
    [0.12, 0.35, 0.08, 0.41],
    [1.0, 0.0, 0.0, 0.0, 0.28],  # a sink ratio of 5 seeds: Student's t runs below 0
    [6.021, 6.019, 6.052, 6.016, 6.027, 6.013],
    [3.1, 2.9, 3.6, 2.2, 3.0, 3.3, 2.7, 4.1, 3.5],  # more than 6 values: drawn resamples
]


@pytest.mark.parametrize("x", SAMPLES, ids=lambda x: f"n{len(x)}")
def test_percentile_bootstrap_matches_scipy(x):
    lo, hi = bootstrap_ci(x)
    slo, shi = scipy_percentile(x)
    spread = max(x) - min(x)
    # scipy draws its resamples; ours are every resample (n <= 6) or 20,000 fixed draws
    assert lo == pytest.approx(slo, abs=0.02 * spread) and hi == pytest.approx(shi, abs=0.02 * spread)
    assert min(x) <= lo <= np.mean(x) <= hi <= max(x)


def test_exact_bootstrap_is_every_resample_once():
    x = [0.2, 1.0, 5.0]
    means = bootstrap_means(x)
    expected = sorted(np.mean(r) for r in itertools.product(x, repeat=3))
    assert len(means) == 27 and np.allclose(sorted(means), expected)
    # two values: resample means x1, m, m, x2 (each 1/4): the 2.5% and 97.5% quantiles are x1, x2;
    # three: the lowest mean has probability 1/27 > 2.5%, so the interval is the range again
    assert bootstrap_ci([1.0, 3.0]) == (1.0, 3.0) and bootstrap_ci(x) == pytest.approx((0.2, 5.0))
    four = [0.0, 1.0, 2.0, 10.0]
    lo, hi = bootstrap_ci(four)
    cdf = sorted(np.mean(r) for r in itertools.product(four, repeat=4))
    assert (lo, hi) == pytest.approx((cdf[math.ceil(0.025 * 256) - 1], cdf[math.ceil(0.975 * 256) - 1])) and 0 < lo < hi < 10
    assert bootstrap_ci([2.0]) is None and bootstrap_ci([]) is None
    assert bootstrap_ci([x * 1.0 for x in range(9)]) == bootstrap_ci([x * 1.0 for x in range(9)])  # fixed draws: reproducible


def test_bootstrap_interval_stays_non_negative_where_students_t_does_not():
    x = SAMPLES[3]
    st = describe({(i,): v for i, v in enumerate(x)})
    mean, sd = np.mean(x), np.std(x, ddof=1)
    half = sps.t.ppf(0.975, len(x) - 1) * sd / math.sqrt(len(x))
    assert st.lo == pytest.approx(mean - half) and st.lo < 0  # the issue's [-0.268, 0.780] kind of interval
    assert st.boot_lo is not None and st.boot_hi is not None
    assert 0 <= st.boot_lo < mean < st.boot_hi <= 1


@pytest.mark.parametrize(("effect", "n"), [(1.0, 10), (0.5, 34), (0.8, 5), (2.5, 3), (3.0, 2), (0.2, 200), (-1.3, 6)])
def test_power_is_the_noncentral_t_of_scipy(effect, n):
    df = n - 1
    crit = sps.t.ppf(1 - ALPHA / 2, df)
    nc = abs(effect) * math.sqrt(n)
    expected = sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc)
    assert paired_power(effect, n) == pytest.approx(expected, rel=1e-9)


def test_power_matches_published_values_and_seeds_needed_is_the_smallest_n():
    # G*Power, one-sample / paired two-tailed t-test, α 0.05: d=1, n=10 -> 0.803; d=0.5, n=34 -> 0.808
    assert paired_power(1.0, 10) == pytest.approx(0.8031, abs=5e-4)
    assert paired_power(0.5, 34) == pytest.approx(0.8078, abs=5e-4)
    for effect in (0.5, 1.0, 1.7, 3.0, 12.0, 45.0):
        k = seeds_needed(effect)
        assert k is not None and paired_power(effect, k) >= TARGET_POWER
        assert k == 2 or paired_power(effect, k - 1) < TARGET_POWER
        brute = next(
            n for n in range(2, MAX_SEEDS + 1) if sps.nct.sf(sps.t.ppf(0.975, n - 1), n - 1, effect * math.sqrt(n)) >= TARGET_POWER
        )
        assert k == brute, effect
    assert seeds_needed(0.5) == 34 and seeds_needed(1.0) == 10
    assert seeds_needed(0.0) is None and seeds_needed(0.01) is None and seeds_needed(float("nan")) is None
    # a stricter level (Holm's α/m) asks for more seeds
    assert seeds_needed(1.0, ALPHA / 20) > seeds_needed(1.0)
    # far tails of large effects, where scipy.special.nctdtr returns NaN: still a probability
    assert 0.99 < paired_power(30.0, 2) <= 1.0 and paired_power(18.8, 250) == pytest.approx(1.0)


def test_holm_on_known_values():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx([0.05, 0.08, 0.09, 0.09, 0.09])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == [] and holm([0.2]) == [0.2]
    rng = np.random.default_rng(3)
    for _ in range(200):  # Holm's step-down test, written out: reject the i-th smallest while p <= α/(m-i)
        ps = list(rng.uniform(0, 0.06, size=rng.integers(1, 9)))
        order = np.argsort(ps)
        rejected = set()
        for i, j in enumerate(order):
            if ps[j] > ALPHA / (len(ps) - i):
                break
            rejected.add(j)
        assert {j for j, a in enumerate(holm(ps)) if a <= ALPHA} == rejected


def test_paired_test_and_interval_of_the_difference_match_scipy():
    row = {(0,): 0.054, (1,): 0.070, (2,): 0.057}
    base = {(0,): 0.759, (1,): 0.743, (2,): 0.762}
    d = paired(describe(row), describe(base))
    a, b = [row[k] for k in sorted(row)], [base[k] for k in sorted(base)]
    res = sps.ttest_rel(a, b)
    assert d.t == pytest.approx(res.statistic, rel=1e-9) and d.p == pytest.approx(res.pvalue, rel=1e-9)
    diffs = np.subtract(a, b)
    assert d.effect == pytest.approx(diffs.mean() / diffs.std(ddof=1))
    lo, hi = scipy_percentile(diffs)
    assert d.boot_lo == pytest.approx(lo, abs=0.02 * np.ptp(diffs)) and d.boot_hi == pytest.approx(hi, abs=0.02 * np.ptp(diffs))
    assert d.power == pytest.approx(paired_power(d.effect, 3)) and d.seeds_needed == seeds_needed(d.effect)


def test_hostile_seed_sets():
    one = paired(describe({(0,): 0.05}), describe({(0,): 0.75}))
    assert one.n_pairs == 1 and one.p is None and one.boot_lo is None and one.power is None and one.seeds_needed is None
    same = paired(describe({(0,): 0.0, (1,): 0.0}), describe({(0,): 1.0, (1,): 1.0}))  # a sink ratio of 1 -> 0 twice
    assert same.p is None and same.power is None and (same.boot_lo, same.boot_hi) == (-1.0, -1.0)
    nan = describe({(0,): float("nan"), (1,): 0.2, (2,): 0.4})
    assert nan.n == 2 and nan.boot_lo is not None and 0.2 <= nan.boot_lo <= nan.boot_hi <= 0.4
    disjoint = paired(describe({(0,): 1.0, (1,): 2.0}), describe({(2,): 1.0, (3,): 2.0}))
    assert disjoint.n_pairs == 0 and disjoint.p is None
    assert describe({}).boot_lo is None and describe({(0,): float("inf")}).n == 0


def three_gates(seeds=(0, 1, 2), fta=None):
    runs, i = [], 0
    fta = fta or {"none": [0.759, 0.743, 0.762], "G1-elementwise": [0.054, 0.070, 0.057], "G1-headwise": [0.035, 0.032, 0.06]}
    for gate, values in fta.items():
        for seed in seeds:
            i += 1
            ppl = [6.021, 6.019, 6.052, 6.016, 6.027, 6.013, 6.024, 6.016, 6.020][i - 1]
            m = {"first_token_attn": values[seed], "val_ppl": ppl, "sink_ratio": 1.0 if gate == "none" else 0.0}
            runs.append(run(i, gate, "0.01", seed, metrics=m))
    return sweep_of(runs, axes="model.gate,train.seed")


def test_the_delta_table_is_one_holm_family():
    comp = compare(three_gates())
    tests = [(row, k, d) for row in comp.rows for k, d in row.deltas.items() if d.p is not None]
    assert comp.n_tests == len(tests) == 4  # 2 gated rows x (first_token_attn, val_ppl); sink_ratio: identical differences
    adjusted = holm([d.p for _, _, d in tests])
    for (_, _, d), a in zip(tests, adjusted):
        assert d.p_holm == pytest.approx(a) and d.p_holm >= d.p
        assert d.seeds_needed_holm == seeds_needed(d.effect, ALPHA / comp.n_tests)
        assert d.seeds_needed_holm is None or d.seeds_needed is None or d.seeds_needed_holm >= d.seeds_needed
    g1 = next(r for r in comp.rows if r.axes["model.gate"] == "G1-elementwise")
    assert g1.deltas["first_token_attn"].significant
    line = seeds_line(comp, g1, "first_token_attn")
    assert line and "Holm" in line and "significant at 0.05 over 4 tests" in line and "seeds" in line
    assert "identical" in (seeds_line(comp, g1, "sink_ratio") or "")
    md, page, csv = tables.markdown(comp), html.render(comp), tables.csv_text(comp)
    # the seeds needed are a table (a cell per comparison and metric), the sentence the cell's tooltip
    assert "## Seeds needed" in md and seeds_cell(g1.deltas["first_token_attn"]) in md and line not in md
    assert html.esc(line) in page and "Holm" in page and "seeds_needed" in csv.splitlines()[0]
    assert "first_token_attn.p_holm" in csv.splitlines()[0] and "first_token_attn.boot95_lo" in csv.splitlines()[0]
    text = tables.terminal(comp)
    assert "Seeds needed (80% power" in text and max(map(len, text.splitlines())) <= 100


def test_one_seed_and_runs_without_metrics_render():
    comp = compare(three_gates(seeds=(0,)))
    assert comp.n_tests == 0 and all(d.p is None and d.p_holm is None for r in comp.rows for d in r.deltas.values())
    g1 = next(r for r in comp.rows if r.axes["model.gate"] == "G1-elementwise")
    assert "at least 2 seeds are needed" in (seeds_line(comp, g1, "first_token_attn") or "")
    empty = compare(sweep_of([run(1, "none", "0.01", 0), run(2, "G1-elementwise", "0.01", 0)], axes="model.gate,train.seed"))
    assert empty.metrics == [] and empty.n_tests == 0
    for render in (tables.terminal, tables.markdown, tables.csv_text, tables.latex, html.render):
        assert render(comp) and render(empty)

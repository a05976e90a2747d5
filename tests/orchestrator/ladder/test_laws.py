"""The law fitter (`orchestrator.ladder.laws`): it reproduces a published law on data nobody here
made (Chinchilla's Figure 4 as Epoch AI extracted it), refits in batches to the same optimum, and
turns everything it cannot fit into `NoFit` with the reason, naming parameters left at a bound."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from orchestrator.ladder.laws import ALPHA_MAX, Data, NoFit, fit, huber, predict_log, refit

CHINCHILLA = Path(__file__).resolve().parents[2] / "data" / "chinchilla_fig4_extracted.csv"
PUBLISHED = {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
"""Besiroglu et al. 2024's refit of Chinchilla's approach 3 (REFERENCE §8)."""


def chinchilla() -> Data:
    """All runs but the 5 of highest loss, as Besiroglu et al. fitted them; D = C / 6N."""
    with CHINCHILLA.open(newline="") as f:
        rows = [(float(r["Model Size"]), float(r["Training FLOP"]), float(r["loss"])) for r in csv.DictReader(f)]
    assert len(rows) == 245
    rows = sorted(rows, key=lambda r: r[2])[:-5]
    return Data.of([[n, c / (6 * n)] for n, c, _ in rows], [loss for *_, loss in rows])


def test_the_fit_reproduces_the_published_chinchilla_law():
    law = fit(chinchilla())
    assert pytest.approx(PUBLISHED["E"], rel=0.01) == law.E
    assert law.alpha == pytest.approx(PUBLISHED["alpha"], rel=0.01)
    assert law.beta == pytest.approx(PUBLISHED["beta"], rel=0.01)
    assert law.A[0] == pytest.approx(PUBLISHED["A"], rel=0.10)
    assert law.A[1] == pytest.approx(PUBLISHED["B"], rel=0.10)
    assert law.at_bound == ()
    # and the optimum a plain SciPy L-BFGS-B fit finds from its grid of starts (REFERENCE §8)
    assert (law.E, law.alpha, law.beta) == pytest.approx((1.8172, 0.3473, 0.3672), abs=5e-4)


def test_the_fit_is_a_minimum_of_the_huber_objective():
    data = chinchilla()
    law = fit(data)
    theta = law.theta()
    base = huber(predict_log(theta, data.logx) - data.y, data.delta).sum()
    assert base == pytest.approx(law.objective, rel=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(50):  # no nearby point is better
        nudged = theta + rng.normal(0, 1e-3, theta.shape)
        assert huber(predict_log(nudged, data.logx) - data.y, data.delta).sum() >= base - 1e-12


def test_refits_in_a_batch_reach_the_fits_own_optimum():
    data = chinchilla()
    law = fit(data)
    theta = refit(law, data, np.stack([data.y, data.y]))
    assert np.allclose(theta, law.theta(), atol=1e-6)
    # a batch of perturbed targets: each row is as good as a fresh fit of its own data
    rng = np.random.default_rng(1)
    y = data.y + rng.normal(0, 0.01, (3, len(data.y)))
    batch = refit(law, data, y)
    for row, yy in zip(batch, y):
        fresh = fit(Data(data.logx, yy, data.w, data.delta))
        mine = huber(predict_log(row, data.logx) - yy, data.delta).sum()
        assert mine <= fresh.objective * (1 + 1e-6) + 1e-12


def test_one_input_recovers_a_known_law():
    c = np.geomspace(1e11, 1e13, 6)
    law = fit(Data.of(c[:, None], 1.6 + 40.0 * c**-0.18))
    assert (law.E, law.A[0], law.alpha) == pytest.approx((1.6, 40.0, 0.18), rel=1e-3)
    assert law.loss(3e12) == pytest.approx(1.6 + 40.0 * 3e12**-0.18, rel=1e-6)


@pytest.mark.parametrize(
    "inputs, losses, reason",
    [
        ([1e11, 1e12], [2.0, 1.9], "2 distinct point(s)"),
        ([1e11, 1e12, 1e13], [2.0, math.nan, 1.8], "2 distinct point(s)"),
        ([1e11, 1e12, 1e13], [2.0, 0.0, -1.0], "1 distinct point(s)"),
        ([1e11, 1e11, 1e11, 1e11], [2.0, 1.9, 1.8, 1.7], "1 distinct point(s)"),
        ([math.inf, 1e12, -1e13], [2.0, 1.9, 1.8], "1 distinct point(s)"),
        ([], [], "0 distinct point(s)"),
    ],
)
def test_what_cannot_be_fitted_is_nofit_with_the_reason(inputs, losses, reason):
    with pytest.raises(NoFit, match=reason.replace("(", r"\(").replace(")", r"\)")):
        fit(Data.of(np.asarray(inputs, float).reshape(-1, 1), losses))
    with pytest.raises(NoFit, match="differ in length"):
        Data.of([[1.0], [2.0]], [1.0])


def test_a_pure_power_law_leaves_e_at_zero_and_says_so():
    c = np.geomspace(1e11, 1e13, 5)
    law = fit(Data.of(c[:, None], 40.0 * c**-0.18))  # E = 0: the old fitter crashed on log(E)
    assert "E at 0" in law.at_bound
    assert law.alpha == pytest.approx(0.18, rel=1e-2) and np.isfinite(law.theta()).all()


def test_a_flat_or_rising_ladder_is_fitted_at_a_bound_not_a_crash():
    c = np.geomspace(1e11, 1e13, 4)
    flat = fit(Data.of(c[:, None], [2.0, 2.0, 2.0, 2.0]))
    rising = fit(Data.of(c[:, None], [1.8, 1.9, 2.0, 2.1]))
    for law in (flat, rising):
        assert law.at_bound, law
        assert all(math.isfinite(x) for x in (law.E, law.alpha, *law.A))
        assert 0 < law.alpha < ALPHA_MAX

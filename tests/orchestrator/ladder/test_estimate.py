"""A ladder's analysis (`orchestrator.ladder.estimate.analyse`) on synthetic ladders with a known
answer: it recovers the multiplier, its anchoring cancels a bump both arms share, one arm's failure
stays its own, nothing measured from one seed gets an interval, and no ladder — however damaged —
makes it raise."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from orchestrator.ladder import multipliers as mx
from orchestrator.ladder import synthetic as sy
from orchestrator.ladder.answers import ArmResult
from orchestrator.ladder.estimate import _fit_arm, analyse
from orchestrator.ladder.laws import Law
from orchestrator.ladder.runs import Run

E, A, ALPHA = sy.LAW


def law(c: float) -> float:
    return E + A * c ** (-ALPHA)


def ladder(m=1.5, rungs=5, seeds=3, noise=0.004, ratio=1.05, bump=None, rng=None, arms=("arm",)) -> list[Run]:
    """A clean ladder: the arm costs `ratio` more FLOPs per token and is worth `m` x its compute;
    `bump` = (rung, factor) multiplies both arms' losses at one rung (a lack of fit they share)."""
    rng = rng or np.random.default_rng(3)
    out = []
    for r, c in enumerate(np.geomspace(1.26e11, 1.26e13, rungs)):
        for s in range(seeds):
            common = rng.normal(0, noise * 0.7)
            for arm, mm, rr in (("base", 1.0, 1.0), *((a, m, ratio) for a in arms)):
                loss = law(mm * c * rr) * math.exp(common + rng.normal(0, noise * 0.7))
                if bump is not None and bump[0] == r:
                    loss *= bump[1]
                out.append(Run(arm, f"r{r}", str(s), c * rr, loss))
    return out


def test_the_known_multiplier_is_recovered_at_every_rung_and_jointly():
    an = analyse(ladder(m=1.5), "base", target=1e15, replicates=500)
    res = an.arms["arm"]
    assert an.form == "L(C)" and an.rungs == [f"r{i}" for i in range(5)]
    covered = [est.low <= 1.5 <= est.high for est in res.rungs.values()]
    assert sum(covered) >= 4, res.rungs  # 95% intervals: one of five may miss (the calibration test counts how often)
    for est in res.rungs.values():
        assert est.value == pytest.approx(1.5, rel=0.15)
    assert res.joint.low <= 1.5 <= res.joint.high and res.verdicts["joint"] == "helps"
    assert an.headline["arm"] == "joint" and res.target is res.joint and res.target_from == "joint fit"
    assert res.rollout is not None and res.rollout.holds is True
    assert an.arms["base"].law.alpha == pytest.approx(ALPHA, rel=0.2)


def test_anchoring_cancels_a_lack_of_fit_that_both_arms_share():
    # a variant worth exactly its FLOPs, and a +3% bump at the second rung for both arms
    runs = ladder(m=1.0, noise=1e-4, bump=(1, 1.03))
    an = analyse(runs, "base", replicates=300)
    base = an.arms["base"].law
    anchored = an.arms["arm"].rungs["r1"].value
    # what the unanchored definition (the arm's loss read through the baseline's law) says there
    ca, la = next((r.compute, r.loss) for r in runs if r.arm == "arm" and r.rung == "r1")
    unanchored = math.exp(float(mx.log_compute_for_c(base.theta(), la))) / ca
    assert anchored == pytest.approx(1.0, abs=0.02)
    assert abs(unanchored - 1.0) > 0.1, unanchored  # the baseline's misfit, taken for the arm's effect


def test_one_seed_gives_no_interval_and_no_verdict_anywhere():
    an = analyse(ladder(seeds=1), "base", target=1e15, replicates=200)
    res = an.arms["arm"]
    ests = [*res.rungs.values(), res.joint, res.target, *res.params.values(), *an.arms["base"].params.values()]
    for est in ests:
        assert est is not None and est.p is None and not (math.isfinite(est.low) or math.isfinite(est.high)), est
        assert "1 seed" in est.note, est
    assert set(res.verdicts.values()) == {"no interval: 1 seed"}
    assert any("one seed" in n for n in an.notes)


def test_two_seeds_give_wide_but_real_intervals():
    an = analyse(ladder(seeds=2), "base", replicates=400)
    for est in an.arms["arm"].rungs.values():
        assert est.p is not None and est.low < est.value < est.high


def test_an_arm_that_diverged_everywhere_is_its_own_no_fit():
    runs = ladder(arms=("arm", "bad"))
    runs = [Run(r.arm, r.rung, r.seed, r.compute, math.nan) if r.arm == "bad" else r for r in runs]
    an = analyse(runs, "base", replicates=300)
    assert "finished runs at 0 rung(s)" in an.arms["bad"].no_fit
    assert an.arms["base"].law is not None and an.arms["arm"].law is not None
    assert an.arms["arm"].verdicts["joint"] == "helps"
    assert any("non-finite" in n and "bad at r0" in n for n in an.notes)


def test_damaged_values_are_left_out_and_said():
    runs = ladder()
    runs[0] = Run(runs[0].arm, runs[0].rung, runs[0].seed, math.inf, runs[0].loss)
    runs[1] = Run(runs[1].arm, runs[1].rung, runs[1].seed, runs[1].compute, -1.0)
    an = analyse(runs, "base", replicates=200)
    assert an.arms["arm"].joint.p is not None
    assert any("2 run(s)" in n for n in an.notes)


def test_three_rungs_fit_but_cannot_check_their_own_extrapolation():
    an = analyse(ladder(rungs=3), "base", target=1e15, replicates=300)
    res = an.arms["arm"]
    assert res.law is not None and res.rollout.holds is None and "needs 4" in res.rollout.note
    assert an.misfit == (0.0, 0)


def test_a_target_below_the_smallest_rung_is_an_extrapolation():
    an = analyse(ladder(), "base", target=1e3, replicates=100)
    assert an.extrapolated and an.extrapolation < 1e-6


def test_several_points_per_run_fit_l_of_n_and_d():
    s = sy.Setting(rungs=4, seeds=3, multiplier=1.5, fractions=(0.25, 0.5, 1.0), bump=0.0)
    an = analyse(sy.ladder(s, np.random.default_rng(2)), "base", target=1e15, replicates=400)
    res = an.arms["arm"]
    assert an.form == "L(N, D)"
    assert an.arms["base"].law.inputs == ("N", "D") and an.arms["base"].law.beta == pytest.approx(sy.ND_LAW[4], rel=0.35)
    assert sum(est.low <= 1.5 <= est.high for est in res.rungs.values()) >= 3, res.rungs
    assert res.optimal_n is not None and res.optimal_n.value > 0
    assert "gamma" in res.params


def test_the_rollout_flags_a_largest_rung_the_law_does_not_reach():
    clean = analyse(ladder(noise=0.002), "base", replicates=400)
    assert all(r.rollout.holds for r in clean.arms.values())
    bent = [Run(r.arm, r.rung, r.seed, r.compute, r.loss * (1.06 if r.rung == "r4" else 1.0)) for r in ladder(noise=0.002)]
    an = analyse(bent, "base", replicates=400)
    assert an.arms["base"].rollout.holds is False and an.arms["arm"].rollout.holds is False


def test_an_equivalence_margin_says_no_practical_difference():
    an = analyse(ladder(m=1.0, noise=0.001, seeds=5), "base", replicates=600, margin=0.1)
    assert an.arms["arm"].verdicts["joint"] == "no practical difference (within 10%)"


def test_no_baseline_runs_is_a_reason_for_every_arm():
    an = analyse([r for r in ladder() if r.arm != "base"], "base", replicates=100)
    assert all("no finished runs of the baseline arm" in r.no_fit for r in an.arms.values())


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2, 3, 4))])
def test_random_damaged_ladders_never_raise(seed):
    """Hundreds of ladders drawn at random — any number of rungs and seeds, flat, rising, E = 0,
    NaN, infinite, zero and negative losses and computes, duplicated rungs, missing arms — and
    every answer is a number with an interval, or says why not; no zero-width interval."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(60):
        rungs, seeds = int(rng.integers(1, 8)), int(rng.integers(1, 5))
        e = float(rng.choice([0.0, 1.0, 2.5]))
        alpha = float(rng.choice([-0.1, 0.0, 0.05, 0.3, 2.9]))
        runs = []
        for r in range(rungs):
            c = 1e11 * 3.0 ** int(rng.integers(0, rungs))
            for s in range(seeds):
                for arm in ("base", "a", "b")[: int(rng.integers(1, 4))]:
                    loss = (e + 10.0 * c ** (-alpha)) * math.exp(rng.normal(0, float(rng.choice([0.0, 0.01, 0.3]))))
                    if rng.random() < 0.1:
                        loss = float(rng.choice([math.nan, math.inf, 0.0, -1.0, 1e308]))
                    comp = c if rng.random() > 0.05 else float(rng.choice([math.nan, 0.0, -5.0]))
                    runs.append(Run(arm, f"r{r}", str(s), comp, loss))
        an = analyse(runs, "base", target=float(rng.choice([1e3, 1e15, math.nan])), replicates=60, margin=0.05)
        for res in an.arms.values():
            for est in [*res.rungs.values(), res.joint, res.target, res.trend, *res.params.values()]:
                if est is None or est.p is None:
                    continue
                assert not (est.low > est.high), est
                assert est.low != est.high or math.isinf(est.low), est
            assert set(res.verdicts) <= {*res.rungs, "joint", "target"}


def test_an_e_at_its_zero_bound_is_shown_as_zero_without_an_interval():
    """ladder_cpu's real fit left E at 4.85e-40 (its bound, 0): the report showed that number;
    it must show the bound, 0, with the note and no interval."""
    law = Law(("N", "D"), 4.85e-40, (3.0, 40.0), (0.17, 0.25), at_bound=("E at 0",))
    res = ArmResult("base", law)
    ctx = SimpleNamespace(refit_law=lambda law, cells: None, arm_cells=lambda arm: [])
    _fit_arm(ctx, res)  # type: ignore[arg-type]
    est = res.params["E"]
    assert est.value == 0.0 and "E at 0" in est.note, est
    assert not (math.isfinite(est.low) or math.isfinite(est.high)), est
    assert res.params["alpha"].value == 0.17  # a parameter off its bound keeps its fitted value

"""A ladder's analysis in the report (`dashboards.ladder`, `orchestrator.scaling`) on runs whose
losses follow a known law: the fits recover it, the multipliers the known effective-compute gain,
the intervals cover it; and what the analysis must refuse to make up (too few rungs, NaN losses,
failed seeds, a missing baseline, runs without their compute)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dashboards.ladder import analyse, verdict
from dashboards.ladder_tables import ladder_markdown, ladder_terminal
from dashboards.records import SweepRuns, make_record
from dashboards.report_json import report_document, report_json
from dashboards.stats import compare
from orchestrator.scaling import Interval, NoFit, Points, fit_laws

E, A, ALPHA = 1.6, 40.0, 0.18
RUNGS = {"d32-l2": 1.2e11, "d48-l2": 4.0e11, "d64-l2": 1.6e12, "d96-l2": 7.5e12}
GAIN = 1.5
"""The gated arm reaches the baseline's loss at GAIN x the baseline's compute."""
FLOP_SHARE = 1.06
"""The gated arm's FLOPs per token over the baseline's."""


def law(c: float) -> float:
    return E + A * c ** (-ALPHA)


def _run(i: int, gate: str, rung: str, seed: int, loss: float, flops: float, status: str = "FINISHED"):
    rec = make_record(
        f"run{i:04d}",
        f"{gate}-{rung}-s{seed}",
        status,
        params={},
        metrics={"val_loss": loss, "train_flops": flops, "first_token_attn": 0.5 if gate == "none" else 0.05},
        tags={},
        start_time=i,
        end_time=i + 1,
        experiment_id="1",
        artifact_uri="",
    )
    rec.axes = {"model.gate": gate, "ladder.rung": rung, "train.seed": str(seed)}
    return rec


def sweep_of(rungs=RUNGS, seeds=(0, 1, 2), noise=0.004, gain=GAIN, tweak=None, data_seed=7) -> SweepRuns:
    rng = np.random.default_rng(data_seed)
    runs, i = [], 0
    for rung, c in rungs.items():
        for seed in seeds:
            for gate in ("none", "G1-elementwise"):
                flops = c if gate == "none" else c * FLOP_SHARE
                loss = law(c) if gate == "none" else law(gain * flops)
                loss *= math.exp(rng.normal(0.0, noise))
                run = _run(i, gate, rung, seed, loss, flops)
                if tweak is not None:
                    run = tweak(run)
                if run is not None:
                    runs.append(run)
                i += 1
    parent = make_record("parent", "lad", "FINISHED", params={}, metrics={}, tags={"gatesweep.kind": "sweep", "gatesweep.sweep": "lad"},
                         start_time=0, end_time=1, experiment_id="1", artifact_uri="")  # fmt: skip
    return SweepRuns("lad", "sqlite:///x.db", "1", "e", parent, runs, 1, axes=["model.gate", "ladder.rung", "train.seed"])


def test_the_fit_recovers_the_law_and_the_known_multiplier():
    comp = compare(sweep_of())
    lad = analyse(comp, target=1e14, replicates=120)
    assert lad.rungs == list(RUNGS), "rungs ordered by compute, not by name"
    assert lad.baseline == "none"
    fit = lad.fit_of("val_loss").fit
    base = fit.laws["none"]
    # E and alpha trade off over 1.8 decades of compute: the curve is pinned, the two are not
    for c in RUNGS.values():
        assert base.loss(c) == pytest.approx(law(c), rel=0.01)
    assert 0 < base.alpha < 3 and min(law(c) for c in RUNGS.values()) > base.E
    assert fit.alpha["none"].low <= fit.alpha["none"].value <= fit.alpha["none"].high
    assert "helps" in lad.fit_of("val_loss").verdicts["G1-elementwise"].values()


@pytest.mark.slow
def test_the_multiplier_is_centred_on_the_truth_and_its_interval_covers_it():
    """Over 10 synthetic ladders with a known 1.5x gain (3 seeds, 0.4% noise): the estimates'
    median is within 10% of it at every rung and the 95% intervals cover it in at least 85% of
    the cases (measured 90%); over 10 ladders of a variant worth exactly its FLOPs, at most 10%
    of the verdicts say `helps` or `hurts` (measured 2.5%; the seed bootstrap: 87.5% and 22.5%)."""
    covered, values, wrong = 0, {r: [] for r in RUNGS}, 0
    for k in range(10):
        fit = analyse(compare(sweep_of(data_seed=100 + k)), target=1e14, replicates=80).fit_of("val_loss").fit
        for rung in RUNGS:
            m = fit.multipliers["G1-elementwise"][rung]
            covered += m.low <= GAIN <= m.high
            values[rung].append(m.value)
        null = analyse(compare(sweep_of(data_seed=200 + k, gain=1.0)), target=1e14, replicates=80)  # worth exactly its FLOPs
        wrong += sum(v in ("helps", "hurts") for r, v in null.fit_of("val_loss").verdicts["G1-elementwise"].items() if r != "target")
    for rung, vs in values.items():
        assert float(np.median(vs)) == pytest.approx(GAIN, rel=0.1), (rung, vs)
    assert covered / (10 * len(RUNGS)) >= 0.85, covered
    assert wrong / (10 * len(RUNGS)) <= 0.10, wrong


def test_the_baseline_against_itself_is_one_and_shared_e_is_one_e():
    lad = analyse(compare(sweep_of()), target=1e14, replicates=60, shared_e=True)
    laws = lad.fit_of("val_loss").fit.laws
    assert pytest.approx(laws["G1-elementwise"].E) == laws["none"].E
    from orchestrator.scaling import multiplier

    assert multiplier(laws["none"], laws["none"], 3e11) == pytest.approx(1.0)


def test_the_target_far_beyond_the_rungs_is_said_to_be_an_extrapolation():
    lad = analyse(compare(sweep_of()), replicates=40)  # default target: dense-1.7b x 400B tokens
    assert lad.target > 1e21 and lad.beyond > 1e8
    text = ladder_terminal(lad)
    assert "an extrapolation, not a measurement" in text and "dense-1.7b" in text


def test_verdicts():
    assert verdict(Interval(1.5, 1.2, 1.9)) == "helps"
    assert verdict(Interval(0.8, 0.7, 0.9)) == "hurts"
    assert verdict(Interval(1.1, 0.9, 1.3)) == "undecided"
    assert verdict(Interval(2.0, 0.5, 40.0)) == "too wide to decide"
    assert verdict(Interval(2.0, 0.5, math.inf)) == "too wide to decide"
    assert verdict(Interval(2.0, math.nan, math.nan)) == "no interval"


def test_two_rungs_give_no_fit_and_say_why():
    two = dict(list(RUNGS.items())[:2])
    lad = analyse(compare(sweep_of(rungs=two)), target=1e14, replicates=10)
    mf = lad.fit_of("val_loss")
    assert mf.fit is None and "2 rung(s); a fit needs 3" in mf.no_fit
    assert "no fit" in ladder_terminal(lad)
    doc = report_document(compare(sweep_of(rungs=two)))
    assert doc["ladder"] is None  # compare alone has no ladder: the report attaches it


def test_nan_losses_and_failed_seeds_are_left_out_and_said():
    def tweak(run):
        if run.axes["ladder.rung"] == "d48-l2" and run.axes["train.seed"] == "1" and run.axes["model.gate"] == "G1-elementwise":
            run.metrics["val_loss"] = float("nan")
        if run.axes["ladder.rung"] == "d96-l2" and run.axes["train.seed"] == "2" and run.axes["model.gate"] == "none":
            return _run(9999, "none", "d96-l2", 2, float("nan"), 7.5e12, status="FAILED")
        return run

    comp = compare(sweep_of(tweak=tweak))
    lad = analyse(comp, target=1e14, replicates=60)
    fit = lad.fit_of("val_loss").fit
    assert fit is not None and all(math.isfinite(law.alpha) for law in fit.laws.values())
    notes = " ".join(lad.notes + fit.notes)
    assert "none at d96-l2: the fits use the 2 of 3 seeds that finished" in notes
    assert "non-finite val_loss left out: G1-elementwise at d48-l2" in notes
    json.loads(json.dumps(report_document(comp)))  # still strict JSON


def test_no_baseline_arm_and_missing_compute_are_reasons_not_numbers():
    def no_base(run):
        return None if run.axes["model.gate"] == "none" else run

    lad = analyse(compare(sweep_of(tweak=no_base)), target=1e14, replicates=10)
    assert lad.fit_of("val_loss").fit is None and "no baseline arm" in lad.fit_of("val_loss").no_fit

    def no_flops(run):
        run.metrics.pop("train_flops")
        return run

    lad = analyse(compare(sweep_of(tweak=no_flops)), target=1e14, replicates=10)
    assert lad.fit_of("val_loss").fit is None
    assert any("logged no train_flops" in n for n in lad.notes)


def test_the_json_document_has_the_documented_keys_and_is_strict():
    comp = compare(sweep_of())
    comp.ladder = analyse(comp, target=1e14, replicates=60)
    doc = json.loads(report_json(comp))
    assert doc["schema"] == "gatesweep.report/1"
    assert {"sweep", "axes", "rows", "effects", "unfinished", "ladder", "metrics", "holm_tests"} <= set(doc)
    lad = doc["ladder"]
    assert [r["rung"] for r in lad["rungs"]] == list(RUNGS)
    arms = lad["fits"]["val_loss"]["arms"]
    assert set(arms) == {"none", "G1-elementwise"}
    g1 = arms["G1-elementwise"]
    assert {"value", "low", "high", "replicates"} <= set(g1["alpha"])
    assert set(g1["multiplier"]["rungs"]) == set(RUNGS) and {"value", "low", "high"} <= set(g1["multiplier"]["target"])
    assert arms["none"]["multiplier"] is None and g1["verdict"]["target"] in {"helps", "hurts", "undecided", "too wide to decide"}
    assert lad["target"]["flops"] == 1e14 and "extrapolated" in lad["target"]
    assert "first_token_attn" in lad["trends"]
    md = ladder_markdown(comp.ladder)
    assert "## Scaling ladder" in md and "effective-compute multiplier" in md


def test_fit_laws_refuses_what_it_cannot_fit():
    with pytest.raises(NoFit, match="a fit needs 3"):
        fit_laws({"a": Points.of([(1e11, 2.0, "r0", 0), (1e12, 1.9, "r1", 0)])})
    nan = Points.of([(1e11, math.nan, "r0", 0), (1e12, math.nan, "r1", 0), (1e13, math.nan, "r2", 0)])
    with pytest.raises(NoFit):
        fit_laws({"a": nan})


def test_the_fit_reaches_scipys_optimum_of_the_same_loss():
    """The Levenberg–Marquardt fit finds the optimum scipy's bounded robust least squares finds."""
    from scipy.optimize import least_squares

    from dashboards.ladder import _arms, _points
    from orchestrator import scaling as sc

    arms = {a.label: _points(a, "val_loss") for a in _arms(compare(sweep_of()))}
    groups = [(np.log(p.compute), np.log(p.loss)) for p in arms.values()]
    for shared in (False, True):
        laws = list(sc.fit_laws(arms, shared_e=shared).values())
        theta = [x for law_ in laws for x in (math.log(law_.A), law_.alpha)]
        theta += [math.log(laws[0].E)] if shared else [math.log(law_.E) for law_ in laws]
        mine = sc._huber_cost(sc._residuals(np.array(theta), groups, shared))
        floors = [float(np.min(lg)) for _, lg in groups]
        e_high = [min(floors) - 1e-6] if shared else [f - 1e-6 for f in floors]
        lo = np.array([-np.inf, 1e-4] * len(groups) + [h - 20 for h in e_high])
        hi = np.array([np.inf, sc.ALPHA_MAX] * len(groups) + e_high)
        scipy_best = min(
            sc._huber_cost(sc._residuals(least_squares(sc._residuals, np.clip(t0, lo + 1e-9, hi - 1e-9), jac=sc._jacobian, bounds=(lo, hi),
                                                       loss="huber", f_scale=sc.HUBER_DELTA, args=(groups, shared)).x, groups, shared))
            for t0 in sc._starts(groups, shared)
        )  # fmt: skip
        assert mine <= scipy_best * (1 + 1e-6)


def test_the_baseline_arm_is_the_one_the_others_are_compared_with():
    """Two ungated arms (the plain and the parameter-matched baseline): the report's baseline rule
    picks the one the gated arm is compared with, and --baseline can pick the other."""

    def matched(run):
        run.axes["model.ffn_dim"] = "176"
        return run

    sweep = sweep_of(tweak=matched)
    extra = []
    for run in [r for r in sweep.runs if r.axes["model.gate"] == "none"]:
        twin = _run(len(sweep.runs) + len(extra), "none", run.axes["ladder.rung"], int(run.axes["train.seed"]), run.metrics["val_loss"] * 0.999,
                    run.metrics["train_flops"] * FLOP_SHARE)  # fmt: skip
        twin.axes["model.ffn_dim"] = "197"
        extra.append(twin)
    sweep.runs += extra
    sweep.axes = ["model.gate", "ladder.rung", "model.ffn_dim", "train.seed"]
    lad = analyse(compare(sweep), target=1e14, replicates=20)
    assert lad.baseline == "none, ffn_dim=176" and len(lad.arms) == 3
    assert set(lad.fit_of("val_loss").fit.multipliers) == {"G1-elementwise, ffn_dim=176", "none, ffn_dim=197"}
    lad = analyse(compare(sweep, baseline={"model.ffn_dim": "197"}), target=1e14, replicates=20)
    assert lad.baseline == "none, ffn_dim=197"


def test_a_target_below_the_rungs_is_said_to_be_one():
    lad = analyse(compare(sweep_of()), target=1e9, replicates=10)
    assert any("lies below the smallest rung" in n for n in lad.notes)


def test_a_flat_ladder_gives_multipliers_not_a_crash():
    """Losses that do not fall with compute (a `--smoke` ladder of 4 steps per rung) fit α at its
    lower bound: the multipliers are what a flat law gives (0, 1 or inf), never a ZeroDivisionError."""
    from orchestrator.scaling import Law

    flat = Law(E=1.0, A=2.0, alpha=0.0)
    assert flat.compute_for(2.5) == math.inf and flat.compute_for(3.5) == 0.0 and flat.compute_for(3.0) == 1.0
    assert Law(E=1.0, A=2.0, alpha=1e-300).compute_for(2.5) == math.inf  # past the float range, not OverflowError

    def flatten(run):
        run.metrics["val_loss"] = 5.55 + 1e-3 * (int(run.name[-1]) - 1)  # the seed's wobble, no trend
        return run

    comp = compare(sweep_of(tweak=flatten))
    comp.ladder = analyse(comp, replicates=20)
    doc = json.loads(report_json(comp))  # strict JSON
    assert doc["ladder"]["fits"]["val_loss"] is not None
    assert "effective-compute multiplier" in ladder_terminal(comp.ladder)

"""A ladder sweep in the report (`dashboards.ladder` over `orchestrator.ladder`): the comparison's
rows become the ladder's records, the baseline arm is picked by the one rule (in either spelling of
an axis), the section is written in every format and as strict JSON, and what cannot be fitted is
said, never made up. The numerics themselves are tested in tests/orchestrator/ladder/."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from dashboards import ladder as dl
from dashboards.records import StoreError, SweepRuns, make_record
from dashboards.report_json import report_document, report_json
from dashboards.stats import compare
from dashboards.tables_terminal import terminal
from orchestrator.ladder.section import Table, parts

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
        params={"model.gate.position": "none" if gate == "none" else "G1", "model.attention.kind": "softmax"},
        metrics={"val_loss": loss, "train_flops": flops, "flops_per_token": 1e6, "first_token_attn": 0.5 if gate == "none" else 0.05},
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


def analyse(comp, **kw):
    kw.setdefault("target", 1e14)
    kw.setdefault("replicates", 300)
    return dl.analyse(comp, **kw)


def test_the_report_recovers_the_known_multiplier_and_writes_every_format():
    comp = compare(sweep_of())
    rep = analyse(comp, replicates=1000)  # Holm over 5 tests needs p < 0.01: a resolution of 1/1000
    assert rep.baseline == "none" and rep.rungs == list(RUNGS), "rungs ordered by compute, not by name"
    an = rep.analysis("val_loss")
    g1 = an.arms["G1-elementwise"]
    assert g1.joint.low <= GAIN <= g1.joint.high and g1.verdicts["joint"] == "helps"
    text = dl.terminal(rep)
    for heading in ("Scaling ladder: 4 rungs, 2 arms", "effective-compute multiplier vs none (val_loss)", "verdicts (val_loss)",
                    "rollout (val_loss)", "what the ladder says (val_loss)", "first_token_attn per rung"):  # fmt: skip
        assert heading in text, heading
    md = dl.markdown(rep)
    assert "## Scaling ladder" in md and re.search(r"\| arm +\| d32-l2 +\|", md) and "\nhelps / hurts:" in md
    html = "\n".join(dl.html(rep, lambda x: str(x)))
    assert '<section id="ladder">' in html and 'class="legend"' in html
    tex = dl.latex(rep, lambda x: x.replace("%", r"\%"))
    assert tex.count("\\begin{table}") == sum(isinstance(p, Table) for p in parts(rep))
    assert "too wide" in "".join(p.legend for p in parts(rep) if isinstance(p, Table))


def test_the_target_far_beyond_the_rungs_is_said_to_be_an_extrapolation():
    rep = analyse(compare(sweep_of()), target=None, replicates=60)  # default target: dense-1.7b x 400B tokens
    assert rep.target > 1e21 and rep.analyses[0].extrapolation > 1e8 and rep.analyses[0].extrapolated
    text = dl.terminal(rep)
    assert "an extrapolation, not a measurement" in text and "dense-1.7b" in text


def test_a_target_below_the_rungs_is_an_extrapolation_too():
    rep = analyse(compare(sweep_of()), target=1e3, replicates=60)
    assert rep.analyses[0].extrapolated and "below the smallest rung" in dl.terminal(rep)
    assert json.loads(report_json(_with(rep)))["ladder"]["target"]["extrapolated"] is True


def _with(rep):
    comp = compare(sweep_of())
    comp.ladder = rep
    return comp


def test_two_rungs_give_no_fit_and_say_why():
    two = dict(list(RUNGS.items())[:2])
    rep = analyse(compare(sweep_of(rungs=two)), replicates=60)
    an = rep.analysis("val_loss")
    assert all("2 rung(s); a fit needs 3" in r.no_fit for r in an.arms.values())
    assert "no fit: " in dl.terminal(rep)
    assert report_document(compare(sweep_of(rungs=two)))["ladder"] is None  # compare alone has no ladder: the report attaches it


def test_nan_losses_and_failed_seeds_are_left_out_and_said():
    def tweak(run):
        if run.axes["ladder.rung"] == "d48-l2" and run.axes["train.seed"] == "1" and run.axes["model.gate"] == "G1-elementwise":
            run.metrics["val_loss"] = float("nan")
        if run.axes["ladder.rung"] == "d96-l2" and run.axes["train.seed"] == "2" and run.axes["model.gate"] == "none":
            return _run(9999, "none", "d96-l2", 2, float("nan"), 7.5e12, status="FAILED")
        return run

    comp = compare(sweep_of(tweak=tweak))
    comp.ladder = rep = analyse(comp)
    an = rep.analysis("val_loss")
    assert all(r.law is not None for r in an.arms.values())
    notes = " ".join(rep.notes + an.notes)
    assert "none at d96-l2: the fits use the 2 of 3 seeds that finished" in notes
    assert "non-finite val_loss" in notes and "G1-elementwise at d48-l2" in notes
    json.loads(report_json(comp))  # strict JSON: json.dumps(allow_nan=False) inside


def test_no_baseline_arm_and_missing_compute_are_reasons_not_numbers():
    rep = analyse(compare(sweep_of(tweak=lambda run: None if run.axes["model.gate"] == "none" else run)))
    assert rep.baseline == "" and not rep.analyses and "no baseline arm" in dl.terminal(rep)

    def no_flops(run):
        run.metrics.pop("train_flops")
        return run

    rep = analyse(compare(sweep_of(tweak=no_flops)))
    assert any("logged no train_flops" in n for n in rep.notes)
    assert all(r.no_fit for r in rep.analysis("val_loss").arms.values())


def test_the_json_document_has_the_documented_keys_and_is_strict():
    comp = compare(sweep_of())
    comp.ladder = analyse(comp)
    doc = json.loads(report_json(comp))
    assert doc["schema"] == "gatesweep.report/1"
    lad = doc["ladder"]
    assert [r["rung"] for r in lad["rungs"]] == list(RUNGS)
    fit = lad["fits"]["val_loss"]
    assert fit["form"] == "L(C)" and {"noise", "misfit", "seeds", "arms", "notes"} <= set(fit)
    arms = fit["arms"]
    assert set(arms) == {"none", "G1-elementwise"}
    g1 = arms["G1-elementwise"]
    assert {"value", "low", "high", "replicates", "p"} <= set(g1["multiplier"]["joint"])
    assert set(g1["multiplier"]["rungs"]) == set(RUNGS)
    assert {"target", "target_from", "per_10x_compute", "exponent_gap"} <= set(g1["multiplier"])
    assert (
        arms["none"]["multiplier"] is None and g1["verdict"]["joint"] in {"helps", "undecided"} and g1["headline"] in {"joint", "per rung"}
    )
    assert {"rung", "predicted", "measured", "holds"} <= set(g1["rollout"])
    assert {"E", "alpha", "rmse_log", "at_bound"} <= set(g1["law"]) and {"E", "alpha"} <= set(g1["params"])
    assert lad["target"]["flops"] == 1e14 and "extrapolated" in lad["target"]
    assert "first_token_attn" in lad["trends"]


def _matched_sweep() -> SweepRuns:
    """Two ungated arms (the plain and the parameter-matched baseline, ffn_dim 176 and 197) and G1."""

    def matched(run):
        run.axes["model.ffn_dim"] = "176"
        run.params["model.ffn_dim"] = "88"  # a run's params are at its rung's width; its axes are the arm's
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
    return sweep


def test_the_baseline_is_the_one_rule_in_either_spelling_of_an_axis():
    sweep = _matched_sweep()
    rep = analyse(compare(sweep), replicates=60)
    assert rep.baseline == "none, ffn_dim=176" and len(rep.arms) == 3
    assert set(rep.analysis("val_loss").arms) == {"none, ffn_dim=176", "G1-elementwise, ffn_dim=176", "none, ffn_dim=197"}
    for want in (
        {"model.ffn_dim": "197"},
        {"model.ffn_dim": "197.0", "model.gate.position": "none"},
        {"model.gate": "none", "model.ffn_dim": 197},
    ):
        assert analyse(compare(sweep), baseline=want, replicates=60).baseline == "none, ffn_dim=197", want
    with pytest.raises(
        StoreError, match=r"--baseline model.gate.width: no arm of this ladder has it; its arms have .*model.ffn_dim: 176, 197"
    ):
        analyse(compare(sweep), baseline={"model.gate.width": "3"})
    with pytest.raises(StoreError, match=r"--baseline model.ffn_dim=395: no arm has these values"):
        analyse(compare(sweep), baseline={"model.ffn_dim": "395"})


def test_the_sweep_files_margin_and_promotion_baseline_are_the_reports_defaults():
    doc = {"ladder": {"margin": 0.05, "promote": {"baseline": {"model.ffn_dim": 197}}}}
    assert dl.file_settings(doc) == (0.05, {"model.ffn_dim": "197"})
    for bad in (None, [], {"ladder": 3}, {"ladder": {"margin": "x", "promote": []}}, {"ladder": {"margin": -1}}):
        assert dl.file_settings(bad) == (None, {})


def test_a_flat_ladder_gives_answers_not_a_crash():
    """Losses that do not fall with compute (a `--smoke` ladder of 4 steps per rung)."""

    def flatten(run):
        run.metrics["val_loss"] = 5.55 + 1e-3 * (int(run.name[-1]) - 1)  # the seed's wobble, no trend
        return run

    comp = compare(sweep_of(tweak=flatten))
    comp.ladder = rep = analyse(comp, replicates=100)
    assert dl.terminal(rep) and json.loads(report_json(comp))["ladder"]["fits"]["val_loss"]


def test_runs_with_wsd_s_points_are_fitted_as_l_of_n_and_d():
    """What a WSD-S trial logs (`wsd/<i>/...` beside its final metrics) becomes several points per run."""
    from orchestrator.ladder import synthetic as sy

    s = sy.Setting(rungs=4, seeds=3, multiplier=1.5, fractions=(0.25, 0.5, 1.0), bump=0.0)
    runs = []
    for i, r in enumerate(sy.ladder(s, np.random.default_rng(4))):
        gate = "none" if r.arm == "base" else "G1-elementwise"
        rec = _run(i, gate, r.rung, int(r.seed), r.loss, r.compute)
        rec.metrics.update({"flops_per_token": r.compute / r.tokens, "params_non_embedding": r.params})
        for k, p in enumerate(r.points):
            rec.metrics.update({f"wsd/{k}/val_loss": p.loss, f"wsd/{k}/tokens": p.tokens, f"wsd/{k}/train_flops": p.compute})
        runs.append(rec)
        i += 1
    parent = make_record(
        "parent", "lad", "FINISHED", params={}, metrics={}, tags={}, start_time=0, end_time=1, experiment_id="1", artifact_uri=""
    )
    sweep = SweepRuns("lad", "sqlite:///x.db", "1", "e", parent, runs, 1, axes=["model.gate", "ladder.rung", "train.seed"])
    rep = analyse(compare(sweep), replicates=300)
    an = rep.analysis("val_loss")
    assert an.form == "L(N, D)" and len(an.cells) == 2 * 4 * 3
    assert an.arms["G1-elementwise"].joint.low <= 1.5 <= an.arms["G1-elementwise"].joint.high
    assert "L(N, D) = E + A·N^-α + B·D^-β" in dl.terminal(rep)


def test_the_terminal_report_of_a_ladder_fits_its_width():
    """Three arms with long labels: the ladder's tables wrap into blocks that repeat the arm and its
    headline sentences wrap with a hanging indent, so no line runs past the terminal's width
    (ladder_cpu's report had lines of 285 characters)."""
    comp = compare(_matched_sweep())
    comp.ladder = analyse(comp, replicates=60)
    for width in (100, 80):
        text = terminal(comp, width=width)
        assert "what the ladder says (val_loss)" in text and "effective-compute multiplier" in text
        long = [line for line in text.splitlines() if len(line) > width]
        assert not long, f"{len(long)} lines over {width}: {long[:3]}"

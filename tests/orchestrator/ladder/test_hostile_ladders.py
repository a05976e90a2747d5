"""Hostile ladders, beyond the named cases: settings that make no sense refused before anything is
written (every problem at once, with the dotted field), command-line values that cannot be a margin
or a target refused in one line, and records a damaged or half-written run leaves behind analysed
without a traceback."""

from __future__ import annotations

import copy
import math

import pytest

from gatedmodels.typedconfig import ConfigError
from orchestrator.cli.main import build_parser
from orchestrator.ladder.estimate import analyse
from orchestrator.ladder.promotion import decide
from orchestrator.ladder.runs import Arm, Run, baseline_of, run_from_metrics
from orchestrator.spec.expand import expand
from orchestrator.spec.sweep import SweepSpec

BASE = {
    "model": {"d_model": 64, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "head_dim": 32, "ffn_dim": 176},
    "data": {"source": "bigram-backcopy", "seq_len": 64},
    "train": {"batch_size": 8, "lr": 3.0e-3, "warmup_steps": 5},
}
RUNGS = [{"d_model": 32, "n_layers": 2}, {"d_model": 64, "n_layers": 2}, {"d_model": 96, "n_layers": 3}]


def problems(ladder: dict, train: dict | None = None, **extra) -> str:
    doc = {"name": "lad", "base": copy.deepcopy(BASE), "ladder": {"rungs": RUNGS, "tokens_per_param": 2, **ladder}, **extra}
    doc["base"]["train"].update(train or {})
    with pytest.raises(ConfigError) as err:
        expand(SweepSpec.from_dict(doc))
    return str(err.value)


@pytest.mark.parametrize(
    "ladder, train, message",
    [
        ({"rungs": []}, None, "ladder.rungs: has 0; allowed: at least 3"),
        ({"rungs": [{"d_model": 0, "n_layers": 2}, *RUNGS[1:]]}, None, "ladder.rungs[0].d_model: got 0"),
        ({"rungs": [{"d_model": -32, "n_layers": 2}, *RUNGS[1:]]}, None, "ladder.rungs[0].d_model: got -32"),
        ({"warmup_tokens_per_param": 1e5}, None, "not more than its warmup"),
        ({}, {"schedule": "wsd_s", "decays": [0.5, float("nan"), 1.0]}, "train.decays"),
        ({}, {"schedule": "wsd_s", "decays": []}, "train.decays: got []"),
        ({}, {"schedule": "wsd_s", "decays": [0.0, 1.0]}, "allowed: shares of the steps in (0, 1]"),
        ({}, {"schedule": "wsd_s", "decays": [0.5, 1.5]}, "allowed: shares of the steps in (0, 1]"),
        ({}, {"schedule": "wsd_s", "decays": [0.5, 0.9]}, "the last must be 1"),
        ({}, {"schedule": "wsd_s", "decay_fraction": 1.0}, "train.decay_fraction: got 1.0; allowed: between 0 and 1"),
        ({}, {"schedule": "wsd_s", "decays": [x / 64 for x in range(1, 65)]}, "each decay needs a segment of its own"),
        ({"promote": {"after": 3, "k": 0}}, None, "ladder.promote.k: got 0"),
        ({"margin": float("inf")}, None, "ladder.margin: got inf"),
        ({"margin": float("nan")}, None, "ladder.margin: got nan"),
    ],
)
def test_hostile_ladder_settings_are_refused_with_the_field(ladder, train, message):
    assert message in problems(ladder, train)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--margin", "0"], "--margin: expected a share above 0 and below 10"),
        (["--margin", "abc"], "--margin: expected a share such as 0.05"),
        (["--margin", "nan"], "--margin: expected a share above 0 and below 10"),
        (["--target-flops", "inf"], "--target-flops: expected a positive, finite number of FLOPs"),
        (["--target-flops=-1e21"], "--target-flops: expected a positive, finite number of FLOPs"),
    ],
)
def test_a_margin_or_target_that_is_not_one_is_a_one_line_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["report", "lad", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def _runs(n_rungs=4, seeds=3, arms=("base", "arm")) -> list[Run]:
    out = []
    for r in range(n_rungs):
        c = 1e11 * 4.0**r
        for s in range(seeds):
            for a in arms:
                wobble = 0.003 * s if a == "base" else 0.002 * (2 - s)  # the arms' seeds differ
                out.append(Run(a, f"r{r}", str(s), c, (1.2 + 2e3 * c**-0.3) * (1 + wobble)))
    return out


def test_half_written_wsd_points_are_left_out_not_guessed():
    metrics = {"train_flops": 1e12, "flops_per_token": 1e6, "val_loss": 2.0, "params_non_embedding": 5e4,
               "wsd/0/val_loss": 2.5, "wsd/1/val_loss": 2.2, "wsd/1/tokens": 5e5}  # fmt: skip
    run = run_from_metrics("a", "r0", "0", metrics, "val_loss")
    assert len(run.points) == 2 and math.isnan(run.points[0].tokens) and math.isnan(run.points[1].compute)
    runs = [Run(r.arm, r.rung, r.seed, r.compute, r.loss, 5e4, 1e6, run.points) for r in _runs()]
    an = analyse(runs, "base", replicates=60)  # the damaged points never make a cell; the ends still fit
    assert all(c.final for c in an.cells) and an.arms["arm"].joint is not None


def test_every_run_failed_or_one_seed_at_one_rung_is_said_not_crashed():
    nan = [Run(r.arm, r.rung, r.seed, r.compute, math.nan) for r in _runs()]
    an = analyse(nan, "base", replicates=60)
    assert all(r.no_fit for r in an.arms.values()) and an.cells == []
    lonely = [r for r in _runs() if not (r.rung == "r1" and r.seed != "0")]
    an = analyse(lonely, "base", replicates=200)
    assert an.arms["arm"].rungs["r1"].note == "no interval: 1 seed"
    assert an.arms["arm"].joint.p is not None and any("leaves out r1" in n for n in an.notes)


def test_a_target_that_is_not_a_positive_number_is_no_target():
    for target in (math.nan, -1.0, 0.0, math.inf):
        an = analyse(_runs(), "base", target=target, replicates=60)
        assert an.arms["arm"].target is None or an.arms["arm"].target.p is None or target > 0


def test_huge_and_tiny_losses_and_computes_stay_numbers():
    runs = [Run(r.arm, r.rung, r.seed, r.compute * 1e290, r.loss * 1e-300) for r in _runs()]
    an = analyse(runs, "base", target=1e300, replicates=60)
    res = an.arms["arm"]
    assert res.law is None or all(math.isfinite(x) for x in (res.law.E, res.law.alpha))


def test_the_baseline_rule_with_no_default_arm_and_arms_whose_values_are_numbers():
    arms = [Arm("a", {"model.gate": "G1-elementwise"}, {"model.gate.position": "G1", "train.lr": "0.001"}),
            Arm("b", {"model.gate": "G2-elementwise"}, {"model.gate.position": "G2", "train.lr": "1e-3"})]  # fmt: skip
    assert baseline_of(arms) is None  # no ungated arm: no baseline, and the report says so
    assert baseline_of(arms, {"model.gate.position": "G2"}).label == "b"
    assert baseline_of(arms, {"train.lr": 0.001}).label == "a", "1e-3 and 0.001 are one value"


def test_promotion_with_one_arm_or_nothing_finished_goes_on():
    d = decide([], ["base"], "base", rule="interval", k=1, metric="val_loss", after_rung="r2", next_rung="r3", next_compute=1e13)
    assert d.kept == ["base"] and d.notes
    d = decide(_runs(3), ["base", "arm", "ghost"], "base", rule="top_k", k=1, metric="val_loss", after_rung="r2", next_rung="r3",
               next_compute=math.nan)  # fmt: skip
    assert "ghost" in d.kept and any("ghost: no finished runs" in n for n in d.notes)

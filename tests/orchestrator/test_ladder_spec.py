"""The `ladder` section of a sweep file: expansion into rungs x arms x seeds with token-matched (or
compute-matched) budgets, the recipe's rules for shape, batch, LR and warmup, and every bad ladder
refused before launch — all its problems at once — with the dotted field and what is allowed."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from gatedmodels import ModelConfig
from gatedmodels.costs import model_costs
from gatedmodels.typedconfig import ConfigError
from orchestrator.ladder.runs import RUNG_AXIS
from orchestrator.spec.expand import expand
from orchestrator.spec.sweep import SweepSpec, apply_smoke

BASE = {
    "model": {"d_model": 64, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "head_dim": 32, "ffn_dim": 176},
    "data": {"source": "bigram-backcopy", "seq_len": 64},
    "train": {"batch_size": 8, "lr": 3.0e-3, "warmup_steps": 5},
}
LADDER = {
    "rungs": [{"d_model": 32, "n_layers": 2}, {"d_model": 64, "n_layers": 2}, {"d_model": 96, "n_layers": 3}],
    "tokens_per_param": 2,
    "warmup_fraction": 0.05,
}


def sweep(ladder=None, **extra) -> SweepSpec:
    doc = {"name": "lad", "base": copy.deepcopy(BASE), "ladder": copy.deepcopy(LADDER if ladder is None else ladder)}
    doc.update(extra)
    return SweepSpec.from_dict(doc)


def problems(**kw) -> str:
    with pytest.raises(ConfigError) as err:
        expand(sweep(**kw))
    return str(err.value)


def test_every_rung_arm_and_seed_is_a_trial_with_its_budget():
    e = expand(sweep(zip=[{"model.gate.position": ["none", "G1", "none"], "model.ffn_dim": [176, 176, 197]}], grid={"train.seed": [0, 1]}))
    assert len(e.trials) == 3 * 3 * 2 and e.varying[:2] == ["model.gate", RUNG_AXIS]
    assert [r.name for r in e.rungs] == ["d32-l2", "d64-l2", "d96-l3"]
    for plan in e.rungs:
        arms = [t for t in e.trials if t.rung is plan]
        assert {t.config.train.steps for t in arms} == {plan.steps}, "every arm of a rung trains the same tokens"
        # tokens = k x the rung's non-embedding parameters of the base model (bigram vocabulary 65)
        n = plan.base.params_non_embedding
        assert plan.steps == int(2 * n // (8 * 64)) and plan.tokens == plan.steps * 8 * 64
        assert {t.config.train.warmup_steps for t in arms} == {round(0.05 * plan.steps)}
        for t in arms:
            cfg = t.config.model
            assert (cfg.d_model, cfg.n_layers, cfg.head_dim) == (plan.d_model, plan.n_layers, 32)
            assert cfg.n_heads == plan.d_model // 32 and t.config.train.lr == pytest.approx(3e-3 * 64 / plan.d_model)
    # the arm that is parameter-matched at the base width stays matched at every rung
    for plan in e.rungs:
        g1 = next(t for t in e.trials if t.rung is plan and t.axes["model.gate"] == "G1-elementwise")
        matched = next(t for t in e.trials if t.rung is plan and t.axes["model.ffn_dim"] == 197)
        plain = next(t for t in e.trials if t.rung is plan and t.axes["model.gate"] == "none" and t.axes["model.ffn_dim"] == 176)
        gain = model_costs(g1.config.model).params - model_costs(plain.config.model).params
        match = model_costs(matched.config.model).params - model_costs(plain.config.model).params
        assert abs(match - gain) / gain < 0.1, (plan.name, gain, match)
    names = {t.name for t in e.trials}
    assert "G1-elementwise-d64-l2-s1" in names and "none-d96-l3-s0-ffn_dim=197" in names


def test_rules_fixed_lr_explicit_steps_presets_and_flops_budgets():
    ladder = {**LADDER, "lr_rule": "fixed", "rungs": [{"d_model": 32, "n_layers": 2, "steps": 40}, *LADDER["rungs"][1:]]}
    e = expand(sweep(ladder))
    assert {t.config.train.lr for t in e.trials} == {3e-3} and e.rungs[0].steps == 40
    flops = [1e11, 1e12, 1e13]
    e = expand(sweep({**LADDER, "flops": flops}))
    for plan, budget in zip(e.rungs, flops):
        spent = plan.base.train_flops(64) * plan.tokens
        assert budget - plan.base.train_flops(64) * 8 * 64 < spent <= budget
    e = expand(sweep({**LADDER, "rungs": [{"size": "tiny"}, {"size": "small"}, {"size": "125m"}], "tokens_per_param": 0.01}))
    assert [r.name for r in e.rungs] == ["tiny", "small", "125m"] and e.trials[-1].config.model.d_model == 768


@pytest.mark.parametrize(
    "ladder, extra, message",
    [
        ({**LADDER, "rungs": LADDER["rungs"][:1]}, {}, "ladder.rungs: has 1; allowed: at least 3"),
        ({**LADDER, "rungs": LADDER["rungs"][:2]}, {}, "ladder.rungs: has 2; allowed: at least 3"),
        ({**LADDER, "rungs": list(reversed(LADDER["rungs"]))}, {}, "list rungs smallest first"),
        ({**LADDER, "rungs": [LADDER["rungs"][0], LADDER["rungs"][0], LADDER["rungs"][2]]}, {}, "repeats the shape of rung d32-l2"),
        ({**LADDER, "warmup_fraction": None, "tokens_per_param": 0.05}, {}, "not more than its warmup (5)"),
        ({**LADDER, "tokens_per_param": 1e-6}, {}, "the budget gives 0 steps"),
        (
            {**LADDER, "rungs": [{"d_model": 40, "n_layers": 2}, *LADDER["rungs"][1:]]},
            {},
            "ladder.rungs[0].d_model: got 40; must be a multiple of the head size",
        ),
        (
            {**LADDER, "rungs": [{"d_model": 32, "n_layers": 64}, *LADDER["rungs"][1:]]},
            {},
            "ladder.rungs[0].n_layers: got 64 at d_model 32: width / depth 0.5",
        ),
        (
            {**LADDER, "rungs": [{"d_model": 32}, *LADDER["rungs"][1:]]},
            {},
            "ladder.rungs[0]: give d_model and n_layers, or a preset as size",
        ),
        ({**LADDER, "rungs": [{"size": "tiny", "d_model": 8}, *LADDER["rungs"][1:]]}, {}, "a rung is either a preset"),
        ({**LADDER, "rungs": [{"size": "huge"}, *LADDER["rungs"][1:]]}, {}, "size: got 'huge'"),
        ({**LADDER, "flops": [1e12]}, {}, "ladder.flops: has 1 budgets for 3 rungs"),
        ({**LADDER, "flops": [1e12, float("nan"), 1e13]}, {}, "ladder.flops[1]"),
        ({**LADDER, "tokens_per_param": float("inf")}, {}, "ladder.tokens_per_param"),
        ({**LADDER, "lr_rule": "sqrt"}, {}, "ladder.lr_rule: got 'sqrt'; allowed: width, params, fixed"),
        (
            {**LADDER, "rungs": [{**r, "name": "same"} for r in LADDER["rungs"]]},
            {},
            "ladder.rungs[1].name: got 'same', which names another rung too",
        ),
        (LADDER, {"grid": {"model.d_model": [32, 64]}}, "grid.model.d_model: model.d_model is set by the ladder's rungs"),
        (LADDER, {"grid": {"train.steps": [10, 20]}}, "grid.train.steps: train.steps is set by the ladder's rungs"),
        (LADDER, {"exclude": [{"ladder.rung": "d128-l4"}]}, "exclude[0].ladder.rung: got 'd128-l4'; not a value of the axis"),
        ({**LADDER, "margin": 0}, {}, "ladder.margin: got 0.0; allowed: > 0 and < 10"),
        ({**LADDER, "margin": -0.05}, {}, "ladder.margin: got -0.05"),
        ({**LADDER, "warmup_tokens_per_param": -1}, {}, "ladder.warmup_tokens_per_param: got -1"),
        ({**LADDER, "budget": "flops"}, {}, "ladder.budget: got 'flops'; allowed: tokens, compute"),
        (
            {**LADDER, "batch_rule": "params"},
            {"base": {**BASE, "train": {**BASE["train"], "batch_size": 1}}},
            "batch_rule params gives 1 x",
        ),
        (LADDER, {"scheduler": {"type": "asha", "metric": "val_loss"}}, "scheduler: asha stops trials early, and a ladder's fits need"),
        (
            {**LADDER, "rungs": [*LADDER["rungs"], {"d_model": 128, "n_layers": 4}], "promote": {"after": 3}},
            {"search": {"type": "optuna", "num_samples": 2, "metric": "val_loss", "space": {"train.lr": {"loguniform": [1e-4, 1e-2]}}}},
            "ladder.promote: promotion needs every arm's trials at every rung known before launch",
        ),
    ],
)
def test_bad_ladders_are_refused_before_launch_naming_the_field(ladder, extra, message):
    assert message in problems(ladder=ladder, **extra)


def test_moe_ladders_are_refused_with_the_reason():
    doc = {"name": "lad", "base": {**BASE, "model": {**BASE["model"], "moe": {"n_experts": 4}}}, "ladder": LADDER}
    with pytest.raises(ConfigError, match="ladders of MoE models are not supported"):
        SweepSpec.from_dict(doc)


def test_exclude_and_smoke_with_a_ladder():
    e = expand(sweep(grid={"model.gate.position": ["none", "G1"]}, exclude=[{"ladder.rung": "d96-l3", "model.gate.position": "G1"}]))
    assert len(e.trials) == 5 and e.excluded == 1
    smoke = expand(apply_smoke(sweep(grid={"model.gate.position": ["none", "G1"]})))
    assert len(smoke.trials) == 6 and {t.config.train.steps for t in smoke.trials} == {4}
    assert [r.d_model for r in smoke.rungs] == [32, 64, 96], "smoke keeps the shapes"


@pytest.mark.slow
def test_plan_prints_a_row_per_rung_with_each_arms_flops(tmp_path):
    import yaml

    doc = {"name": "lad", "base": BASE, "ladder": LADDER, "grid": {"model.gate.position": ["none", "G1"]}}
    path = tmp_path / "lad.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "plan", str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "ladder: 3 rungs; budget 2 tokens per non-embedding parameter" in out.stdout
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith(("d32-l2 ", "d64-l2 ", "d96-l3 "))]
    assert len(rows) == 3 and all("(+0.0%)" in r and "G1-elementwise" not in r for r in rows)
    assert all("(+" in r.split("(+0.0%)")[1] for r in rows), "the gated arm's FLOPs over the base"
    assert "compute span of the ladder" in out.stdout
    assert not (tmp_path / "mlflow.db").exists()


def test_a_ladders_three_rung_problems_are_reported_together():
    rungs = [{"d_model": 64, "n_layers": 2, "name": "a"}, {"d_model": 40, "n_layers": 2}, {"d_model": 32, "n_layers": 2, "name": "a"}]
    text = problems(ladder={**LADDER, "rungs": rungs})
    assert "ladder.rungs[2].name: got 'a', which names another rung too" in text
    assert "ladder.rungs[1].d_model: got 40; must be a multiple of the head size" in text
    assert "ladder.rungs[2]: a has" in text and "list rungs smallest first" in text


def test_the_recipe_rules_batch_lr_warmup_and_a_compute_matched_budget():
    four = {**LADDER, "rungs": [*LADDER["rungs"], {"d_model": 128, "n_layers": 4}], "tokens_per_param": 20}
    olmo = expand(sweep({**four, "batch_rule": "params", "lr_rule": "params", "warmup_tokens_per_param": 1.0}))
    n = [r.base.params_non_embedding for r in olmo.rungs]
    base_n = model_costs(ModelConfig(**BASE["model"], vocab_size=65)).params_non_embedding  # Bigram-Backcopy: 64 tokens + BOS
    for r, p in zip(olmo.rungs, n):
        assert r.batch_size == max(1, round(8 * (p / base_n) ** (2 / 3)))
        assert r.lr_factor == pytest.approx((base_n / p) ** (1 / 3))
        assert r.warmup_steps * r.tokens_per_step >= p  # at least N tokens of warmup
    # compute-matched: every arm of a rung spends the base's FLOPs; the gated arm trains fewer tokens
    cm = expand(sweep({**four, "budget": "compute"}, grid={"model.gate.position": ["none", "G1"]}))
    for rung in cm.rungs:
        trials = [t for t in cm.trials if t.rung is rung]
        flops = [
            model_costs(t.config.model.replace(vocab_size=65)).train_flops(64) * t.config.train.steps * rung.tokens_per_step for t in trials
        ]
        steps = {t.axes["model.gate"]: t.config.train.steps for t in trials}
        assert steps["G1-elementwise"] < steps["none"]
        assert max(flops) <= rung.flops and min(flops) >= rung.flops * 0.9
    tok = expand(sweep(four, grid={"model.gate.position": ["none", "G1"]}))
    assert len({t.config.train.steps for t in tok.trials if t.rung is tok.rungs[0]}) == 1, "token-matched: one step count per rung"


def test_promotion_settings_are_checked():
    assert "ladder.promote.after: got 3 with 3 rungs; allowed: fewer than the rungs" in problems(ladder={**LADDER, "promote": {"after": 3}})
    assert "ladder.promote.after: got 2; allowed: 3.." in problems(ladder={**LADDER, "promote": {"after": 2}})
    four = {**LADDER, "rungs": [*LADDER["rungs"], {"d_model": 128, "n_layers": 4}], "promote": {"baseline": {"model.ffn_dim": 197}}}
    assert "ladder.promote.baseline.model.ffn_dim: is not an arm axis of this sweep" in problems(
        ladder=four, grid={"model.gate.position": ["none", "G1"]}
    )
    three_arms = {"model.gate.position": ["none", "G1", "G2"]}
    expand(sweep({**four, "promote": {"rule": "top_k", "k": 1}}, grid=three_arms))
    assert "ladder.promote.k: got 2 with 2 arm(s) besides the baseline: every arm would go on" in problems(
        ladder={**four, "promote": {"rule": "top_k", "k": 2}}, grid=three_arms
    )
    # the baseline in the keys the sweep file uses: the gated field, or the composed gate label
    for baseline in ({"model.gate.position": "none"}, {"model.gate": "none"}):
        e = expand(sweep({**four, "promote": {"baseline": baseline}}, grid=three_arms))
        assert len(e.trials) == 12
    assert (
        "ladder.promote.baseline: got {model.gate.position: 'G7'}, which no arm has; the arms have model.gate.position: none, G1, G2"
        in problems(ladder={**four, "promote": {"baseline": {"model.gate.position": "G7"}}}, grid=three_arms)
    )


@pytest.mark.slow
def test_plan_of_the_gpu_ladder_gives_gpu_hours_and_refuses_a_bad_mfu(tmp_path):
    from pathlib import Path

    gpu = Path(__file__).resolve().parents[2] / "sweeps" / "ladder_gpu.yaml"
    run = lambda *a: subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "plan", str(gpu), *a], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    out = run()
    assert out.returncode == 0, out.stderr
    hours = float(out.stdout.split("on GPUs: ")[1].split(" GPU-hours")[0].replace(",", ""))
    flops = float(out.stdout.split("training compute: ")[1].split(" FLOPs")[0])
    assert hours == pytest.approx(flops / (989e12 * 0.4) / 3600, rel=0.01)
    assert "d512-l6" in out.stdout and "d2048-l20" in out.stdout
    bad = run("--mfu", "1.5")
    assert bad.returncode == 2 and "--mfu: got 1.5; allowed: 0 < MFU <= 1" in bad.stderr and "Traceback" not in bad.stderr

"""A ladder sweep on a real Ray (the session's, on loopback) with a real MLflow store: every trial logs its compute, the
report fits the ladder and prints it as JSON, and promotion across rungs stops an arm that is
worse than the baseline, recording why, and resumes to the same decisions."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run_cli, sweep_cli
from tests.support.mlflow import children, sqlite_store
from tests.support.sweeps import write_sweep

pytestmark = pytest.mark.slow

RUNGS = [{"d_model": 16, "n_layers": 1}, {"d_model": 32, "n_layers": 1}, {"d_model": 48, "n_layers": 1}, {"d_model": 64, "n_layers": 1}]
LADDER_BASE = {
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "head_dim": 16, "ffn_dim": 64, "qk_norm": False},
    "data": {"seq_len": 32},
    "train": {"batch_size": 8, "lr": 1.0e-2, "eval_every": 0, "log_every": 10, "schedule": "wsd_s", "decays": [0.5, 1.0]},
}


def test_a_promoting_ladder_stops_the_arm_that_is_worse_and_says_why(tmp_path, shared_ray, no_ray_left_behind, capsys, monkeypatch):
    """The launch and its resume join the session's Ray (`shared_ray`); nothing they start outlives them."""
    # the second arm's learning rate is a million times too small: it learns nothing at any rung
    f = write_sweep(
        tmp_path,
        "lad",
        base=LADDER_BASE,
        ladder={"rungs": RUNGS, "tokens_per_param": 0.5, "warmup_fraction": 0.1, "lr_rule": "fixed", "promote": {"after": 3}},
        zip=[{"model.gate.position": ["none", "G1"], "train.lr": [1.0e-2, 1.0e-8]}],
        grid={"train.seed": [0, 1]},
    )
    plan = sweep_cli("plan", str(f), cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "ladder: 4 rungs" in plan.stdout and "compute span of the ladder" in plan.stdout
    out = sweep_cli("run", str(f), "--address", shared_ray, cwd=tmp_path, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "ladder stage 1/2: rung(s) d16-l1, d32-l1, d48-l1, 12 trials" in log
    assert "promotion: G1-elementwise lr=1e-08 stops: not promoted after rung d48-l1" in log
    assert "entirely below 1" in log and "2 trials not run: their arms were not promoted" in log
    c = sqlite_store(tmp_path)
    kids = {r.info.run_name: r for r in children(c, "lad")}
    assert len(kids) == 16
    for name, run in kids.items():
        if name.startswith("G1") and "d64-l1" in name:
            assert run.info.status == "KILLED" and run.data.tags["gatesweep.outcome"] == "not_promoted"
            assert "not promoted after rung d48-l1" in run.data.tags["gatesweep.stopped_early"]
        else:
            assert run.info.status == "FINISHED", name
            assert run.data.metrics["train_flops"] > 0 and run.data.metrics["params_non_embedding"] > 0
    # every arm of a rung trained the same tokens; a larger rung trained more
    flops = {n: r.data.metrics["train_flops"] for n, r in kids.items() if r.info.status == "FINISHED" and n.startswith("none")}
    assert (
        flops["none-d16-l1-s0-lr=0.01"]
        < flops["none-d32-l1-s0-lr=0.01"]
        < flops["none-d48-l1-s0-lr=0.01"]
        < flops["none-d64-l1-s0-lr=0.01"]
    )
    assert (
        kids["none-d48-l1-s0-lr=0.01"].data.metrics["train_flops"] < kids["G1-elementwise-d48-l1-s0-lr=1e-08"].data.metrics["train_flops"]
    )
    parent = next(r for r in c.search_runs([c.get_experiment_by_name("e").experiment_id], "tags.`gatesweep.kind` = 'sweep'"))
    promo = json.loads(
        c.download_artifacts(parent.info.run_id, "promotion.json", str(tmp_path)) and (tmp_path / "promotion.json").read_text()
    )
    assert promo["decisions"][0]["after_rung"] == "d48-l1" and "G1-elementwise lr=1e-08" in promo["decisions"][0]["stopped"]

    # the report fits the ladder; its JSON is the machine-readable form
    monkeypatch.chdir(tmp_path)  # the report in this process (what the command does, not its process)
    rep = run_cli(capsys, "report", "lad", "--format", "json", "--no-plots")
    assert rep.code == 0, rep.err
    doc = json.loads(rep.out)
    lad = doc["ladder"]
    assert [r["rung"] for r in lad["rungs"]] == ["d16-l1", "d32-l1", "d48-l1", "d64-l1"]
    fit = lad["fits"]["val_loss"]
    assert fit["form"] == "L(N, D)", "two points per run (WSD-S): each arm is fitted as L(N, D)"
    arms = fit["arms"]
    assert set(arms) == {"none, lr=0.01", "G1-elementwise, lr=1e-08"} and lad["baseline"] == "none, lr=0.01"
    bad = arms["G1-elementwise, lr=1e-08"]
    assert bad["multiplier"]["rungs"]["d48-l1"]["high"] < 1
    assert "d64-l1" not in bad["multiplier"]["rungs"], "no multiplier where the arm did not train"
    assert any("not promoted" in u["reason"] for u in doc["unfinished"])

    # a resume takes the same decisions and trains nothing again
    again = sweep_cli("resume", "lad", "--address", shared_ray, cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "G1-elementwise lr=1e-08 stops" in again.stdout
    assert sum(1 for r in children(sqlite_store(tmp_path), "lad") if r.info.status == "FINISHED") == 14

"""One trial end to end with real DeepSpeed (CPU) and a real MLflow SQLite store."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.spec.trial import TrialConfig
from orchestrator.trial.run import FINAL_METRICS, TrialContext, TrialFailed, run_trial
from tests.support.mlflow import history
from tests.support.trials import cfg


@pytest.mark.slow
def test_trial_logs_every_metric_param_tag_and_artifact(tmp_path, tracking_uri):
    c = cfg()
    result = run_trial(c, TrialContext(run_dir=tmp_path / "run", tracking_uri=tracking_uri, experiment="t"))
    client = MlflowClient(tracking_uri)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    for key in FINAL_METRICS:
        assert key in run.data.metrics, key
    for key in ("bbc/trigger_loss", "bbc/copy_acc", "first_token_attn/layer_0", "gate_frac_below_1e-2", "max_activation/ratio"):
        assert key in run.data.metrics, key
    assert 0 < run.data.metrics["first_token_attn"] < 1
    assert 0.3 < run.data.metrics["gate_score_mean"] < 0.7
    assert run.data.metrics["val_ppl"] > 1 and run.data.metrics["tokens_per_s"] > 0
    p = run.data.params
    assert p["model.gate.position"] == "G1" and p["train.steps"] == "40" and p["model.vocab_size"] == "65"
    assert "tracking.uri" not in p
    t = run.data.tags
    assert t["gatesweep.config_hash"] == c.config_hash()
    assert "version.torch" in t and "version.deepspeed" in t
    assert json.loads(t["gatesweep.deepspeed"])["zero_optimization"]["stage"] == 0
    arts = {a.path for a in client.list_artifacts(result.run_id)}
    assert {
        "config.yaml",
        "deepspeed.json",
        "spikes.json",
        "probes.json",
        "loss_curve.png",
        "first_token_attn.png",
        "attention_map.png",
        "gate_hist.png",
    } <= arts
    # step metrics went in at every logged step, once each
    steps = [s for s, _ in history(client, result.run_id)]
    assert steps == list(range(1, 41))
    assert (tmp_path / "run" / "model.pt").exists()


@pytest.mark.slow
def test_resume_reproduces_the_uninterrupted_loss_curve(tmp_path, tracking_uri):
    c = cfg()
    client = MlflowClient(tracking_uri)
    straight = run_trial(c, TrialContext(run_dir=tmp_path / "a", tracking_uri=tracking_uri))

    def crash(line: str):
        if line.startswith("step 25/"):
            raise RuntimeError("simulated crash")

    with pytest.raises(TrialFailed, match="simulated crash") as err:
        run_trial(c, TrialContext(run_dir=tmp_path / "b", tracking_uri=tracking_uri, progress=crash))
    run_id = err.value.run_id
    assert client.get_run(run_id).info.status == "FAILED"
    assert "simulated crash" in client.get_run(run_id).data.tags["gatesweep.failure_reason"]
    resumed = run_trial(c, TrialContext(run_dir=tmp_path / "b", tracking_uri=tracking_uri, run_id=run_id))
    assert resumed.resumed_from == 20 and resumed.run_id == run_id
    assert client.get_run(run_id).info.status == "FINISHED"
    a, b = history(client, straight.run_id), history(client, run_id)
    assert [s for s, _ in b] == list(range(1, 41)), "no duplicated and no missing points"
    for (sa, va), (_sb, vb) in zip(a, b):
        assert va == pytest.approx(vb, rel=1e-5, abs=1e-6), f"step {sa}"
    assert resumed.metrics["val_loss"] == pytest.approx(straight.metrics["val_loss"], rel=1e-5)


def test_nan_loss_fails_the_trial_with_its_reason(tmp_path, tracking_uri):
    c = cfg(train={"lr": 1e10, "grad_clip": 0.0, "warmup_steps": 0})
    with pytest.raises(TrialFailed, match="loss is nan") as err:
        run_trial(c, TrialContext(run_dir=tmp_path / "nan", tracking_uri=tracking_uri))
    run = MlflowClient(tracking_uri).get_run(err.value.run_id)
    assert run.info.status == "FAILED"
    assert "diverged" in run.data.tags["gatesweep.failure_reason"]


@pytest.mark.slow
def test_gqa_text_trial_with_zero_stage_and_grad_accum(tmp_path, tracking_uri):
    c = TrialConfig.from_dict(
        {
            "model": {"size": "tiny", "gate": {"position": "G1", "granularity": "headwise"}},
            "data": {"source": "shakespeare", "seq_len": 32, "max_chars": 300_000},
            "train": {"steps": 6, "batch_size": 4, "grad_accum": 2, "eval_every": 0, "log_every": 2, "warmup_steps": 2},
            "deepspeed": {"zero_stage": 1},
            "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 2},
        }
    )
    result = run_trial(c, TrialContext(run_dir=tmp_path / "text", tracking_uri=tracking_uri))
    assert result.steps == 6
    assert 1.0 < result.metrics["val_bpb"] < 9.0  # byte-level: bits per byte of English text, untrained
    assert "bbc/trigger_loss" not in result.metrics


TIMING = ("tokens_per_s", "_time_s", "first_step_s", "train_time_s", "system/")
"""Metrics that measure the machine, not the model: the only ones two runs may differ in."""


def every_point(client, run_id) -> dict[tuple[str, int], float]:
    keys = [k for k in client.get_run(run_id).data.metrics if not any(t in k for t in TIMING)]
    return {(k, m.step): m.value for k in keys for m in client.get_metric_history(run_id, k)}


@pytest.mark.slow
def test_the_same_config_and_seed_repeat_bit_for_bit(tmp_path, tracking_uri):
    """docs/training.md, Repeatability: on one machine and software, a trial's every logged point
    (losses, gradient norms, evaluations, probes) and its weights are equal bit for bit on a second
    run, here a text trial whose data come from the token cache the first run built; both runs
    record the same numeric environment, with the thread count the trial set."""
    import torch

    c = TrialConfig.from_dict(
        {
            "model": {"size": "tiny", "gate": {"position": "G1"}},
            "data": {"source": "shakespeare", "seq_len": 32, "max_chars": 300_000},
            "train": {"steps": 12, "batch_size": 4, "eval_every": 6, "log_every": 1, "warmup_steps": 2, "threads": 1},
            "eval": {"batches": 2, "batch_size": 4, "probe_sequences": 2},
        }
    )
    client = MlflowClient(tracking_uri)
    a, b = (run_trial(c, TrialContext(run_dir=tmp_path / d, tracking_uri=tracking_uri)) for d in "ab")
    pa, pb = every_point(client, a.run_id), every_point(client, b.run_id)
    assert len(pa) > 12 * 3 and {("val_loss", 6), ("val_loss", 12), ("train/loss", 1), ("first_token_attn", 12)} <= set(pa)
    assert pa == pb, {k: (pa.get(k), pb.get(k)) for k in set(pa) | set(pb) if pa.get(k) != pb.get(k)}
    wa, wb = (torch.load(tmp_path / d / "model.pt", weights_only=True)["model"] for d in "ab")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    ta, tb = (client.get_run(r.run_id).data.tags for r in (a, b))
    assert ta["gatesweep.numerics_key"] == tb["gatesweep.numerics_key"] and json.loads(ta["gatesweep.numerics"])["threads"] == 1

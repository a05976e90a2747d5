"""Training speed options (issue 18): activation checkpointing, torch.compile and the AdamW
implementation change how a step runs, not what it computes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from mlflow.tracking import MlflowClient

from gatedmodels import GatedTransformer
from gatedmodels.config import ModelConfig
from gatedmodels.typedconfig import ConfigError
from orchestrator.spec.trial import TrialConfig
from orchestrator.trial.run import TrialContext, run_trial
from tests.support.mlflow import history
from tests.support.trials import cfg


@pytest.mark.parametrize("moe", [0, 4])
def test_activation_checkpointing_gives_the_same_gradients(moe):
    mc = ModelConfig.from_dict(
        {
            "d_model": 64,
            "n_layers": 3,
            "n_heads": 4,
            "n_kv_heads": 2,
            "vocab_size": 61,
            "gate": {"position": "G1"},
            "moe": {"n_experts": moe, "top_k": 2, "expert_dim": 32},
        }
    )
    ids = torch.randint(0, 61, (2, 20))
    grads = {}
    for recompute in (False, True):
        torch.manual_seed(0)
        model = GatedTransformer(mc).train()
        model.checkpoint_blocks = recompute
        logits = model(ids[:, :-1])
        (F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()) + model.aux_loss()).backward()
        grads[recompute] = {n: p.grad for n, p in model.named_parameters()}
    for name, g in grads[False].items():
        torch.testing.assert_close(grads[True][name], g, msg=name)
    model.eval()
    with torch.no_grad():  # evaluation never recomputes (nothing to save)
        assert torch.equal(model(ids), model(ids))


@pytest.mark.slow
def test_options_train_like_the_default_and_are_validated(tmp_path, tracking_uri):
    client = MlflowClient(tracking_uri)
    base = run_trial(
        cfg(train={"steps": 12, "eval_every": 0, "checkpoint_every": 0}), TrialContext(run_dir=tmp_path / "a", tracking_uri=tracking_uri)
    )
    other = run_trial(
        cfg(train={"steps": 12, "eval_every": 0, "checkpoint_every": 0, "activation_checkpointing": "blocks", "adamw": "loop"}),
        TrialContext(run_dir=tmp_path / "b", tracking_uri=tracking_uri),
    )
    for (step, a), (_, b) in zip(history(client, base.run_id), history(client, other.run_id)):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5), step
    assert base.metrics["first_step_s"] > 0
    for bad, match in (
        (("activation_checkpointing", "all"), "train.activation_checkpointing: got 'all'"),
        (("adamw", "sgd"), "train.adamw: got 'sgd'"),
    ):
        with pytest.raises(ConfigError, match=match):
            TrialConfig.from_dict({"train": {bad[0]: bad[1]}})


@pytest.mark.slow
def test_compile_trains_like_eager(tmp_path, tracking_uri):
    """torch.compile on the smallest model: the same loss curve to compiler rounding, the
    compilation inside `first_step_s`, checkpoints with unchanged parameter names."""
    client = MlflowClient(tracking_uri)
    over = {"steps": 4, "eval_every": 0, "checkpoint_every": 0, "log_every": 1}
    eager = run_trial(cfg(train=over), TrialContext(run_dir=tmp_path / "e", tracking_uri=tracking_uri))
    compiled = run_trial(cfg(train={**over, "compile": True}), TrialContext(run_dir=tmp_path / "c", tracking_uri=tracking_uri))
    for (step, a), (_, b) in zip(history(client, eager.run_id), history(client, compiled.run_id)):
        assert b == pytest.approx(a, rel=1e-3, abs=1e-4), step
    assert compiled.metrics["first_step_s"] > eager.metrics["first_step_s"]
    blob = torch.load(tmp_path / "c" / "model.pt", weights_only=True)
    assert not any("_orig_mod" in k for k in blob["model"]), "compiled checkpoints keep the model's names"


@pytest.mark.slow
def test_bf16_on_cpu_is_deepspeeds_mixed_precision_and_resumes(tmp_path, tracking_uri):
    """`deepspeed.precision: bf16` runs on a CPU as on a GPU: bf16 weights and activations, fp32
    master weights in the optimizer. Its loss curve follows fp32's to bf16 rounding (and is not
    fp32's: bf16 is really used), it evaluates and probes, and a crash resumes to the same curve."""
    from orchestrator.tracking.outcomes import TrialFailed
    from orchestrator.trial.distributed import process_group
    from orchestrator.trial.run import build

    client = MlflowClient(tracking_uri)
    over = {"steps": 20, "eval_every": 10, "checkpoint_every": 10, "log_every": 1}
    with process_group():
        engine = build(cfg(train=over, deepspeed={"precision": "bf16"})).engine
    assert next(engine.module.parameters()).dtype == torch.bfloat16
    assert {p.dtype for group in engine.optimizer.fp32_groups for p in group} == {torch.float32}, "fp32 master weights"

    fp32 = run_trial(cfg(train=over), TrialContext(run_dir=tmp_path / "fp32", tracking_uri=tracking_uri))
    bf16_cfg = cfg(train=over, deepspeed={"precision": "bf16"})
    bf16 = run_trial(bf16_cfg, TrialContext(run_dir=tmp_path / "bf16", tracking_uri=tracking_uri))
    a, b = history(client, fp32.run_id), history(client, bf16.run_id)
    assert len(a) == len(b) == 20
    assert max(abs(x - y) for (_, x), (_, y) in zip(a, b)) < 0.05, "bf16 follows fp32"
    assert any(x != y for (_, x), (_, y) in zip(a, b)), "bf16 is not fp32"
    assert abs(bf16.metrics["val_loss"] - fp32.metrics["val_loss"]) < 0.05
    assert 0 <= bf16.metrics["first_token_attn"] <= 1

    def crash(line: str):
        if line.startswith("step 15/"):
            raise RuntimeError("simulated crash")

    with pytest.raises(TrialFailed) as err:
        run_trial(bf16_cfg, TrialContext(run_dir=tmp_path / "crash", tracking_uri=tracking_uri, progress=crash))
    resumed = run_trial(bf16_cfg, TrialContext(run_dir=tmp_path / "crash", tracking_uri=tracking_uri, run_id=err.value.run_id))
    assert resumed.resumed_from == 10
    for (step, x), (_, y) in zip(b, history(client, err.value.run_id)):
        assert y == pytest.approx(x, abs=1e-6), f"step {step}: the resumed bf16 run is the uninterrupted one"

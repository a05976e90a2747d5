"""The optimizer's pieces, the one perplexity the periodic evaluation and the perplexity sets share,
and what `orchestrator.trial` exports."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from orchestrator.evals.heldout import evaluate, perplexity
from orchestrator.trial.optim import lr_lambda, param_groups

from .fakes import VOCAB, FakeData, Tiny, config


def test_lr_schedule_and_weight_decay_groups():
    train = config(steps=110, warmup_steps=10, min_lr_ratio=0.1).train
    fn = lr_lambda(train)
    assert [fn(0), fn(4), fn(9)] == [0.1, 0.5, 1.0]
    assert (
        fn(10) == pytest.approx(1.0) and fn(60) == pytest.approx(0.55) and fn(110) == pytest.approx(0.1) and fn(500) == pytest.approx(0.1)
    )
    decay, no_decay = param_groups(Tiny(), 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [torch.Size([VOCAB, VOCAB])]  # proj.weight; not the embedding, not biases
    assert len(no_decay["params"]) == 2


def test_one_perplexity_serves_the_periodic_evaluation_and_the_perplexity_sets():
    model = Tiny().eval()
    windows = FakeData().train_batch(0, 6)
    token_bytes = [1, 2, 1, 3, 1, 1, 2]
    whole = perplexity(model, [windows], token_bytes, device="cpu")
    split = perplexity(model, (windows[i : i + 4] for i in range(0, 6, 4)), token_bytes, device="cpu")  # as suite batches a set
    assert split.ppl == pytest.approx(whole.ppl, rel=1e-6) and split.bpb == pytest.approx(whole.bpb, rel=1e-6)
    with torch.no_grad():
        logits = model(windows[:, :-1])
        nll = float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="sum"))
    n_bytes = int(torch.as_tensor(token_bytes)[windows[:, 1:]].sum())
    assert whole.loss == pytest.approx(nll / windows[:, 1:].numel())
    assert whole.ppl == pytest.approx(math.exp(whole.loss)) and whole.bpb == pytest.approx(nll / math.log(2) / n_bytes)


def test_evaluate_reports_the_shared_perplexity_as_val_metrics():
    from gatedmodels import GatedTransformer
    from orchestrator.data import build_trial_data

    cfg = config()
    data = build_trial_data(cfg.data, 0)
    torch.manual_seed(0)
    model = GatedTransformer(cfg.model.replace(vocab_size=data.vocab_size))
    batches = data.val_batches(2, 4)
    r = evaluate(model, data, batches, cfg.eval)
    p = perplexity(model.eval(), batches, data.token_bytes, device="cpu")
    assert (r.metrics["val_loss"], r.metrics["val_ppl"], r.metrics["val_bpb"]) == (p.loss, p.ppl, p.bpb)
    assert "bbc/copy_acc" in r.metrics  # the task metrics still see every batch


def test_the_trial_package_reexports_run_and_stays_light():
    import orchestrator.trial as trial
    from orchestrator.trial import run

    for name in ("run_trial", "TrialContext", "TrialResult", "FINAL_METRICS", "TrialFailed"):
        assert getattr(trial, name) is getattr(run, name)
    with pytest.raises(AttributeError):
        trial.nothing_here  # noqa: B018
    code = "import sys, orchestrator.trial.spikes, orchestrator.trial; print(sorted({'torch', 'deepspeed', 'mlflow'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_wsd_s_schedule_decays_to_the_floor_at_each_bottom_and_rewarms():
    train = config(steps=100, warmup_steps=5, min_lr_ratio=0.1, schedule="wsd_s", decays=[0.25, 0.5, 1.0], decay_fraction=0.2).train
    fn = lr_lambda(train)
    assert [fn(0), fn(4)] == [0.2, 1.0]  # warmup
    assert fn(10) == 1.0 and fn(24) == pytest.approx(0.1)  # stable, then the floor at the step before the first evaluation
    assert fn(20) == pytest.approx(0.82) and fn(21) < fn(20)  # the decay: the last 5 of the first 25 steps
    assert 0.1 < fn(25) < fn(26) < fn(29) and fn(30) == 1.0  # re-warm to the peak
    assert fn(49) == pytest.approx(0.1) and fn(99) == pytest.approx(0.1) and fn(89) == 1.0 and fn(90) < 1.0  # the last decay: 10 of 50

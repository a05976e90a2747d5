"""The training loop with a fake engine: the order of its events, who receives the per-step ones,
divergence, and the state a checkpoint holds."""

from __future__ import annotations

import math

import pytest

from orchestrator.tracking.outcomes import TrialFailed
from orchestrator.trial.callbacks import Callback

from .fakes import VOCAB, FakeEngine, Recorder, T, config, trainer


def test_the_trainer_calls_every_event_in_order():
    rec = Recorder()
    t = trainer(config(checkpoint_every=2), [rec])
    metrics = t.run()
    e = rec.events
    assert e[:3] == [("on_start",), ("after_resume", 0, 0), ("on_step", 1, 0.5)]
    assert e[3:10] == [
        ("on_step", 2, 0.5),
        ("collect_metrics", 2),
        ("on_log_interval", 2, ["recorder"]),
        ("on_eval", 2),
        ("on_checkpoint", 2),
        ("on_report", 2, True),
        ("on_step", 3, 0.5),
    ]
    assert e[10:] == [
        ("on_step", 4, 0.5),
        ("collect_metrics", 4),
        ("on_log_interval", 4, ["recorder"]),
        ("on_eval", 4),
        ("on_checkpoint", 4),
        ("collect_final", ["val_loss"]),
        ("on_end", 4),
    ]  # no report at the last step
    assert metrics["val_loss"] == 1.5 and metrics["eval_time_s/periodic"] >= 0
    assert t.step == 4 and t.tokens_seen == 4 * 2 * T and t.wall_s >= t.train_s > 0


def test_per_step_events_reach_only_the_callbacks_that_override_them():
    class EvalOnly(Callback):
        def on_eval(self, step, result):
            pass

    rec, other = Recorder(), EvalOnly()
    t = trainer(config(), [other, rec])
    assert t._on_step == [rec.on_step] and t._collect == [rec.collect_metrics] and t._on_log == [rec.on_log_interval]
    assert t.hooks("on_eval") == [other.on_eval, rec.on_eval]


def test_a_non_finite_loss_is_diverged_with_its_step_and_micro_batch():
    t = trainer(config(grad_accum=2), [], engine=FakeEngine(loss_scale=math.inf))
    with pytest.raises(TrialFailed, match=r"loss is (nan|inf) at step 1 \(micro-batch 0\); training diverged") as err:
        t.run()
    assert err.value.kind == "diverged"


def test_trainer_state_holds_the_loop_and_every_stateful_callback():
    rec = Recorder()
    t = trainer(config(), [rec, Callback()])
    t.step, t.tokens_seen, t.train_s = 3, 36, 1.25
    state = t.state_dict()
    assert state == {"step": 3, "tokens_seen": 36, "train_s": 1.25, "recorder": {"events": 0}}
    rec2 = Recorder()
    t2 = trainer(config(), [rec2])
    t2.load_state_dict({**state, "history": [(1, 2.0)]})  # a key no callback here owns is left alone
    assert (t2.step, t2.tokens_seen, t2.train_s, t2.resumed_from, rec2.loaded) == (3, 36, 1.25, 3, {"events": 0})


def test_a_wsd_s_schedule_evaluates_at_the_bottom_of_every_decay_and_logs_its_points():
    from gatedmodels import ModelConfig
    from gatedmodels.costs import model_costs
    from orchestrator.trial.callbacks.decay_points import DecayPoints

    cfg = config(steps=12, eval_every=0, schedule="wsd_s", decays=[0.25, 0.5, 1.0])
    assert cfg.train.decay_steps() == [3, 6, 12]
    rec = Recorder()
    points = DecayPoints(cfg.train, ModelConfig.preset("bigram-1l").replace(vocab_size=VOCAB), T)
    t = trainer(cfg, [rec, points])
    metrics = t.run()
    assert [e[1] for e in rec.events if e[0] == "on_eval"] == [3, 6, 12]  # eval_every 0: only the decays' bottoms
    per_token = model_costs(ModelConfig.preset("bigram-1l").replace(vocab_size=VOCAB)).train_flops(T)
    assert metrics["wsd/0/tokens"] == 3 * 2 * T and metrics["wsd/1/tokens"] == 6 * 2 * T
    assert metrics["wsd/1/train_flops"] == pytest.approx(per_token * 6 * 2 * T)
    assert metrics["wsd/0/val_loss"] == 1.5 and "wsd/2/val_loss" not in metrics  # the last decay's point is the final metrics
    # the points travel in the checkpoint state: a resumed trial keeps the ones before it
    fresh = DecayPoints(cfg.train, ModelConfig.preset("bigram-1l").replace(vocab_size=VOCAB), T)
    fresh.load_state_dict(t.state_dict()["decay_points"])
    out: dict = {}
    fresh.collect_final(out)
    assert out == {k: v for k, v in metrics.items() if k.startswith("wsd/")}

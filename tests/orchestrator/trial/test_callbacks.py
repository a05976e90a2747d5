"""Each metric, reporting and output callback on its own: spikes, speed, step metrics, console,
Ray Tune report, MLflow logging, artifacts and benchmarks."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import torch

from orchestrator.evals.heldout import EvalResult
from orchestrator.tracking.outcomes import TrialFailed
from orchestrator.trial import checkpoint as ckpt
from orchestrator.trial.callbacks.artifacts import Artifacts
from orchestrator.trial.callbacks.benchmarks import Benchmarks, selected
from orchestrator.trial.callbacks.console import Console
from orchestrator.trial.callbacks.mlflow_logging import MLflowLogging
from orchestrator.trial.callbacks.speed import Speed
from orchestrator.trial.callbacks.spikes import SpikeMonitor
from orchestrator.trial.callbacks.step_metrics import StepMetrics
from orchestrator.trial.callbacks.tune_report import TuneReport

from .fakes import VOCAB, FakeLogging, Tiny, config, eval_result, fake_trainer


def test_spike_monitor_records_rules_positions_and_state():
    cfg = config(batch_size=4, grad_accum=2, spikes={"window": 3, "k": 1.0, "delta": 0.5, "warmup": 0})
    mon = SpikeMonitor(cfg.train, rank=1, world=2)
    assert mon.batch_position(5, 1) == {"step": 5, "micro_batch": 1, "rank": 1, "seed": 0, "sequences": [(5 * 2 + 1) * 2 * 4 + 4, 4]}
    for step, loss in enumerate([1.0, 1.0, 1.01, 3.0], 1):
        mon.on_step(step, loss, 1.0)
    assert {e["rule"] for e in mon.detector.events} == {"sigma", "ema"}
    assert mon.detector.events[0]["batch"] == mon.batch_position(3, 0)
    metrics, final = {}, {}
    mon.collect_metrics(4, metrics)
    mon.collect_final(final)
    assert metrics == final == {"loss_spikes": 1, "loss_spikes/sigma": 1, "loss_spikes/ema": 1, "grad_norm_spikes": 0}
    other = SpikeMonitor(cfg.train)
    other.load_state_dict(json.loads(json.dumps(mon.state_dict())))
    assert other.state_dict() == json.loads(json.dumps(mon.state_dict()))


def drive(speed: Speed, t, durations, start: int = 0, log_at=()):
    """Steps of the given durations, as Trainer.advance times them."""
    for step, dt in enumerate(durations, start + 1):
        t.step_t0 = time.perf_counter()
        t.tokens_seen += t.tokens_per_step
        speed.on_step(step, 1.0, None)
        if step in log_at:
            m = {}
            speed.collect_metrics(step, m)
            speed.on_log_interval(step, m)
            yield step, m["train/tokens_per_s"]
        t.train_s += dt


def test_speed_leaves_out_the_first_step_and_counts_each_window():
    speed, t = Speed(), fake_trainer()
    speed.after_resume(t)
    windows = list(drive(speed, t, [10.0, 1.0, 1.0, 2.0, 2.0], log_at=(2, 5)))
    # the window logged at step 2 holds steps 1-2 (10 s: step 2's own time is not over yet), then 3-5 (3 s)
    assert windows[0][1] == pytest.approx(200 / 10.0, rel=1e-3)
    assert windows[1][1] == pytest.approx(300 / 3.0, rel=1e-3)
    final = {}
    speed.collect_final(final)
    assert final["tokens_per_s"] == pytest.approx(400 / 6.0) and final["train_time_s"] == 16.0


def test_speed_after_a_resume_counts_every_step_and_falls_back_without_timed_steps():
    speed, t = Speed(), fake_trainer(train_s=50.0, tokens_seen=1000)
    speed.after_resume(t)
    list(drive(speed, t, [4.0, 1.0], start=10))
    final = {}
    speed.collect_final(final)
    assert final["tokens_per_s"] == pytest.approx(200 / 5.0) and final["train_time_s"] == 55.0
    speed, t = Speed(), fake_trainer(train_s=8.0, tokens_seen=400)  # a resumed finished trial: no step at all
    speed.after_resume(t)
    speed.collect_final(final)
    assert final["tokens_per_s"] == 50.0


def test_step_metrics_average_each_log_window():
    sm, t = StepMetrics(), fake_trainer(tokens_seen=300)
    sm.after_resume(t)
    for step, (loss, gn) in enumerate([(2.0, 1.0), (4.0, None), (3.0, 3.0)], 1):
        sm.on_step(step, loss, gn)
    m = {}
    sm.collect_metrics(3, m)
    assert m == {"train/loss": 3.0, "train/loss_max": 4.0, "train/lr": 0.1, "train/tokens_seen": 300, "train/grad_norm": 2.0}
    sm.on_log_interval(3, m)
    sm.on_step(4, 1.0, None)
    m = {}
    sm.collect_metrics(4, m)
    assert m["train/loss"] == 1.0 and "train/grad_norm" not in m


# ---- console, Tune, MLflow ----------------------------------------------------------------------
def test_console_lines_keep_their_text():
    lines = []
    c = Console(lines.append, 40)
    c.on_log_interval(25, {"train/loss": 2.345678, "train/lr": 0.00123, "train/tokens_per_s": 1234.6})
    c.on_eval(20, EvalResult({"val_loss": 2.5, "first_token_attn": 0.1234, "sink_ratio": 0.456}))
    c.on_eval(40, EvalResult({"val_loss": 2.5, "first_token_attn": 0.1234, "sink_ratio": 0.456, "gate_score_mean": 0.5}))
    assert lines == [
        "step 25/40 loss 2.3457 lr 1.23e-03 1235 tok/s",
        "eval step 20: val_loss 2.5000 first_token_attn 0.123 sink_ratio 0.46",
        "eval step 40: val_loss 2.5000 first_token_attn 0.123 sink_ratio 0.46 gate_score_mean 0.500",
    ]


def test_tune_report_flushes_first_and_names_the_checkpoint_folder(tmp_path):
    log, reports = FakeLogging(), []

    def report(metrics, checkpoint):
        reports.append((metrics, checkpoint, list(log.calls)))

    cb = TuneReport(report, tmp_path, log)
    log.warnings = ["store down"]
    cb.on_report(10, EvalResult({"val_loss": 2.0}), True)
    cb.on_report(20, EvalResult({"val_loss": 1.0}), False)
    assert reports[0] == ({"step": 10, "val_loss": 2.0, "warnings": ["store down"]}, ckpt.checkpoint_dir(tmp_path), [("flush", 60, None)])
    assert reports[1][:2] == ({"step": 20, "val_loss": 1.0}, None)
    TuneReport(report, tmp_path).on_report(30, EvalResult({"val_loss": 0.5}), False)  # no MLflow run here (not the main process)
    assert reports[2][0] == {"step": 30, "val_loss": 0.5}


@pytest.mark.slow
def test_mlflow_logging_opens_the_run_logs_points_and_records_the_ending(tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    cfg, seen = config(), []
    ctx = SimpleNamespace(
        run_dir=tmp_path,
        remote_dir=None,
        tracking_uri=tracking_uri,
        experiment="cb",
        run_id=None,
        run_name=None,
        parent_run_id=None,
        tags={"extra": "1"},
        on_run=seen.append,
    )
    log = MLflowLogging(cfg, ctx)
    run_id = log.open()
    assert seen == [run_id] and json.loads((tmp_path / "run.json").read_text())["run_id"] == run_id
    t = fake_trainer(resumed_from=20, eval_s=0.5)
    log.on_start(t)
    log.after_resume(t)
    log.on_log_interval(21, {"train/loss": 2.0})
    log.on_eval(21, EvalResult({"val_loss": 1.5}))
    log.on_end(21, {"val_loss": 1.4, "tokens_per_s": 99.0})  # val_loss is at step 21 already: skipped
    log.on_failure("stopped", "stopped by the scheduler at step 21")
    cl = MlflowClient(tracking_uri)
    run = cl.get_run(run_id)
    assert run.info.status == "KILLED"
    tags = run.data.tags
    assert tags["gatesweep.outcome"] == "stopped" and tags["gatesweep.stopped_early"].endswith("step 21")
    assert tags["gatesweep.resumed_from_step"] == "20" and tags["extra"] == "1" and tags["gatesweep.config_hash"] == cfg.config_hash()
    assert [(m.step, m.value) for m in cl.get_metric_history(run_id, "val_loss")] == [(21, 1.5)]
    assert run.data.metrics["eval_time_s/periodic"] == 0.5 and run.data.metrics["tokens_per_s"] == 99.0
    assert "gatesweep.failure_reason" not in tags

    again = MLflowLogging(cfg, SimpleNamespace(**{**vars(ctx), "run_id": run_id}))
    assert again.open() == run_id
    again.on_failure("crashed", "train: RuntimeError: boom", "Traceback ...")
    run = cl.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["gatesweep.failure_reason"] == "train: RuntimeError: boom"
    assert "failure_traceback.txt" in {a.path for a in cl.list_artifacts(run_id)}
    MLflowLogging(cfg, ctx).on_failure("crashed", "never opened")  # nothing to record: no error


# ---- artifacts, benchmarks ----------------------------------------------------------------------


@pytest.mark.slow
def test_artifacts_writes_every_file_and_keeps_the_loss_history(tmp_path):
    cfg = config()
    built = SimpleNamespace(model_cfg=cfg.model.replace(vocab_size=VOCAB), ds_json={"zero_optimization": {"stage": 0}}, model=Tiny())
    spikes = SpikeMonitor(cfg.train).detector
    spikes.events.append({"step": 2, "rule": "sigma", "loss": 3.0, "threshold": 2.0, "batch": None})
    log = FakeLogging()
    art = Artifacts(cfg, built, spikes, tmp_path, log)
    art.load_state_dict([[1, 2.5]])
    art.on_step(2, 3.0, None)
    assert art.state_dict() == [(1, 2.5), (2, 3.0)]
    art.on_eval(2, eval_result())
    art.on_end(2, {})
    names = {
        "config.yaml",
        "deepspeed.json",
        "spikes.json",
        "probes.json",
        "loss_curve.png",
        "first_token_attn.png",
        "attention_map.png",
        "gate_hist.png",
    }
    assert {p.name for p in (tmp_path / "artifacts").iterdir()} == names
    assert [c[1] for c in log.calls] == [*sorted(names), "model.pt"]  # the weights last, once written
    assert log.calls[-1][0] == "weights"
    assert json.loads((tmp_path / "artifacts" / "probes.json").read_text())["max_activation_per_layer"] == [2.0, 3.0]
    assert json.loads((tmp_path / "artifacts" / "spikes.json").read_text())["events"][0]["step"] == 2
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    assert saved["config"]["model"]["vocab_size"] == VOCAB and set(saved["model"]) == set(Tiny().state_dict())
    assert saved["run_id"] == log.run_id  # the weights know whose they are
    assert not [p.name for p in tmp_path.iterdir() if "model.pt" in p.name and p.name != "model.pt"], "no temporary weights file left"


def test_artifacts_that_cannot_be_written_are_a_disk_failure(tmp_path):
    cfg = config()
    (tmp_path / "artifacts").write_text("a file where the folder goes")
    built = SimpleNamespace(model_cfg=cfg.model, ds_json={}, model=Tiny())
    art = Artifacts(cfg, built, SpikeMonitor(cfg.train).detector, tmp_path, FakeLogging())
    art.on_eval(1, eval_result())
    with pytest.raises(TrialFailed, match="artifacts could not be written .*training finished and its metrics are logged") as err:
        art.on_end(1, {})
    assert err.value.kind == "disk"


def test_benchmarks_run_the_selected_suite_once_and_join_the_final_metrics(monkeypatch):
    from orchestrator.evals import suite

    calls = []

    def fake_suite(model, tokenizer, cfg, *, device, which, progress):
        calls.append((tokenizer, which, progress))
        return {"ppl/kjv": 12.0}

    monkeypatch.setattr(suite, "run_benchmarks", fake_suite)
    assert selected(config().eval) == ()
    off = SimpleNamespace(enabled=False)
    no_lengths = SimpleNamespace(lengths=[])
    assert selected(SimpleNamespace(tasks=SimpleNamespace(names=["piqa"]), ruler=off, ppl_sets=["kjv"], length=no_lengths)) == (
        "tasks",
        "ppl",
    )
    lengths = SimpleNamespace(lengths=[256])
    assert selected(SimpleNamespace(tasks=SimpleNamespace(names=[]), ruler=off, ppl_sets=[], length=lengths)) == ("length",)
    final = {"val_loss": 1.0}
    Benchmarks(config(), Tiny(), SimpleNamespace(tokenizer="tok"), ("ppl",), device="cpu", progress=print).collect_final(final)
    assert calls == [("tok", ("ppl",), print)]
    assert final["ppl/kjv"] == 12.0 and final["eval_time_s/benchmarks"] >= 0 and final["val_loss"] == 1.0
    Benchmarks(config(), Tiny(), SimpleNamespace(), ("length",), device="cpu").collect_final({})  # synthetic data: no tokenizer
    assert calls[-1] == (None, ("length",), None)

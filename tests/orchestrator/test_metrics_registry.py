"""The metric registry (`orchestrator.core.metrics`): well-formed entries, every one a real trial
produces where it says it does, and the consumers' lists derived from it."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from orchestrator.core import metrics as registry
from orchestrator.spec.trial import TrialConfig

ROOT = Path(__file__).resolve().parents[2]

BIGRAM = {
    "model": {"size": "bigram-1l", "gate": {"position": "G1"}},
    "data": {"source": "bigram-backcopy", "seq_len": 32},
    "train": {"steps": 8, "batch_size": 8, "warmup_steps": 2, "eval_every": 4, "log_every": 2, "checkpoint_every": 0},
    "eval": {"batches": 1, "batch_size": 8, "probe_sequences": 4},
}


def trial_config(gate: str = "G1", **data) -> TrialConfig:
    return TrialConfig.from_dict({**BIGRAM, "model": {"size": "bigram-1l", "gate": {"position": gate}}, "data": {**BIGRAM["data"], **data}})


def evaluation(cfg: TrialConfig) -> dict[str, float]:
    """The metrics of one held-out evaluation of an untrained model built from `cfg`."""
    from gatedmodels import GatedTransformer
    from orchestrator.data import build_trial_data
    from orchestrator.evals.heldout import evaluate

    data = build_trial_data(cfg.data, cfg.train.seed)
    torch.manual_seed(0)
    model = GatedTransformer(cfg.model.replace(vocab_size=data.vocab_size))
    return evaluate(model, data, data.val_batches(cfg.eval.batches, cfg.eval.batch_size), cfg.eval).metrics


def test_entries_are_well_formed_and_named_once():
    names = [m.name for m in registry.REGISTRY]
    assert len(names) == len(set(names)), "a metric is registered twice"
    for m in registry.REGISTRY:
        assert m.better in ("min", "max", None), m
        assert m.when in registry.WHEN and m.needs in registry.NEEDS, m
        assert m.roles <= set(registry.ROLES), m
        assert m.label and m.format(0.5), m
        assert m.prefix == m.name.endswith(("/", "_")), m  # `mmlu_`: MMLU's groups and subjects, `mmlu_<name>/...`
    for role in registry.ROLES:
        assert registry.names(role) or registry.prefixes(role), f"no metric has role {role}"
    assert set(registry.names("progress")) <= set(registry.names(when="eval")), "progress metrics come with every evaluation"
    assert registry.lookup("first_token_attn/layer_3") is registry.get("first_token_attn")
    assert registry.lookup("ruler_avg/4096").name == "ruler_avg/" and registry.lookup("no_such_metric") is None


def test_every_harness_task_has_an_entry_and_stderrs_have_no_direction():
    from orchestrator.evals.harness_data import task_names

    for name in task_names():
        metric = f"{name}/bits_per_byte" if name.endswith("_bpb") else f"{name}/acc"
        entry = registry.lookup(metric)
        assert entry is not None and entry.needs == "tasks", name
        assert entry.better == ("min" if name.endswith("_bpb") else "max"), name
    assert registry.lookup("hellaswag/acc_norm") is registry.get("hellaswag/acc_norm")
    assert registry.lookup("lambada_openai/perplexity").better == "min"
    stderr = registry.lookup("hellaswag/acc_norm_stderr")
    assert stderr.name == "hellaswag/acc_norm_stderr" and stderr.better is None and not stderr.roles
    assert registry.lookup("mmlu_anatomy/acc").name == "mmlu_" and registry.lookup("gsm8k/exact_match/flexible-extract").name == "gsm8k/"


def test_registry_is_torch_free():
    code = "import sys, orchestrator.core.metrics; assert 'torch' not in sys.modules and 'mlflow' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


@pytest.mark.parametrize("gate", ["G1", "none"])
def test_an_evaluation_reports_its_registered_metrics_and_only_those(gate):
    metrics = evaluation(trial_config(gate))
    expected = set(registry.names(when="eval", needs="")) | set(registry.names(when="eval", needs="bigram"))
    gated = set(registry.names(when="eval", needs="gate"))
    assert expected <= set(metrics), sorted(expected - set(metrics))
    assert (gated <= set(metrics)) if gate != "none" else not (gated & set(metrics))
    unknown = [k for k in metrics if registry.lookup(k) is None]
    assert not unknown, f"evaluate() logs metrics the registry does not know: {unknown}"


def test_a_text_evaluation_reports_no_bigram_metric(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    cfg = TrialConfig.from_dict({**BIGRAM, "data": {"source": str(corpus), "seq_len": 32}})
    metrics = evaluation(cfg)
    assert set(registry.names(when="eval", needs="")) <= set(metrics)
    assert not set(registry.names(when="eval", needs="bigram")) & set(metrics)


@pytest.mark.slow
def test_a_finished_trial_has_every_final_metric(tmp_path, tracking_uri):
    from orchestrator.trial.run import TrialContext, run_trial

    cfg = trial_config()
    cfg = cfg.replace(eval=cfg.eval.replace(length=cfg.eval.length.replace(lengths=[64], batches=1, batch_size=4)))
    result = run_trial(cfg, TrialContext(run_dir=tmp_path / "run", tracking_uri=tracking_uri, experiment="reg"))
    run = MlflowClient(tracking_uri).get_run(result.run_id)
    # every key the trial logged (evaluations, end metrics, its benchmarks, MLflow's system metrics) is a registry name
    assert any(k.startswith("length_loss/") for k in run.data.metrics)
    assert not unknown(run.data.metrics) and not unknown(result.metrics), (unknown(run.data.metrics), unknown(result.metrics))
    assert run.info.status == "FINISHED"
    final = set(registry.names("final"))
    assert final <= set(run.data.metrics), sorted(final - set(run.data.metrics))
    at_end = set(registry.names(when="end", needs=""))
    assert at_end <= set(result.metrics), sorted(at_end - set(result.metrics))  # what Tune receives at the end
    logged_steps = {k for k in run.data.metrics if k.startswith("train/")}
    assert "train/loss" in logged_steps and logged_steps <= set(registry.names(when="step")), sorted(logged_steps)


def test_report_and_summary_columns_come_from_the_registry():
    from dashboards import metrics as columns
    from orchestrator.launch.summary import summary_columns

    assert registry.names("headline") == columns.DEFAULT_METRICS
    every = [m.name for m in registry.REGISTRY if not m.prefix] + ["ruler_avg/4096"]
    chosen = columns.choose(every)
    assert [c.key for c in chosen] == [
        *registry.names("headline"),
        *[k for k in registry.names("bigram") if k not in registry.names("headline")],
        "ruler_avg/4096",
    ]
    for c in chosen:
        m = registry.lookup(c.key)
        assert c.better == m.better and (c.label == m.label or c.key != m.name), c
    logged = [{"metrics": {k: 1.0 for k in every}}]
    assert summary_columns(logged) == [c.key for c in chosen]
    assert summary_columns([{"metrics": {}}]) == []


@pytest.mark.parametrize(
    "logged",
    [
        # a Bigram-Backcopy sweep (the quickstart's metrics), a text sweep with RULER, a failed sweep
        ["val_loss", "val_ppl", "val_bpb", "first_token_attn", "sink_ratio", "max_activation", "gate_score_mean", "loss_spikes"]
        + ["tokens_per_s", "bbc/trigger_loss", "bbc/copy_acc", "value_norm_bos_ratio", "train/loss", "train_flops"],
        ["val_loss", "val_ppl", "val_bpb", "first_token_attn", "mmlu/acc", "ruler_avg/8192", "ruler_avg/4096", "tokens_per_s"],
        [],
    ],
)
def test_the_end_table_the_report_and_results_show_one_default_metric_set(logged):
    """One default set for the three tables a sweep's results are read in (issue 35): the
    end-of-sweep table, `gatesweep report` and `dashboards.results`."""
    from dashboards import metrics as columns
    from dashboards.records import RunRecord
    from dashboards.results import metric_columns
    from orchestrator.launch.summary import summary_columns

    run = RunRecord("r", "t", "FINISHED", "finished", "", {}, {k: 1.0 for k in logged}, {}, 0, 1, "0")
    end_table = summary_columns([{"metrics": run.metrics}])
    report = [c.key for c in columns.choose(run.metrics)]
    assert end_table == report == metric_columns([run], None) == registry.default_columns(logged)
    if "bbc/copy_acc" in logged:
        assert end_table[-4:] == ["val_loss", "bbc/trigger_loss", "bbc/copy_acc", "value_norm_bos_ratio"]
    if "ruler_avg/4096" in logged:
        assert end_table[-2:] == ["ruler_avg/4096", "ruler_avg/8192"]


# ---- every key any code path logs is a registry name -------------------------------------------
def unknown(keys) -> list[str]:
    return sorted(k for k in keys if registry.lookup(k) is None)


@pytest.mark.parametrize(
    "model",
    [
        {"gate": {"position": "G1"}},
        {"gate": {"position": "none"}},
        {"attention": {"kind": "softmax1"}},
        {"gate": {"position": "G1", "granularity": "headwise", "activation": "softplus"}},
        {"attention": {"kind": "mla"}, "n_kv_heads": 4, "qk_norm": False, "gate": {"position": "G1", "activation": "2sigmoid"}},
    ],
)
def test_the_evaluation_and_the_probe_log_registry_names_only_and_the_same_ones(model):
    """heldout.evaluate (a trial's evaluation) and run_probe (`gatesweep probe`) share
    probe_metrics: the same keys, every one known to the registry."""
    from types import SimpleNamespace

    from gatedmodels import GatedTransformer, ModelConfig
    from orchestrator.evals.heldout import evaluate
    from orchestrator.interop.probe import run_probe
    from orchestrator.spec.evaluation import EvalConfig

    torch.manual_seed(0)
    net = GatedTransformer(ModelConfig.preset("tiny", **model)).eval()
    seqs = torch.randint(0, 511, (4, 33))
    seqs[:, 0] = 511
    data = SimpleNamespace(token_bytes=torch.ones(512, dtype=torch.long), task_metrics=lambda logits, seq: {})
    trial = evaluate(net, data, [seqs], EvalConfig(probe_sequences=4, batches=1, batch_size=4)).metrics
    probe = run_probe(net, seqs, data.token_bytes).metrics
    assert not unknown(trial) and not unknown(probe), (unknown(trial), unknown(probe))
    assert set(trial) == set(probe), sorted(set(trial) ^ set(probe))
    if model.get("attention", {}).get("kind") == "softmax1":
        assert "sink_slot_mass" in probe and "first_token_share" in probe  # the keys `gatesweep probe` used to lack


def test_the_synthetic_store_of_the_report_benchmark_logs_registry_names_only():
    import random

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import report_scale
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    templates = report_scale.probe_templates()
    for gate in ("none", "G1-elementwise"):
        metrics = report_scale.synthetic_metrics(random.Random(0), gate, "tiny", templates)
        assert not unknown(metrics), unknown(metrics)
        assert set(templates[gate != "none"]) <= set(metrics)
    assert registry.lookup(report_scale.TRAIN_LOSS) is not None


def test_a_non_finite_model_reads_as_nan_with_a_warning_never_as_sink_free():
    """All-NaN weights (a diverged or damaged checkpoint): attention and gate scores are NaN, so
    the sink ratio and the fractions of small gate scores are NaN, not a reassuring 0."""
    from gatedmodels import GatedTransformer, ModelConfig
    from orchestrator.interop.probe import run_probe

    net = GatedTransformer(ModelConfig.preset("tiny", gate={"position": "G1"})).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(float("nan"))
    seqs = torch.randint(0, 511, (4, 33))
    report = run_probe(net, seqs, torch.ones(512, dtype=torch.long))
    m = report.metrics
    for key in ("val_loss", "sink_ratio", "sink_ratio/layer_0", "first_token_attn", "gate_frac_below_1e-2", "gate_score_mean"):
        assert math.isnan(m[key]), (key, m[key])
    assert math.isfinite(m["first_token_attn_uniform"])  # a property of the length, not of the model
    assert any("attention probabilities are not finite" in w and "sink_ratio" in w for w in report.warnings), report.warnings
    assert any("gate scores are not finite" in w for w in report.warnings), report.warnings
    assert all(math.isnan(x) for row in report.sink_heads for x in row)


def test_a_model_with_one_bad_layer_names_it_and_keeps_the_other_layers():
    from gatedmodels import GatedTransformer, ModelConfig
    from orchestrator.evals.probe_metrics import probe_metrics

    torch.manual_seed(0)
    net = GatedTransformer(ModelConfig.preset("tiny", gate={"position": "G1"})).eval()
    with torch.no_grad():
        _, probe = net.probe(torch.randint(0, 511, (2, 17)))
    probe.layers[1].gate = torch.full_like(probe.layers[1].gate, float("inf"))
    probed = probe_metrics(probe, 17, sink_eps=0.3, sink_tokens=64)
    assert math.isnan(probed.metrics["gate_score_mean"]) and math.isnan(probed.metrics["gate_score_mean/layer_1"])
    assert math.isfinite(probed.metrics["gate_score_mean/layer_0"]) and math.isfinite(probed.metrics["sink_ratio"])
    assert probed.warnings == [
        "the model's gate scores are not finite (NaN or inf in layer 1): gate_score_mean, gate_frac_below_1e-2, gate_frac_below_1e-3, "
        "gate_frac_below_0.1, gate_frac_above_1 reported as NaN"
    ]


def test_an_unbounded_gate_is_read_to_2_and_its_share_above_1_is_logged():
    """softplus / 2·sigmoid scores exceed 1: the evaluation's histogram spans [0, 2] (probes.json
    says so, the trial's and the report's plots read it), and gate_frac_above_1 counts them."""
    from types import SimpleNamespace

    from gatedmodels import GatedTransformer, ModelConfig
    from orchestrator.evals.heldout import evaluate, probes_artifact
    from orchestrator.spec.evaluation import EvalConfig

    torch.manual_seed(0)
    seqs = torch.randint(0, 511, (4, 33))
    data = SimpleNamespace(token_bytes=torch.ones(512, dtype=torch.long), task_metrics=lambda logits, seq: {})
    cfg = EvalConfig(probe_sequences=4, batches=1, batch_size=4)
    sig = evaluate(GatedTransformer(ModelConfig.preset("tiny", gate={"position": "G1"})), data, [seqs], cfg)
    assert sig.gate_high == 1.0 and sig.metrics["gate_frac_above_1"] == 0.0 and sig.warnings == []
    net = GatedTransformer(ModelConfig.preset("tiny", gate={"position": "G1", "activation": "softplus"}))
    with torch.no_grad():
        for block in net.blocks:
            block.attn.wqkv.weight[-block.attn.S :].mul_(100)
    result = evaluate(net, data, [seqs], cfg)
    assert result.gate_high == 2.0 and result.warnings == []
    assert 0.1 < result.metrics["gate_frac_above_1"] < 0.9 and 0.0 < result.metrics["gate_frac_below_0.1"] < 0.9
    for i in range(net.cfg.n_layers):  # per layer, at every evaluation: what the report's heat maps are drawn from
        assert math.isfinite(result.metrics[f"gate_score_mean/layer_{i}"]) and math.isfinite(result.metrics[f"first_token_attn/layer_{i}"])
    hist = probes_artifact(result)["gate_histogram"]
    assert hist["range"] == [0.0, 2.0] and sum(map(sum, hist["counts"])) == sum(g.numel() for g in net.probe(seqs[:, :-1])[1].gates)

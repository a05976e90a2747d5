"""The metric registry (`orchestrator.metrics`): well-formed entries, every one a real trial
produces where it says it does, and the consumers' lists derived from it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from mlflow.tracking import MlflowClient

from orchestrator import metrics as registry
from orchestrator.spec.trial import TrialConfig

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
    code = "import sys, orchestrator.metrics; assert 'torch' not in sys.modules and 'mlflow' not in sys.modules"
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


def test_a_finished_trial_has_every_final_metric(tmp_path, tracking_uri):
    from orchestrator.trial.run import TrialContext, run_trial

    result = run_trial(trial_config(), TrialContext(run_dir=tmp_path / "run", tracking_uri=tracking_uri, experiment="reg"))
    run = MlflowClient(tracking_uri).get_run(result.run_id)
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
    assert summary_columns(logged) == list(registry.names("summary"))
    assert summary_columns([{"metrics": {}}]) == [m.name for m in registry.select("summary") if not m.needs]

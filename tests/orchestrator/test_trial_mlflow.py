"""MLflow's own features in a trial's run (real DeepSpeed on CPU, real SQLite store): the data set
as dataset inputs, system metrics, the trained weights as an artifact that loads back into the
model; and a reopened run (a retry) that logs its inputs again without duplicating them."""

from __future__ import annotations

import json

import pytest
import torch
from mlflow.tracking import MlflowClient

from gatedmodels import GatedTransformer, ModelConfig
from orchestrator.tracking import RunLogger, inputs, names
from orchestrator.trial.callbacks.mlflow_logging import data_inputs
from orchestrator.trial.run import TrialContext, run_trial
from tests.support.trials import cfg


@pytest.mark.slow
def test_trial_run_has_dataset_inputs_system_metrics_and_loadable_weights(tmp_path, tracking_uri):
    c = cfg(train={"steps": 20, "eval_every": 10, "checkpoint_every": 0})
    result = run_trial(c, TrialContext(run_dir=tmp_path / "run", tracking_uri=tracking_uri, experiment="t"))
    cl = MlflowClient(tracking_uri)
    run = cl.get_run(result.run_id)

    [ds] = run.inputs.dataset_inputs
    assert ds.dataset.name == "bigram-backcopy" and ds.dataset.source_type == "code"
    assert [t.value for t in ds.tags if t.key == inputs.CONTEXT_TAG] == ["training"]
    source = json.loads(ds.dataset.source)
    assert source["generator"] == "bigram-backcopy" and source["settings"]["seq_len"] == 32
    assert json.loads(ds.dataset.profile)["vocab_size"] == int(run.data.params["model.vocab_size"])
    assert ds.dataset.digest == inputs.settings_digest(source["settings"])

    system = {k for k in run.data.metrics if k.startswith("system/")}
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= system
    assert cl.get_metric_history(result.run_id, "system/cpu_utilization_percentage")  # at least the final sample

    assert cl.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"

    local = cl.download_artifacts(result.run_id, f"{names.WEIGHTS_DIR}/{names.WEIGHTS_FILE}", str(tmp_path / "dl"))
    saved = torch.load(local, weights_only=True)
    model_cfg = ModelConfig.from_dict(saved["config"]["model"])
    model = GatedTransformer(model_cfg)
    model.load_state_dict(saved["model"])  # strict: every weight is there, nothing else
    ours = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    assert all(torch.equal(ours["model"][k], v) for k, v in saved["model"].items())
    x = torch.randint(0, model_cfg.vocab_size, (2, 16))
    assert torch.isfinite(model(x)).all()
    assert names.WEIGHTS_SKIPPED_TAG not in run.data.tags


def test_reopened_run_keeps_one_input_per_data_set(tmp_path, tracking_uri):
    from orchestrator.data import build_trial_data

    c = cfg()
    data = build_trial_data(c.data, 0)
    first = RunLogger.create(tracking_uri, "t", run_name="r")
    first.log_inputs(data_inputs(c.data, data))
    again = RunLogger(tracking_uri, first.run_id)  # a retried trial reopens its run
    again.log_inputs(data_inputs(c.data, data))
    run = MlflowClient(tracking_uri).get_run(first.run_id)
    assert len(run.inputs.dataset_inputs) == 1


def test_a_local_text_corpus_is_a_local_dataset_with_both_splits(tmp_path):
    from orchestrator.data import build_trial_data
    from orchestrator.spec.trial import TrialConfig

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"document {i}: " + "the gate closes and the sink goes away. " * 40 for i in range(60)))
    c = TrialConfig.from_dict({"model": {"size": "tiny"}, "data": {"source": str(corpus), "seq_len": 32, "val_fraction": 0.1}})
    data = build_trial_data(c.data, 0)
    train, val = data_inputs(c.data, data)
    assert (train.dataset.name, val.dataset.name) == ("corpus.txt", "corpus.txt (validation)")
    assert train.dataset.source_type == "local" and json.loads(train.dataset.source) == {"uri": corpus.resolve().as_uri()}
    assert train.dataset.digest == val.dataset.digest == data.prepared.folder.name  # the token cache's key
    tp, vp = json.loads(train.dataset.profile), json.loads(val.dataset.profile)
    assert tp["train_tokens"] == len(data.train) and vp["val_tokens"] == len(data.val) and "val_tokens" not in tp
    assert [t.value for t in train.tags] == ["training"] and [t.value for t in val.tags] == ["validation"]


@pytest.mark.slow
def test_the_logged_weights_load_through_the_export_path(tmp_path, tracking_uri):
    """The artifact is the trial's model.pt itself, so `orchestrator.interop` (gatesweep export)
    reads a downloaded copy as it reads RUN_DIR/model.pt."""
    import pytest

    locate = pytest.importorskip("orchestrator.interop.locate")
    c = cfg(train={"steps": 6, "eval_every": 0, "checkpoint_every": 0})
    result = run_trial(c, TrialContext(run_dir=tmp_path / "run", tracking_uri=tracking_uri, experiment="t"))
    local = MlflowClient(tracking_uri).download_artifacts(result.run_id, f"{names.WEIGHTS_DIR}/{names.WEIGHTS_FILE}", str(tmp_path / "dl"))
    loaded = locate.locate(local)
    assert loaded.kind == "trial" and loaded.model_cfg.gate.position == "G1"
    ours = torch.load(tmp_path / "run" / "model.pt", weights_only=True)["model"]
    assert set(loaded.state) == set(ours) and all(torch.equal(loaded.state[k], ours[k]) for k in ours)


def test_run_params_leave_out_the_gate_fields_that_do_not_apply_and_runs_say_they_are_trials(tmp_path):
    from types import SimpleNamespace

    from gatedmodels import build_meta
    from orchestrator.trial.callbacks.mlflow_logging import run_params, run_tags

    def params(gate: dict) -> dict:
        c = cfg(model={"size": "bigram-1l", "gate": gate})
        model_cfg = c.model.replace(vocab_size=65)
        built = SimpleNamespace(model_cfg=model_cfg, model=build_meta(model_cfg), data=SimpleNamespace(vocab_size=65))
        return run_params(c, built, 1)

    none = params({"position": "none"})
    assert none["model.gate.position"] == "none"
    assert not [k for k in none if k.startswith("model.gate.") and k != "model.gate.position"], sorted(none)
    g1 = params({"position": "G1", "granularity": "headwise"})
    assert g1["model.gate.granularity"] == "headwise" and g1["model.gate.activation"] == "sigmoid"
    g5 = params({"position": "G5", "input_dependent": False})
    assert "model.gate.granularity" not in g5 and "model.gate.init_std" not in g5 and g5["model.gate.input_dependent"] is False
    ctx = SimpleNamespace(run_dir=tmp_path, remote_dir=None, tags={})
    assert run_tags(cfg(), ctx)[names.KIND_TAG] == names.TRIAL_KIND

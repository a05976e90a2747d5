"""The notebook API (`dashboards.results`, `dashboards.history`) on the store a real sweep filled
(tests/dashboards/conftest.py): one row per trial of the latest launch with its axes as typed
columns, status and reason, final metrics equal to MLflow's and run ids; the same frame through
MLflow's API as from the SQLite tables; curves equal to `get_metric_history`; the tags that make
raw `mlflow.search_runs` easy; and examples/results.ipynb executed in a real kernel."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import dashboards
from orchestrator.tracking import names
from tests.support.records import mlflow_runs

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_results_one_row_per_trial_with_typed_axes_status_and_metrics(store):
    cl, parent, children = mlflow_runs(store)
    df = dashboards.results("cmp", store.uri)
    assert len(df) == len(children) == 5
    axes = ["model.gate", "model.gate.position", "train.seed", "train.lr", "train.grad_clip"]
    assert list(df.columns[:7]) == ["trial", "seed", *axes]
    assert list(df.columns[7:12]) == ["status", "reason", "start", "end", "duration_s"]
    assert list(df.columns[-4:]) == ["run_id", "config_hash", "reused", "parent_run_id"]
    assert str(df["train.seed"].cat.categories.dtype) == "int64" and str(df["train.lr"].cat.categories.dtype) == "float64"
    assert list(df["model.gate"].cat.categories) == ["none", "G1-elementwise"] and list(df["train.lr"].cat.categories) == [0.003, 1e10]
    assert list(df["model.gate.position"].cat.categories) == ["none", "G1"]
    assert set(df["run_id"]) == {r.info.run_id for r in children} and set(df["parent_run_id"]) == {parent.info.run_id}
    assert df.attrs["sweep"] == "cmp" and df.attrs["experiment"] == "dash" and df.attrs["axes"] == axes
    assert (df["seed"] == df["train.seed"].astype(int)).all() and (df["config.train.steps"] == 30).all()
    by_id = {r.info.run_id: r for r in children}
    for _, row in df.iterrows():
        run = by_id[row["run_id"]]
        assert row["trial"] == run.info.run_name and row["config_hash"] == run.data.tags[names.CONFIG_HASH_TAG]
        assert row["train.seed"] == int(run.data.tags[names.axis_tag("train.seed")])
        for m in ("val_ppl", "first_token_attn", "sink_ratio", "tokens_per_s"):
            v = row[f"metrics.{m}"]
            assert (math.isnan(v) and m not in run.data.metrics) or v == run.data.metrics[m], (row["trial"], m)
        assert row["duration_s"] == (run.info.end_time - run.info.start_time) / 1000
    failed = df[df["status"] == "failed"]
    assert len(failed) == 1 and failed["train.lr"].iloc[0] == 1e10 and "diverged" in failed["reason"].iloc[0]
    assert (df[df["status"] == "finished"]["reason"] == "").all() and not df["reused"].any()
    # metrics: the default set by default (the end table's and the report's); every one, or the ones named
    assert "metrics.first_token_attn" in df.columns and "metrics.train/loss" not in df.columns
    every = dashboards.results("cmp", store.uri, metrics="all")
    assert {"metrics.train/loss", "metrics.first_token_attn/layer_0"} <= set(every.columns)
    some = dashboards.results("cmp", store.uri, metrics=["val_ppl", "sink_ratio"])
    assert list(some.columns[12:14]) == ["metrics.val_ppl", "metrics.sink_ratio"]
    with pytest.raises(dashboards.ResultsError, match="'no_such_metric' not logged by any run of sweep cmp"):
        dashboards.results("cmp", store.uri, metrics=["val_ppl", "no_such_metric"])


def test_results_read_the_same_through_mlflows_api(store, monkeypatch):
    fast = dashboards.results("cmp", store.uri)
    monkeypatch.setenv("GATESWEEP_REPORT_SEARCH_RUNS", "1")
    api = dashboards.results("cmp", store.uri)
    assert fast.equals(api), fast.compare(api) if fast.shape == api.shape else (fast.shape, api.shape)
    assert dashboards.history("cmp", ["train/loss"], store.uri).equals(_history_api(store, monkeypatch))


def _history_api(store, monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules["dashboards.results"], "_sqlite_points", lambda *a: None)
    return dashboards.history("cmp", ["train/loss"], store.uri)


def test_reused_runs_of_a_later_sweep_are_its_rows(store):
    again = dashboards.results("cmp-again", store.uri)
    assert len(again) == 4 and again["reused"].all() and (again["status"] == "finished").all()
    first = dashboards.results("cmp", store.uri)
    assert set(again["run_id"]) == set(first[first["status"] == "finished"]["run_id"])


def test_history_long_form_equals_mlflows_metric_history(store):
    cl, parent, children = mlflow_runs(store)
    h = dashboards.history("cmp", metrics=["train/loss", "first_token_attn"], tracking_uri=store.uri)
    axes = ["model.gate", "model.gate.position", "train.seed", "train.lr", "train.grad_clip"]
    assert list(h.columns) == ["trial", "seed", *axes, "metric", "step", "value", "run_id"]
    assert str(h["step"].dtype) == "int64" and str(h["train.seed"].cat.categories.dtype) == "int64"
    for run in children:
        for key in ("train/loss", "first_token_attn"):
            want = sorted((m.step, m.value) for m in cl.get_metric_history(run.info.run_id, key))
            got = h[(h["run_id"] == run.info.run_id) & (h["metric"] == key)]
            assert list(zip(got["step"], got["value"])) == want or (
                # a NaN point (the diverged trial's loss) compares unequal to itself
                [s for s, _ in want] == list(got["step"])
                and all((math.isnan(a) and math.isnan(b)) or a == b for (_, a), b in zip(want, got["value"]))
            ), (run.info.run_name, key)
    assert len(dashboards.history("cmp", metrics=[], tracking_uri=store.uri)) == 0


def test_raw_search_runs_is_easy_with_the_kind_tag(store):
    import mlflow

    cl, parent, children = mlflow_runs(store)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(store.uri)  # also MLflow's in-process default: set back at the end
    try:
        raw = mlflow.search_runs(experiment_names=["dash"], filter_string="tags.`gatesweep.sweep` = 'cmp'")
        assert len(raw) == len(children) + 1  # the parent carries the sweep's name too
        trials = mlflow.search_runs(
            experiment_names=["dash"],
            filter_string=f"tags.`gatesweep.kind` = 'trial' and tags.`gatesweep.in.cmp` = '{parent.info.run_id}'",
        )
        assert set(trials["run_id"]) == {r.info.run_id for r in children}
        assert not [c for c in trials.columns if c.startswith("metrics.") and "/none" in c]  # no per-configuration means of the parent
        ungated = trials[trials["tags.gatesweep.gate"] == "none"]
        assert len(ungated) == 3 and ungated["params.model.gate.granularity"].isna().all()
        gated = trials[trials["tags.gatesweep.gate"] == "G1-elementwise"]
        assert (gated["params.model.gate.granularity"] == "elementwise").all()

    finally:
        mlflow.set_tracking_uri(previous)


def test_unknown_sweep_or_store_is_one_clear_error(store, tmp_path):
    from dashboards import ResultsError as StoreError

    with pytest.raises(StoreError, match="no sweep named 'nope'.*sweeps there: cmp-again, cmp"):
        dashboards.results("nope", store.uri)
    with pytest.raises(StoreError, match="no store at"):
        dashboards.results("cmp", f"sqlite:///{tmp_path / 'missing.db'}")
    assert not (tmp_path / "missing.db").exists()


def test_the_example_notebook_runs_in_a_real_kernel(store, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "examples" / "results.ipynb", as_version=4)
    [params] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    params.source = f"sweep = 'cmp'\ntracking_uri = {store.uri!r}"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = {i: c.outputs for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for outs in outputs.values() for o in outs)
    assert not [o for outs in outputs.values() for o in outs if o.output_type == "error"]
    assert "5 trials of sweep cmp" in text and "G1-elementwise" in text and "each arm minus none" in text
    assert any("image/png" in o.get("data", {}) for outs in outputs.values() for o in outs)  # the curves plot
    assert any("train/loss" in o.get("data", {}).get("text/plain", "") for o in outputs[max(outputs)])  # the curves' first rows

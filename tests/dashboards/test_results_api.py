"""The notebook API's contract on stores filled by hand (`tests.sweepstore`, no training): the
axes spelt as the sweep file spells them and ordered as it lists them, a seed column always,
every config field, times, metrics that cannot collide with other columns, and one exception
type, `dashboards.ResultsError`, for every mistake a caller can make (issues 33 and 35)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd
import pytest

import dashboards
from dashboards import ResultsError

from ..sweepstore import Trial, fill

pytestmark = pytest.mark.slow  # an MLflow store per test (its schema takes seconds to create)
REPO = Path(__file__).resolve().parents[2]

GATES = {  # label -> (position, granularity or None: an ungated model has none)
    "none": ("none", None),
    "G1-elementwise": ("G1", "elementwise"),
    "G1-headwise": ("G1", "headwise"),
    "G2-elementwise": ("G2", "elementwise"),
}
FILE = {
    "name": "qs",
    "grid": {"model.gate.position": ["none", "G1", "G2"], "model.gate.granularity": ["elementwise", "headwise"], "train.seed": [0]},
    "exclude": [{"model.gate.position": "G2", "model.gate.granularity": "headwise"}],
}


def fill_gates(uri: str, seeds=(0,), *, name: str = "qs", extra_metrics: dict | None = None) -> str:
    trials = []
    for label, (position, granularity) in GATES.items():
        for seed in seeds:
            params = {"model.gate.position": position, "train.lr": 0.01, "train.steps": 1500, "train.seed": seed}
            if granularity:
                params["model.gate.granularity"] = granularity
            axes = {"model.gate": label, **({"train.seed": seed} if len(seeds) > 1 else {})}
            metrics = {
                "first_token_attn": 0.7 if label == "none" else 0.05 + 0.01 * seed,
                "val_ppl": 6.0,
                "train/loss": 2.0,
                **(extra_metrics or {}),
            }
            trials.append(Trial(axes, metrics, params=params))
    doc = {**FILE, "name": name, "grid": {**FILE["grid"], "train.seed": list(seeds)}}
    return fill(uri, name, trials, sweep_file=doc)


def test_the_axes_are_the_files_keys_in_the_files_order_with_a_seed_column_on_one_seed(tracking_uri):
    fill_gates(tracking_uri)
    df = dashboards.results("qs", tracking_uri)
    assert list(df.columns[:5]) == ["trial", "seed", "model.gate", "model.gate.position", "model.gate.granularity"]
    assert list(df.columns[5:10]) == ["status", "reason", "start", "end", "duration_s"]
    assert df.attrs["axes"] == ["model.gate", "model.gate.position", "model.gate.granularity"]
    # the sweep's order, not the alphabet's (which would put `none` last)
    assert list(df["model.gate"].cat.categories) == list(GATES) and df["model.gate"].cat.ordered
    assert list(df["model.gate.position"].cat.categories) == ["none", "G1", "G2"]
    assert list(df["trial"]) == list(GATES)  # rows in the sweep's order too
    assert list(df.groupby("model.gate", observed=True)["metrics.first_token_attn"].mean().index) == list(GATES)
    # the raw gridded key is a column: df["model.gate.position"] exists, empty where a field does not apply
    assert list(df["model.gate.position"]) == ["none", "G1", "G1", "G2"]
    assert df["model.gate.granularity"].isna().tolist() == [True, False, False, False]
    # one seed: no seed axis, but a seed column
    assert list(df["seed"]) == [0, 0, 0, 0] and str(df["seed"].dtype) == "Int64"
    # every config field, typed; times
    assert df["config.train.lr"].tolist() == [0.01] * 4 and str(df["config.train.steps"].dtype) == "int64"
    assert str(df["start"].dtype).startswith("datetime64") and (df["duration_s"] >= 0).all() and (df["end"] >= df["start"]).all()
    assert list(df.columns[-4:]) == ["run_id", "config_hash", "reused", "parent_run_id"]


def test_history_has_the_same_keys(tracking_uri):
    fill_gates(tracking_uri, seeds=(0, 1))
    df = dashboards.results("qs", tracking_uri)
    h = dashboards.history("qs", ["first_token_attn"], tracking_uri)
    keys = ["trial", "seed", "model.gate", "model.gate.position", "model.gate.granularity", "train.seed"]
    assert list(h.columns) == [*keys, "metric", "step", "value", "run_id"]
    assert list(df.columns[: len(keys)]) == keys
    assert list(h["model.gate"].cat.categories) == list(GATES) and list(h["trial"]) == list(df["trial"])
    assert h["value"].tolist() == df["metrics.first_token_attn"].tolist()


def test_metrics_named_like_the_frames_own_columns_cannot_collide(tracking_uri):
    clash = {"status": 1.0, "trial": 2.0, "reason": 3.0, "model.gate": 4.0, "run_id": 5.0, "reused": 6.0, "seed": 7.0}
    fill_gates(tracking_uri, extra_metrics=clash)
    df = dashboards.results("qs", tracking_uri, metrics="all")
    assert (df["status"] == "finished").all() and list(df["trial"]) == list(GATES) and not df["reused"].any()
    assert list(df["model.gate"]) == list(GATES) and df["run_id"].str.fullmatch("[0-9a-f]{32}").all()
    for name, value in clash.items():
        assert (df[f"metrics.{name}"] == value).all(), name
    assert len(set(df.columns)) == len(df.columns)


def _raised(call) -> ResultsError:
    try:
        call()
    except ResultsError as err:  # the one type a notebook catches
        return err
    raise AssertionError("no ResultsError")


def test_every_mistake_of_the_caller_is_one_results_error(tracking_uri, tmp_path):
    fill_gates(tracking_uri)
    cases = {
        "no such sweep": lambda: dashboards.results("nope", tracking_uri),
        "no such experiment": lambda: dashboards.results("qs", tracking_uri, experiment="nope"),
        "no such parent": lambda: dashboards.results("qs", tracking_uri, parent="0" * 32),
        "no store": lambda: dashboards.results("qs", f"sqlite:///{tmp_path / 'missing.db'}"),
        "no folder": lambda: dashboards.results("qs", f"sqlite:///{tmp_path / 'no' / 'm.db'}"),
        "bad scheme": lambda: dashboards.results("qs", "ftp://host/x"),
        "unreachable": lambda: dashboards.results("qs", "http://127.0.0.1:9"),
        "bad metric": lambda: dashboards.results("qs", tracking_uri, metrics=["val_ppx"]),
        "metrics of a wrong type": lambda: dashboards.results("qs", tracking_uri, metrics=3),
        "sweep of a wrong type": lambda: dashboards.results(3, tracking_uri),
        "history's bad metric": lambda: dashboards.history("qs", ["first_token_atn"], tracking_uri),
        "history's unreachable store": lambda: dashboards.history("qs", tracking_uri="http://127.0.0.1:9"),
    }
    said = {}
    for what, call in cases.items():
        t0 = time.monotonic()
        err = _raised(call)
        said[what] = str(err)
        assert "\n" not in str(err) and time.monotonic() - t0 < 5, (what, str(err))
    assert "no sweep named 'nope'" in said["no such sweep"] and "sweeps there: qs" in said["no such sweep"]
    assert "did you mean 'val_ppl'" in said["bad metric"] and "did you mean 'first_token_attn'" in said["history's bad metric"]
    assert said["bad scheme"].startswith("tracking_uri: got") and "--tracking-uri" not in said["bad scheme"]
    assert "cannot reach the tracking server" in said["unreachable"]
    assert not (tmp_path / "missing.db").exists()  # reading never creates a store
    err = _raised(cases["no such sweep"])
    assert isinstance(err.__cause__, Exception) and not isinstance(err.__cause__, ResultsError)


def test_a_store_that_fails_is_a_results_error_with_its_cause(tracking_uri, monkeypatch):
    import sys

    from mlflow.exceptions import MlflowException

    module = sys.modules["dashboards.results"]  # the package's `results` is the function
    fill_gates(tracking_uri)

    def broken(*args, **kwargs):
        raise MlflowException("the database is locked")

    monkeypatch.setattr(module, "read_sweep", broken)
    err = _raised(lambda: dashboards.results("qs", tracking_uri))
    assert "the tracking store failed: MlflowException: the database is locked" in str(err)
    assert isinstance(err.__cause__, MlflowException)


def test_times_of_a_running_trial_are_empty(tracking_uri):
    trials = [
        Trial({"model.gate": "none"}, {"val_ppl": 6.0}, params={"train.seed": 0}),
        Trial({"model.gate": "G1-elementwise"}, {}, status="RUNNING"),
    ]
    fill(tracking_uri, "live", trials)
    df = dashboards.results("live", tracking_uri)
    running = df[df["status"] == "running"].iloc[0]
    assert pd.isna(running["end"]) and math.isnan(running["duration_s"]) and pd.isna(running["seed"])


def _run_notebook(tmp_path, sweep: str, uri: str) -> str:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "examples" / "results.ipynb", as_version=4)
    [params] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    params.source = f"sweep = {sweep!r}\ntracking_uri = {uri!r}"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    errors = [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"]
    assert not errors, errors
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the curves
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "orchestrator" not in sources and "dashboards._" not in sources  # the public API only
    return "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)


def test_the_example_notebook_runs_on_one_seed_and_on_a_ladder(tracking_uri, tmp_path):
    """Issue 35: the notebook failed with KeyError 'none' on a 1-seed sweep."""
    fill_gates(tracking_uri, name="one-seed")
    text = _run_notebook(tmp_path, "one-seed", tracking_uri)
    assert "4 trials of sweep one-seed" in text and "each arm minus none" in text and "-0.65" in text
    trials = []
    for rung, loss in (("d32-l2", 3.0), ("d48-l2", 2.6), ("d64-l2", 2.3)):
        for gate in ("none", "G1-elementwise"):
            for seed in (0, 1):
                trials.append(
                    Trial(
                        {"ladder.rung": rung, "model.gate": gate, "train.seed": seed},
                        {"val_loss": loss - (0.05 if gate != "none" else 0) + seed / 100, "train_flops": 1e11, "train/loss": loss},
                        params={"model.gate.position": gate.split("-")[0], "train.seed": seed},
                    )
                )
    doc = {
        "name": "lad",
        "ladder": {"rungs": [{"d_model": 32}, {"d_model": 48}, {"d_model": 64}]},
        "grid": {"model.gate.position": ["none", "G1"]},
    }
    fill(tracking_uri, "lad", trials, sweep_file=doc)
    text = _run_notebook(tmp_path, "lad", tracking_uri)
    assert "12 trials of sweep lad" in text and "other axes ['ladder.rung']" in text and "each arm minus none" in text

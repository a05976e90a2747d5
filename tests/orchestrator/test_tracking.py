"""The tracking contract: URI resolution, parsing and redaction, run states, names, the one
paginator, and the logger's no-duplicate guarantee."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatedmodels.typedconfig import ConfigError
from orchestrator.tracking import (
    RunLogger,
    client,
    file_store_path,
    names,
    redact_uri,
    resolve_tracking_uri,
    run_outcome,
    run_state,
    search_all,
    sqlite_path,
    sqlite_uri,
)
from orchestrator.tracking.names import OUTCOME_TAG, REASON_TAG, STOPPED_TAG


def test_default_is_absolute_sqlite_in_cwd(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(cwd=tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_explicit_beats_env_and_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///env.db")
    assert resolve_tracking_uri(cwd=tmp_path) == f"sqlite:///{tmp_path / 'env.db'}"
    assert resolve_tracking_uri("store.db", cwd=tmp_path) == f"sqlite:///{tmp_path / 'store.db'}"
    assert resolve_tracking_uri("http://127.0.0.1:5000", cwd=tmp_path) == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("mlruns", cwd=tmp_path) == (tmp_path / "mlruns").as_uri()


@pytest.mark.parametrize("uri", ["ftp://x/y", "sqlite://", "sqlite:///no/such/folder/m.db", "http://"])
def test_bad_uris_are_config_errors(uri, tmp_path):
    with pytest.raises(ConfigError):
        resolve_tracking_uri(uri, cwd=tmp_path)


def test_credentials_are_redacted():
    assert redact_uri("https://alice:s3cret@mlflow.example.com/path?token=abc&x=1") == "https://***@mlflow.example.com/path?token=***&x=1"
    assert "s3cret" not in redact_uri("postgresql://u:s3cret@db:5432/mlflow")


def test_reopened_run_drops_points_already_logged(tracking_uri):
    first = RunLogger.create(tracking_uri, "e", run_name="r")
    for step in range(1, 6):
        first.log_metrics({"a": step * 1.0, "b": -step}, step)
    first.log_metrics({"only_early": 1.0}, 2)
    first.log_params({"x": 1, "nested.list": [1, 2]})
    first.flush()
    again = RunLogger(tracking_uri, first.run_id)
    for step in range(3, 9):  # a retry replays steps 3..5 before going further
        again.log_metrics({"a": step * 1.0, "only_early": 5.0}, step)
    again.log_params({"x": 1})  # same value again: fine
    again.finish()
    steps = sorted(m.step for m in again.client.get_metric_history(first.run_id, "a"))
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]
    assert sorted(m.step for m in again.client.get_metric_history(first.run_id, "only_early")) == list(range(2, 9))
    assert again.client.get_run(first.run_id).data.params["nested.list"] == "[1, 2]"


def test_store_uris_are_parsed_in_one_place(tmp_path):
    db = tmp_path / "m.db"
    assert sqlite_path(sqlite_uri(db)) == db and sqlite_uri(db) == f"sqlite:///{db}"
    assert sqlite_path("sqlite:///rel.db") == Path("rel.db")
    assert sqlite_path("http://127.0.0.1:5000") is None and sqlite_path("sqlite://") is None
    assert file_store_path((tmp_path / "a b").as_uri()) == tmp_path / "a b"
    assert file_store_path(sqlite_uri(db)) is None


@pytest.mark.parametrize(
    "status, tags, state, reason, outcome",
    [
        ("FINISHED", {OUTCOME_TAG: "finished"}, "finished", "", "finished"),
        ("FAILED", {OUTCOME_TAG: "diverged", REASON_TAG: "loss is nan"}, "failed", "loss is nan", "diverged"),
        ("FAILED", {}, "failed", "failed (no reason recorded)", "crashed"),
        (
            "KILLED",
            {OUTCOME_TAG: "stopped", STOPPED_TAG: "stopped by the scheduler at step 4"},
            "stopped",
            "stopped by the scheduler at step 4",
            "stopped",
        ),
        ("KILLED", {OUTCOME_TAG: "interrupted", REASON_TAG: "interrupted"}, "interrupted", "interrupted", "interrupted"),
        (
            "KILLED",
            {REASON_TAG: "interrupted; `gatesweep resume s` continues it"},
            "interrupted",
            "interrupted; `gatesweep resume s` continues it",
            "interrupted",
        ),
        ("KILLED", {OUTCOME_TAG: "interrupted"}, "interrupted", "interrupted", "interrupted"),
        ("KILLED", {}, "killed", "killed", ""),
        ("RUNNING", {}, "running", "", ""),
        ("SCHEDULED", {}, "scheduled", "", ""),
    ],
)
def test_run_state_of_every_ending(status, tags, state, reason, outcome):
    got = run_state(status, tags)
    assert (got.state, got.reason) == (state, reason) and tuple(got) == (state, reason)
    assert got.terminal == (state not in ("running", "scheduled"))
    assert run_outcome(status, tags) == outcome


def test_names_are_distinct():
    values = [v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)]
    tags = [v for k, v in vars(names).items() if k.endswith(("_TAG", "_PREFIX"))]
    assert len(values) == len(set(values))
    assert all(t.startswith(("gatesweep.", "mlflow.")) for t in tags)
    assert names.axis_of(names.axis_tag("train.lr")) == "train.lr" and names.axis_of(names.SWEEP_TAG) is None


def test_search_all_reads_every_page(tracking_uri):
    cl = client(tracking_uri)
    exp = cl.create_experiment("paged")
    ids = {cl.create_run(exp, tags={names.SWEEP_TAG: "p"}).info.run_id for _ in range(5)}
    cl.create_run(exp, tags={names.SWEEP_TAG: "other"})
    found = search_all(cl, [exp], f"tags.`{names.SWEEP_TAG}` = 'p'", page=2, order_by=["attributes.start_time DESC"])
    assert {r.info.run_id for r in found} == ids and len(found) == 5

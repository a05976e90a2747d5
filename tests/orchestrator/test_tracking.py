"""Tracking URI resolution, redaction, and the logger's no-duplicate guarantee."""

from __future__ import annotations


import pytest

from gatedmodels.configbase import ConfigError
from orchestrator.tracking import RunLogger, redact_uri, resolve_tracking_uri


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

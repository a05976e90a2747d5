"""The end of a sweep: the parent run is closed before the report is built, so a signal or a
failure while the report is built never leaves the parent RUNNING; the CLI says what to do."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from orchestrator.cli import run as run_cmd


def _parent(uri: str) -> str:
    cl = MlflowClient(uri)
    exp = cl.create_experiment("e")
    run_id = cl.create_run(exp, run_name="qs").info.run_id
    cl.set_terminated(run_id, status="FINISHED")  # what close_parent leaves before the report
    return run_id


@pytest.mark.slow
def test_a_signal_while_the_report_is_built_exits_130_with_the_parent_closed(tracking_uri, tmp_path, monkeypatch, capsys):
    parent = _parent(tracking_uri)
    outcome = SimpleNamespace(parent_run_id=parent, parent_status="FINISHED", report_dir=None, report_error="")

    def slow_report(uri, name, parent_id, out_dir):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the report is being built
        raise AssertionError("SIGTERM should have stopped the report")

    monkeypatch.setattr(run_cmd, "publish", slow_report)
    before = signal.getsignal(signal.SIGTERM)
    assert run_cmd.publish_report("qs", tracking_uri, outcome, tmp_path / "report") is False
    err = capsys.readouterr().err
    assert "interrupted while the report was built" in err and "gatesweep report qs" in err and "FINISHED" in err
    assert MlflowClient(tracking_uri).get_run(parent).info.status == "FINISHED"
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is restored


def test_a_report_that_fails_is_a_warning_and_the_reason_is_kept(tracking_uri, tmp_path, capsys):
    parent = _parent(tracking_uri)
    outcome = SimpleNamespace(parent_run_id=parent, parent_status="FINISHED", report_dir=None, report_error="")
    # no sweep of that name in the store: the report cannot be built, the sweep is not failed by it
    assert run_cmd.publish_report("nosuch", tracking_uri, outcome, tmp_path / "report") is True
    assert outcome.report_dir is None and outcome.report_error
    assert "warning: sweep nosuch" in capsys.readouterr().err

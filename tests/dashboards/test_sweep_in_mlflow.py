"""What a finished sweep leaves in MLflow for its UI, before anyone runs `gatesweep report`
(the session's real sweeps: `cmp` with a diverged trial, and `cmp-again`, which trained nothing
and reused `cmp`'s finished runs): a model-training experiment, the comparison report on the
parent run, linked from its description, the parent's per-configuration means, and a saved
view whose filter finds exactly the launch's trials, reused ones included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dashboards.publish import config_key
from dashboards.stats import compare
from dashboards.store import read_sweep
from orchestrator.tracking import client, names, views

pytestmark = pytest.mark.slow


def parent_of(cl, exp_id: str, sweep: str):
    [parent] = cl.search_runs([exp_id], f"tags.`{names.KIND_TAG}` = 'sweep' and tags.`{names.SWEEP_TAG}` = '{sweep}'")
    return parent


def test_parent_run_carries_report_note_and_per_configuration_means(store):
    cl = client(store.uri)
    exp = cl.get_experiment_by_name("dash")
    assert exp.tags[views.EXPERIMENT_KIND_TAG] == views.TRAINING_KIND
    parent = parent_of(cl, exp.experiment_id, "cmp")
    logged = {a.path for a in cl.list_artifacts(parent.info.run_id, names.REPORT_DIR)}
    assert {"report/report.html", "report/report.md", "report/report.csv", "report/loss_curves.png"} <= logged
    assert (store.root / "runs" / "sweeps" / "cmp" / "report" / "report.html").is_file()
    assert "report: " in store.run_log and "runs table: `gatesweep ui --sweep cmp" in store.run_log

    note = parent.data.tags[names.NOTE_TAG]
    assert f"#/experiments/{exp.experiment_id}/runs/{parent.info.run_id}/artifacts/report/report.html" in note
    assert f"viewStateShareKey={views.view_id('cmp')}" in note

    comp = compare(read_sweep(store.uri, "cmp"))
    children = cl.search_runs([exp.experiment_id], f"tags.`{names.PARENT_TAG}` = '{parent.info.run_id}'")
    checked = 0
    for row in comp.rows:
        label = config_key(row.label(comp.axes))
        finished = [r for r in children if r.info.run_id in {c.run_id for c in row.counted.values()}]
        for key in ("first_token_attn", "val_ppl", "sink_ratio"):
            name = f"{key}/{label}"
            if not finished:
                assert name not in parent.data.metrics  # the diverged configuration has no mean
                continue
            expected = np.mean([r.data.metrics[key] for r in finished])
            assert parent.data.metrics[name] == pytest.approx(expected, rel=1e-12), name
            checked += 1
    assert checked == 6
    assert not any(math.isnan(v) for v in parent.data.metrics.values())


@pytest.mark.parametrize(("sweep", "reused"), [("cmp", False), ("cmp-again", True)])
def test_saved_view_finds_exactly_the_launchs_trials(store, sweep, reused):
    cl = client(store.uri)
    exp = cl.get_experiment_by_name("dash")
    parent = parent_of(cl, exp.experiment_id, sweep)
    name, state = views.decode_view(cl.get_experiment(exp.experiment_id).tags[views.view_tag(sweep)])
    assert name == f"sweep {sweep}" and state["searchFilter"] == views.member_filter(sweep, parent.info.run_id)
    found = {r.info.run_id for r in cl.search_runs([exp.experiment_id], state["searchFilter"], max_results=1000)}
    trials = {r.run_id for r in read_sweep(store.uri, sweep).runs}
    assert found == trials and parent.info.run_id not in found
    assert len(found) == (4 if reused else 5)  # cmp: 4 finished + the diverged one; cmp-again: the 4 it reused
    cols = state["selectedColumns"]
    assert cols[0] == "tags.`gatesweep.gate`" and "metrics.`first_token_attn`" in cols
    keys = {c["metricKey"] for c in state["compareRunCharts"]}
    assert {"first_token_attn", "train/loss", "system/cpu_utilization_percentage"} <= keys

"""Run records made by hand (no store) and a shared sweep's runs read straight from MLflow."""

from __future__ import annotations

from dashboards.store import RunRecord, SweepRuns, resolve_axes
from orchestrator.tracking import client, run_state


def run(
    i: int,
    gate: str,
    lr: str,
    seed: int,
    *,
    status: str = "FINISHED",
    metrics: dict | None = None,
    tags: dict | None = None,
    params: dict | None = None,
    start: int = 0,
) -> RunRecord:
    t = {"gatesweep.axis.model.gate": gate, "gatesweep.axis.train.lr": lr, "gatesweep.axis.train.seed": str(seed), **(tags or {})}
    state, reason = run_state(status, t)
    return RunRecord(
        run_id=f"r{i:03d}",
        name=f"{gate}-{lr}-s{seed}",
        status=status,
        state=state,
        reason=reason,
        params=params or {"train.lr": lr, "train.seed": str(seed)},
        metrics=metrics or {},
        tags=t,
        start_time=start or i,
        end_time=None,
        experiment_id="1",
    )


def sweep_of(
    runs: list[RunRecord], axes: str = "model.gate,train.lr,train.seed", search: str = "grid", space: str | None = None
) -> SweepRuns:
    params = {"sweep.axes": axes, "sweep.search": search, **({"sweep.space": space} if space is not None else {})}
    parent = RunRecord("p", "s", "FINISHED", "finished", "", params, {}, {"gatesweep.kind": "sweep"}, 0, None, "1")
    s = SweepRuns("s", "sqlite:///x.db", "1", "e", parent, runs, 1, search=search)
    resolve_axes(s)
    return s


def mlflow_runs(store, sweep="cmp"):
    """The sweep's parent and children, straight from MLflow (independent of dashboards.store)."""
    cl = client(store.uri)
    exp = cl.get_experiment_by_name("dash")
    runs = cl.search_runs([exp.experiment_id], filter_string=f"tags.`gatesweep.sweep` = '{sweep}'", max_results=1000)
    parent = [r for r in runs if r.data.tags.get("gatesweep.kind") == "sweep"]
    assert len(parent) == 1
    return cl, parent[0], [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]

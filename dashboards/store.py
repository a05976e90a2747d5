"""Read a sweep from any MLflow tracking store into plain records. Read-only.

The data model is `orchestrator.tracking`'s contract (names in `orchestrator.tracking.names`):
- the sweep's **parent run** carries tags `gatesweep.kind=sweep` and `gatesweep.sweep=NAME`
  and params `sweep.axes`, `sweep.search` (and `sweep.space` for Optuna); a sweep launched
  several times has several parents, the newest one is the sweep's (or `parent=`);
- its trials are **child runs** (`mlflow.parentRunId`), plus FINISHED runs of earlier launches
  that this launch reused, which carry `gatesweep.also_in.NAME = <parent id>` instead;
- a child carries one tag `gatesweep.axis.<dotted path>` per varying axis (the gate axis is
  `model.gate` with the gate's label, `none` for the baseline), the full flattened config as
  params, and the final value of every metric as its latest value; its state comes from
  `orchestrator.tracking.run_state`.

Two ways to read the runs, with the same result (a test checks it on a real store):
- any tracking URI: paginated `MlflowClient.search_runs` calls (`orchestrator.tracking.search_all`),
  three whatever the sweep's size (no per-run `get_run`);
- a local SQLite store (`sqlite:///`, the default): the same rows read directly, read-only
  (`dashboards.sqlite_reader`), ~25x faster. On any schema surprise it falls back to
  `search_runs`; `GATESWEEP_REPORT_SEARCH_RUNS=1` forces the API.
Metric histories and artifacts are fetched only for the few runs a plot shows (`dashboards.artifacts`);
the one artifact every report reads is the sweep file on the parent run, for the order of the
axes' values (`dashboards.levels`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from orchestrator.tracking import STATES, all_experiments, client, file_store_path, names, quoted, redact_uri, search_all, sqlite_path

from .artifacts import ArtifactCache, json_artifact, local_artifact, metric_history, sweep_file
from .records import (
    BASELINE_GATE,
    GATE_AXIS,
    RunRecord,
    StoreError,
    SweepRuns,
    check_parent,
    finite,
    no_such_experiment,
    no_such_sweep,
    record,
)
from .sqlite_reader import SqliteRuns, read_sweep_sqlite

FORCE_API_ENV = "GATESWEEP_REPORT_SEARCH_RUNS"
DERIVED_PARAMS = frozenset({"model.num_params", "model.gate_params", "data.vocab_size", "model.vocab_size", "world_size"})
"""Params a trial derives from its config (never an axis of their own)."""
SWEEP_PARENTS = f"tags.`{names.KIND_TAG}` = {quoted(names.SWEEP_KIND)}"
NEWEST_FIRST = ["attributes.start_time DESC"]

__all__ = [
    "BASELINE_GATE",
    "GATE_AXIS",
    "STATES",
    "ArtifactCache",
    "RunRecord",
    "SqliteRuns",
    "StoreError",
    "SweepRuns",
    "axis_value",
    "check_store",
    "experiment_ids",
    "find_parent",
    "finite",
    "json_artifact",
    "local_artifact",
    "metric_history",
    "open_client",
    "optuna_space",
    "read_sweep",
    "read_sweep_api",
    "read_sweep_sqlite",
    "record",
    "resolve_axes",
    "search_all",
    "sweep_names",
    "sweep_parents",
]


# ---- opening a store ----------------------------------------------------------------------
def check_store(uri: str) -> None:
    """Raise StoreError when a local store does not exist: reading it must never create one."""
    db, folder = sqlite_path(uri), file_store_path(uri)
    if db is not None and not db.is_file():
        raise StoreError(f"no store at {db} (no such SQLite file); pass --tracking-uri or set MLFLOW_TRACKING_URI")
    if folder is not None and not folder.is_dir():
        raise StoreError(f"no store at {folder} (no such folder); pass --tracking-uri or set MLFLOW_TRACKING_URI")


def open_client(uri: str):
    """An MlflowClient on an existing store (`orchestrator.tracking.client`: lock-guarded)."""
    check_store(uri)
    return client(uri)


def experiment_ids(cl, experiment: str | None = None) -> list[str]:
    """The named experiment's id, or every active experiment's."""
    if experiment:
        exp = cl.get_experiment_by_name(experiment)
        if exp is None:
            raise no_such_experiment(experiment, [e.name for e in all_experiments(cl)])
        return [exp.experiment_id]
    return [e.experiment_id for e in all_experiments(cl)]


def sweep_parents(cl, ids: list[str]) -> dict[str, Any]:
    """Sweep name -> its newest parent run, over these experiments, newest sweep first."""
    out: dict[str, Any] = {}
    for run in search_all(cl, ids, SWEEP_PARENTS, order_by=NEWEST_FIRST) if ids else []:
        out.setdefault(run.data.tags.get(names.SWEEP_TAG, "?"), run)
    return out


def sweep_names(cl, ids: list[str]) -> list[str]:
    """Names of the sweeps launched in these experiments, newest first."""
    return list(sweep_parents(cl, ids))


def find_parent(cl, name: str | None, *, parent_id: str | None = None, experiment: str | None = None) -> tuple[Any, int]:
    """(parent run, number of launches of that sweep). Newest launch unless `parent_id`."""
    if parent_id:
        try:
            run = cl.get_run(parent_id)
        except Exception as err:  # MlflowException: RESOURCE_DOES_NOT_EXIST
            raise StoreError(f"no run {parent_id!r} in this store ({type(err).__name__})") from None
        check_parent(record(run), parent_id, name)
        return run, 1
    if not name:
        raise StoreError("name a sweep (or pass --parent RUN_ID)")
    ids = experiment_ids(cl, experiment)
    found = []
    if ids:
        found = search_all(cl, ids, f"{SWEEP_PARENTS} and tags.`{names.SWEEP_TAG}` = {quoted(name)}", order_by=NEWEST_FIRST)
    if not found:
        raise no_such_sweep(name, experiment, sweep_names(cl, ids))
    return found[0], len(found)


def read_sweep(uri: str, name: str | None, *, parent_id: str | None = None, experiment: str | None = None, cl=None) -> SweepRuns:
    """The sweep's parent and all its trials (children and reused finished runs), axes resolved.
    `cl`: an MlflowClient to reuse (one is opened only when needed)."""
    t0 = time.perf_counter()
    check_store(uri)
    sweep = None
    path = sqlite_path(uri)
    if path is not None and os.environ.get(FORCE_API_ENV) != "1":
        try:
            sweep = read_sweep_sqlite(path, uri, name, parent_id=parent_id, experiment=experiment)
        except (sqlite3.Error, LookupError, TypeError, ValueError) as err:
            if isinstance(err, StoreError):
                raise
            sweep = None  # a schema this reader does not know: MLflow's API reads it
    if sweep is None:
        cl = cl if cl is not None else open_client(uri)
        sweep = read_sweep_api(cl, uri, name, parent_id=parent_id, experiment=experiment)
    resolve_axes(sweep)
    sweep.sweep_file = sweep_file(lambda: cl if cl is not None else open_client(uri), sweep.parent)
    sweep.read_s = time.perf_counter() - t0
    return sweep


def read_sweep_api(cl, uri: str, name: str | None, *, parent_id: str | None = None, experiment: str | None = None) -> SweepRuns:
    """`read_sweep` through `MlflowClient.search_runs` (any tracking URI); axes not resolved."""
    parent_run, launches = find_parent(cl, name, parent_id=parent_id, experiment=experiment)
    parent = record(parent_run)
    name = parent.sweep or name or "?"
    exp_id = parent_run.info.experiment_id
    pid = parent.run_id
    children = [record(r) for r in search_all(cl, [exp_id], f"tags.`{names.PARENT_TAG}` = {quoted(pid)}")]
    known = {r.run_id for r in children}
    reused = [
        record(r, reused=True)
        for r in search_all(cl, [exp_id], f"tags.`{names.also_in_tag(name)}` = {quoted(pid)}")
        if r.info.run_id not in known
    ]
    exp = cl.get_experiment(exp_id)
    return SweepRuns(
        name=name,
        uri=redact_uri(uri),
        experiment_id=exp_id,
        experiment=exp.name,
        parent=parent,
        runs=children + reused,
        launches=launches,
        search=parent.params.get(names.SWEEP_SEARCH_PARAM, "grid"),
    )


# ---- axes -------------------------------------------------------------------------------------
def axis_value(run: RunRecord, path: str) -> str | None:
    """A run's value on an axis: its own axis tag; for runs without one (reused from another
    sweep or from `gatesweep train`, or sampled by Optuna) the gate label tag or the param."""
    tag = run.tags.get(names.axis_tag(path))
    if tag is not None:
        return tag
    if path == GATE_AXIS:
        return run.tags.get(names.GATE_TAG)
    return run.params.get(path)


def _paths(text: str) -> list[str]:
    """The dotted paths of a comma-separated param (`-`: none)."""
    return [p for p in text.split(",") if p and p != "-"]


def resolve_axes(sweep: SweepRuns) -> None:
    """Fill `sweep.axes` and every run's `axes`: the parent's `sweep.axes` param and the
    children's axis tags, plus an Optuna sweep's sampled parameters; keep those that vary."""
    paths: list[str] = []
    declared = _paths(sweep.parent.params.get(names.SWEEP_AXES_PARAM, ""))
    tagged = [p for run in sweep.runs for key in run.tags if (p := names.axis_of(key)) is not None]
    sampled = optuna_space(sweep) if sweep.search == "optuna" else []
    for p in declared + tagged + sampled:
        if p not in paths:
            paths.append(p)
    for run in sweep.runs:
        run.axes = {p: v for p in paths if (v := axis_value(run, p)) is not None}
    # an axis is shown when its (known) values differ; runs without any value show "?"
    varying = [p for p in paths if len({r.axes.get(p) for r in sweep.runs if p in r.axes}) > 1]
    for run in sweep.runs:
        run.axes = {p: run.axes.get(p, "?") for p in varying}
    sweep.axes = varying


def optuna_space(sweep: SweepRuns) -> list[str]:
    """Dotted paths an Optuna sweep sampled: the parent run's `sweep.space` param; without it
    (sweeps launched before it was logged), params that differ between runs sharing every axis tag."""
    logged = sweep.parent.params.get(names.SWEEP_SPACE_PARAM)
    if logged is not None:
        return _paths(logged)
    groups: dict[tuple, list[RunRecord]] = {}
    for run in sweep.runs:
        key = tuple(sorted((k, v) for k, v in run.tags.items() if names.axis_of(k) is not None))
        groups.setdefault(key, []).append(run)
    out: list[str] = []
    for runs in groups.values():
        with_params = [r for r in runs if r.params]
        if len(with_params) < 2:
            continue
        common = set.intersection(*(set(r.params) for r in with_params))
        for k in sorted(common):
            if k in DERIVED_PARAMS:
                continue  # they follow the sampled fields
            if len({r.params[k] for r in with_params}) > 1 and k not in out:
                out.append(k)
    return out

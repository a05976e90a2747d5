"""A sweep's results as pandas DataFrames, for notebooks: `results` (one row per trial, final
values) and `history` (metric curves, long form). Read-only, like everything in `dashboards`.

    import dashboards
    df = dashboards.results("quickstart")                      # ./mlflow.db, or MLFLOW_TRACKING_URI
    df.groupby("model.gate")["first_token_attn"].agg(["mean", "std", "count"])
    curves = dashboards.history("quickstart", metrics=["train/loss", "first_token_attn"])

Both read the sweep's **latest launch** (its newest parent run; `parent=` picks another) the way
`gatesweep report` does (`dashboards.store.read_sweep`): a local SQLite store straight from its
tables, read-only (~0.1 s for a thousand runs), any other store through MLflow's API. The trials
are the launch's own runs and the finished runs it reused from earlier launches.

`results` columns, in this order: `trial` (the run name), one column per varied axis named by
its dotted path (`model.gate` holds the gate's label, `none` for the baseline; numbers are
numbers), `status` (finished, failed, stopped, interrupted, killed, running, scheduled: see
`orchestrator.tracking.state`) and `reason` (why it did not finish, else ""), the metrics (by
default the runs table's: the registry's headline metrics, then the final metrics the trials
logged; `metrics="all"` for every one, or a list), then `run_id`, `config_hash`, `reused`
(finished in an earlier launch) and `parent_run_id`. A metric a run did not log is NaN.

`history` columns: `trial`, the axes, `metric`, `step`, `value`, `run_id`; one row per logged
point, ordered by trial, metric and step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from orchestrator.tracking import names, resolve_tracking_uri, sqlite_path, views

from .artifacts import metric_history
from .records import RunRecord, SweepRuns
from .store import open_client, read_sweep

if TYPE_CHECKING:
    import pandas as pd

INFO_COLUMNS = ["run_id", "config_hash", "reused", "parent_run_id"]
DEFAULT_HISTORY = ("train/loss",)
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|nan)$", re.I)


def _sweep(sweep: str, tracking_uri: str | None, experiment: str | None, parent: str | None) -> SweepRuns:
    return read_sweep(resolve_tracking_uri(tracking_uri), sweep, parent_id=parent, experiment=experiment)


def _typed(values: list[str | None]) -> list[Any]:
    """An axis column's values as ints or floats when every known value is one, else as given."""
    known = [v for v in values if v is not None and v != "?"]
    if known and all(_INT.match(v) for v in known):
        return [int(v) if v is not None and v != "?" else None for v in values]
    if known and all(_FLOAT.match(v) for v in known):
        return [float(v) if v is not None and v != "?" else math.nan for v in values]
    return values


def metric_columns(runs: Iterable[RunRecord], metrics: str | Iterable[str] | None) -> list[str]:
    """The metric columns: the runs table's (None), every logged one ("all"), or those named."""
    logged = {k for r in runs for k in r.metrics}
    if metrics is None:
        return views.table_metrics(logged)
    if isinstance(metrics, str):
        if metrics == "all":
            return sorted(logged)
        metrics = [metrics]
    return list(dict.fromkeys(metrics))


def results(
    sweep: str,
    tracking_uri: str | None = None,
    *,
    metrics: str | Iterable[str] | None = None,
    experiment: str | None = None,
    parent: str | None = None,
) -> pd.DataFrame:
    """One row per trial of the sweep's latest launch: its axes, status, reason, final metrics
    and run ids (see the module's docstring for the columns)."""
    import pandas as pd

    s = _sweep(sweep, tracking_uri, experiment, parent)
    runs = sorted(s.runs, key=lambda r: (r.start_time, r.run_id))
    keys = metric_columns(runs, metrics)
    data: dict[str, list[Any]] = {"trial": [r.name for r in runs]}
    for axis in s.axes:
        data[axis] = _typed([r.axes.get(axis) for r in runs])
    data["status"] = [r.state for r in runs]
    data["reason"] = [r.reason for r in runs]
    for k in keys:
        data[k] = [r.metrics.get(k, math.nan) for r in runs]
    data["run_id"] = [r.run_id for r in runs]
    data["config_hash"] = [r.tags.get(names.CONFIG_HASH_TAG, "") for r in runs]
    data["reused"] = [r.reused for r in runs]
    data["parent_run_id"] = [s.parent.run_id] * len(runs)
    df = pd.DataFrame(data, columns=list(data))
    df.attrs.update({"sweep": s.name, "experiment": s.experiment, "parent_run_id": s.parent.run_id, "axes": list(s.axes)})
    return df


def history(
    sweep: str,
    metrics: str | Iterable[str] = DEFAULT_HISTORY,
    tracking_uri: str | None = None,
    *,
    experiment: str | None = None,
    parent: str | None = None,
) -> pd.DataFrame:
    """Every logged point of `metrics` of every trial of the sweep's latest launch, long form
    (`trial`, the axes, `metric`, `step`, `value`, `run_id`)."""
    import pandas as pd

    uri = resolve_tracking_uri(tracking_uri)
    s = read_sweep(uri, sweep, parent_id=parent, experiment=experiment)
    keys = [metrics] if isinstance(metrics, str) else list(dict.fromkeys(metrics))
    runs = sorted(s.runs, key=lambda r: (r.start_time, r.run_id))
    points = _sqlite_points(uri, runs, keys)
    if points is None:
        cl = open_client(uri)
        points = {(r.run_id, k): metric_history(cl, r.run_id, k) for r in runs for k in keys}
    rows: list[dict[str, Any]] = []
    for r in runs:
        for k in keys:
            steps, values = points.get((r.run_id, k), ([], []))
            rows += [{"trial": r.name, **r.axes, "metric": k, "step": st, "value": v, "run_id": r.run_id} for st, v in zip(steps, values)]
    columns = ["trial", *s.axes, "metric", "step", "value", "run_id"]
    df = pd.DataFrame(rows, columns=columns)
    for axis in s.axes:
        df[axis] = _typed([None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in df[axis]])
    df["step"] = df["step"].astype("int64")
    df["value"] = df["value"].astype("float64")
    df.attrs.update({"sweep": s.name, "experiment": s.experiment, "parent_run_id": s.parent.run_id, "axes": list(s.axes)})
    return df


def _sqlite_points(uri: str, runs: list[RunRecord], keys: list[str]) -> dict[tuple[str, str], tuple[list[int], list[float]]] | None:
    """The points straight from a local SQLite store (None for other stores, or on any surprise:
    the API reads them then)."""
    import sqlite3

    from .sqlite_reader import SqliteRuns

    path = sqlite_path(uri)
    if path is None or not runs or not keys:
        return None if path is None else {}
    try:
        db = SqliteRuns(path)
        try:
            return db.histories([r.run_id for r in runs], keys)
        finally:
            db.close()
    except (sqlite3.Error, LookupError, TypeError, ValueError):
        return None

"""A sweep's results as pandas DataFrames, for notebooks: `results` (one row per trial, final
values) and `history` (metric curves, long form). Read-only, like everything in `dashboards`.

    import dashboards
    df = dashboards.results("quickstart")                      # ./mlflow.db, or MLFLOW_TRACKING_URI
    df.groupby("model.gate")["metrics.first_token_attn"].agg(["mean", "std", "count"])
    curves = dashboards.history("quickstart", metrics=["train/loss", "first_token_attn"])

Both read the sweep's **latest launch** (its newest parent run; `parent=` picks another) the way
`gatesweep report` does (`dashboards.store.read_sweep`): a local SQLite store straight from its
tables, read-only (~0.1 s for a thousand runs), any other store through MLflow's API. The trials
are the launch's own runs and the finished runs it reused from earlier launches.

`results` columns, in this order (`dashboards.frame`):

- `trial` (the run name) and `seed` (its `train.seed`, always there);
- the axes, named as the sweep file names them: each varied axis by its dotted path, a composed
  axis (`model.gate`, the gate's label: `none`, `G1-elementwise`) followed by the file's own keys
  inside it (`model.gate.position`, `model.gate.granularity`; empty where a field does not apply,
  as the granularity of an ungated model); each an ordered categorical whose categories are the
  sweep's order of its values (the file's, not the alphabet's), numbers as numbers;
- `status` (finished, failed, stopped, interrupted, killed, running, scheduled: see
  `orchestrator.tracking.state`), `reason` (why it did not finish, else ""), `start`, `end`
  (UTC timestamps) and `duration_s`;
- the metrics, each `metrics.<name>` (so that no metric name can collide with another column):
  by default the one default set of the end-of-sweep table and the report
  (`orchestrator.core.metrics.default_columns`); `metrics="all"` for every one, or a list of names;
- every resolved config field the trial logged, `config.<dotted path>`, typed;
- `run_id`, `config_hash`, `reused` (finished in an earlier launch) and `parent_run_id`.

`df.attrs`: `sweep`, `experiment`, `parent_run_id`, and the axes by role: `axes` (every axis
column), `arm_axes` (the varied model fields: what makes an arm), `other_axes` (a learning rate,
a ladder's rung) and `seed_axes`.

`history` columns: `trial`, `seed`, the same axis columns, `metric`, `step`, `value`, `run_id`;
one row per logged point, in the sweep's order of trials, then metric and step.

Every mistake a caller can make (a sweep, experiment or parent run that is not there, a tracking
URI that cannot be used or reached, a metric no run logged, an argument of the wrong type) raises
`ResultsError`, one line, with the underlying exception as its `__cause__`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from gatedmodels.typedconfig import ConfigError, did_you_mean
from orchestrator.core.metrics import default_columns
from orchestrator.tracking import resolve_tracking_uri, sqlite_path
from orchestrator.tracking.failures import store_failure, unreachable

from .artifacts import metric_history
from .frame import axis_columns, frame_attrs, frame_of, ordered_runs, seed_of
from .records import RunRecord, StoreError, SweepRuns
from .sqlite_reader import SqliteRuns
from .store import open_client, read_sweep

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_HISTORY = ("train/loss",)
MAX_LISTED = 30
T = TypeVar("T")


class ResultsError(StoreError):
    """A mistake of the caller's in `dashboards.results` or `dashboards.history`: one line saying
    what and what is allowed; the exception it comes from is its `__cause__`."""


def _guarded(what: Callable[[], T]) -> T:
    """`what()`, its user mistakes and store failures raised as ResultsError (cause chained)."""
    try:
        return what()
    except ResultsError:
        raise
    except StoreError as err:
        raise ResultsError(str(err)) from err
    except ConfigError as err:
        raise ResultsError(" ".join(str(err).split())) from err
    except Exception as err:
        reason = store_failure(err)
        if reason is None:
            raise  # a bug: its traceback is what a report of it needs
        raise ResultsError(reason) from err


def _uri(tracking_uri: str | None) -> str:
    if tracking_uri is not None and not isinstance(tracking_uri, str):
        raise ResultsError(f"tracking_uri: got {type(tracking_uri).__name__}; allowed: a tracking URI string or None")
    uri = resolve_tracking_uri(tracking_uri, name="tracking_uri")
    problem = unreachable(uri)
    if problem:
        raise ResultsError(problem)
    return uri


def _sweep(sweep: str, tracking_uri: str | None, experiment: str | None, parent: str | None) -> tuple[str, SweepRuns]:
    for name, value in (("sweep", sweep), ("experiment", experiment), ("parent", parent)):
        if value is not None and not isinstance(value, str):
            raise ResultsError(f"{name}: got {type(value).__name__} {value!r}; allowed: a string")
    uri = _uri(tracking_uri)
    return uri, read_sweep(uri, sweep, parent_id=parent, experiment=experiment)


def metric_columns(runs: Iterable[RunRecord], metrics: str | Iterable[str] | None, sweep: str = "") -> list[str]:
    """The metric names to show: the default set (None), every logged one ("all"), or those named,
    each of which some run must have logged (ResultsError with the closest names otherwise)."""
    logged = {k for r in runs for k in r.metrics}
    if metrics is None:
        return default_columns(logged)
    if isinstance(metrics, str):
        if metrics == "all":
            return sorted(logged)
        metrics = [metrics]
    try:
        names = list(dict.fromkeys(metrics))
    except TypeError as err:
        raise ResultsError(f"metrics: got {type(metrics).__name__}; allowed: None, 'all', a metric name or a list of them") from err
    if not all(isinstance(m, str) for m in names):
        raise ResultsError(f"metrics: got {names!r}; allowed: metric names (strings)")
    unknown = [m for m in names if m not in logged]
    if unknown:
        top = sorted(k for k in logged if "/layer_" not in k and not k.startswith("system/"))
        shown = ", ".join(top[:MAX_LISTED]) + (f", ... ({len(top) - MAX_LISTED} more)" if len(top) > MAX_LISTED else "")
        named = ", ".join(f"{m!r}{did_you_mean(m, sorted(logged))}" for m in unknown)
        raise ResultsError(f"metrics: {named} not logged by any run of sweep {sweep}; its runs logged: {shown or 'nothing'}")
    return names


def results(
    sweep: str,
    tracking_uri: str | None = None,
    *,
    metrics: str | Iterable[str] | None = None,
    experiment: str | None = None,
    parent: str | None = None,
) -> pd.DataFrame:
    """One row per trial of the sweep's latest launch: its seed, axes, status, times, final
    metrics, config and run ids (see the module's docstring for the columns); ResultsError for
    any mistake of the caller's."""

    def build() -> pd.DataFrame:
        _, s = _sweep(sweep, tracking_uri, experiment, parent)
        return frame_of(s, metric_columns(s.runs, metrics, s.name))

    return _guarded(build)


def history(
    sweep: str,
    metrics: str | Iterable[str] = DEFAULT_HISTORY,
    tracking_uri: str | None = None,
    *,
    experiment: str | None = None,
    parent: str | None = None,
) -> pd.DataFrame:
    """Every logged point of `metrics` of every trial of the sweep's latest launch, long form
    (`trial`, `seed`, the axes as `results` names them, `metric`, `step`, `value`, `run_id`);
    ResultsError for any mistake of the caller's."""
    return _guarded(lambda: _history(sweep, metrics, tracking_uri, experiment, parent))


def _history(sweep: str, metrics: Any, tracking_uri: str | None, experiment: str | None, parent: str | None) -> pd.DataFrame:
    import pandas as pd

    uri, s = _sweep(sweep, tracking_uri, experiment, parent)
    if isinstance(metrics, str):
        metrics = [metrics]
    keys = _logged_history_keys(s, metrics)
    runs = ordered_runs(s)
    points = _sqlite_points(uri, runs, keys)
    if points is None:
        cl = open_client(uri)
        points = {(r.run_id, k): metric_history(cl, r.run_id, k) for r in runs for k in keys}
    axes = axis_columns(s, runs)
    rows: list[dict[str, Any]] = []
    for r in runs:
        head = {"trial": r.name, "seed": seed_of(r)}
        for k in keys:
            steps, values = points.get((r.run_id, k), ([], []))
            rows += [{**head, "metric": k, "step": st, "value": v, "run_id": r.run_id, "_run": r.run_id} for st, v in zip(steps, values)]
    df = pd.DataFrame(rows, columns=["trial", "seed", "metric", "step", "value", "run_id", "_run"])
    by_run = {r.run_id: i for i, r in enumerate(runs)}
    for name, column in reversed(list(axes.items())):
        df.insert(2, name, column.take([by_run[x] for x in df["_run"]]).reset_index(drop=True) if len(df) else column[:0])
    df = df.drop(columns="_run")
    df["seed"] = df["seed"].astype("Int64")
    df["step"] = df["step"].astype("int64")
    df["value"] = df["value"].astype("float64")
    df.attrs.update(frame_attrs(s, list(axes)))
    return df


def _logged_history_keys(s: SweepRuns, metrics: Any) -> list[str]:
    """The metric names of a history: each a string that some run logged (its latest value is in
    the run's metrics, so a logged history has one)."""
    try:
        keys = list(dict.fromkeys(metrics))
    except TypeError as err:
        raise ResultsError(f"metrics: got {type(metrics).__name__}; allowed: a metric name or a list of them") from err
    return metric_columns(s.runs, keys, s.name) if keys else []


def _sqlite_points(uri: str, runs: list[RunRecord], keys: list[str]) -> dict[tuple[str, str], tuple[list[int], list[float]]] | None:
    """The points straight from a local SQLite store (None for other stores, or on any surprise:
    the API reads them then)."""
    import sqlite3

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

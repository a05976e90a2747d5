"""A sweep's saved view: the runs page's state (its filter, sort, grouping, columns and charts),
MLflow's envelope around it in the experiment tag (deflated past the tag's limit), and writing it."""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Iterable
from typing import Any

from .. import names
from .chart_view import charts, constant_metrics, table_metrics
from .groups import group_by
from .links import view_id, view_tag

MAX_TAG_VALUE = 20000
"""MLflow's limit on an experiment tag's value; a longer view state is stored deflated."""
METRIC_COLUMN_WIDTH = 110
AXIS_COLUMN_WIDTH = 140


def axis_columns(axes: Iterable[str]) -> list[str]:
    """Table columns of the varied axes: the gate's label tag for the gate axis, else the param
    of the same dotted path."""
    out = []
    for path in axes:
        if path == "model.gate":
            out.append(_col("tags", names.GATE_TAG))
        else:
            out.append(_col("params", path))
    return out


def _col(kind: str, key: str) -> str:
    """MLflow's column id: `metrics.`key``."""
    return f"{kind}.`{key}`"


def sweep_view_state(
    *,
    search_filter: str,
    axes: Iterable[str],
    logged: Iterable[str] | None = None,
    runs: int = 100,
    group: str | None = None,
    values: dict[str, list[float]] | None = None,
    parallel: tuple[list[str], list[str]] | None = None,
) -> dict[str, Any]:
    """The runs page's state for a sweep: `search_filter` picks its runs, sorted by run name
    (which lists them flat: MLflow nests children only when sorting by start time without a
    filter), grouped by the tag `group` (each group's mean in the charts), columns the data
    set, the axes and the table metrics, every run shown in charts; `values` (metric -> every
    trial's final value) leaves the constant metrics out of the charts;
    `parallel` (params, metrics) adds a parallel-coordinates chart."""
    constant = constant_metrics(values or {})
    metric_keys = table_metrics(logged)
    axis_cols = axis_columns(axes)
    columns = [*axis_cols, *(_col("metrics", k) for k in metric_keys), _col("attributes", "Dataset")]
    state: dict[str, Any] = {
        "searchFilter": search_filter,
        "orderByKey": _col("tags", "mlflow.runName"),
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "datasetsFilter": [],
        "modelVersionFilter": "All Runs",
        "selectedColumns": columns,
        "columnOrder": columns,
        "columnWidths": {
            **{c: AXIS_COLUMN_WIDTH for c in axis_cols},
            **{_col("metrics", k): max(METRIC_COLUMN_WIDTH, 8 * len(k) + 24) for k in metric_keys},
        },
        "runsHiddenMode": "SHOW_ALL",
        "hideEmptyCharts": True,
    }
    if group is not None:
        state.update({"groupBy": group_by(group), "groupsExpanded": {}, "useGroupedValuesInCharts": True})
    if logged is not None:
        chart_list, sections = charts(logged, runs=runs, constant=constant, parallel=parallel)
        state.update({"compareRunCharts": chart_list, "compareRunSections": sections, "isAccordionReordered": True})
    return state


def encode_view(name: str, state: dict[str, Any], now_ms: int | None = None) -> str:
    """The experiment tag's value: MLflow's saved-view envelope around `state` (deflated when
    the plain JSON would pass MLflow's tag limit)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    body = json.dumps(state, separators=(",", ":"))
    value = json.dumps({"name": name, "createdAt": now, "updatedAt": now, "state": body})
    if len(value) > MAX_TAG_VALUE:
        body = "deflate;" + base64.b64encode(zlib.compress(body.encode(), 9)).decode("ascii")
        value = json.dumps({"name": name, "createdAt": now, "updatedAt": now, "state": body})
    return value


def decode_view(value: str) -> tuple[str, dict[str, Any]]:
    """(name, state) of a saved view's tag value, plain or deflated."""
    env = json.loads(value)
    body = env["state"]
    if body.startswith("deflate;"):
        body = zlib.decompress(base64.b64decode(body[len("deflate;") :])).decode()
    return env["name"], json.loads(body)


def write_sweep_view(
    cl,
    experiment_id: str,
    sweep: str,
    *,
    search_filter: str,
    axes: Iterable[str],
    logged: Iterable[str] | None = None,
    runs: int = 100,
    group: str | None = None,
    values: dict[str, list[float]] | None = None,
    parallel: tuple[list[str], list[str]] | None = None,
) -> str:
    """Write (or replace) the sweep's saved view on its experiment; return its id."""
    state = sweep_view_state(
        search_filter=search_filter, axes=axes, logged=logged, runs=runs, group=group, values=values, parallel=parallel
    )
    cl.set_experiment_tag(experiment_id, view_tag(sweep), encode_view(f"sweep {sweep}", state))
    return view_id(sweep)

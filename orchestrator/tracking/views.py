"""What the MLflow UI shows of a sweep: a model-training experiment, and one saved view per sweep.

MLflow 3.17 (read from its sources and its UI bundle, `mlflow/server/js/build`):

- **Experiment kind**: the experiment tag `mlflow.experimentKind` is MLflow's own mark;
  `custom_model_development` is a model-training experiment (the UI's kind selector writes the
  same tag; `genai_development` is the other kind). Since 3.17 the UI's mode itself (GenAI or
  Model training) comes from the URL parameter `workflowType` (`machine_learning`), falling back
  to the browser's last choice, GenAI by default; so every URL gatesweep prints carries it, and
  opens the runs page (`#/experiments/ID/runs`), not the GenAI traces overview.
- **Saved views**: the experiment tag `mlflow.sharedViewState.<id>` holds
  `{"name", "createdAt", "updatedAt", "state"}`, where `state` is the JSON (or `deflate;` +
  base64 of its zlib bytes) of the runs page's search facets and UI state; `?viewStateShareKey=<id>`
  opens it and the page's "Views" menu lists it. A sweep's view (`sweep_view_state`) lists the
  sweep's trial runs (a search filter and a sort by run name turn MLflow's nesting under the
  parent off), with the varied axes, the data set and the headline metrics as columns in that
  order, and the chart view's sections laid out: the headline metrics' final values as bar
  charts first (and, for a search sweep, a parallel-coordinates chart of the varied axes and
  the headline metrics), then every metric's curve grouped by its prefix as MLflow groups them
  (the unprefixed evaluation metrics in "Model metrics", `train/...`, the per-layer breakdowns,
  ...), the system metrics last. A metric whose final value is the same in every trial (spike
  counts of 0, the learning rate, the tokens seen) gets no chart.
- **Groups**: the view's `groupBy` (`{"aggregateFunction", "groupByKeys": [{"mode": "tag",
  "groupByData": KEY}]}`) groups the runs by one tag, the trial's group (`names.group_tag`: its
  values on the varied axes but the seeds), and with `useGroupedValuesInCharts` the charts show
  each group's mean, a curve with a band from its min to its max, a bar of its mean. The UI
  colours a group by a checksum of its id (`tag.KEY.VALUE`) into its 29-colour palette
  (`ui_colour`, as its bundle computes it), so two groups can share a colour; `group_key`
  picks the tag's name (`gatesweep.group.NAME`, else with a `:SALT`) under which every group of
  the sweep gets its own colour, and each run's `mlflow.runColor` is its group's colour, so the
  expanded rows and an ungrouped chart show the same colours.

Writers: `launch.runs` (the view at launch), `launch.outcome` (refreshed with the metrics the
trials logged), `gatesweep ui` (for sweeps launched before views existed). Column and chart
choices come from the metric registry (`orchestrator.core.metrics`), never from a list here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
import zlib
from collections.abc import Iterable
from typing import Any

from orchestrator.core import metrics as registry

from . import names

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
"""MLflow's kind for model-training experiments (`genai_development` is the GenAI one)."""
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_KEY_PARAM = "viewStateShareKey"
WORKFLOW_PARAM = "workflowType"
TRAINING_WORKFLOW = "machine_learning"
MAX_TAG_VALUE = 20000
"""MLflow's limit on an experiment tag's value; a longer view state is stored deflated."""
MODEL_SECTION = "Model metrics"
"""MLflow's section for metrics without a `/` prefix."""
SYSTEM_SECTION = "System metrics"
"""MLflow's section for `system/...` metrics."""
SYSTEM_PREFIX = "system/"
HEADLINE_SECTION = "Headline metrics: final values"
METRIC_COLUMN_WIDTH = 110
AXIS_COLUMN_WIDTH = 140
GATE_AXIS = "model.gate"
PALETTE = (
    "#a6630c", "#c83243", "#b45091", "#8a63bf", "#434a93", "#137dae", "#04867d", "#308613", "#facb66", "#1f272d",
    "#445461", "#5f7281", "#8396a5", "#93320b", "#be501e", "#de7921", "#f2be88", "#115026", "#277c43", "#3ba65e",
    "#8ddda8", "#9e102c", "#c82d4c", "#e65b77", "#f792a6", "#0e538b", "#2272b4", "#4299e0", "#8acaff",
)  # fmt: skip
"""The run colours of MLflow 3.17's UI, in its order (`mlflow/server/js/build`)."""
MAX_SALT = 20000
"""Salts `group_key` tries (enough for ~20 groups of distinct colours; beyond, the most it found)."""
GROUP_AGGREGATE = "average"


# ---- experiment kind ------------------------------------------------------------------------
def mark_training_experiment(cl, experiment) -> None:
    """Tag an experiment as model training, unless it already has a kind (a user's choice stays)."""
    tags = getattr(experiment, "tags", None) or {}
    if EXPERIMENT_KIND_TAG not in tags:
        cl.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)


# ---- URLs -----------------------------------------------------------------------------------
def view_id(sweep: str) -> str:
    """The saved view's id (a sweep name is letters, digits, '.', '_', '-': URL-safe)."""
    return f"gatesweep-{sweep}"


def view_tag(sweep: str) -> str:
    return VIEW_TAG_PREFIX + view_id(sweep)


def runs_url(base: str, experiment_id: str, sweep: str | None = None) -> str:
    """The runs table of the experiment in model-training mode, in the sweep's saved view."""
    query = (f"{VIEW_KEY_PARAM}={view_id(sweep)}&" if sweep else "") + f"{WORKFLOW_PARAM}={TRAINING_WORKFLOW}"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def run_url(base: str, experiment_id: str, run_id: str, artifact: str | None = None) -> str:
    """A run's page (its artifact `artifact` selected, when given), in model-training mode."""
    tail = f"/artifacts/{artifact}" if artifact else ""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}{tail}?{WORKFLOW_PARAM}={TRAINING_WORKFLOW}"


def parent_note(description: str, experiment_id: str, parent_id: str, sweep: str) -> str:
    """The parent run's description (markdown, shown on its page): links to the comparison
    report on this run and to the sweep's runs table first (MLflow folds long descriptions), then
    the sweep's own description."""
    # hash links, relative to wherever the UI is served (a server's --static-prefix included)
    report = run_url("", experiment_id, parent_id, f"{names.REPORT_DIR}/report.html").lstrip("/")
    md = run_url("", experiment_id, parent_id, f"{names.REPORT_DIR}/report.md").lstrip("/")
    table = runs_url("", experiment_id, sweep).lstrip("/")
    links = (
        f"**Comparison report**: [report.html]({report}) · [report.md]({md}) (artifacts `{names.REPORT_DIR}/` of this run, "
        f"written when the sweep ends and by `gatesweep report {sweep}`). **Trials**: [the runs table of sweep {sweep}]({table}). "
        "This run's metrics `<metric>/<configuration>` are each configuration's mean over its finished seeds."
    )
    return f"{links}\n\n{description.strip()}" if description and description.strip() else links


# ---- groups and colours ------------------------------------------------------------------------
def _checksum(text: str, t: int = 0, n: int = 0) -> tuple[int, int]:
    """The UI's running (t, n) over the UTF-16 code units of `text`, from (t, n)."""
    units = text.encode("utf-16-le")
    for i in range(0, len(units), 2):
        t = (t + int.from_bytes(units[i : i + 2], "little")) % 255
        n = (n + t) % 255
    return t, n


def ui_colour(uuid: str) -> str:
    """The colour MLflow's UI gives a run or group id it has no colour for (its
    `getStableColorForRun`: a Fletcher-style checksum of the UTF-16 code units into `PALETTE`)."""
    t, n = _checksum(uuid)
    return PALETTE[(t | n << 8) % len(PALETTE)]


def group_uuid(key: str, label: str) -> str:
    """The UI's id of the group of runs whose tag `key` is `label`."""
    return f"tag.{key}.{label}"


def group_colour(key: str, label: str) -> str:
    return ui_colour(group_uuid(key, label))


def group_key(sweep: str, labels: Iterable[str]) -> str:
    """The group tag's name under which the groups `labels` get the most distinct colours (all
    distinct when there are at most as many as the palette has): `gatesweep.group.NAME` when it
    does, else the first salt that does."""
    groups = sorted(set(labels))
    want = min(len(groups), len(PALETTE))
    # the checksum is linear: a label's part of it, (sum, weighted sum, length), is the same under every key
    parts = [(*_checksum(g), len(g.encode("utf-16-le")) // 2) for g in groups]
    best, best_n = names.group_tag(sweep), -1
    for salt in range(MAX_SALT):
        key = names.group_tag(sweep, salt)
        t0, n0 = _checksum(group_uuid(key, ""))
        n = len({((t0 + s) % 255 | (n0 + length * t0 + w) % 255 << 8) % len(PALETTE) for s, w, length in parts})
        if n > best_n:
            best, best_n = key, n
        if n >= want:
            break
    return best


def group_label(axes: dict[str, Any]) -> str:
    """A trial's group: its values on the varied axes but the seeds, as the report names its
    rows (`G1-elementwise`, `G1-elementwise, lr=0.003`; `all runs` when nothing else varies)."""
    items = [(p, v) for p, v in axes.items() if not names.is_seed_axis(p)]
    parts = []
    for p, v in items:
        text = f"{v:g}" if isinstance(v, float) else str(v)
        parts.append(text if p == GATE_AXIS or len(items) == 1 else f"{p.rsplit('.', 1)[-1]}={text}")
    return ", ".join(parts) or "all runs"


def sampled_group(key: str, label: str, sampled: dict[str, Any]) -> dict[str, str]:
    """An Optuna sample's group tags: its arm's label with the sampled values (`lr=0.0031`)."""
    values = ", ".join(
        f"{p.rsplit('.', 1)[-1]}={v:.3g}" if isinstance(v, float) else f"{p.rsplit('.', 1)[-1]}={v}" for p, v in sampled.items()
    )
    text = values if label == "all runs" else f"{label}, {values}"
    return {key: text, names.RUN_COLOR_TAG: group_colour(key, text)}


def group_by(key: str) -> dict[str, Any]:
    """The view's grouping: runs by tag `key`, charts of each group's mean (min/max band)."""
    return {"aggregateFunction": GROUP_AGGREGATE, "groupByKeys": [{"mode": "tag", "groupByData": key}]}


def constant_metrics(values: dict[str, list[float]]) -> set[str]:
    """Metrics whose final value is the same in every trial that logged it (at least two)."""
    out = set()
    for key, xs in values.items():
        finite = [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
        if len(finite) >= 2 and len(finite) == len(xs) and max(finite) == min(finite):
            out.add(key)
    return out


# ---- the view -------------------------------------------------------------------------------
def table_metrics(logged: Iterable[str] | None = None) -> list[str]:
    """The metric columns: the registry's headline metrics (its order), the headline families
    that were logged (`ruler_avg/<length>`), then the other metrics every finished trial has
    (`final`). Without `logged`, every fixed one."""
    headline = registry.names("headline")
    final = [k for k in registry.names("final") if k not in headline]
    if logged is None:
        return [*headline, *final]
    keys = set(logged)
    families = registry.prefixes("headline")
    fam = sorted(k for k in keys if any(k.startswith(f) for f in families) and k not in headline)
    return [k for k in headline if k in keys] + fam + [k for k in final if k in keys]


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


def section_of(key: str) -> str:
    """The chart section MLflow puts a metric in: everything before its last `/`."""
    prefix = key.rsplit("/", 1)[0] if "/" in key else ""
    if prefix == "":
        return MODEL_SECTION
    if prefix + "/" == SYSTEM_PREFIX:
        return SYSTEM_SECTION
    return prefix


def _col(kind: str, key: str) -> str:
    """MLflow's column id: `metrics.`key``."""
    return f"{kind}.`{key}`"


def _uid(*parts: str) -> str:
    return "gs-" + hashlib.sha1("\0".join(parts).encode()).hexdigest()[:16]


def _chart(kind: str, key: str, section: str, *, runs: int, generated: bool) -> dict[str, Any]:
    base: dict[str, Any] = {
        "uuid": _uid(kind, key, section),
        "type": kind,
        "runsCountToCompare": runs,
        "metricSectionId": _uid("section", section),
        "deleted": False,
        "isGenerated": generated,
        "metricKey": key,
        "displayName": key if kind == "BAR" else key.rsplit("/", 1)[-1],
    }
    if kind == "LINE":
        system = key.startswith(SYSTEM_PREFIX)
        base.update(
            {
                "lineSmoothness": 0,
                "xAxisScaleType": "linear",
                "scaleType": "linear",
                "range": {},
                "xAxisKey": "time" if system else "step",
                "selectedXAxisMetricKey": "",
                "yAxisKey": "metric",
                "yAxisExpressions": [],
                "ignoreOutliers": False,
                "useGlobalXaxisKey": not system,
                "useGlobalLineSmoothing": True,
            }
        )
    return base


def parallel_chart(params: list[str], metrics: list[str], *, runs: int) -> dict[str, Any]:
    """A parallel-coordinates chart of `params` (run params) and `metrics` (final values)."""
    return {
        "uuid": _uid("PARALLEL", *params, "|", *metrics),
        "type": "PARALLEL",
        "runsCountToCompare": runs,
        "metricSectionId": _uid("section", HEADLINE_SECTION),
        "deleted": False,
        "isGenerated": False,
        "selectedParams": params,
        "selectedMetrics": metrics,
        "showAllRuns": True,
    }


def charts(
    logged: Iterable[str],
    *,
    runs: int = 100,
    constant: Iterable[str] = (),
    parallel: tuple[list[str], list[str]] | None = None,
) -> tuple[list[dict], list[dict]]:
    """(charts, sections) of the chart view: a bar chart of each table metric's final value (and
    the `parallel` chart, (params, metrics), when given), then a chart of every logged metric in
    MLflow's own section for it (a line over steps, a bar for metrics only a trial's end
    reports), sections ordered headline, "Model metrics", `train`, the others alphabetically,
    "System metrics". The `constant` metrics (the same final value in every trial) get none."""
    keys = sorted(set(logged) - set(constant))
    out = [_chart("BAR", k, HEADLINE_SECTION, runs=runs, generated=False) for k in table_metrics(keys)]
    if parallel is not None and len(parallel[0]) + len(parallel[1]) >= 2:
        out.append(parallel_chart(*parallel, runs=runs))
    by_section: dict[str, list[str]] = {}
    for k in keys:
        by_section.setdefault(section_of(k), []).append(k)
    rest = sorted(s for s in by_section if s not in (MODEL_SECTION, SYSTEM_SECTION))
    train = [s for s in rest if s.split("/")[0] == "train"]
    order = [s for s in (MODEL_SECTION, *train) if s in by_section] + [s for s in rest if s not in train]
    order += [SYSTEM_SECTION] if SYSTEM_SECTION in by_section else []
    for section in order:
        for k in by_section[section]:
            m = registry.lookup(k)
            kind = "BAR" if m is not None and m.when == "end" else "LINE"
            out.append(_chart(kind, k, section, runs=runs, generated=True))
    sections = [
        {"uuid": _uid("section", s), "name": s, "display": True, "isReordered": True, "deleted": False, "isGenerated": True}
        for s in [HEADLINE_SECTION, *order]
    ]
    return out, sections


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


def member_filter(sweep: str, parent_id: str) -> str:
    """The search filter of a launch's trial runs: its children and the finished runs it reused
    both carry `gatesweep.in.<sweep> = <parent id>` (MLflow's filters have no OR)."""
    return f"tags.`{names.member_tag(sweep)}` = '{parent_id}'"


def children_filter(parent_id: str) -> str:
    """The filter for sweeps launched before member tags: the parent's children."""
    return f"tags.`{names.PARENT_TAG}` = '{parent_id}'"


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

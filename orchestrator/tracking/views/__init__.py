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

The modules: `links` (the experiment's kind, the URLs, the parent's description, the filters of a
launch's runs), `groups` (groups and colours), `chart_view` (columns, sections, charts), `saved` (the
view's state, its tag, writing it); everything is re-exported here (`views.group_key`).

Writers: `launch.runs` (the view at launch), `launch.outcome` (refreshed with the metrics the
trials logged), `gatesweep ui` (for sweeps launched before views existed). Column and chart
choices come from the metric registry (`orchestrator.core.metrics`), never from a list here.
"""

from __future__ import annotations

from .chart_view import (
    HEADLINE_SECTION,
    MODEL_SECTION,
    SYSTEM_PREFIX,
    SYSTEM_SECTION,
    charts,
    constant_metrics,
    parallel_chart,
    section_of,
    table_metrics,
)
from .groups import (
    GATE_AXIS,
    GROUP_AGGREGATE,
    MAX_SALT,
    PALETTE,
    group_by,
    group_colour,
    group_key,
    group_label,
    group_uuid,
    sampled_group,
    ui_colour,
)
from .links import (
    EXPERIMENT_KIND_TAG,
    TRAINING_KIND,
    TRAINING_WORKFLOW,
    VIEW_KEY_PARAM,
    VIEW_TAG_PREFIX,
    WORKFLOW_PARAM,
    children_filter,
    mark_training_experiment,
    member_filter,
    parent_note,
    run_url,
    runs_url,
    view_id,
    view_tag,
)
from .saved import (
    AXIS_COLUMN_WIDTH,
    MAX_TAG_VALUE,
    METRIC_COLUMN_WIDTH,
    axis_columns,
    decode_view,
    encode_view,
    sweep_view_state,
    write_sweep_view,
)

__all__ = [
    "AXIS_COLUMN_WIDTH",
    "EXPERIMENT_KIND_TAG",
    "GATE_AXIS",
    "GROUP_AGGREGATE",
    "HEADLINE_SECTION",
    "MAX_SALT",
    "MAX_TAG_VALUE",
    "METRIC_COLUMN_WIDTH",
    "MODEL_SECTION",
    "PALETTE",
    "SYSTEM_PREFIX",
    "SYSTEM_SECTION",
    "TRAINING_KIND",
    "TRAINING_WORKFLOW",
    "VIEW_KEY_PARAM",
    "VIEW_TAG_PREFIX",
    "WORKFLOW_PARAM",
    "axis_columns",
    "charts",
    "children_filter",
    "constant_metrics",
    "decode_view",
    "encode_view",
    "group_by",
    "group_colour",
    "group_key",
    "group_label",
    "group_uuid",
    "mark_training_experiment",
    "member_filter",
    "parallel_chart",
    "parent_note",
    "run_url",
    "runs_url",
    "sampled_group",
    "section_of",
    "sweep_view_state",
    "table_metrics",
    "ui_colour",
    "view_id",
    "view_tag",
    "write_sweep_view",
]

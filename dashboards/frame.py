"""The columns of `dashboards.results` and `dashboards.history`, built from a `SweepRuns`.

Axes are spelt as the sweep file spells them (`orchestrator.spec.axes`): a composed axis
(`model.gate`, the gate's label) comes with the file's own keys inside it
(`model.gate.position`, ...), read from each run's params; each axis column is an ordered
categorical in the sweep's order of its values (`dashboards.levels`). Metric columns are
`metrics.<name>` and config columns `config.<dotted path>`, so that no name a run logs can
collide with another column.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from orchestrator.core.values import same_value
from orchestrator.spec.axes import COMPOSED, recorded_axis
from orchestrator.tracking import names

from .levels import file_values, level_order
from .records import RunRecord, SweepRuns

if TYPE_CHECKING:
    import pandas as pd

METRIC_PREFIX = "metrics."
CONFIG_PREFIX = "config."
SEED_PARAM = "train.seed"
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|nan)$", re.I)


def typed(values: list[Any]) -> list[Any]:
    """A column's text values as ints, floats or booleans when every known one is, else as given
    (None stays None; NaN where floats)."""
    known = [v for v in values if v is not None and v != "?"]
    text = [str(v) for v in known]
    if known and all(_INT.match(v) for v in text):
        return [int(v) if v is not None and v != "?" else None for v in values]
    if known and all(_FLOAT.match(v) for v in text):
        return [float(v) if v is not None and v != "?" else math.nan for v in values]
    if known and all(v in ("True", "False") for v in text):
        return [None if v is None or v == "?" else str(v) == "True" for v in values]
    return [None if v == "?" else v for v in values]


def seed_of(run: RunRecord) -> int | None:
    """A run's `train.seed` (its axis value, else its param), None when it has none."""
    value = run.axes.get(SEED_PARAM) or run.params.get(SEED_PARAM)
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def raw_keys(sweep: SweepRuns, axis: str, runs: list[RunRecord]) -> list[str]:
    """The keys a user wrote for a composed axis: the sweep file's grid/zip/choice keys inside it
    (in the file's order); without a file, the params inside it whose values differ."""
    listed = [p for p in file_values(sweep.sweep_file) if p != axis and recorded_axis(p) == axis]
    if listed or sweep.sweep_file is not None:
        return listed
    inside = sorted({k for r in runs for k in r.params if k.startswith(axis + ".")})
    return [k for k in inside if len({r.params.get(k) for r in runs}) > 1]


def _order(sweep: SweepRuns, runs: list[RunRecord]) -> dict[str, list[str]]:
    return level_order(sweep, sweep.axes, runs)


def ordered_runs(sweep: SweepRuns) -> list[RunRecord]:
    """The runs in the sweep's order: by each axis' level (as `gatesweep report` orders its rows),
    then seed, then start time."""
    runs = list(sweep.runs)
    levels = _order(sweep, runs)

    def key(r: RunRecord) -> tuple:
        at = tuple(levels[a].index(r.axes.get(a, "?")) for a in sweep.axes if not names.is_seed_axis(a))
        seed = seed_of(r)
        return (at, math.inf if seed is None else seed, r.start_time, r.run_id)

    return sorted(runs, key=key)


def _categorical(values: list[Any], order: list[Any]) -> pd.Series:
    import pandas as pd

    cats = [v for v in dict.fromkeys(order) if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return pd.Series(pd.Categorical(values, categories=cats, ordered=True))


def axis_columns(sweep: SweepRuns, runs: list[RunRecord]) -> dict[str, pd.Series]:
    """Axis name -> its column over `runs`: every varied axis in the sweep's order, a composed
    one followed by the file's keys inside it; ordered categoricals in the sweep's order."""
    levels = _order(sweep, runs)
    out: dict[str, pd.Series] = {}
    for axis in sweep.axes:
        values = [r.axes.get(axis, "?") for r in runs]
        both = typed(values + levels[axis])
        out[axis] = _categorical(both[: len(values)], both[len(values) :])
        if axis in COMPOSED:
            for key in raw_keys(sweep, axis, runs):
                out[key] = _raw_column(sweep, key, [r.params.get(key) for r in runs])
    return out


def _raw_column(sweep: SweepRuns, key: str, values: list[str | None]) -> pd.Series:
    """A file key's column: the runs' params, ordered as the file lists the key's values."""
    listed = file_values(sweep.sweep_file).get(key, [])
    seen = [v for v in dict.fromkeys(values) if v is not None]
    order = [v for raw in listed for v in seen if same_value(v, raw)] + sorted(seen)
    both = typed(values + list(dict.fromkeys(order)))
    return _categorical(both[: len(values)], both[len(values) :])


def frame_of(sweep: SweepRuns, metrics: list[str]) -> pd.DataFrame:
    """The `results` frame of a sweep with these metric columns (see `dashboards.results`)."""
    import pandas as pd

    runs = ordered_runs(sweep)
    cols: dict[str, Any] = {"trial": [r.name for r in runs], "seed": pd.array([seed_of(r) for r in runs], dtype="Int64")}
    axes = axis_columns(sweep, runs)
    cols.update(axes)
    cols["status"] = [r.state for r in runs]
    cols["reason"] = [r.reason for r in runs]
    cols["start"] = pd.to_datetime([r.start_time or None for r in runs], unit="ms", utc=True)
    cols["end"] = pd.to_datetime([r.end_time or None for r in runs], unit="ms", utc=True)
    cols["duration_s"] = [(r.end_time - r.start_time) / 1000 if r.end_time and r.start_time else math.nan for r in runs]
    for k in metrics:
        cols[METRIC_PREFIX + k] = [float(r.metrics.get(k, math.nan)) for r in runs]
    for k in sorted({k for r in runs for k in r.params}):
        cols[CONFIG_PREFIX + k] = typed([r.params.get(k) for r in runs])
    cols["run_id"] = [r.run_id for r in runs]
    cols["config_hash"] = [r.tags.get(names.CONFIG_HASH_TAG, "") for r in runs]
    cols["reused"] = [r.reused for r in runs]
    cols["parent_run_id"] = [sweep.parent.run_id] * len(runs)
    df = pd.DataFrame({k: (v.reset_index(drop=True) if isinstance(v, pd.Series) else v) for k, v in cols.items()})
    df.attrs.update(frame_attrs(sweep, list(axes)))
    return df


def frame_attrs(sweep: SweepRuns, columns: list[str]) -> dict[str, Any]:
    """`df.attrs` of both frames: the sweep, its experiment and launch, and its axes by role:
    `axes` (every axis column), `arm_axes` (the varied model fields, composed ones as such: what
    makes an arm), `other_axes` (the other varied axes: a learning rate, a ladder's rung) and
    `seed_axes`."""
    recorded = [a for a in sweep.axes if a in columns]
    seeds = [a for a in recorded if names.is_seed_axis(a)]
    arms = [a for a in recorded if a.startswith("model.") and a not in seeds]
    return {
        "sweep": sweep.name,
        "experiment": sweep.experiment,
        "parent_run_id": sweep.parent.run_id,
        "axes": columns,
        "arm_axes": arms,
        "other_axes": [a for a in recorded if a not in seeds and a not in arms],
        "seed_axes": seeds,
    }

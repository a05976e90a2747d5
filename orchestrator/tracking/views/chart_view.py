"""The chart view of a sweep's saved view: the table's metric columns (from the metric
registry), the section MLflow puts each metric in, the bar, line and parallel-coordinates charts,
and the metrics left out (the same final value in every trial)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

from orchestrator.core import metrics as registry

MODEL_SECTION = "Model metrics"
"""MLflow's section for metrics without a `/` prefix."""
SYSTEM_SECTION = "System metrics"
"""MLflow's section for `system/...` metrics."""
SYSTEM_PREFIX = "system/"
HEADLINE_SECTION = "Headline metrics: final values"


def constant_metrics(values: dict[str, list[float]]) -> set[str]:
    """Metrics whose final value is the same in every trial that logged it (at least two)."""
    out = set()
    for key, xs in values.items():
        finite = [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
        if len(finite) >= 2 and len(finite) == len(xs) and max(finite) == min(finite):
            out.add(key)
    return out


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


def section_of(key: str) -> str:
    """The chart section MLflow puts a metric in: everything before its last `/`."""
    prefix = key.rsplit("/", 1)[0] if "/" in key else ""
    if prefix == "":
        return MODEL_SECTION
    if prefix + "/" == SYSTEM_PREFIX:
        return SYSTEM_SECTION
    return prefix


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

"""The end of a sweep, on its parent run: the comparison report (written to RUNS/sweeps/NAME/report/
and logged under `report/`, which the parent's description links) and each configuration's mean
over its finished seeds as the parent's metrics `<metric>/<configuration>`.

The CLI calls `publish` after the launcher has closed the parent run, so the trials' results
and the parent's status are settled before anything here can fail. Nothing here fails the
sweep either: a problem comes back as a one-line reason (and a warning on stderr).
"""

from __future__ import annotations

import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core import metrics as registry
from orchestrator.tracking import client, views


@dataclass
class Published:
    report_dir: Path | None = None
    """Where the report was written (None when none was)."""
    error: str = ""
    """Why the report or the parent's summary metrics could not be written ("" when they were)."""


def publish(uri: str, name: str, parent_id: str, out_dir: Path) -> Published:
    """Build and log the report of launch `parent_id` of sweep `name`, then the parent's
    per-configuration means; never raises for a store or report problem (nor for a report module
    that cannot be imported: a package upgraded under a running driver still ends its sweep)."""
    done: list[str] = []
    out = Published()
    try:
        from dashboards.report import build_report  # lazy: imports matplotlib, and a report that cannot be imported still ends the sweep

        report = build_report(uri, name, parent_id=parent_id, out_dir=out_dir)
        out.report_dir = report.out_dir
        if report.log_error:
            raise RuntimeError(f"the report could not be logged to the parent run: {report.log_error}")
        done.append("report")
        log_summary_metrics(client(uri), parent_id, report.comparison)
    except Exception as err:  # the sweep's results are in the store; what is missing is said
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        out.error = f"{type(err).__name__}: {first[:300]}" + (f" (written: {', '.join(done)})" if done else "")
        print(f"[gatesweep] warning: sweep {name}: {out.error}", file=sys.stderr, flush=True)
    return out


def config_key(label: str) -> str:
    """A configuration's label as the last part of a metric name (`G1-elementwise lr_0.003`):
    MLflow allows letters, digits, `_ - . : space /`, and `/` separates the parts."""
    text = re.sub(r"[^\w.\- ]+", "_", label.replace(", ", " ").replace("=", "_"))
    return re.sub(r"\s+", " ", text).strip(" ._") or "all"


def summary_metrics(comp) -> dict[str, float]:
    """`<metric>/<configuration>`: each configuration's mean over its finished seeds, for the
    default columns (`orchestrator.core.metrics.default_columns`) and the runs table's metrics the
    trials logged."""
    logged = {k for row in comp.rows for r in row.counted.values() for k in r.metrics}
    keys = registry.default_columns(logged) + views.table_metrics(logged)
    out: dict[str, float] = {}
    labels = [(row, config_key(row.label(comp.axes))) for row in comp.rows]
    for key in dict.fromkeys(keys):  # metric by metric: a metric's configurations side by side
        for row, label in labels:
            vals = [
                r.metrics[key]
                for r in row.counted.values()
                if isinstance(r.metrics.get(key), (int, float)) and math.isfinite(r.metrics[key])
            ]
            if vals:
                out[f"{key}/{label}"[:250]] = math.fsum(vals) / len(vals)
    return out


def log_summary_metrics(cl, parent_id: str, comp) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(k, v, now, 0) for k, v in summary_metrics(comp).items()]
    for i in range(0, len(items), 1000):
        cl.log_batch(parent_id, metrics=items[i : i + 1000])

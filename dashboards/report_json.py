"""The whole report as one JSON document (`gatesweep report NAME --format json`, and `report.json`
beside the other files): the sweep, its configurations with their statistics, the Δ tests with
Holm's adjustment, the main effects, the runs that did not finish and, for a ladder sweep, the
fits and multipliers. The keys are documented in docs/reading-results.md; `schema` names the
layout's version. Strict JSON: infinities are the strings "inf" / "-inf" and NaN is null. A machine
format: it takes no sections of `dashboards.sections.SECTIONS` (which lay out tables for people)."""

from __future__ import annotations

import json
import math
from typing import Any

from . import ladder
from .comparison import Comparison, Row
from .environments import mixed_note
from .seedstats import Delta, Stat

SCHEMA = "gatesweep.report/1"


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _stat(s: Stat) -> dict:
    return {
        "n": s.n,
        "mean": s.mean,
        "std": s.std,
        "ci95_t": [s.lo, s.hi] if s.ci95 is not None else None,
        "ci95_bootstrap": [s.boot_lo, s.boot_hi] if s.boot_lo is not None else None,
        "values": {"/".join(map(str, k)): v for k, v in s.values.items()},
    }


def _delta(d: Delta) -> dict:
    return {
        "diff": d.diff,
        "rel_percent": d.rel,
        "pairs": d.n_pairs,
        "ci95_bootstrap": [d.boot_lo, d.boot_hi] if d.boot_lo is not None else None,
        "t": d.t,
        "p": d.p,
        "p_holm": d.p_holm,
        "significant": d.significant,
        "effect_size": d.effect,
        "power": d.power,
        "seeds_needed": d.seeds_needed,
        "seeds_needed_holm": d.seeds_needed_holm,
    }


def _row(comp: Comparison, row: Row) -> dict:
    return {
        "label": row.label(comp.axes),
        "axes": row.axes,
        "n": row.n,
        "status": row.status,
        "is_baseline": row.is_baseline,
        "baseline": row.baseline.label(comp.axes) if row.baseline is not None else None,
        "runs": {"/".join(map(str, k)): r.run_id for k, r in row.counted.items()},
        "stats": {k: _stat(s) for k, s in row.stats.items()},
        "deltas": {k: _delta(d) for k, d in row.deltas.items()},
        "best": sorted(row.best),
    }


def report_document(comp: Comparison) -> dict:
    """The report as plain JSON-able data."""
    s = comp.sweep
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "sweep": {
            "name": s.name,
            "experiment": s.experiment,
            "experiment_id": s.experiment_id,
            "parent_run_id": s.parent.run_id,
            "tracking_uri": s.uri,
            "launches": s.launches,
            "runs": len(s.runs),
            "search": s.search,
        },
        "axes": comp.axes,
        "seed_axes": comp.seed_axes,
        "baseline": comp.baseline_text,
        "metrics": [{"key": m.key, "label": m.label, "better": m.better} for m in comp.metrics],
        "holm_tests": comp.n_tests,
        "rows": [_row(comp, row) for row in comp.rows],
        "effects": {
            axis: [{"level": e.level, "configs": e.configs, "means": e.means} for e in effects] for axis, effects in comp.effects.items()
        },
        "unfinished": [{"name": r.name, "run_id": r.run_id, "state": r.state, "reason": r.reason} for r in comp.unfinished],
        "superseded": [{"name": r.name, "run_id": r.run_id, "state": r.state} for r in comp.superseded],
        "numerics": [{"key": e.key, "label": e.label, "runs": e.runs} for e in comp.environments],
        "numerics_note": mixed_note(comp.environments),
        "ladder": None,
    }
    if getattr(comp, "ladder", None) is not None:
        doc["ladder"] = ladder.json_doc(comp.ladder)
    return _clean(doc)


def report_json(comp: Comparison) -> str:
    return json.dumps(report_document(comp), indent=2, allow_nan=False) + "\n"

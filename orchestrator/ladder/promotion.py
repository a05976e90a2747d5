"""Promotion across rungs, decided on the multiplier's trend: successive halving across scale
that does not stop an arm whose advantage grows with scale.

After each stage the driver hands the finished runs of the rungs trained so far to `decide`,
which analyses them (`estimate.analyse`: anchored multipliers per rung, their weighted trend
against log compute) and predicts each arm's multiplier at the next rung's compute. Under
`interval` an arm stops when that prediction's 95% interval lies entirely below 1; under `top_k`
the k arms with the largest prediction go on. The baseline always goes on; an arm that cannot be
judged (no fit, no interval) goes on, and the reason is said. The decision is a pure function of
the runs (the bootstrap's generator is fixed), so a resumed sweep takes the same ones again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .answers import ArmResult
from .cells import Estimate, num
from .checks import predict_multiplier
from .estimate import analyse
from .runs import Run

REPLICATES = 1000
"""Bootstrap replicates of a decision (fewer than the report's: it runs between stages)."""


@dataclass
class Decision:
    """What was decided after one stage."""

    after_rung: str
    kept: list[str]
    stopped: dict[str, str] = field(default_factory=dict)
    """arm -> why it stopped."""
    notes: list[str] = field(default_factory=list)
    predicted: dict[str, dict] = field(default_factory=dict)
    """arm -> the predicted multiplier at the next rung ({value, low, high}) the decision read."""


def decide(
    runs: Sequence[Run],
    arms: Sequence[str],
    baseline: str,
    *,
    rule: str,
    k: int,
    metric: str,
    after_rung: str,
    next_rung: str,
    next_compute: float,
    replicates: int = REPLICATES,
) -> Decision:
    """Which of the `arms` (active, baseline included) train `next_rung`; never raises for the runs given."""
    d = Decision(after_rung, kept=list(arms))
    if not any(r.arm == baseline for r in runs):
        d.notes.append(f"no finished runs of the baseline {baseline}: every arm goes on")
        return d
    an = analyse(runs, baseline, metric=metric, replicates=replicates)
    judged: dict[str, Estimate] = {}
    for arm in arms:
        if arm == baseline:
            continue
        res = an.arms.get(arm)
        pred, how = _prediction(res, after_rung, next_compute)
        if pred is None or pred.p is None:
            d.notes.append(f"{arm}: {how}; it goes on")
            continue
        judged[arm] = pred
        d.predicted[arm] = {"value": num(pred.value), "low": num(pred.low), "high": num(pred.high), "from": how}
        text = f"multiplier predicted at {next_rung} {_iv(pred)} vs {baseline} ({metric}, {how})"
        if rule == "interval" and pred.high < 1:
            d.stopped[arm] = f"not promoted after rung {after_rung}: {text}, entirely below 1"
    if rule == "top_k":
        ranked = sorted(judged, key=lambda a: -judged[a].value)
        for arm in ranked[k:]:
            d.stopped[arm] = f"not promoted after rung {after_rung}: {_iv(judged[arm])} predicted at {next_rung} is not among the top {k}"
    d.kept = [a for a in arms if a not in d.stopped]
    return d


def _prediction(res: ArmResult | None, after_rung: str, next_compute: float) -> tuple[Estimate | None, str]:
    """The trend's prediction at the next rung, else the multiplier at the rung just trained."""
    if res is None:
        return None, "no finished runs"
    if res.no_fit and not res.rungs:
        return None, f"no fit ({res.no_fit})"
    pred = predict_multiplier(res, next_compute) if math.isfinite(next_compute) else None
    if pred is not None and pred.p is not None:
        return pred, "the trend over its rungs"
    at = res.rungs.get(after_rung)
    if at is not None and at.p is not None:
        return at, f"its multiplier at {after_rung} (no trend: {res.trend.note if res.trend else 'fewer than 3 rungs'})"
    return None, f"no multiplier with an interval at {after_rung}" + (f" ({at.note})" if at is not None and at.note else "")


def _iv(e: Estimate) -> str:
    return f"{e.value:.3g} [{e.low:.3g}, {e.high:.3g}]"

"""A ladder sweep's scaling analysis: per arm, the held-out loss against training compute fitted as
L(C) = E + A·C^(−α) (`orchestrator.scaling`), each arm's effective-compute multiplier against the
baseline at every rung and at a target compute, the verdicts, and the sink metrics per rung.

An **arm** is a configuration without its rung: the rows of the comparison that differ only in
`ladder.rung`. The **baseline arm** is the comparison's baseline (no gate, softmax attention, and
`--baseline AXIS=VALUE`). Every run's compute is its own `train_flops` (what its variant adds per
token included); rungs are ordered by the baseline's compute.

Verdicts say plainly what the intervals allow: `helps` when the multiplier's 95% interval lies
above 1, `hurts` below 1, `undecided` when it contains 1, `too wide to decide` when its high end
is more than `WIDE` times its low end (or infinite); a target more than `EXTRAPOLATION` times
beyond the largest rung's compute is flagged as an extrapolation. No number is made up: an arm
that cannot be fitted gets its reason instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from orchestrator import metrics as registry
from orchestrator.scaling import BOOTSTRAP, Interval, LadderFit, NoFit, Points, fit_ladder

from .comparison import Comparison, Row
from .records import finite

RUNG_AXIS = "ladder.rung"
COMPUTE = registry.get("train_flops").name
FIT_METRICS = ("val_loss", "val_bpb")
"""Fitted when the runs logged them: the held-out loss, and bits per byte (comparable across tokenizers)."""
TREND_METRICS = ("first_token_attn", "sink_ratio", "max_activation", "gate_score_mean")
WIDE = 10.0
"""An interval whose high end is more than this many times its low end is too wide to decide."""
EXTRAPOLATION = 10.0
"""A target beyond this many times the largest rung's compute is an extrapolation, said so."""
TARGET_TOKENS = 4e11
TARGET_PRESET = "dense-1.7b"
TARGET_SEQ = 4096


def default_target() -> tuple[float, str]:
    """The paper's dense model: dense-1.7b trained on 400B tokens at 4,096 tokens a sequence."""
    from gatedmodels import ModelConfig
    from gatedmodels.costs import model_costs

    flops = model_costs(ModelConfig.preset(TARGET_PRESET)).train_flops(TARGET_SEQ) * TARGET_TOKENS
    return flops, f"{TARGET_PRESET} x 400B tokens (the paper's dense model)"


@dataclass
class Arm:
    label: str
    axes: dict[str, str]
    rows: list[Row]
    """Its rows, smallest rung first."""
    is_baseline: bool = False


@dataclass
class MetricFit:
    """The fits of one metric."""

    metric: str
    fit: LadderFit | None
    no_fit: str = ""
    """Why there is no fit ("" when there is one)."""
    verdicts: dict[str, dict[str, str]] = field(default_factory=dict)
    """arm -> rung (or "target") -> helps / hurts / undecided / too wide to decide."""


@dataclass
class Ladder:
    """What a report shows of a ladder sweep."""

    arms: list[Arm]
    baseline: str
    """The baseline arm's label."""
    rungs: list[str]
    """Rung names, smallest compute first."""
    compute: dict[str, dict[str, float]]
    """arm -> rung -> training FLOPs (mean over its finished runs)."""
    fits: list[MetricFit]
    target: float
    target_label: str
    beyond: float
    """How many times the target lies beyond the largest rung's compute."""
    shared_e: bool
    replicates: int
    bootstrap: str
    """How the bootstrap redraws: `residuals` (the default) or `seeds` (orchestrator.scaling)."""
    trends: dict[str, dict[str, dict[str, tuple[float, float | None, int]]]]
    """metric -> arm -> rung -> (mean, std or None, n) over finished seeds."""
    runs: dict[str, dict[str, tuple[int, int]]]
    """arm -> rung -> (finished runs, runs in all)."""
    notes: list[str] = field(default_factory=list)

    def fit_of(self, metric: str) -> MetricFit | None:
        return next((f for f in self.fits if f.metric == metric), None)


def verdict(iv: Interval) -> str:
    lo, hi = iv.low, iv.high
    if not (isinstance(lo, float) and isinstance(hi, float)) or math.isnan(lo) or math.isnan(hi):
        return "no interval"
    if math.isinf(hi) or (lo > 0 and hi / lo > WIDE) or lo <= 0:
        return "too wide to decide"
    if lo > 1:
        return "helps"
    if hi < 1:
        return "hurts"
    return "undecided"


def _arms(comp: Comparison) -> list[Arm]:
    others = [a for a in comp.axes if a != RUNG_AXIS]
    groups: dict[tuple, Arm] = {}
    for row in comp.rows:
        key = tuple(row.axes[a] for a in others)
        arm = groups.get(key)
        if arm is None:
            arm = groups[key] = Arm(row.label(others) if others else "all runs", {a: row.axes[a] for a in others}, [])
        arm.rows.append(row)
        arm.is_baseline = arm.is_baseline or row.is_baseline
    return list(groups.values())


def _baseline_arm(arms: list[Arm]) -> Arm | None:
    """The arm the others are compared with: the one whose rows are the other rows' baselines
    (with a parameter-matched arm, two arms have no gate; the report's baseline rule picks one)."""
    refs: dict[int, int] = {}
    for arm in arms:
        for row in arm.rows:
            if row.baseline is not None:
                refs[id(row.baseline)] = refs.get(id(row.baseline), 0) + 1
    scored = [(sum(refs.get(id(r), 0) for r in a.rows), i, a) for i, a in enumerate(arms) if a.is_baseline]
    if not scored:
        return None
    return max(scored, key=lambda t: (t[0], -t[1]))[2]


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def analyse(
    comp: Comparison, *, target: float | None = None, shared_e: bool = False, replicates: int = BOOTSTRAP, bootstrap: str = "residuals"
) -> Ladder | None:
    """The ladder analysis of a comparison whose axes include `ladder.rung` (None otherwise)."""
    if RUNG_AXIS not in comp.axes:
        return None
    target_label = "given on the command line"
    if target is None:
        target, target_label = default_target()
    arms = _arms(comp)
    notes: list[str] = []
    base = _baseline_arm(arms)
    compute: dict[str, dict[str, float]] = {}
    runs: dict[str, dict[str, tuple[int, int]]] = {}
    for arm in arms:
        compute[arm.label], runs[arm.label] = {}, {}
        for row in arm.rows:
            rung = row.axes[RUNG_AXIS]
            flops = [r.metrics[COMPUTE] for r in row.counted.values() if finite(r.metrics.get(COMPUTE))]
            if flops:
                compute[arm.label][rung] = _mean(flops)
            runs[arm.label][rung] = (row.n, len(row.live_runs()))
            missing = row.n - len(flops)
            if missing:
                notes.append(f"{arm.label} at {rung}: {missing} finished run(s) logged no {COMPUTE} and are left out of the fits")
            if row.n < len(row.live_runs()):
                notes.append(f"{arm.label} at {rung}: the fits use the {row.n} of {len(row.live_runs())} seeds that finished")
    order_from = compute[base.label] if base is not None else {}
    rung_names = sorted({row.axes[RUNG_AXIS] for row in comp.rows}, key=lambda r: (order_from.get(r, math.inf), r))
    for arm in arms:
        arm.rows.sort(key=lambda row: rung_names.index(row.axes[RUNG_AXIS]))
    largest = max((c for per in compute.values() for c in per.values()), default=math.nan)
    smallest = min((c for per in compute.values() for c in per.values()), default=math.nan)
    if math.isfinite(smallest) and target < smallest:
        notes.append(
            f"the target ({target:.3g} FLOPs) lies below the smallest rung ({smallest:.3g}): its multiplier is an extrapolation downwards"
        )
    ladder = Ladder(
        arms=arms,
        baseline=base.label if base is not None else "",
        rungs=rung_names,
        compute=compute,
        fits=[],
        target=target,
        target_label=target_label,
        beyond=target / largest if largest and math.isfinite(largest) else math.nan,
        shared_e=shared_e,
        replicates=replicates,
        bootstrap=bootstrap,
        trends=_trends(arms),
        runs=runs,
        notes=notes,
    )
    for metric in FIT_METRICS:
        if not any(finite(r.metrics.get(metric)) for row in comp.rows for r in row.counted.values()):
            continue
        ladder.fits.append(_fit_metric(ladder, metric, shared_e, replicates, bootstrap))
    return ladder


def _points(arm: Arm, metric: str) -> Points:
    rows = []
    for row in arm.rows:
        for seed, run in row.counted.items():
            c, loss = run.metrics.get(COMPUTE), run.metrics.get(metric)
            if finite(c) and finite(loss):
                rows.append((float(c), float(loss), row.axes[RUNG_AXIS], seed))
    return Points.of(rows)


def _fit_metric(ladder: Ladder, metric: str, shared_e: bool, replicates: int, bootstrap: str) -> MetricFit:
    if not ladder.baseline:
        return MetricFit(metric, None, "no baseline arm (no gate, softmax attention) in this sweep")
    points = {arm.label: _points(arm, metric) for arm in ladder.arms}
    diverged = [
        f"{arm.label} at {row.axes[RUNG_AXIS]}"
        for arm in ladder.arms
        for row in arm.rows
        if any(not finite(r.metrics.get(metric)) for r in row.counted.values())
    ]
    try:
        fit = fit_ladder(points, ladder.baseline, target=ladder.target, shared_e=shared_e, replicates=replicates, method=bootstrap)
    except NoFit as err:
        return MetricFit(metric, None, str(err))
    if diverged:
        fit.notes.append(f"non-finite {metric} left out: {', '.join(diverged)}")
    from orchestrator.scaling import ALPHA_MAX

    for arm, law in fit.laws.items():
        if law.alpha > 0.99 * ALPHA_MAX or law.alpha < 1e-3:
            fit.notes.append(f"{arm}: the fitted alpha ({law.alpha:.3g}) sits at its bound; the law is not pinned by these rungs")
    out = MetricFit(metric, fit)
    for arm, per in fit.multipliers.items():
        out.verdicts[arm] = {rung: verdict(iv) for rung, iv in per.items()}
        out.verdicts[arm]["target"] = verdict(fit.target[arm])
    return out


def _trends(arms: list[Arm]) -> dict[str, dict[str, dict[str, tuple[float, float | None, int]]]]:
    out: dict[str, dict[str, dict[str, tuple[float, float | None, int]]]] = {}
    for metric in TREND_METRICS:
        per_arm: dict[str, dict[str, tuple[float, float | None, int]]] = {}
        for arm in arms:
            for row in arm.rows:
                vals = [r.metrics[metric] for r in row.counted.values() if finite(r.metrics.get(metric))]
                if not vals:
                    continue
                mean = _mean(vals)
                std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
                per_arm.setdefault(arm.label, {})[row.axes[RUNG_AXIS]] = (mean, std, len(vals))
        if per_arm:
            out[metric] = per_arm
    return out


def target_text(ladder: Ladder) -> str:
    beyond = ladder.beyond
    far = (
        f"; {beyond:.3g}x beyond the largest rung: an extrapolation, not a measurement"
        if math.isfinite(beyond) and beyond > EXTRAPOLATION
        else ""
    )
    return f"target {ladder.target:.3g} FLOPs ({ladder.target_label}){far}"

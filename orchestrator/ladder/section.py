"""The ladder's section of a report, as neutral parts (`orchestrator.core.parts`): tables (title, head,
rows, legend) and lists of lines, in report order, plus the JSON document every consumer reads. The dashboards write the
parts in each format (terminal, markdown, LaTeX, HTML) and draw the plots from `LadderReport`.

`build` analyses every fitted metric (`estimate.analyse`) of a ladder's runs, so the driver's
promotion, the report and a notebook read the same numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.core.parts import Lines, Part, Table

from .answers import EXTRAPOLATION, REPLICATES, Analysis, ArmResult
from .cells import Estimate, num
from .estimate import analyse
from .runs import Arm, Run

DASH = "–"
TREND_METRICS = ("first_token_attn", "sink_ratio", "max_activation", "gate_score_mean")
"""Probe metrics shown per rung: does the baseline's sink grow with scale?"""
PER_DECADE = math.log(10.0)


@dataclass
class LadderReport:
    """What a report shows of a ladder sweep."""

    arms: list[Arm]
    baseline: str
    """The baseline arm's label ("" when no arm is one)."""
    analyses: list[Analysis]
    """One per fitted metric (val_loss, and val_bpb when logged)."""
    target: float
    target_label: str
    trends: dict[str, dict[str, dict[str, tuple[float, float | None, int]]]] = field(default_factory=dict)
    """metric -> arm -> rung -> (mean, std or None, n) over finished seeds."""
    runs: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    """arm -> rung -> (finished runs, runs in all)."""
    notes: list[str] = field(default_factory=list)
    margin: float | None = None
    replicates: int = REPLICATES

    @property
    def rungs(self) -> list[str]:
        return self.analyses[0].rungs if self.analyses else list(dict.fromkeys(r for per in self.runs.values() for r in per))

    def analysis(self, metric: str) -> Analysis | None:
        return next((a for a in self.analyses if a.metric == metric), None)


def build(
    runs: Mapping[str, Sequence[Run]],
    arms: Sequence[Arm],
    baseline: Arm | None,
    *,
    target: float,
    target_label: str,
    margin: float | None = None,
    replicates: int = REPLICATES,
    trends: dict | None = None,
    counts: dict | None = None,
    notes: Sequence[str] = (),
) -> LadderReport:
    """`runs`: metric -> the runs of that metric (their losses are that metric)."""
    rep = LadderReport(
        list(arms),
        baseline.label if baseline else "",
        [],
        target,
        target_label,
        trends or {},
        counts or {},
        list(notes),
        margin,
        replicates,
    )
    if baseline is None:
        rep.notes.append("no baseline arm (no gate, softmax attention, or the one --baseline names): no fit")
        return rep
    for metric, rs in runs.items():
        if rs:
            rep.analyses.append(analyse(rs, baseline.label, metric=metric, target=target, margin=margin, replicates=replicates))
    return rep


# ---- text of numbers ----------------------------------------------------------------------------------
def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.{max(1, digits - 1)}e}"
    return f"{x:.{digits}g}"


def interval(est: Estimate | None, digits: int = 3) -> str:
    """`1.16 [1.02, 1.31]`, or the value and why it has no interval."""
    if est is None:
        return DASH
    if est.p is None and not (math.isfinite(est.low) and math.isfinite(est.high)):
        if not math.isfinite(est.value):
            return f"{DASH} ({est.note})" if est.note else DASH
        return f"{fmt(est.value, digits)} ({est.note})" if est.note else fmt(est.value, digits)
    return f"{fmt(est.value, digits)} [{fmt(est.low, digits)}, {fmt(est.high, digits)}]"


def per_decade(est: Estimate | None) -> Estimate | None:
    """A trend's slope (per e-fold of compute) as the factor the multiplier changes by per 10x compute."""
    if est is None:
        return None
    f = lambda x: math.exp(x * PER_DECADE) if math.isfinite(x) else x
    return Estimate(f(est.value), f(est.low), f(est.high), est.p, est.replicates, est.note)


def target_text(rep: LadderReport, an: Analysis | None = None) -> str:
    if not math.isfinite(rep.target):
        return "no target"
    x = (an or (rep.analyses[0] if rep.analyses else None)).extrapolation if (an or rep.analyses) else math.nan
    where = ""
    if math.isfinite(x):
        if x > EXTRAPOLATION:
            where = f"; {x:.3g}x beyond the largest rung: an extrapolation, not a measurement"
        elif x < 1:
            where = f"; {1 / x:.3g}x below the smallest rung: an extrapolation downwards, not a measurement"
    return f"target {rep.target:.3g} FLOPs ({rep.target_label}){where}"


# ---- the parts ------------------------------------------------------------------------------------------
def header_lines(rep: LadderReport) -> list[str]:
    forms = sorted({a.form for a in rep.analyses}) or ["L(C)"]
    return [
        f"Scaling ladder: {len(rep.rungs)} rungs, {len(rep.arms)} arms; {' and '.join(forms)} per arm (Huber on log loss, rung means "
        f"weighted by their noise), 95% intervals from {rep.replicates} replicates of a paired bootstrap over seeds (t per rung).",
        "Effective-compute multiplier at a rung: the baseline compute that reaches the arm's loss over the baseline compute "
        "that reaches the baseline's own loss there, times the baseline's over the arm's FLOPs (>1: the arm is worth more "
        f"compute than it costs). Baseline arm: {rep.baseline or DASH}; {target_text(rep)}.",
    ]


def parts(rep: LadderReport) -> list[Part]:
    out: list[Part] = []
    for an in rep.analyses:
        out += _metric_parts(rep, an)
    if not rep.analyses:
        out.append(Lines("fits", ["no fit: " + ("; ".join(rep.notes) or "no run logged val_loss")]))
    for metric, per_arm in rep.trends.items():
        out.append(_trend_table(rep, metric, per_arm))
    notes = list(rep.notes) + [f"{an.metric}: {n}" for an in rep.analyses for n in an.notes]
    if notes:
        out.append(Lines("notes", notes))
    return out


def _metric_parts(rep: LadderReport, an: Analysis) -> list[Part]:
    out: list[Part] = [_loss_table(rep, an)]
    out.append(_fit_table(an))
    others = [a for a in an.arms.values() if a.arm != an.baseline]
    if others:
        out.append(_multiplier_table(rep, an, others))
        out.append(_verdict_table(an, others))
        out.append(Lines(f"what the ladder says ({an.metric})", [_headline(rep, an, r) for r in others]))
    out.append(_rollout_table(an))
    return out


def _loss_table(rep: LadderReport, an: Analysis) -> Table:
    head = ["rung", "FLOPs (baseline)", *[a.label for a in rep.arms]]
    rows = []
    for rung in an.rungs:
        c = an.compute.get(an.baseline, {}).get(rung)
        cells = [rung, fmt(c)]
        for arm in rep.arms:
            v = an.loss.get(arm.label, {}).get(rung)
            cells.append(DASH if v is None else f"{v[0]:.4f} ({v[1]})")
        rows.append(cells)
    return Table(
        f"{an.metric} per rung: geometric mean over the finished seeds (n)", head, rows,
        "FLOPs: the baseline's training FLOPs at the rung; every arm's own FLOPs are in the JSON", keys=2,
    )  # fmt: skip


def _fit_table(an: Analysis) -> Table:
    nd = an.form == "L(N, D)"
    head = ["arm", "E [95%]", "α [95%]", *(["β [95%]", "γ [95%]"] if nd else []), "rmse(log L)"]
    rows = []
    for res in an.arms.values():
        if res.law is None:
            rows.append([res.arm, f"no fit: {res.no_fit}", *([""] * (len(head) - 2))])
            continue
        p = res.params
        cells = [res.arm, interval(p.get("E")), interval(p.get("alpha"))]
        if nd:
            cells += [interval(p.get("beta")), interval(p.get("gamma"))]
        rows.append([*cells, fmt(res.law.rmse, 2)])
    law = "L(N, D) = E + A·N^-α + B·D^-β" if nd else "L(C) = E + A·C^-α"
    legend = "γ = αβ/(α+β): the exponent of the compute-optimal loss, L* = E + K·C^-γ" if nd else ""
    return Table(f"fit of {an.metric}: {law}", head, rows, legend, keys=1)


def _multiplier_table(rep: LadderReport, an: Analysis, others: list[ArmResult]) -> Table:
    head = ["arm", *an.rungs, "joint", "per 10x compute", "target"]
    rows = []
    for res in others:
        rows.append(
            [
                res.arm,
                *[interval(res.rungs.get(r)) for r in an.rungs],
                interval(res.joint),
                interval(per_decade(res.trend)),
                interval(res.target),
            ]
        )
    return Table(
        f"effective-compute multiplier vs {an.baseline} ({an.metric})",
        head,
        rows,
        "joint: every rung's anchored multiplier pooled (inverse-variance); per 10x compute: the factor the multiplier changes "
        "by per decade of compute (1: the same at every scale); target: the joint multiplier when it does not change with scale, "
        "else each arm's own law extrapolated",
        keys=1,
    )


def _verdict_table(an: Analysis, others: list[ArmResult]) -> Table:
    head = ["arm", *an.rungs, "joint", "target"]
    rows = [
        [res.arm, *[res.verdicts.get(r, DASH) for r in an.rungs], res.verdicts.get("joint", DASH), res.verdicts.get("target", DASH)]
        for res in others
    ]
    margin = f"; no practical difference: its interval lies within {an.margin:.0%} of 1 (equivalence, Holm)" if an.margin else ""
    return Table(
        f"verdicts ({an.metric})",
        head,
        rows,
        "helps / hurts: the multiplier differs from 1 after Holm's correction over every test of this ladder (5% family-wise)"
        f"{margin}; too wide to decide: the interval spans more than 10x; no interval: fewer than 2 seeds",
        keys=1,
    )


def _rollout_table(an: Analysis) -> Table:
    head = ["arm", "largest rung", "predicted [95%]", "measured [95%]", "check"]
    rows = []
    for res in an.arms.values():
        ro = res.rollout
        if ro is None:
            continue
        if ro.holds is None:
            check = ro.note or "no check"
        else:
            check = "holds" if ro.holds else "the law does not extrapolate here"
        rows.append([res.arm, ro.rung or DASH, interval(ro.predicted, 4), interval(ro.measured, 4), check])
    return Table(
        f"rollout ({an.metric}): each arm's law fitted on every rung but its largest, predicting that rung",
        head,
        rows,
        "holds: the measured loss lies within the prediction's 95% interval (its difference's interval holds 0)",
        keys=1,
    )


def _headline(rep: LadderReport, an: Analysis, res: ArmResult) -> str:
    j, v = res.joint, res.verdicts
    if res.joint is None or not math.isfinite(res.joint.value):
        return f"{res.arm}: no joint multiplier ({j.note if j else 'no rung with both arms'})"
    trend = per_decade(res.trend)
    scale = (
        f"the same at every scale within the noise (x{fmt(trend.value)} per 10x compute [{fmt(trend.low)}, {fmt(trend.high)}])"
        if trend is not None and an.headline.get(res.arm) == "joint"
        else f"changing with scale (x{fmt(trend.value)} per 10x compute [{fmt(trend.low)}, {fmt(trend.high)}])"
        if trend is not None
        else "its trend needs 3 rungs"
    )
    roll = res.rollout
    flag = ""
    if roll is not None and roll.holds is False:
        flag = "; the law does not extrapolate here (the largest rung falls outside its prediction), so read the target with care"
    target = ""
    if res.target is not None and math.isfinite(rep.target):
        far = " (an extrapolation)" if an.extrapolated else ""
        target = f"; at the target{far}: {interval(res.target)}, {v.get('target', DASH)}, from the {res.target_from}"
    return f"{res.arm} vs {an.baseline}: worth {interval(j)} of its compute over every rung ({v.get('joint', DASH)}), {scale}{target}{flag}"


def _trend_table(rep: LadderReport, metric: str, per_arm: dict) -> Table:
    head = ["rung", *[a.label for a in rep.arms]]
    rows = []
    for rung in rep.rungs:
        cells = [rung]
        for arm in rep.arms:
            v = per_arm.get(arm.label, {}).get(rung)
            cells.append(DASH if v is None else fmt(v[0]) + (f" ± {fmt(v[1], 2)}" if v[1] is not None else ""))
        rows.append(cells)
    return Table(f"{metric} per rung (does the sink grow with scale?)", head, rows, "mean ± std over the finished seeds", keys=1)


# ---- JSON -----------------------------------------------------------------------------------------------
def _est(e: Estimate | None) -> dict | None:
    return None if e is None else e.to_dict()


def _arm_json(an: Analysis, res: ArmResult) -> dict:
    out: dict = {
        "no_fit": res.no_fit or None,
        "law": res.law.to_dict() if res.law else None,
        "params": {k: _est(v) for k, v in res.params.items()},
    }
    if res.arm == an.baseline:
        out["multiplier"] = None
    else:
        out["multiplier"] = {
            "rungs": {r: _est(e) for r, e in res.rungs.items()},
            "joint": _est(res.joint),
            "per_10x_compute": _est(per_decade(res.trend)),
            "target": _est(res.target),
            "target_from": res.target_from or None,
            "optimal_params_at_target": _est(res.optimal_n),
            "exponent_gap": _est(res.exponent_gap),
        }
        out["verdict"] = dict(res.verdicts)
        out["headline"] = an.headline.get(res.arm)
    ro = res.rollout
    out["rollout"] = (
        None
        if ro is None
        else {
            "rung": ro.rung,
            "predicted": _est(ro.predicted),
            "measured": _est(ro.measured),
            "log_gap": _est(ro.gap),
            "holds": ro.holds,
            "note": ro.note or None,
        }
    )
    return out


def document(rep: LadderReport) -> dict:
    """The `ladder` object of the report's JSON (docs/ladder.md lists its keys)."""
    first = rep.analyses[0] if rep.analyses else None
    x = first.extrapolation if first else math.nan
    return {
        "baseline": rep.baseline,
        "rungs": [
            {
                "rung": r,
                "compute": {a: (first.compute.get(a, {}).get(r) if first else None) for a in (first.compute if first else {})},
                "runs": {a: list(v.get(r, (0, 0))) for a, v in rep.runs.items()},
            }
            for r in rep.rungs
        ],
        "arms": [{"label": a.label, "axes": dict(a.axes), "is_baseline": a.label == rep.baseline} for a in rep.arms],
        "target": {
            "flops": num(rep.target),
            "label": rep.target_label,
            "times_largest_rung": num(x),
            "extrapolated": bool(first.extrapolated) if first else None,
        },
        "margin": rep.margin,
        "bootstrap": "paired multiplier bootstrap over seeds, t per rung, with the laws' lack of fit as a rung effect",
        "bootstrap_replicates": rep.replicates,
        "fits": {
            an.metric: {
                "form": an.form,
                "seeds": an.seeds,
                "noise": {"log_sd_intercept": an.noise.a, "log_sd_slope": an.noise.b, "cells": an.noise.cells},
                "misfit": {"rung_effect_sd": math.sqrt(an.misfit[0]), "dof": an.misfit[1]},
                "arms": {arm: _arm_json(an, res) for arm, res in an.arms.items()},
                "notes": list(an.notes),
            }
            for an in rep.analyses
        },
        "trends": {
            metric: {arm: {r: {"mean": v[0], "std": v[1], "n": v[2]} for r, v in per.items()} for arm, per in arms.items()}
            for metric, arms in rep.trends.items()
        },
        "notes": list(rep.notes),
    }
